"""Throughput of the paper's training on one GPU, in one short run: step variants and k jobs.

Part 1, **steps** (``steps.tsv``): one round (every node's forward, loss and backward) of the
engine's own step code, for each case (model x nodes, per-node batch, px) and precision (fp32,
and 8-bit: the paper's recipe), in the variants

- ``eager``: ``Steps`` without compiling, node by node (the reference);
- ``sequential``: ``Steps`` compiled (``train.compile``), node by node;
- ``batched-eager``: ``BatchedSteps`` uncompiled (``train.batch_nodes``: the n nodes as one
  vmapped step);
- ``batched``: ``BatchedSteps`` compiled;
- ``graphs`` / ``batched-graphs`` (not in the default list): ``sequential`` / ``batched`` with
  ``train.compile_mode: reduce-overhead`` (CUDA graphs; ``ran`` says whether inductor used them
  or in how many graphs it skipped them, ``tools/gpu_check.sh graphs``).

Each variant warms up with three rounds (``compile_s``: the first, which compiles; ``first_s``:
all three), and one more round is counted (``lpdt.engine.opcount``): ``aten_ops_round``,
``launches_round`` and ``host_syncs_round``, the aten operations, those of them that are not
views (eagerly each a kernel launch on a GPU) and the host reads of a tensor that the round
dispatches (on the quantisers' tensor path, as on a GPU; for a compiled variant, the operations
that still dispatch outside its graphs, such as convolutions and the gradients' accumulation). ``kernels``: the kernels inductor reports for the
variant's graphs (forward and backward; node by node the graph runs once per node per round).
The inductor cache is a fresh folder for the run (``--inductor-cache``), so ``compile_s`` is a
first compile. Warm-ups go cheapest first, the batched steps before the node-by-node compiled
ones, across precisions; a compiled variant whose warm-up would end past the steps' share of
``--budget`` (estimated from the same variant's compile in the other precision) is skipped with a
row saying so. A compiled variant that ran eagerly (lpdt would not compile it here, or its
compile fell back) gets a row saying so and is not timed: it would time its eager twin again.
Then each precision's variants run in turn within each of ``--rounds`` blocks of up to
``--iters`` rounds and about ``--block-s`` seconds (drifting load hits all alike); each block's
ratio to ``sequential`` is taken within the block. ``grad_vs_eager``: the gradients after the
warm-up against ``eager``'s (the same rounding-noise seeds).

Part 2, **jobs** (``jobs.tsv``): k = 1, 4, 8 concurrent training jobs on the one GPU for each of
``--job-precisions``, each the paper's Table 3 cell (ResNet-20, 8-node directed ring, CHOCO with
99 % top-k, per-node batch 32, compiled, nodes batched) through the engine's full iteration
(``Run.iteration``: steps, optimizer, compression, gossip) on generated 32 px images (the
synthetic dataset: timing only). Per precision, max(k) worker processes start and warm up
(compile and ``--job-warmup`` iterations: ``warm_s``, ``job_kernels``), all at once when the
steps part compiled the same step (its graphs are then in the cache), else the first alone and
then the others; then for each k the first k run together for ``--job-seconds`` on a signal, with
``cores // k`` threads each (or once with each of ``--job-threads``; each job sets its threads and
runs untimed iterations first, until one compiles nothing: a new thread count makes dynamo trace
the step again, its guards holding the count, and on the CPU inductor's C++ kernels hold it
too), while the others wait idle; images/s per GPU is the sum over the k
jobs. A precision's warm-up is counted in the budget before it starts (estimated from the last
measured warm-up, else from the steps part's compile of that step, else ``--job-warmup-guess``)
and bounded by what is left of it; if a worker dies or not every worker is ready in time, all are
killed (by pid), a row names which failed, and no timed part starts. Each worker's log gives,
per timed window, its iterations, the median and longest host time of an iteration and the
kernels compiled inside the window; the row's ``note`` names a compile inside the windows and
the longest iteration of any job (what makes one job's images/s stand apart).

Everything is written to ``--out`` as it is measured (one line per row, flushed; the workers'
logs in ``job-logs/``), so a run cut off by a time limit keeps what finished; ``--budget``
seconds bound the whole script (what would start past it is skipped, with a message and a row).

On an H100 or H200 (one call, under 5 minutes; ``--force-int8-compile`` compiles the
node-by-node 8-bit step too, which lpdt runs eagerly on CUDA; ``tools/gpu_check.sh bench_gpu``
runs it and keeps the files; what it measured on 2026-11-28: docs/notebook/2026-11-28-h200.md):

    PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 timeout 290 \\
        python3 benchmarks/bench_gpu.py --out $OUT --force-int8-compile --budget 280

On the CPU (the smoke run; tests/test_bench_gpu.py):

    python benchmarks/bench_gpu.py --device cpu --cases tiny_cnn:2:4:8 --eager-only \\
        --jobs 1,2 --job-model tiny_cnn --job-samples 256 --job-seconds 1 --out /tmp/b
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

T0 = time.monotonic()  # the budget's clock, started before torch's import (seconds)

import torch  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # bench_compile's model builder and device sync

from bench_compile import build, sync  # noqa: E402

from lpdt.engine.opcount import (  # noqa: E402
    OpCounter,
    OutsideGraphCounter,
    counter_sees_compiled_code,
    inductor_kernels,
)
from lpdt.layers.quant import fused  # noqa: E402
from lpdt.plan.gpu import INT8_COMPILE  # noqa: E402

VARIANTS = (
    "eager",
    "eager-unfused",
    "sequential",
    "graphs",
    "batched-eager",
    "batched",
    "batched-graphs",
    "batched-combo",
    "batched-combo-nosplit",
)
# Not "sequential" by default: on the H200 of 2026-11-28 the batched compiles (fp32 40 s, 8-bit
# 137 s) left no room in a 5-minute call for the node-by-node ones and the 8-bit jobs (the fp32
# node-by-node compiled step was measured on 2026-11-27: docs/notebook/2026-11-27-h100.md).
DEFAULT_VARIANTS = ("eager", "batched-eager", "batched")
# The uncompiled twin of each variant: what a compiled variant that ran eagerly would time again.
EAGER_TWIN = {
    "eager": "eager",
    "eager-unfused": "eager-unfused",
    "sequential": "eager",
    "graphs": "eager",
    "batched-eager": "batched-eager",
    "batched": "batched-eager",
    "batched-graphs": "batched-eager",
    "batched-combo": "batched-eager",
    "batched-combo-nosplit": "batched-eager",
}
# "eager-unfused": the eager node-by-node step with the 8-bit rounding as tensor operations
# (``LPDT_QUANT_FUSED=0``), the step the H100 measured on 2026-11-27 (1,353 ms a round); "eager"
# fuses each rounding into one compiled kernel off the CPU (lpdt.layers.quant.fused).
# "batched-combo": the batched step compiled with inductor's combo kernels (independent small
# kernels launched as one; a GPU option, not lpdt's default). Most of the 8-bit step's extra
# kernels are a few elements each (per quantiser: two batch means and two running-range
# updates; docs/notebook/2026-11-28-hashed-dropout.md), so this asks how many launches a
# horizontal fusion saves there. "batched-combo-nosplit": also no split reductions (a large
# reduction in one kernel instead of a partial kernel and one per output: fewer launches, less
# parallel). Counted without a GPU (lpdt.engine.cudacount; docs/notebook/
# 2026-11-29-cuda-kernels-without-a-gpu.md, -gpu-launches-in-the-price.md), ResNet-20 x 8 on
# torch 2.11: 8-bit 863 kernels, 529 with combo kernels, 429 with both (fp32: 222, 163, 146);
# their time is unmeasured.
VARIANT_OPTIONS: dict[str, dict] = {
    "batched-combo": {"combo_kernels": True},
    "batched-combo-nosplit": {"combo_kernels": True, "split_reductions": False},
}
# Warm-up order (across precisions): cheap first, then the batched compiled step (issue 51's
# target: the 8-bit batched round against the fp32 one), then the rest.
PRIORITY = (
    "eager",
    "eager-unfused",
    "batched-eager",
    "batched",
    "batched-combo",
    "batched-combo-nosplit",
    "sequential",
    "batched-graphs",
    "graphs",
)
# An 8-bit compile against the fp32 one (the batched step on the H200 of 2026-11-28, the plan's
# INT8_COMPILE: 137.1 / 40.1 s): the estimate of an 8-bit warm-up from an fp32 one, to decide
# whether it still fits the budget.
INT8_COMPILE_FACTOR = INT8_COMPILE
# The jobs' warm-up (8 workers at once) where the steps part compiled the same step into the
# cache, against that compile: fp32 on the H200 of 2026-11-28, about 28.7 s (its "43 s" 8-bit
# estimate at the factor 1.5 of that day) against 40.1 s. Dynamo still traces the step in each
# worker; inductor's lowering and the kernels' compiles come from the cache.
WARM_CACHE_FACTOR = 0.72
# What a phase allows its jobs' re-warm after a thread change (dynamo traces the step again; the
# fp32 jobs on the H200 of 2026-11-30 took 3-5 s, from the cache), beside its window and 60 s.
REWARM_S = 60.0
PRECISIONS = ("fp32", "int8")
CompileTimes = dict[tuple[str, str, str], float]  # (case, precision, variant) -> seconds
TABLE3 = HERE.parent / "examples" / "cifar10_resnet20_lp_choco.yaml"


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
        unknown = set(values) - set(self.columns)
        assert not unknown, f"{self.path.name}: no column {sorted(unknown)}"
        cells = [values.get(c, "") for c in self.columns]
        text = [f"{v:.4g}" if isinstance(v, float) else str(v) for v in cells]
        text = [t.replace("\t", " ").replace("\n", " ") for t in text]
        self.f.write("\t".join(text) + "\n")
        self.f.flush()
        print("  ".join(f"{c}={t}" for c, t in zip(self.columns, text, strict=True)), flush=True)


def parse_case(text: str) -> tuple[str, int, int, int]:
    """``model:nodes:batch:px``, e.g. ``resnet20:8:32:32``."""
    parts = text.split(":")
    if len(parts) != 4 or not all(p.isdigit() and int(p) > 0 for p in parts[1:]):
        raise ValueError(f"case {text!r}: expected model:nodes:batch:px, e.g. resnet20:8:32:32")
    return parts[0], int(parts[1]), int(parts[2]), int(parts[3])


def _error(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}".replace("\n", " ").replace("\t", " ")[:300]


# -- part 1: step variants --------------------------------------------------------------------
def compiles(variant: str) -> bool:
    """Whether ``variant`` asks for a compiled step."""
    return EAGER_TWIN[variant] != variant


def gpu_path() -> contextlib.AbstractContextManager[object]:
    """The 8-bit quantisers' tensor operations, as on a GPU (on the CPU they would otherwise
    run a C++ kernel and read the noise seed on the host: ``lpdt.layers.quant.kernel``)."""
    from lpdt.layers.quant import kernel

    return mock.patch.dict(os.environ, {kernel.ENV: "0"})


@dataclass
class Runner:
    """One variant on fresh node replicas: a round, the gradient matrix it writes, and (after
    the first call) whether it runs compiled and why not."""

    round: Callable[[torch.Tensor, torch.Tensor], None]
    grad: torch.Tensor
    compiled: Callable[[], bool]
    notes: list[str]
    graphs: bool = False  # compiled with CUDA graphs asked for (``reduce-overhead``)


def make_runner(
    variant: str,
    model_name: str,
    precision: str,
    nodes: int,
    px: int,
    device: torch.device,
    eager_only: bool = False,
) -> Runner:
    """``variant`` of one round on fresh node replicas (the same initial weights, and the same
    8-bit noise seeds from torch's generator in the same order, in every variant)."""
    from lpdt.decentral.state import NodeState
    from lpdt.engine.batched import BatchedSteps
    from lpdt.engine.steps import Steps

    torch.manual_seed(0)
    # VGG-11 as the paper scale runs it (hashed dropout, config/scales/paper.yaml): batchable.
    state = NodeState(build(model_name, precision, px, device, dropout_noise="hash"), nodes, device)
    state.train()
    compile = compiles(variant) and not eager_only
    mode = "reduce-overhead" if variant.endswith("graphs") else "default"
    graphs = compile and mode == "reduce-overhead"
    notes: list[str] = []
    if variant.startswith("batched"):
        options = VARIANT_OPTIONS.get(variant)
        steps = BatchedSteps(state, compile, mode, log=notes.append, options=options)

        def round_batched(x: torch.Tensor, y: torch.Tensor) -> None:
            # the nodes' seeds from torch's one generator, in node order (no node streams here)
            steps.train_step(x, y, steps.seeds(lambda _k: contextlib.nullcontext()))

        return Runner(round_batched, state.grad, lambda: steps.compiled, notes, graphs)
    step = Steps(state.models[0], compile, mode, log=notes.append, compile_eval=False)
    env = {fused.ENV: "0"} if variant == "eager-unfused" else {}

    def round_sequential(x: torch.Tensor, y: torch.Tensor) -> None:
        state.grad.zero_()
        with mock.patch.dict(os.environ, env):
            for k, model in enumerate(state.models):
                step.train_step(model, x[k], y[k])

    return Runner(round_sequential, state.grad, lambda: bool(step.compiled), notes, graphs)


def ran_text(
    asked: bool, compiled: bool, notes: list[str], precision: str, graph_skips: int | None = None
) -> str:
    """What ran: compiled or eager, and why eager when compiling was asked for; with CUDA graphs
    asked for (``graph_skips`` not None), whether inductor used them: it skips them for a graph
    it judges unfit (a CPU device, an input mutated that is not static, ...) and says why only
    in its log (``TORCH_LOGS=cudagraphs``). A forward's skip also turns them off for its
    backward, which inductor does not count again."""
    if compiled:
        forced = precision == "int8" and os.environ.get("LPDT_FORCED_INT8")
        text = "compiled" + (" (forced)" if forced else "")
        if graph_skips is not None:
            text += (
                f"; CUDA graphs skipped by inductor in {graph_skips} graph(s)"
                if graph_skips
                else "; CUDA graphs"
            )
        return text
    return "eager" + (f" ({notes[-1].strip()[:150]})" if asked and notes else "")


def cudagraph_skips() -> int:
    """How many compiled graphs inductor has run without CUDA graphs that were asked for, in
    this process (its own counter)."""
    from torch._dynamo.utils import counters

    return int(counters["inductor"]["cudagraph_skips"])


@dataclass
class Warm:
    """A variant after its warm-up: what ran, what it cost, what it dispatched."""

    runner: Runner
    ran: str
    compiled: bool
    compile_s: float
    first_s: float
    last_s: float  # the third warm-up round: the size of a timed block
    kernels: int | str
    aten_ops: int | str
    launches: int | str
    host_syncs: int | str
    grad: torch.Tensor


def warm_up(
    runner: Runner,
    x: torch.Tensor,
    y: torch.Tensor,
    device: torch.device,
    asked: bool,
    precision: str,
) -> Warm:
    """Three rounds (compile, record CUDA graphs, warm), then one counted round."""
    before, skips_before = inductor_kernels(), cudagraph_skips()
    sync(device)
    t0 = time.perf_counter()
    runner.round(x, y)
    sync(device)
    compile_s = time.perf_counter() - t0
    runner.round(x, y)
    sync(device)
    t1 = time.perf_counter()
    runner.round(x, y)
    sync(device)
    last_s = time.perf_counter() - t1
    first_s = time.perf_counter() - t0
    compiled = runner.compiled()
    kernels: int | str = inductor_kernels() - before if compiled else ""
    grad = runner.grad.clone()
    ops: int | str = ""
    launches: int | str = ""
    syncs: int | str = ""
    if not asked or compiled:  # a step that fell back is not counted (nor timed)
        if not compiled:
            counter: OpCounter | None = OpCounter()
            where: contextlib.AbstractContextManager = gpu_path()
        else:
            counter = OutsideGraphCounter() if counter_sees_compiled_code() else None
            where = contextlib.nullcontext()
        if counter is not None:
            with where, counter:
                runner.round(x, y)
            sync(device)
            ops, launches, syncs = counter.total, counter.launches, counter.host_syncs
    skips = cudagraph_skips() - skips_before if runner.graphs else None
    ran = ran_text(asked, compiled, runner.notes, precision, skips)
    return Warm(
        runner, ran, compiled, compile_s, first_s, last_s, kernels, ops, launches, syncs, grad
    )


STEP_COLUMNS = [
    "case",
    "precision",
    "variant",
    "ran",
    "compile_s",
    "first_s",
    "kernels",
    "aten_ops_round",
    "launches_round",
    "host_syncs_round",
    "ms_round",
    "ms_node_step",
    "img_s",
    "vs_sequential",
    "grad_vs_eager",
    "blocks",
]


def bench_steps(args: argparse.Namespace, device: torch.device, out: Path) -> CompileTimes:
    """Part 1; returns the compile seconds of the variants that compiled (the jobs' warm-up
    estimate)."""
    table = Table(out / "steps.tsv", STEP_COLUMNS)
    share = args.budget * args.steps_share
    compiled_s: CompileTimes = {}
    if not counter_sees_compiled_code():
        print(
            f"steps: torch {torch.__version__} runs compiled code eagerly under a dispatch mode: "
            "aten_ops_round of compiled variants not counted",
            flush=True,
        )
    for case in args.cases:
        model_name, nodes, batch, px = parse_case(case)
        gen = torch.Generator().manual_seed(0)
        x = torch.randn(nodes, batch, 3, px, px, generator=gen).to(device)
        y = torch.randint(0, 10, (nodes, batch), generator=gen).to(device)
        warm: dict[str, dict[str, Warm]] = {p: {} for p in args.precisions}
        order = sorted(
            ((p, v) for p in args.precisions for v in args.variants),
            key=lambda pv: (PRIORITY.index(pv[1]), args.precisions.index(pv[0])),
        )
        for precision, variant in order:
            key = dict(case=case, precision=precision, variant=variant)
            asked = compiles(variant) and not args.eager_only
            est = 0.0
            if asked:  # the same variant's compile in the other precision, if it ran
                for p in PRECISIONS:
                    if (case, p, variant) in compiled_s and p != precision:
                        scale = {"int8": INT8_COMPILE_FACTOR, "fp32": 1 / INT8_COMPILE_FACTOR}
                        est = compiled_s[(case, p, variant)] * scale[precision]
            if elapsed() + est > share:
                ahead = f"with about {est:.0f} s of warm-up" if est else "before its warm-up"
                why = (
                    f"skipped: at {elapsed():.0f} s, {ahead}, past the steps' share of --budget "
                    f"({share:.0f} s)"
                )
                print(f"steps: {case} {precision} {variant} {why}", flush=True)
                table.row(**key, ran=why)
                continue
            try:
                runner = make_runner(
                    variant, model_name, precision, nodes, px, device, args.eager_only
                )
                w = warm_up(runner, x, y, device, asked, precision)
            except Exception as e:  # a variant that fails is a row, not the end of the run
                table.row(**key, ran=_error(e))
                continue
            if w.compiled:
                compiled_s[(case, precision, variant)] = w.compile_s
            elif asked:
                twin = EAGER_TWIN[variant]
                table.row(
                    **key,
                    ran=f"{w.ran}; not timed: the same step as {twin}",
                    compile_s=w.compile_s,
                    first_s=w.first_s,
                )
                continue
            warm[precision][variant] = w
        for precision in args.precisions:
            _time_variants(args, table, device, case, precision, warm[precision], x, y)
        del warm
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return compiled_s


def _time_variants(
    args: argparse.Namespace,
    table: Table,
    device: torch.device,
    case: str,
    precision: str,
    warm: dict[str, Warm],
    x: torch.Tensor,
    y: torch.Tensor,
) -> None:
    """The warmed variants of one precision in alternating blocks; one row each."""
    nodes, batch = y.shape
    iters = {
        v: max(1, min(args.iters, round(args.block_s / max(w.last_s, 1e-6))))
        for v, w in warm.items()
    }
    times: dict[str, list[float]] = {v: [] for v in warm}
    for _ in range(args.rounds):
        for variant, w in list(warm.items()):
            try:
                sync(device)
                t0 = time.perf_counter()
                for _ in range(iters[variant]):
                    w.runner.round(x, y)
                sync(device)
            except Exception as e:
                table.row(case=case, precision=precision, variant=variant, ran=_error(e))
                del warm[variant], times[variant]
                continue
            times[variant].append((time.perf_counter() - t0) / iters[variant])
    ref_g = warm["eager"].grad if "eager" in warm else None
    ref = times.get("sequential")
    for variant, ts in times.items():
        w = warm[variant]
        ms = statistics.median(ts) * 1e3
        ratios = [r / s for r, s in zip(ref, ts, strict=True)] if ref else []
        table.row(
            case=case,
            precision=precision,
            variant=variant,
            ran=w.ran,
            compile_s=w.compile_s,
            first_s=w.first_s,
            kernels=w.kernels,
            aten_ops_round=w.aten_ops,
            launches_round=w.launches,
            host_syncs_round=w.host_syncs,
            ms_round=ms,
            ms_node_step=ms / nodes,
            img_s=nodes * batch / (ms / 1e3),
            vs_sequential=statistics.median(ratios) if ratios else "",
            # zero gradients would read 1.0
            grad_vs_eager=(
                float((w.grad - ref_g).norm() / ref_g.norm()) if ref_g is not None else ""
            ),
            blocks=",".join(f"{r:.2f}" for r in ratios),
        )


# -- part 2: k concurrent jobs ----------------------------------------------------------------
def job_config(args: argparse.Namespace, device: str, precision: str) -> Any:
    from lpdt.config import load_config

    overrides = {
        "data.dataset": "synthetic",
        "data.train_subset": args.job_samples,
        "data.test_subset": 100,
        "precision.mode": precision,
        "model.norm": "evonorm" if precision == "fp32" else "rangeen",
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


def job_case(args: argparse.Namespace) -> str:
    """The jobs' step as a case of the steps part (``model:nodes:batch:px``)."""
    cfg = job_config(args, args.device, "fp32")
    return f"{cfg.model.name}:{cfg.topology.nodes}:{cfg.per_node_batch}:32"  # synthetic: 32 px


def _write(path: Path, text: str) -> None:
    """Write a signal file whole (a reader never sees it half-written)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def rewarm_for_threads(run: Any, threads: int, least: int = 2, most: int = 5) -> dict[str, float]:
    """Set ``threads`` and run untimed iterations, at least ``least`` and until one compiles
    nothing (at most ``most``): what a new thread count recompiles (``rewarm_kernels``) then
    happens outside the timed window. Dynamo's guards hold the thread count (on the CPU
    inductor's C++ kernels too): on the CPU of 2026-11-30 a worker's whole step recompiled
    inside its window after ``torch.set_num_threads`` (23 s for a tiny model), and on the H200
    that day every fp32 job recompiled its 222 kernels (3-5 s), one of them at its second
    iteration after the change, inside the window (one iteration took 5.5 s), hence more than
    one iteration here."""
    before, t0 = inductor_kernels(), time.perf_counter()
    torch.set_num_threads(threads)
    for i in range(most):
        start = inductor_kernels()
        run.iteration(0.1)
        sync(run.device)
        if i + 1 >= least and inductor_kernels() == start:
            break
    return {"rewarm_s": time.perf_counter() - t0, "rewarm_kernels": inductor_kernels() - before}


def job_worker(args: argparse.Namespace) -> None:
    """One training job: build, warm up, signal ready; then for each phase n wait for ``go.n``
    and, if this worker is among the phase's k, run ``--job-seconds`` and write its result;
    until ``stop`` (or the parent is gone)."""
    from lpdt.engine.run import Run

    sync_dir, me = Path(args.job_worker), args.job_index
    parent = os.getppid()
    cfg = job_config(args, args.device, args.job_precisions[0])
    t0 = time.perf_counter()
    run = Run(cfg, log=lambda m: None)
    run.state.train()
    device = run.device
    before = inductor_kernels()
    for _ in range(args.job_warmup):
        run.iteration(0.1)
    sync(device)
    warm = {"pid": os.getpid(), "warm_s": time.perf_counter() - t0}
    warm["kernels"] = inductor_kernels() - before
    _write(sync_dir / f"ready.{me}", json.dumps(warm))
    print(f"worker {me}: ready after {warm['warm_s']:.1f} s", flush=True)

    def wait_for(files: list[Path], deadline: float = float("inf")) -> bool:
        """Whether ``files`` all came before ``stop``, the parent's end or ``deadline``."""
        while not all(f.exists() for f in files):
            gone = (sync_dir / "stop").exists() or os.getppid() != parent
            if gone or time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    phase = 0
    while True:
        go = sync_dir / f"go.{phase}"
        if not wait_for([go]):
            return
        spec = json.loads(go.read_text())
        if me < spec["k"]:
            print(f"worker {me}: go, k={spec['k']}", flush=True)
            rewarm = rewarm_for_threads(run, spec["threads"])
            print(
                f"worker {me}: {rewarm['rewarm_kernels']} kernels compiled in "
                f"{rewarm['rewarm_s']:.1f} s after setting {spec['threads']} threads",
                flush=True,
            )
            # The k workers' windows start together, after every one has re-warmed.
            _write(sync_dir / f"rewarmed.{phase}.{me}", "")
            rewarmed = [sync_dir / f"rewarmed.{phase}.{i}" for i in range(spec["k"])]
            if not wait_for(rewarmed, time.monotonic() + spec.get("rewarm_wait", 300.0)):
                return
            # What the window holds beside steady iterations (the H200 run of 2026-11-28: one
            # job alone at 849 images/s, another at 3,096 in k = 4, one at 47 in k = 8): a
            # compile inside it (new kernels), or a long iteration (host times, unsynchronised).
            kernels0, gaps = inductor_kernels(), []
            iters, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < args.job_seconds:
                t_it = time.perf_counter()
                run.iteration(0.1)
                gaps.append(time.perf_counter() - t_it)
                iters += 1
            sync(device)
            took = time.perf_counter() - t0
            images = iters * cfg.topology.nodes * cfg.per_node_batch
            result = {"iters": iters, "seconds": took, "img_s": images / took}
            result["new_kernels"] = inductor_kernels() - kernels0
            result.update(rewarm)
            result["iter_ms_max"] = 1e3 * max(gaps)
            print(
                f"worker {me}: {iters} iterations in {took:.2f} s; host ms per iteration: median "
                f"{1e3 * statistics.median(gaps):.1f}, max {result['iter_ms_max']:.1f} "
                f"(iteration {gaps.index(max(gaps))}); kernels compiled in the window: "
                f"{result['new_kernels']}",
                flush=True,
            )
            _write(sync_dir / f"result.{phase}.{me}.json", json.dumps(result))
        phase += 1


def job_note(results: list[dict[str, Any]], compiled_as_asked: bool) -> str:
    """A timed phase's note: ok, and what made its windows uneven (a compile inside a window,
    the longest iteration of any job)."""
    note = "ok" if compiled_as_asked else "ok; the step ran eagerly"
    recompiled = sum(r.get("new_kernels", 0) for r in results)
    if recompiled:
        note += f"; {recompiled} kernels compiled inside the timed windows"
    rewarmed = sum(r.get("rewarm_kernels", 0) for r in results)
    if rewarmed:
        slowest = max(r.get("rewarm_s", 0.0) for r in results)
        note += f"; {rewarmed} kernels compiled after the thread change, before the windows "
        note += f"(up to {slowest:.0f} s)"
    longest = max((r.get("iter_ms_max", 0.0) for r in results), default=0.0)
    return note + f"; longest iteration {longest:.0f} ms" if longest else note


JOB_COLUMNS = [
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
    "warm_s",
    "job_kernels",
    "iters",
    "note",
]


class Workers:
    """The job processes of one precision (each in a session of its own, so that killing it
    by its id also ends the compile workers it started)."""

    def __init__(self, args: argparse.Namespace, precision: str, out: Path) -> None:
        self.args, self.precision = args, precision
        self.dir = Path(tempfile.mkdtemp(prefix=f"lpdt-jobs-{precision}-"))
        self.logs = out / "job-logs"
        self.logs.mkdir(exist_ok=True)
        self.procs: dict[int, subprocess.Popen] = {}
        self.ready: dict[int, dict[str, Any]] = {}

    def log_path(self, i: int) -> Path:
        return self.logs / f"{self.args.job_label}{self.precision}-{i}.log"

    def start(self, indices: range) -> None:
        """Start workers ``indices``. They warm up with this process's threads (a count that
        inductor's cache keys hold: so they find the steps part's graphs), and run each timed
        phase with that phase's threads."""
        args = self.args
        threads = str(torch.get_num_threads())
        env = dict(os.environ, OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads)
        cmd = [sys.executable, __file__, "--job-worker", str(self.dir), "--device", args.device]
        cmd += ["--job-precisions", self.precision]
        for opt in ("job_seconds", "job_samples", "job_warmup", "job_model", "job_mode"):
            cmd += [f"--{opt.replace('_', '-')}", str(getattr(args, opt))]
        cmd += ["--job-batch-nodes" if args.job_batch_nodes else "--no-job-batch-nodes"]
        cmd += ["--job-compile"] if args.job_compile else []
        cmd += ["--force-int8-compile"] if args.force_int8_compile else []
        for i in indices:
            with self.log_path(i).open("w") as log:
                self.procs[i] = subprocess.Popen(
                    [*cmd, "--job-index", str(i)],
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )

    def await_ready(self, wait_s: float) -> str | None:
        """None once every started worker is ready; else what failed (a worker that died, or
        those not ready within ``wait_s``)."""
        deadline = time.monotonic() + wait_s
        while True:
            for i in self.procs:
                f = self.dir / f"ready.{i}"
                if i not in self.ready and f.exists():
                    self.ready[i] = json.loads(f.read_text())
            if len(self.ready) == len(self.procs):
                return None
            for i, p in self.procs.items():
                if i not in self.ready and p.poll() is not None:
                    return f"worker {i} (pid {p.pid}) exited {p.returncode}: {self.tail(i)}"
            if time.monotonic() > deadline:
                late = [i for i in self.procs if i not in self.ready]
                pids = ", ".join(f"{i} (pid {self.procs[i].pid})" for i in late)
                return f"workers {pids} not ready within {wait_s:.0f} s"
            time.sleep(0.05)

    def tail(self, i: int) -> str:
        lines = self.log_path(i).read_text(errors="replace").strip().splitlines()
        return lines[-1][:200] if lines else "no output"

    def phase(self, n: int, k: int, threads: int, wait_s: float) -> list[dict[str, Any]] | str:
        """Phase n: the first k workers re-warm with ``threads`` each, then run together; their
        results, or what failed."""
        spec = {"k": k, "threads": threads, "rewarm_wait": wait_s}
        _write(self.dir / f"go.{n}", json.dumps(spec))
        print(f"jobs: {self.precision} go: k={k}", flush=True)
        deadline = time.monotonic() + wait_s
        files = [self.dir / f"result.{n}.{i}.json" for i in range(k)]
        while not all(f.exists() for f in files):
            dead = [i for i in range(k) if self.procs[i].poll() is not None]
            if dead or time.monotonic() > deadline:
                failed = dead or [i for i, f in enumerate(files) if not f.exists()]
                return f"workers {failed} gave no result (job-logs/): {self.tail(failed[0])}"
            time.sleep(0.05)
        return [json.loads(f.read_text()) for f in files]

    def close(self) -> None:
        """Stop every worker: the stop signal, then a kill (by pid) for any still running."""
        _write(self.dir / "stop", "")
        deadline = time.monotonic() + 10
        for p in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)

    def kill(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def warm_estimate(
    args: argparse.Namespace,
    precision: str,
    measured: dict[str, float],
    compiled_s: CompileTimes,
) -> tuple[float, str]:
    """Seconds a precision's workers will take to warm up, and from what that is estimated:
    its last warm-up, else the other precision's, else the steps part's compile of the jobs'
    step (the same shape if it ran: x ``WARM_CACHE_FACTOR``, else the longest), else
    ``--job-warmup-guess``."""
    if precision in measured:
        return measured[precision], "its last warm-up"
    if measured:
        last, seconds = max(measured.items(), key=lambda kv: kv[1])
        factors = {("int8", "fp32"): INT8_COMPILE_FACTOR, ("fp32", "int8"): 1 / INT8_COMPILE_FACTOR}
        scale = factors.get((precision, last), 1.0)
        return seconds * scale, f"the {last} warm-up"
    variant = "batched" if args.job_batch_nodes else "sequential"
    case = job_case(args)
    same = [t for (c, p, v), t in compiled_s.items() if (c, p, v) == (case, precision, variant)]
    other = [t for (c, p, v), t in compiled_s.items() if (p, v) == (precision, variant)]
    if same:
        return max(same) * WARM_CACHE_FACTOR, "the steps part's compile, its graphs cached"
    if other:
        return max(other), "the steps part's compile"
    return args.job_warmup_guess, "--job-warmup-guess"


def bench_jobs(
    args: argparse.Namespace,
    out: Path,
    ks: list[int],
    compiled_s: CompileTimes,
    measured: dict[str, float],
) -> None:
    """Part 2 for each of ``--job-precisions``: one warm-up of max(ks) workers, then a timed
    phase per k. ``measured``: the warm-ups so far (seconds by precision), updated."""
    table = Table(out / "jobs.tsv", JOB_COLUMNS)
    cores = os.cpu_count() or 1
    ks = sorted(set(ks))
    margin = args.margin
    compiling = args.device == "cuda" or args.job_compile
    for precision in args.job_precisions:
        key = dict(
            model=args.job_model,
            precision=precision,
            mode=args.job_mode,
            batch_nodes=args.job_batch_nodes,
        )
        variant = "batched" if args.job_batch_nodes else "sequential"
        # The first worker alone where it would compile from an empty cache: then the others
        # find its graphs in the cache instead of compiling the same graphs at once.
        staged = (
            compiling and max(ks) > 1 and (job_case(args), precision, variant) not in compiled_s
        )
        staged = staged and precision not in measured
        est, basis = warm_estimate(args, precision, measured, compiled_s)
        est *= 2 if staged else 1
        need = est + args.job_seconds + margin
        if elapsed() + need > args.budget:
            why = (
                f"skipped: at {elapsed():.0f} s, warm-up (about {est:.0f} s, from {basis}) + "
                f"{args.job_seconds:g} s + {margin:g} s margin is past --budget {args.budget:g} s"
            )
            print(f"jobs: {precision} {why}", flush=True)
            table.row(**key, k=",".join(map(str, ks)), note=why)
            continue
        workers = Workers(args, precision, out)
        try:
            t0 = time.monotonic()
            waves = [range(1), range(1, max(ks))] if staged else [range(max(ks))]
            failed = None
            for wave in waves:
                wait_s = min(args.job_wait, args.budget - elapsed() - args.job_seconds - margin)
                workers.start(wave)
                failed = workers.await_ready(max(1.0, wait_s))
                if failed:
                    break
            warm_s = time.monotonic() - t0
            if failed:
                workers.kill()
                note = f"warm-up failed, no go: {failed}; all {len(workers.procs)} workers killed"
                print(f"jobs: {precision} {note}", flush=True)
                table.row(**key, k=",".join(map(str, ks)), warm_s=warm_s, note=note)
                continue
            measured[precision] = warm_s / (2 if staged else 1)
            kernels = max(r["kernels"] for r in workers.ready.values())
            base = None
            # each k with cores // k threads a job, or with each of --job-threads
            phases = [(k, t) for k in ks for t in args.job_threads or [max(1, cores // k)]]
            for n, (k, threads) in enumerate(phases):
                if elapsed() + args.job_seconds + margin > args.budget:
                    why = f"skipped: at {elapsed():.0f} s, past --budget {args.budget:g} s"
                    print(f"jobs: {precision} k={k} {why}", flush=True)
                    table.row(**key, k=k, threads=threads, note=why)
                    continue
                # the re-warm after the thread change may compile (REWARM_S), within what is left
                left = args.budget - elapsed() - margin
                wait_s = max(args.job_seconds + 5, min(left, args.job_seconds + 60 + REWARM_S))
                results = workers.phase(n, k, threads, wait_s)
                if isinstance(results, str):
                    table.row(**key, k=k, threads=threads, note=results)
                    break  # the workers' state is unknown: no further phase
                total = sum(r["img_s"] for r in results)
                base = base or total
                table.row(
                    **key,
                    k=k,
                    threads=threads,
                    img_s_gpu=total,
                    img_s_job_min=min(r["img_s"] for r in results),
                    img_s_job_max=max(r["img_s"] for r in results),
                    vs_k1=total / base,  # against the precision's first k
                    warm_s=warm_s,
                    job_kernels=kernels,
                    iters=sum(r["iters"] for r in results),
                    note=job_note(results, bool(kernels or not compiling)),
                )
        finally:
            workers.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=Path(__file__).name, description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, help="folder for steps.tsv, jobs.tsv and the job logs")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--cases", default="resnet20:8:32:32", help="model:nodes:batch:px,...")
    ap.add_argument("--precisions", default="fp32,int8")
    ap.add_argument("--variants", default=",".join(DEFAULT_VARIANTS), help=f"of {VARIANTS}")
    ap.add_argument("--iters", type=int, default=10, help="most rounds per timed block")
    ap.add_argument("--block-s", type=float, default=0.5, help="about this long a timed block")
    ap.add_argument("--rounds", type=int, default=3, help="alternating blocks")
    ap.add_argument("--jobs", default="1,4,8", help="k values; empty: no jobs part")
    # 8-bit first: the fp32 batched jobs ran on the H200 of 2026-11-28, the 8-bit ones did not fit
    ap.add_argument("--job-precisions", "--job-precision", default="int8,fp32")
    ap.add_argument(
        "--job-threads",
        default="",
        help="threads of each job, a phase per value for each k (default: cores // k)",
    )
    ap.add_argument("--job-seconds", type=float, default=5.0)
    ap.add_argument("--job-samples", type=int, default=8192)
    ap.add_argument("--job-warmup", type=int, default=3, help="iterations before ready")
    ap.add_argument("--job-wait", type=float, default=150.0, help="bound on a warm-up (s)")
    ap.add_argument(
        "--job-warmup-guess", type=float, default=60.0, help="warm-up estimate (s) if none"
    )
    ap.add_argument("--job-model", default="resnet20")
    ap.add_argument("--job-mode", default="default", help="train.compile_mode of the jobs")
    ap.add_argument(
        "--job-batch-nodes",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="train.batch_nodes of the jobs",
    )
    ap.add_argument("--job-compile", action="store_true", help="compile on the CPU too")
    ap.add_argument("--budget", type=float, default=280.0, help="seconds for the whole script")
    ap.add_argument("--steps-share", type=float, default=0.6, help="of --budget for part 1")
    ap.add_argument("--margin", type=float, default=10.0, help="seconds kept for stopping")
    ap.add_argument("--parts", default="steps,jobs")
    ap.add_argument("--eager-only", action="store_true", help="run every variant uncompiled")
    ap.add_argument(
        "--inductor-cache",
        type=Path,
        help="TORCHINDUCTOR_CACHE_DIR (kept); default: a fresh folder for this run (first "
        "compiles), removed at the end",
    )
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
    ap.add_argument("--alt-batch-nodes", action=argparse.BooleanOptionalAction, default=False)
    ap.add_argument("--job-worker", help=argparse.SUPPRESS)
    ap.add_argument("--job-index", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.job_label = ""
    try:
        args.cases = [c for c in args.cases.split(",") if c]
        for c in args.cases:
            parse_case(c)
        args.precisions = [p for p in args.precisions.split(",") if p]
        args.job_precisions = [p for p in args.job_precisions.split(",") if p]
        args.variants = [v for v in args.variants.split(",") if v]
        args.jobs = [int(k) for k in args.jobs.split(",") if k]
        args.job_threads = [int(t) for t in args.job_threads.split(",") if t]
        args.alt_jobs = [int(k) for k in args.alt_jobs.split(",") if k]
    except ValueError as e:
        ap.error(str(e))
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
    from lpdt.models import MODELS

    bad = [v for v in args.variants if v not in VARIANTS]
    bad += [p for p in args.precisions + args.job_precisions if p not in PRECISIONS]
    if bad:
        ap.error(f"unknown variant or precision {bad}: variants {VARIANTS}, precisions fp32,int8")
    unknown = [m for m in (parse_case(c)[0] for c in args.cases) if m not in MODELS.names()]
    if unknown:
        ap.error(f"unknown model {unknown} in --cases: models {MODELS.names()}")
    if any(k < 1 for k in args.jobs + args.alt_jobs + args.job_threads):
        ap.error(
            f"--jobs / --alt-jobs / --job-threads: each >= 1, not "
            f"{args.jobs + args.alt_jobs + args.job_threads}"
        )
    if not 0 < args.steps_share <= 1 or args.budget <= 0:
        ap.error("--budget must be > 0 and --steps-share in (0, 1]")
    parts = [p for p in args.parts.split(",") if p]
    if set(parts) - {"steps", "jobs"}:
        ap.error(f"--parts: steps and/or jobs, not {args.parts!r}")
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: no GPU here (use --device cpu for the smoke run)")
    if "jobs" in parts and (args.jobs or args.alt_jobs):
        from lpdt.errors import LpdtError

        for p in args.job_precisions:
            try:
                job_config(args, args.device, p)
            except (LpdtError, ValueError) as e:
                ap.error(f"the jobs' configuration: {e}")
    args.out.mkdir(parents=True, exist_ok=True)
    fresh = args.inductor_cache is None
    cache = Path(tempfile.mkdtemp(prefix="lpdt-bench-gpu-cache-")) if fresh else args.inductor_cache
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache)
    os.environ["TRITON_CACHE_DIR"] = str(cache / "triton")
    env = f"torch {torch.__version__}, {os.cpu_count()} cores"
    if device.type == "cuda":
        env += f", {torch.cuda.get_device_name(device)}"
    argv_text = " ".join(sys.argv[1:] if argv is None else argv)
    (args.out / "env.txt").write_text(f"{env}\nbench_gpu.py {argv_text}\n")
    print(env, flush=True)
    try:
        compiled_s: CompileTimes = {}
        measured: dict[str, float] = {}
        if "steps" in parts:
            compiled_s = bench_steps(args, device, args.out)
        if "jobs" in parts and args.jobs:
            bench_jobs(args, args.out, args.jobs, compiled_s, measured)
        if "jobs" in parts and args.alt_jobs:
            args.job_mode, args.job_batch_nodes = args.alt_mode, args.alt_batch_nodes
            args.job_label = "alt-"
            bench_jobs(args, args.out, args.alt_jobs, compiled_s, {})
    finally:
        if fresh:
            shutil.rmtree(cache, ignore_errors=True)
    print(f"done in {elapsed():.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
