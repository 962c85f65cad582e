"""Launches as a proxy for GPU time, measured on any device: kernels, aten operations, host syncs,
compile time and step time of the training round, fp32 against 8-bit, node by node against
batched.

On a GPU a small model's step costs about its number of kernel launches (docs/engine.md, "On a
GPU"), and both counts can be taken on the CPU:

- ``kernels``: the kernels inductor generates for the compiled round
  (``torch._inductor.metrics.generated_kernel_count``: forward and backward graphs), each a
  launch per round on a GPU (the batched round's graph runs once for all nodes; the node-by-node
  round runs its graph once per node, so its launches per round are ``kernels x nodes``);
- ``cuda_kernels``: the Triton kernels the same compiled round launches on a CUDA GPU, counted
  without one (``lpdt.engine.cudacount``: inductor lowers each graph a second time for CUDA,
  code generation only; on the CPU only), which fuses otherwise than the CPU's loop nests;
  ``cuda_kernels_combo``: the same with inductor's combo kernels (``combo_kernels``: independent
  kernels launched as one, a GPU option); ``cuda_library_calls``: its cuDNN / cuBLAS calls
  (convolutions, matmuls, operators inductor falls back to); ``cuda_graph_blockers``: what would
  make inductor leave out CUDA graphs for the round on a GPU, by its checks that need none
  (``cudacount.Lowered.cudagraph_blocker``), ``none`` if nothing;
- ``aten_ops_round``: the aten operations one eager round dispatches (``lpdt.engine.opcount``),
  each a launch on a GPU (views aside), with the quantisers on the path a GPU takes
  (``LPDT_QUANT_KERNEL=0``, ``LPDT_QUANT_FUSED=1``: each rounding one compiled kernel,
  ``lpdt.layers.quant.fused``): n node steps, or the one batched step; ``launches_round``: those
  that are not views (``opcount.VIEWS``); ``*_unfused``: the same with the rounding as tensor
  operations (``LPDT_QUANT_FUSED=0``); ``host_syncs_round``: reads of a tensor on the host in
  that round (fused);
- ``compile_s``: the first compiled round from an **empty** inductor cache (each row runs in a
  fresh process with a cache of its own), so compile times compare side by side;
- ``ms_round_eager`` / ``ms_round_compiled``: median wall time of a round on this device.

    python benchmarks/bench_launches.py --out /tmp/launches.tsv                 # ResNet-20 x 8
    python benchmarks/bench_launches.py --model tiny_cnn --nodes 2 --batch 4 --px 8 --out t.tsv

Each row is written when measured. Numbers: docs/int8.md, "Launches".
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
COLUMNS = [
    "model",
    "nodes",
    "batch",
    "px",
    "precision",
    "variant",
    "ran",
    "kernels",
    "cuda_kernels",
    "cuda_kernels_combo",
    "cuda_library_calls",
    "cuda_graph_blockers",
    "aten_ops_round",
    "launches_round",
    "aten_ops_round_unfused",
    "launches_round_unfused",
    "host_syncs_round",
    "compile_s",
    "ms_round_eager",
    "ms_round_compiled",
    "torch",
]


def measure(args: argparse.Namespace) -> dict[str, object]:
    """One row, in this (fresh) process: ``args.precision`` x ``args.variant``."""
    sys.path.insert(0, str(HERE))
    import torch
    from bench_compile import build, sync  # the model builder of the compiled-step benchmark

    from lpdt.decentral.state import NodeState
    from lpdt.engine.batched import BatchedSteps
    from lpdt.engine.opcount import count_ops, inductor_kernels
    from lpdt.engine.steps import Steps
    from lpdt.layers.quant import fused, kernel

    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    n = args.nodes
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(n, args.batch, 3, args.px, args.px, generator=gen).to(device)
    y = torch.randint(0, 10, (n, args.batch), generator=gen).to(device)

    def runner(compile: bool) -> tuple[object, object]:
        torch.manual_seed(0)
        state = NodeState(build(args.model, args.precision, args.px, device), n, device)
        state.train()
        if args.variant == "batched":
            bsteps = BatchedSteps(state, compile, log=lambda m: None)

            def one_round() -> None:
                # the nodes' seeds from torch's one generator, in node order (no node streams)
                seeds = bsteps.seeds(lambda _k: contextlib.nullcontext())
                state.grad.zero_()
                bsteps.train_step(x, y, seeds)

            return one_round, bsteps
        steps = Steps(state.models[0], compile, log=lambda m: None, compile_eval=False)

        def one_round() -> None:
            state.grad.zero_()
            for k, model in enumerate(state.models):
                steps.train_step(model, x[k], y[k])

        return one_round, steps

    def timed(fn: object, iters: int) -> float:
        times = []
        for _ in range(iters):
            sync(device)
            t0 = time.perf_counter()
            fn()  # type: ignore[operator]
            sync(device)
            times.append(time.perf_counter() - t0)
        return statistics.median(times) * 1e3

    row: dict[str, object] = {}
    eager, _ = runner(False)
    eager()  # warm-up (builds the C++ kernel where it runs)
    os.environ[kernel.ENV] = "0"  # the path a GPU takes: no C++ kernel, ...
    for fused_mode, suffix in (("1", ""), ("0", "_unfused")):  # ... the quantiser fused
        os.environ[fused.ENV] = fused_mode
        eager()  # warm-up: compiles the fused quantiser
        _, counted = count_ops(eager)
        row[f"aten_ops_round{suffix}"] = counted.total
        row[f"launches_round{suffix}"] = counted.launches
        if not suffix:
            row["host_syncs_round"] = counted.host_syncs
    del os.environ[kernel.ENV], os.environ[fused.ENV]
    row["ms_round_eager"] = timed(eager, args.iters)
    compiled, steps = runner(True)
    before = inductor_kernels()
    t0 = time.perf_counter()
    compiled()
    sync(device)
    row["compile_s"] = time.perf_counter() - t0
    row["kernels"] = inductor_kernels() - before
    ran = bool(getattr(steps, "compiled", False))
    row["ran"] = "compiled" if ran else "eager (the compile fell back)"
    compiled()
    row["ms_round_compiled"] = timed(compiled, args.iters)
    if device.type == "cpu":  # after the timed part: each count compiles the round once more
        from bench_gpu import VARIANT_OPTIONS  # the GPU run's inductor options, by variant

        from lpdt.engine import cudacount

        combo = VARIANT_OPTIONS["batched-combo"]
        for options, suffix in ((None, ""), (combo, "_combo")):
            with cudacount.counting(options) as launches:
                runner(True)[0]()  # type: ignore[operator]
            row[f"cuda_kernels{suffix}"] = launches.kernels
            row.setdefault("cuda_library_calls", launches.extern)
            blockers = sorted({g.cudagraph_blocker for g in launches.graphs} - {None})
            row.setdefault("cuda_graph_blockers", "; ".join(blockers) or "none")
    row["torch"] = torch.__version__
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="TSV file (appended)")
    ap.add_argument("--model", default="resnet20")
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--px", type=int, default=32)
    ap.add_argument("--precisions", default="fp32,int8")
    ap.add_argument("--variants", default="sequential,batched")
    ap.add_argument("--iters", type=int, default=5, help="timed rounds (median)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per row")
    ap.add_argument("--row", help=argparse.SUPPRESS)  # internal: measure one row, print JSON
    args = ap.parse_args(argv)
    if args.row:
        args.precision, args.variant = args.row.split(":")
        print(json.dumps(measure(args)))
        return 0
    precisions = [p for p in args.precisions.split(",") if p]
    variants = [v for v in args.variants.split(",") if v]
    bad = [p for p in precisions if p not in ("fp32", "int8")]
    bad += [v for v in variants if v not in ("sequential", "batched")]
    if bad:
        ap.error(f"unknown {bad}: precisions fp32,int8; variants sequential,batched")
    new = not args.out.exists()
    out = args.out.open("a")
    if new:
        out.write("\t".join(COLUMNS) + "\n")
    for precision in precisions:
        for variant in variants:
            with tempfile.TemporaryDirectory(prefix="lpdt-launches-") as cache:
                env = dict(
                    os.environ,
                    TORCHINDUCTOR_CACHE_DIR=str(Path(cache) / "inductor"),
                    OMP_NUM_THREADS=str(args.threads),
                )
                cmd = [sys.executable, __file__, "--out", str(args.out), "--row"]
                cmd += [f"{precision}:{variant}"]
                for opt in ("model", "nodes", "batch", "px", "iters", "threads", "device"):
                    cmd += [f"--{opt}", str(getattr(args, opt))]
                try:
                    r = subprocess.run(
                        cmd, env=env, capture_output=True, text=True, timeout=args.timeout
                    )
                    lines = r.stdout.strip().splitlines()
                    if r.returncode != 0 or not lines:
                        tail = (r.stderr.strip().splitlines() or ["no output"])[-1]
                        row: dict[str, object] = {"ran": f"failed: {tail[:200]}"}
                    else:
                        row = json.loads(lines[-1])
                except subprocess.TimeoutExpired:
                    row = {"ran": f"no result within {args.timeout:g} s"}
            row.update(
                model=args.model,
                nodes=args.nodes,
                batch=args.batch,
                px=args.px,
                precision=precision,
                variant=variant,
            )
            cells = [row.get(c, "") for c in COLUMNS]
            text = [f"{v:.4g}" if isinstance(v, float) else str(v) for v in cells]
            out.write("\t".join(text) + "\n")
            out.flush()
            print("  ".join(f"{c}={t}" for c, t in zip(COLUMNS, text, strict=True)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
