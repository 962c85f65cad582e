"""Throughput of the paper's training on one GPU, in one short run: step variants and k jobs.

Part 1, **steps** (``steps.tsv``): one round (every node's forward, loss and backward) of the
engine's own step code, for each case (model x nodes, per-node batch, px) and precision, in the
variants

- ``eager``: ``Steps`` without compiling (the reference);
- ``sequential``: ``Steps`` compiled (``train.compile``), node by node: what the grid runs today;
- ``graphs``: the same with ``train.compile_mode: reduce-overhead`` (CUDA graphs);
- ``batched``: ``BatchedSteps`` compiled (``train.batch_nodes``: the n nodes as one vmapped step);
- ``batched-graphs``: both.

The variants run in turn within each of ``--rounds`` blocks (drifting load hits all alike), and
each block's ratio to ``sequential`` is taken within the block. An 8-bit step that lpdt would not
compile here (torch older than ``MIN_TORCH_COMPILED_INT8``) runs eagerly and says so in its row.

Part 2, **jobs** (``jobs.tsv``): k = 1, 2, 4, ... concurrent training jobs on the one GPU, each the
paper's Table 3 cell (ResNet-20, 8-node directed ring, CHOCO with 99 % top-k, per-node batch 32,
compiled) through the engine's full iteration (``Run.iteration``: steps, optimizer, compression,
gossip) on generated 32 px images (the synthetic dataset: timing only). Each job compiles and
warms up, then all start together on a signal and run ``--job-seconds``; images/s per GPU is the
sum over the jobs. Each job gets ``cores // k`` threads.

Everything is written to ``--out`` as it is measured (one line per row, flushed), so a run cut off
by a time limit keeps what finished; ``--budget`` seconds bounds the whole script (a part that
would start past it is skipped and says so).

    python benchmarks/bench_gpu.py --out gpu-out                          # on a GPU machine
    python benchmarks/bench_gpu.py --device cpu --cases resnet8:2:4:8 --jobs 1,2 \\
        --job-seconds 3 --out /tmp/b                                      # the CPU smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # bench_compile's model builder and device sync

from bench_compile import build, sync  # noqa: E402

VARIANTS = ("eager", "sequential", "graphs", "batched", "batched-graphs")
TABLE3 = HERE.parent / "examples" / "cifar10_resnet20_lp_choco.yaml"
T0 = time.monotonic()


def elapsed() -> float:
    return time.monotonic() - T0


class Table:
    """A TSV file written row by row (flushed), and each row printed."""

    def __init__(self, path: Path, columns: list[str]) -> None:
        self.path, self.columns = path, columns
        new = not path.exists()
        self.f = path.open("a")
        if new:
            self.f.write("\t".join(columns) + "\n")
            self.f.flush()

    def row(self, **values: object) -> None:
        cells = [values.get(c, "") for c in self.columns]
        text = [f"{v:.4g}" if isinstance(v, float) else str(v) for v in cells]
        self.f.write("\t".join(text) + "\n")
        self.f.flush()
        print("  ".join(f"{c}={t}" for c, t in zip(self.columns, text, strict=True)), flush=True)


def parse_case(text: str) -> tuple[str, int, int, int]:
    """``model:nodes:batch:px``, e.g. ``resnet20:8:32:32``."""
    parts = text.split(":")
    if len(parts) != 4 or not all(p.isdigit() for p in parts[1:]):
        raise ValueError(f"case {text!r}: expected model:nodes:batch:px, e.g. resnet20:8:32:32")
    return parts[0], int(parts[1]), int(parts[2]), int(parts[3])


def make_runner(
    variant: str,
    model_name: str,
    precision: str,
    nodes: int,
    px: int,
    device: torch.device,
    eager_only: bool = False,
) -> tuple[Callable[[torch.Tensor, torch.Tensor], None], str, torch.Tensor]:
    """A function doing one round of ``variant`` on fresh node replicas, a note (what ran) and
    the replicas' gradient matrix (what the round writes)."""
    from lpdt.decentral.state import NodeState
    from lpdt.engine.batched import BatchedSteps
    from lpdt.engine.steps import Steps
    from lpdt.layers.quant.quantizers import draw_seed

    torch.manual_seed(0)
    state = NodeState(build(model_name, precision, px, device), nodes, device)
    state.train()
    compile = variant != "eager" and not eager_only
    mode = "reduce-overhead" if variant.endswith("graphs") else "default"
    notes: list[str] = []
    if variant.startswith("batched"):
        steps = BatchedSteps(state, compile, mode, log=notes.append)

        def round_batched(x: torch.Tensor, y: torch.Tensor) -> None:
            seeds = None
            if steps.quantized:
                seeds = torch.stack([draw_seed(device) for _ in range(nodes)])
            steps.train_step(x, y, seeds)

        return round_batched, _ran(compile, steps.compiled, notes), state.grad
    step = Steps(state.models[0], compile, mode, log=notes.append, compile_eval=False)

    def round_sequential(x: torch.Tensor, y: torch.Tensor) -> None:
        state.grad.zero_()
        for k, model in enumerate(state.models):
            step.train_step(model, x[k], y[k])

    return round_sequential, _ran(compile, bool(step.compiled), notes), state.grad


def _ran(asked: bool, compiled: bool, notes: list[str]) -> str:
    """What ran: compiled or eager, and why eager when compiling was asked for."""
    if compiled:
        return "compiled" + (" (forced)" if os.environ.get("LPDT_FORCED_INT8") else "")
    return "eager" + (f" ({notes[0][:70]})" if asked and notes else "")


def bench_steps(args: argparse.Namespace, device: torch.device, out: Path) -> None:
    table = Table(
        out / "steps.tsv",
        [
            "case",
            "precision",
            "variant",
            "ran",
            "first_s",
            "ms_round",
            "ms_node_step",
            "img_s",
            "vs_sequential",
            "grad_vs_eager",
            "blocks",
        ],
    )
    for case in args.cases:
        model_name, nodes, batch, px = parse_case(case)
        for precision in args.precisions:
            if elapsed() > args.budget * args.steps_share:
                print(f"steps: {case} {precision} skipped (past the steps' share of --budget)")
                continue
            gen = torch.Generator().manual_seed(0)
            x = torch.randn(nodes, batch, 3, px, px, generator=gen).to(device)
            y = torch.randint(0, 10, (nodes, batch), generator=gen).to(device)
            runners, first, grads = {}, {}, {}
            for variant in args.variants:
                try:
                    fn, ran, grad = make_runner(
                        variant, model_name, precision, nodes, px, device, args.eager_only
                    )
                    sync(device)
                    t0 = time.perf_counter()
                    for _ in range(3):  # compile, record graphs, warm up
                        fn(x, y)
                    sync(device)
                    first[variant] = time.perf_counter() - t0
                    runners[variant] = (fn, ran)
                    grads[variant] = grad.clone()
                except Exception as e:  # a variant that fails is a row, not the end of the run
                    msg = f"{type(e).__name__}: {e}".replace("\n", " ").replace("\t", " ")
                    table.row(case=case, precision=precision, variant=variant, ran=msg[:300])
            times: dict[str, list[float]] = {v: [] for v in runners}
            for _ in range(args.rounds):
                for variant, (fn, _) in list(runners.items()):
                    try:
                        sync(device)
                        t0 = time.perf_counter()
                        for _ in range(args.iters):
                            fn(x, y)
                        sync(device)
                    except Exception as e:
                        msg = f"{type(e).__name__}: {e}".replace("\n", " ").replace("\t", " ")
                        table.row(case=case, precision=precision, variant=variant, ran=msg[:300])
                        del runners[variant], times[variant]
                        continue
                    times[variant].append((time.perf_counter() - t0) / args.iters)
            # Each variant's gradients after the same three warm-up rounds, against eager's (the
            # rounding noise differs between variants: 8-bit differs by that; zero gradients: 1.0).
            ref_g = grads.get("eager")
            ref = times.get("sequential")
            for variant, ts in times.items():
                ms = statistics.median(ts) * 1e3
                ratios = [r / s for r, s in zip(ref, ts, strict=True)] if ref else []
                table.row(
                    case=case,
                    precision=precision,
                    variant=variant,
                    ran=runners[variant][1],
                    first_s=first[variant],
                    ms_round=ms,
                    ms_node_step=ms / nodes,
                    img_s=nodes * batch / (ms / 1e3),
                    vs_sequential=statistics.median(ratios) if ratios else "",
                    grad_vs_eager=(
                        float((grads[variant] - ref_g).norm() / ref_g.norm())
                        if ref_g is not None
                        else ""
                    ),
                    blocks=",".join(f"{r:.2f}" for r in ratios),
                )
            del runners
            if device.type == "cuda":
                torch.cuda.empty_cache()


# -- part 2: k concurrent jobs ----------------------------------------------------------------
def job_config(args: argparse.Namespace, device: str):
    from lpdt.config import load_config

    overrides = {
        "data.dataset": "synthetic",
        "data.train_subset": args.job_samples,
        "data.test_subset": 100,
        "precision.mode": args.job_precision,
        "model.norm": "evonorm" if args.job_precision == "fp32" else "rangeen",
        "device": device,
        "train.compile": device == "cuda" or args.job_compile,
        "train.compile_eval": False,
        "train.compile_mode": args.job_mode,
        "train.batch_nodes": args.job_batch_nodes,
        "tracking.mlflow": False,
    }
    if args.job_model != "resnet20":
        overrides["model.name"] = args.job_model
    return load_config(TABLE3, overrides)


def job_worker(args: argparse.Namespace) -> None:
    """One training job: build, warm up, signal ready, wait for go, run, write its result."""
    from lpdt.engine.run import Run

    sync_dir = Path(args.job_worker)
    cfg = job_config(args, args.device)
    run = Run(cfg, log=lambda m: None)
    run.state.train()
    device = run.device
    t0 = time.perf_counter()
    for _ in range(args.job_warmup):
        run.iteration(0.1)
    sync(device)
    warm_s = time.perf_counter() - t0
    me = os.getpid()
    (sync_dir / f"ready.{me}").write_text(f"{warm_s}\n")
    deadline = time.monotonic() + args.job_wait
    while not (sync_dir / "go").exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"job {me}: no start signal within {args.job_wait} s")
        time.sleep(0.05)
    iters, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < args.job_seconds:
        run.iteration(0.1)
        iters += 1
    sync(device)
    took = time.perf_counter() - t0
    images = iters * cfg.topology.nodes * cfg.per_node_batch
    result = {"iters": iters, "seconds": took, "img_s": images / took, "warm_s": warm_s}
    (sync_dir / f"result.{me}.json").write_text(json.dumps(result))


def bench_jobs(args: argparse.Namespace, out: Path, ks: list[int]) -> None:
    table = Table(
        out / "jobs.tsv",
        [
            "model",
            "precision",
            "mode",
            "batch_nodes",
            "k",
            "threads",
            "img_s_gpu",
            "img_s_job_min",
            "img_s_job_max",
            "vs_k1",
            "warm_s_max",
            "iters",
        ],
    )
    cores = os.cpu_count() or 1
    base = None
    for k in ks:
        if elapsed() + args.job_seconds + 30 > args.budget:
            print(f"jobs: k={k} skipped (past --budget {args.budget} s)", flush=True)
            continue
        name = f"jobs-{args.job_mode}{'-batched' if args.job_batch_nodes else ''}-k{k}"
        sync_dir = Path(tempfile.mkdtemp(prefix=f"{name}-"))  # out/ keeps only the tables
        threads = max(1, cores // k)
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
        cmd = [sys.executable, __file__, "--job-worker", str(sync_dir), "--device", args.device]
        for opt in (
            "job_seconds",
            "job_samples",
            "job_warmup",
            "job_wait",
            "job_precision",
            "job_model",
            "job_mode",
        ):
            cmd += [f"--{opt.replace('_', '-')}", str(getattr(args, opt))]
        cmd += ["--job-batch-nodes"] if args.job_batch_nodes else []
        cmd += ["--job-compile"] if args.job_compile else []
        cmd += ["--force-int8-compile"] if args.force_int8_compile else []
        log = (out / "jobs.log").open("a")
        log.write(f"=== {name}\n")
        log.flush()
        procs = [
            subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT) for _ in range(k)
        ]
        ok = _wait(lambda d=sync_dir, k=k, p=procs: _ready(d, k, p), args.job_wait)
        (sync_dir / "go").write_text("")
        deadline = args.job_seconds + 60
        for p in procs:
            try:
                p.wait(timeout=max(1.0, deadline))
            except subprocess.TimeoutExpired:
                p.kill()
        log.close()
        results = [json.loads(f.read_text()) for f in sync_dir.glob("result.*.json")]
        shutil.rmtree(sync_dir, ignore_errors=True)
        if not ok or len(results) < k:
            table.row(
                model=args.job_model,
                precision=args.job_precision,
                k=k,
                threads=threads,
                iters=f"{len(results)} of {k} jobs finished (jobs.log, {name})",
            )
            continue
        total = sum(r["img_s"] for r in results)
        base = base or (total if k == ks[0] else None)
        table.row(
            model=args.job_model,
            precision=args.job_precision,
            mode=args.job_mode,
            batch_nodes=args.job_batch_nodes,
            k=k,
            threads=threads,
            img_s_gpu=total,
            img_s_job_min=min(r["img_s"] for r in results),
            img_s_job_max=max(r["img_s"] for r in results),
            vs_k1=total / base if base else "",  # against the set's first k
            warm_s_max=max(r["warm_s"] for r in results),
            iters=sum(r["iters"] for r in results),
        )


def _ready(sync_dir: Path, k: int, procs: list[subprocess.Popen]) -> bool:
    """All k jobs are warm, or one has died (no point waiting)."""
    return len(list(sync_dir.glob("ready.*"))) == k or any(p.poll() not in (None, 0) for p in procs)


def _wait(done: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if done():
            return True
        time.sleep(0.1)
    return False


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, help="folder for steps.tsv, jobs.tsv and the job logs")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--cases", default="resnet20:8:32:32", help="model:nodes:batch:px,...")
    ap.add_argument("--precisions", default="fp32,int8")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--iters", type=int, default=10, help="rounds per timed block")
    ap.add_argument("--rounds", type=int, default=3, help="alternating blocks")
    ap.add_argument("--jobs", default="1,2,4,8,12", help="k values; empty: no jobs part")
    ap.add_argument("--job-seconds", type=float, default=20.0)
    ap.add_argument("--job-samples", type=int, default=8192)
    ap.add_argument("--job-warmup", type=int, default=5)
    ap.add_argument("--job-wait", type=float, default=240.0, help="bound on every wait (s)")
    ap.add_argument("--job-precision", default="fp32", choices=("fp32", "int8"))
    ap.add_argument("--job-model", default="resnet20")
    ap.add_argument("--job-mode", default="default", help="train.compile_mode of the jobs")
    ap.add_argument("--job-batch-nodes", action="store_true")
    ap.add_argument("--job-compile", action="store_true", help="compile on the CPU too")
    ap.add_argument("--budget", type=float, default=450.0, help="seconds for the whole script")
    ap.add_argument("--steps-share", type=float, default=0.5, help="of --budget for part 1")
    ap.add_argument("--parts", default="steps,jobs")
    ap.add_argument("--eager-only", action="store_true", help="run every variant uncompiled")
    ap.add_argument(
        "--force-int8-compile",
        action="store_true",
        help="compile 8-bit steps even where lpdt would not (older torch, CUDA): to check them",
    )
    ap.add_argument(
        "--alt-jobs",
        default="",
        help="k values of a second set of jobs with --alt-mode and --alt-batch-nodes",
    )
    ap.add_argument("--alt-mode", default="reduce-overhead")
    ap.add_argument("--alt-batch-nodes", action="store_true")
    ap.add_argument("--job-worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.force_int8_compile:
        import lpdt.engine.steps as steps_module

        os.environ[steps_module.CUDA_INT8_ENV] = "1"
        os.environ["LPDT_FORCED_INT8"] = "1"
        steps_module.MIN_TORCH_COMPILED_INT8 = (2, 0)
    if args.job_worker:
        job_worker(args)
        return 0
    if args.out is None:
        ap.error("--out is required")
    try:
        args.cases = [c for c in args.cases.split(",") if c]
        for c in args.cases:
            parse_case(c)
        args.precisions = [p for p in args.precisions.split(",") if p]
        args.variants = [v for v in args.variants.split(",") if v]
        args.jobs = [int(k) for k in args.jobs.split(",") if k]
        args.alt_jobs = [int(k) for k in args.alt_jobs.split(",") if k]
    except ValueError as e:
        ap.error(str(e))
    bad = [v for v in args.variants if v not in VARIANTS] + [
        p for p in args.precisions if p not in ("fp32", "int8")
    ]
    if bad:
        ap.error(f"unknown variant or precision {bad}: variants {VARIANTS}, precisions fp32,int8")
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: no GPU here (use --device cpu for the smoke run)")
    args.out.mkdir(parents=True, exist_ok=True)
    env = f"torch {torch.__version__}, {os.cpu_count()} cores"
    if device.type == "cuda":
        env += f", {torch.cuda.get_device_name(device)}"
    (args.out / "env.txt").write_text(env + "\n")
    print(env, flush=True)
    parts = args.parts.split(",")
    if "steps" in parts:
        bench_steps(args, device, args.out)
    if "jobs" in parts and args.jobs:
        bench_jobs(args, args.out, args.jobs)
    if "jobs" in parts and args.alt_jobs:
        args.job_mode, args.job_batch_nodes = args.alt_mode, args.alt_batch_nodes
        bench_jobs(args, args.out, args.alt_jobs)
    print(f"done in {elapsed():.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
