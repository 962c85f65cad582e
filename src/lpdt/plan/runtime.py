"""Wall-time estimate of a grid before it runs (``snakemake plan``), from measured step costs.

A training job's time is modelled as

    start-up + training samples x (seconds per training sample)
             + evaluated images x (seconds per evaluated image)
             + gossip rounds x nodes x gossiped entries x (seconds per entry)

with the costs of its (model, precision, input px) fitted on this project's reference machine (a
2-core x86_64 CPU, torch 2.14.1, one thread per job, two jobs at once; eager steps ``STEP_MS``,
``GOSSIP_NS``, ``TOPK_NS``: ``benchmarks/fit_runtime.py`` refits them from any finished pipeline,
``benchmarks/bench_runtime.py`` times the steps alone). A compiled step (``train.compile``) has
its own cost per sample and adds its compile time (``COMPILED_MS``). The grid's wall time is the
jobs packed onto ``slots`` parallel job slots (longest first).

On another machine the absolute numbers differ. The plan's speed probe (``lpdt.plan.probe``)
times a few eager steps of the claims' problem on the machine at hand, as many at once as there
are job slots, and ``run_seconds(..., speed=...)`` scales the fitted costs by its ratio to the
same probe on the reference machine, each cost by the probe's kind of step that does its work
(``speed_kind``: eager 8-bit costs by the 8-bit step as eager jobs run it, with or without the
quantiser kernel; compiled 8-bit costs by the 8-bit tensor operations, which compiled graphs
fuse and which never use the kernel). A machine far from the reference (other core counts,
jobs per slot) is better refitted.

"In sample" below: a constant fitted to some jobs and checked against the same jobs; its error
there is no measure of the plan's error on other runs or machines.

On GPUs the price of a run is ``lpdt.plan.gpu``'s (measured or derived, with a range); k jobs
may share a GPU where measured (``gpu.H100_SHARE``: a job's time is its time alone x s(k)), and
the grid packs onto GPUs x k slots (``shared_gpu_wall_seconds``, ``gpu_hours``).
"""

from __future__ import annotations

import csv
import heapq
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lpdt.data import DATASETS, full_test_size
from lpdt.decentral.catalog import COMPRESSORS
from lpdt.models import MODELS

# (model, precision, px) -> (ms per training sample (forward + backward + optimizer, at the
#                            quick scale's per-node batches), ms per evaluated image (forward)).
# Training costs: fitted (benchmarks/fit_runtime.py, with GOSSIP_NS and TOPK_NS below; compile
# times held at what each job's log measured, evaluation costs held) to the 88 training jobs of
# the fresh-clone `make report` of fdf1b8e on the reference machine, 2026-11-25, with nothing
# else running (two jobs at once, 1 thread each, the torch.compile cache empty at the start):
# 4,606 s measured and fitted (in sample: median job error 3 %, largest 15 %). The previous fit
# (d9376af's run) had the CPU shared with other work: its constants were 1.3-2.4x these, and
# the plan said ~60 min for a pipeline that takes ~40 on an idle machine. Entries not in the
# quick grid (ResNet-20 eager) are older fits. Evaluation costs: ResNet-20 from real `lpdt
# train` evaluations (27 s / 61 s for 90,000 images fp32 / 8-bit, before the 8-bit eager noise
# got 2.5x faster: docs/notebook/2026-11-23-int8-measurements.md), the other models scaled by
# their step-time ratio in benchmarks/bench_runtime.py.
#
# The eager 8-bit entries (ResNet-20 at 12 px, ResNet-54, ResNet-18, VGG-11, MiniLM) were then
# scaled when the eager quantiser became one C++ loop (lpdt.layers.quant.kernel, 2026-11-26):
# each key's training and evaluation costs by one factor, fitted to that key's jobs of the
# fresh-clone `make report` of 25d7224 (idle, two jobs at once), every other constant held:
# MiniLM 0.94, ResNet-18 0.81, VGG-11 0.73, ResNet-54 0.54 and ResNet-20 0.37 (one job each for
# the last two, whose old entries were scaled estimates, not fits).
STEP_MS: dict[tuple[str, str, int], tuple[float, float]] = {
    ("resnet20", "fp32", 16): (1.42, 0.30),
    ("resnet20", "int8", 16): (5.705, 0.68),
    # 12 px, per-node batch 8 (the claims' problem): eager training scaled from 16 px by the
    # eager step-time ratio measured 2026-11-25 (fp32 1.90 / 1.55, 8-bit 6.35 / 5.50 ms per
    # sample; not refitted: every run of the quick grid at 12 px is compiled); evaluation by the
    # pixel count.
    ("resnet20", "fp32", 12): (1.74, 0.17),
    ("resnet20", "int8", 12): (2.43, 0.14),
    # ResNet-8 at the claims' shape (the quick scale's claims model since 2026-11-26): every run
    # of it is compiled (its evaluation eager), so the eager training cost is not fitted. fp32:
    # ResNet-20's scaled by the compiled step-time ratio (0.41, benchmarks); evaluation likewise.
    # 8-bit: refreshed 2026-11-27 with the eager quantiser kernel (the old 2.70 / 0.16 were
    # derived before it), on a 2-core x86_64 VM of the reference's kind, torch 2.14.1, shared
    # with other work (load average 3.0-3.5: the ratios below are within alternating blocks,
    # the absolute times are not usable). Training: the compiled entry below (0.53, fitted to
    # jobs) over the compiled / eager 8-bit step-time ratio 0.35 (blocks 0.32-0.37, two runs of
    # `benchmarks/bench_compile.py --cases resnet8:4 --batch 8 --size 12 --threads 1 --iters 10
    # --rounds 5 --range-chunks 2`); on the idle reference machine the same ratio was 3.2 / 8.0
    # = 0.40 (docs/int8.md, Current measured numbers), which would give 1.33. Evaluation: fp32's
    # 0.07 x the 8-bit / fp32 evaluation-forward ratio 1.43-1.57 (`benchmarks/bench_runtime.py
    # --cases resnet8:fp32:12,resnet8:int8:12 --jobs 1`, twice). Estimates, not fits.
    ("resnet8", "fp32", 12): (0.71, 0.07),
    ("resnet8", "int8", 12): (1.51, 0.10),
    ("resnet54", "fp32", 16): (1.27, 0.67),
    ("resnet54", "int8", 16): (1.90, 0.87),
    ("resnet18", "fp32", 32): (2.575, 0.45),
    ("resnet18", "int8", 32): (3.965, 0.41),
    ("vgg11", "fp32", 32): (8.677, 1.6),
    ("vgg11", "int8", 32): (7.40, 3.05),
    ("minilm", "fp32", 32): (31.755, 4.7),
    ("minilm", "int8", 32): (33.49, 7.98),
}
# Compiled steps (``train.compile: true``; ``lpdt.engine.steps``): (model, precision, px) -> (ms per
# training sample, seconds of compiling the training step and seconds of compiling the
# evaluation forward (``train.compile_eval``), in each process with inductor's cache warm).
# Measured 2026-11-24 on the reference machine, two 16-epoch 8-node ResNet-20 jobs at once (skew
# 0.9): 5.2 s (fp32) / 7.6 s (8-bit) per epoch of 6,000 samples less the gossip term. Compile:
# fp32 4.3-5.0 s; 8-bit 11.4-12.7 s with the cache warm since AOTAutograd caches the 8-bit graphs
# (28-34 s before), 88-91 s for the first, cold ones (the fresh-clone run of 03aebe5; rounded up
# to 6 s / 16 s; the evaluation's share not measured apart: counted as at 12 px). Not listed:
# eager costs apply.
COMPILED_MS: dict[tuple[str, str, int], tuple[float, float, float]] = {
    ("resnet20", "fp32", 16): (0.72, 6.0, 5.0),
    ("resnet20", "int8", 16): (1.12, 16.0, 11.0),
    # The claims' problem (12 px, per-node batch 8, compiled training and evaluation): per sample
    # from the fit above (fdf1b8e, idle machine); compile: training step fp32 6 s / 8-bit 16 s
    # and evaluation forward 5 s / 11 s with the cache warm (measured 2026-11-25; cold: 47 s /
    # 206 s for the training step while the CPU was shared with other jobs).
    ("resnet20", "fp32", 12): (0.648, 6.0, 5.0),
    ("resnet20", "int8", 12): (1.26, 16.0, 11.0),
    # ResNet-8, 12 px, per-node batch 8: per sample from the epoch times of 26 calibration jobs
    # (the 13 claim cells at 16 and 32 epochs, two at once, idle, 2026-11-26), which the plan then
    # estimates at 1,254 s against 1,239 s measured (in sample: the same 26 jobs; median job
    # error 14 %; a least-squares fit is degenerate there: one model, one node count); warm
    # compile of the training step from their logs (fp32 2.3-2.8 s, 8-bit 5.5 s); evaluation
    # compile not measured (eager in the grid). Compiled steps never use the eager quantiser
    # kernel: the 8-bit entry did not move with it.
    # Refitted 2026-11-29 (the old entries 0.30 / 3.0 and 0.53 / 6.0 put three fresh `make
    # report`s on idle VMs 28-29 % high): `benchmarks/fit_runtime.py --speed fp32=1.76,
    # int8=2.04,int8_ops=1.91 --hold GOSSIP_NS,TOPK_NS,minilm,resnet18,resnet20,vgg11` on the
    # fresh-clone `make report` of 1a8b608 (an idle 2-core VM of the reference's kind, not the
    # reference itself: its plan's speed probe gave the factors, which convert its times to the
    # reference's), with START_S 4 (below). The per-sample costs absorb this model's gossip,
    # which the fit cannot tell apart (every claim job has 4 nodes) and holds at GOSSIP_NS
    # (0.073 ms a sample on 4 nodes). Warm compile of the training step: the logs' 3.0-3.1 s
    # (fp32) and 5.8-6.6 s (8-bit) over the fp32 factor 1.76. In sample, each job with the
    # compile time its log measured: the 14 ResNet-8 jobs within -11 % to +20 % each; all 18
    # jobs 4,116 s against 3,990 s measured (the four small-model batches, held, 170 s of the
    # excess). docs/notebook/2026-11-29-quick-plan-refit.md.
    ("resnet8", "fp32", 12): (0.192, 1.7, 3.0),
    ("resnet8", "int8", 12): (0.364, 3.5, 5.0),
}


def warm_compile_seconds(cfg: Mapping[str, Any]) -> float:
    """Seconds a compiled run spends compiling with inductor's cache warm: the training step,
    and the evaluation forward if ``train.compile_eval`` (0 for an eager run or a shape without
    an entry in ``COMPILED_MS``)."""
    key = (cfg["model"]["name"], cfg["precision"]["mode"], input_px(cfg))
    if not cfg["train"].get("compile") or key not in COMPILED_MS:
        return 0.0
    _, train_s, eval_s = COMPILED_MS[key]
    return train_s + (eval_s if cfg["train"].get("compile_eval", True) else 0.0)


# Nanoseconds per gossiped entry (``ModelSpec.gossiped``: a model without it adds no gossip
# term), per node and round: the mixing, the optimizer step and the algorithm's buffers (all
# compressions), plus top-k's selection (sparsifiers). They dominate the many-node runs of large
# models (VGG-11 on 16 nodes, ResNet-18 on 8, MiniLM on 4), whose compute is small at the quick
# scale. Fitted with benchmarks/fit_runtime.py (see STEP_MS).
GOSSIP_NS = 7.48
TOPK_NS = 10.09
# A job's start-up: the interpreter, imports, data loading, model build, final gossip, writing
# results and the MLflow log. 8 s until 2026-11-29 (fitted to fresh clones with cold disk
# caches, 2026-11-25); now measured in the fresh-clone run of 1a8b608 (see COMPILED_MS), in
# reference seconds (over its fp32 factor 1.76): the time of its 18 batches outside their runs'
# own clocks (wall less the runs' total_s, 5.5-15.6 s) is 1.4 s + 0.8 s a run, and a run's own
# time outside training less its final evaluation and gossip is about 1.4-2 s.
START_S = 4.0
# A run after the first of a batch (the workflow's batch_runs: one process trains several runs
# in turn): its partition, model build, final gossip and evaluation, writing its results and its
# MLflow log; the interpreter and imports are the first run's (and the compiled step, where an
# earlier run of the batch compiled the same graph). Measured 2026-11-27 (ResNet-8, the claims'
# cell at 2 epochs, idle): 1.4 s of the run outside training (total_s - train_s); rounded up to 2
# for what falls outside the run's own clock (its setup before the clock starts, its MLflow log),
# not measured apart.
BATCHED_START_S = 2.0
REFERENCE = "2-core x86_64 CPU, torch 2.14.1, 1 thread per job, 2 jobs at once"


def input_px(cfg: Mapping[str, Any]) -> int:
    """Input side in px as the model sees it (text: tokens per example): ``data.image_size``,
    else the dataset's own (``DatasetSpec.input_px``: Imagenette's 224), else 32."""
    data = cfg["data"]
    spec = MODELS.find(cfg["model"]["name"])
    if spec is not None and spec.inputs == "text":
        return int(data.get("max_length") or 128)
    dataset = DATASETS.find(data["dataset"])
    return int(data.get("image_size") or (dataset.input_px if dataset else None) or 32)


def evaluated_images(cfg: Mapping[str, Any]) -> int:
    """Test images one run evaluates, over all its evaluations: ``full_eval_images`` (the test
    split) and ``curve_images`` (the accuracy curve's subset)."""
    return full_eval_images(cfg) + curve_images(cfg)


def full_eval_images(cfg: Mapping[str, Any]) -> int:
    """Test images of a run's evaluations on the test split (every ``eval_every`` epochs but the
    last, and the final one; ``sharded``: each image once over the nodes, plus the average
    model)."""
    tr, data = cfg["train"], cfg["data"]
    n = int(cfg["topology"]["nodes"])
    test = int(data.get("test_subset") or full_test_size(data["dataset"]))
    per_eval = 2 * test if tr.get("node_eval") == "sharded" else (n + 1) * test
    # lpdt.engine.loop evaluates after epochs k, 2k, ... except the last one, whose evaluation is the
    # final one (after the last gossip rounds)
    evals = (int(tr["epochs"]) - 1) // int(tr.get("eval_every") or 1)
    return per_eval * (evals + 1)


def curve_images(cfg: Mapping[str, Any]) -> int:
    """Test images of a run's accuracy curve (``train.curve_images``, every epoch: the subset
    once over the nodes, at least one image a node, at most the split;
    ``lpdt.engine.evaluation.curve_rows``)."""
    tr, data = cfg["train"], cfg["data"]
    size = int(tr.get("curve_images") or 0)
    if not size:
        return 0
    test = int(data.get("test_subset") or full_test_size(data["dataset"]))
    nodes = int(cfg["topology"]["nodes"])
    return int(tr["epochs"]) * max(min(test, max(size, nodes)), nodes)


def sparse(cfg: Mapping[str, Any]) -> bool:
    """Whether the run's messages are sparsified (top-k / random-k, and top-k with 8-bit values,
    whose selection costs as top-k's)."""
    return COMPRESSORS.get(cfg["algorithm"]["compression"]["name"]).sparse


def per_node_batch(cfg: Mapping[str, Any]) -> int:
    """Samples each node's step sees (the run's batch size is the total over the nodes)."""
    return max(1, int(cfg["train"]["batch_size"]) // int(cfg["topology"]["nodes"]))


def gossip_units(cfg: Mapping[str, Any], samples: int) -> float:
    """Gossip rounds x nodes x gossiped entries per node (0 for one node: nothing to gossip)."""
    n = int(cfg["topology"]["nodes"])
    if n < 2:
        return 0.0
    iterations = samples / (per_node_batch(cfg) * n)
    rounds = iterations + int(cfg["train"].get("final_gossip_rounds") or 0)
    spec = MODELS.find(cfg["model"]["name"])
    return rounds * n * ((spec.gossiped or 0) if spec else 0)


MACHINES = {
    "cpu": REFERENCE,
    "h100": "one NVIDIA H100 80GB, torch 2.11.0+cu130 (lpdt.plan.gpu: measured or derived)",
}


def run_seconds(
    cfg: Mapping[str, Any],
    samples: int | None,
    machine: str = "cpu",
    speed: Mapping[str, float] | None = None,
    in_batch: bool = False,
    graph_compiled: bool = False,
) -> float | None:
    """Estimated seconds of one training job on ``machine`` (a key of ``MACHINES``); None: no
    measured cost for its model / precision / px (the H100: ``lpdt.plan.gpu.run_price``, None
    only for a model without counts).
    ``in_batch``: a run after the first of a batch of runs in one process (the workflow's
    ``batch_runs``; CPU only): ``BATCHED_START_S`` instead of the start-up;
    ``graph_compiled``: an earlier run of this process compiled its graph: no compile.

    ``speed`` (CPU only): the probe's kind of step -> this machine's time / the reference
    machine's, from ``probe.speed_factors``. The kind of the run's training steps and that of its
    evaluation (``speed_kind``: precision, compiled or eager) scale those costs; fp32's scales
    start-up, compiling and gossip, which are Python and fp32 arithmetic in both precisions."""
    if machine not in MACHINES:
        raise ValueError(f"machine {machine!r}: allowed {', '.join(MACHINES)}")
    if machine != "cpu":  # one H100's price is lpdt.plan.gpu's (which imports this module)
        raise ValueError(f"run_seconds prices the CPU; {machine!r}: lpdt.plan.gpu.run_price")
    kinds = cost_kinds(cfg)
    if kinds is None or samples is None:
        return None
    key, compiled = kinds.key, kinds.compiled
    train_ms, eval_ms = STEP_MS[key]
    start = BATCHED_START_S if in_batch else START_S
    if compiled:
        train_ms = COMPILED_MS[key][0]
        start += 0.0 if graph_compiled else warm_compile_seconds(cfg)
    gossip_ns = GOSSIP_NS + (TOPK_NS if sparse(cfg) else 0.0)
    train_f, eval_f, base = kinds.factors(speed)
    return (
        base * start
        + train_f * samples * train_ms / 1e3
        + eval_f * evaluated_images(cfg) * eval_ms / 1e3
        + base * gossip_units(cfg, samples) * gossip_ns / 1e9
    )


@dataclass(frozen=True)
class CostKinds:
    """Which costs price a run on the CPU: ``key`` (model, precision, px) of ``STEP_MS``,
    ``compiled`` (its training step is priced by ``COMPILED_MS``), and the speed probe's kinds
    that scale its training steps and its evaluation (``speed_kind``); fp32's scales the rest."""

    key: tuple[str, str, int]
    compiled: bool
    train_kind: str
    eval_kind: str

    def factors(self, speed: Mapping[str, float] | None) -> tuple[float, float, float]:
        """(training, evaluation, the rest): the factors of ``speed`` (1 for None, the
        reference machine)."""
        if speed is None:
            return 1.0, 1.0, 1.0
        missing = {"fp32", self.train_kind, self.eval_kind} - set(speed)
        if missing:
            raise ValueError(f"speed: no factor for {', '.join(sorted(missing))}")
        return speed[self.train_kind], speed[self.eval_kind], speed["fp32"]


def cost_kinds(cfg: Mapping[str, Any]) -> CostKinds | None:
    """The costs that price ``cfg`` on the CPU (None: no measured cost for its model, precision
    and px)."""
    key = (cfg["model"]["name"], cfg["precision"]["mode"], input_px(cfg))
    if key not in STEP_MS:
        return None
    compiled = bool(cfg["train"].get("compile")) and key in COMPILED_MS
    # The evaluation forward is eager unless train.compile_eval (compiled runs only).
    eval_compiled = compiled and bool(cfg["train"].get("compile_eval", True))
    return CostKinds(key, compiled, speed_kind(key[1], compiled), speed_kind(key[1], eval_compiled))


def job_run_seconds(
    runs: Sequence[tuple[Mapping[str, Any], int | None]],
    speed: Mapping[str, float] | None = None,
) -> list[float | None]:
    """``run_seconds`` of each run of one CPU job: ``runs`` are (config, samples) in the order
    the job trains them (a batch, or one run). The runs after the first start as
    ``BATCHED_START_S``, and a run whose graph an earlier run of the job compiled compiles
    nothing."""
    graphs = set()
    out = []
    for n, (cfg, samples) in enumerate(runs):
        graph = compiled_shape(cfg)
        out.append(run_seconds(cfg, samples, "cpu", speed, n > 0, n > 0 and graph in graphs))
        graphs.add(graph)
    return out


def speed_kind(precision: str, compiled: bool) -> str:
    """The speed probe's kind of step (``lpdt.plan.probe.KINDS``) whose factor scales a cost of
    ``precision``, compiled or eager: the precision's own for fp32 and eager 8-bit (eager jobs
    use the quantiser kernel where the machine builds it, as the probe's 8-bit step does);
    ``int8_ops`` for compiled 8-bit, the tensor operations that compiled graphs fuse (they never
    call the kernel, so its absence must not scale them)."""
    return f"{precision}_ops" if compiled and precision != "fp32" else precision


# A compile with inductor's cache empty (a fresh machine) costs much more than the warm compile
# COMPILED_MS counts: (model, precision) -> extra seconds of (the training step, the evaluation
# forward when ``train.compile_eval``) in each of the first ``slots`` jobs of each (model,
# precision, px, per-node batch, compile_eval) (``cold_compile_seconds``). Measured 2026-11-25 in
# the fresh-clone `make report` (TORCHINDUCTOR_CACHE_DIR empty, two jobs at once;
# docs/workflow.md): ResNet-20 at 12 px, 8 per
# node: fp32 training step 71.9 s + evaluation forward 18.1 s, 8-bit 234.8 s + 101.1 s, less the
# warm compile times of COMPILED_MS. ResNet-8 (2026-11-26, the same shape, one job beside another):
# fp32 training step 11.8 s, 8-bit 67.9 s, less the warm compiles; its evaluation forwards scaled
# from ResNet-20's by the same ratio as the training step (not measured; eager in the grid).
# Other models: ResNet-20's (not measured). Cold compiles also run inductor's compile workers on
# every core, which slows the job beside them: that is in these numbers only as far as it fell
# in the job.
COLD_COMPILE_S: dict[tuple[str, str], tuple[float, float]] = {
    ("resnet20", "fp32"): (66.0, 13.0),
    ("resnet20", "int8"): (219.0, 90.0),
    # ResNet-8's training steps refreshed 2026-11-29 (the fresh-clone run of 1a8b608 above, its
    # logs: four fp32 shapes compiled cold in 21.6-35.4 s, the 8-bit one in 42.0 s, warm 3.0 /
    # 6.2 s; the extra over the fp32 factor 1.76: fp32 mean 14 s, 8-bit 20 s; 62 s before the
    # 8-bit graph got smaller, docs/notebook/2026-11-28-8bit-compile-time.md)
    ("resnet8", "fp32"): (14.0, 2.0),
    ("resnet8", "int8"): (20.0, 26.0),
}


def cold_compile_s(model: str, precision: str) -> tuple[float, float]:
    """Extra seconds of a cold compile (training step, evaluation forward) for a model and
    precision: its own entry, else ResNet-20's of that precision, else the largest."""
    for key in ((model, precision), ("resnet20", precision)):
        if key in COLD_COMPILE_S:
            return COLD_COMPILE_S[key]
    return max(COLD_COMPILE_S.values())


def compiled_shape(cfg: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """What a compiled run's graphs depend on (None: an eager run)."""
    if not cfg["train"].get("compile"):
        return None
    return (
        cfg["model"]["name"],
        cfg["precision"]["mode"],
        cfg["model"].get("norm"),  # each normalisation layer is a graph of its own
        input_px(cfg),
        per_node_batch(cfg),
        bool(cfg["train"].get("compile_eval", True)),
    )


def cold_compile_seconds(cfgs: Mapping[str, Mapping[str, Any]], slots: int = 1) -> dict[str, float]:
    """run id -> the extra seconds of compiling with an empty cache: the first ``slots`` runs (in
    the mapping's order) of each ``compiled_shape`` pay ``COLD_COMPILE_S`` of its precision.
    ``slots`` jobs start at once, and the longest-first order starts runs of one shape side by
    side: each misses the cache the other is still filling (measured 2026-11-25: the first two
    8-bit jobs compiled cold together, 145 s each, and so did the first two fp32 ones, 62 s)."""
    out: dict[str, float] = {}
    seen: dict[tuple[Any, ...], int] = {}
    for run_id, cfg in cfgs.items():
        shape = compiled_shape(cfg)
        if shape is None or seen.get(shape, 0) >= max(1, slots):
            continue
        seen[shape] = seen.get(shape, 0) + 1
        train_s, eval_s = cold_compile_s(shape[0], shape[1])
        out[run_id] = train_s + (eval_s if shape[-1] else 0.0)
    return out


def compile_cache_is_empty(path: str | None) -> bool:
    """Whether inductor's on-disk cache at ``path`` holds nothing yet (a fresh machine)."""
    import os

    if not path or not os.path.isdir(path):
        return True
    return not any(os.scandir(path))


def packed_wall_seconds(jobs: Iterable[float], slots: int) -> float:
    """Makespan of ``jobs`` (seconds) on ``slots`` parallel slots, longest job first (LPT)."""
    loads = [0.0] * max(1, slots)
    for t in sorted(jobs, reverse=True):
        heapq.heapreplace(loads, loads[0] + t)
    return max(loads)


def shared_gpu_wall_seconds(jobs: Iterable[tuple[float, int]], gpus: int) -> float:
    """Makespan of GPU jobs, each ``(seconds, k)``: its time with k jobs on its GPU (the time
    alone x s(k)), on ``gpus`` GPUs. The jobs of one k are packed longest first onto gpus x k
    slots, and the groups of different k run one after another (a schedule the workflow can
    follow; one k: exactly ``packed_wall_seconds`` on gpus x k slots)."""
    by_k: dict[int, list[float]] = {}
    for seconds, k in jobs:
        by_k.setdefault(k, []).append(seconds)
    return sum(packed_wall_seconds(times, max(1, gpus) * k) for k, times in by_k.items())


def gpu_hours(jobs: Iterable[tuple[float, int]], gpus: int) -> tuple[float, float]:
    """(the GPUs' hours: makespan x GPUs, idle time included; the jobs' own GPU hours: each
    job's time / its k, its share of a GPU) of ``shared_gpu_wall_seconds``'s jobs."""
    jobs = list(jobs)
    wall = shared_gpu_wall_seconds(jobs, gpus)
    return wall * max(1, gpus) / 3600, sum(s / k for s, k in jobs) / 3600


def benchmark_seconds(path: str | Path) -> float | None:
    """Wall seconds of a job from its Snakemake benchmark file (a header line, then the values,
    seconds first); None for a missing file or one being written or of another format."""
    try:
        return float(Path(path).read_text().splitlines()[1].split("\t")[0])
    except (OSError, IndexError, ValueError):
        return None


def plan_check(plan_tsv: str | Path, bench_dir: str | Path, since: float) -> str | None:
    """One line comparing the training jobs this invocation ran with the plan's estimates for
    them.

    ``plan_tsv``: the plan's per-run table (``snakemake plan``: ``run_id``, ``est_s`` and, where
    runs are batched, ``job``: the job that trains the run, its batch or the run itself);
    ``bench_dir``: Snakemake's benchmark files of the training jobs (``<job>.tsv``, wall seconds
    in the first column); ``since``: when this invocation started (``time.time()``). Only jobs
    whose runs all have an estimate and whose benchmark file was written since then count: a
    benchmark file stays from earlier invocations (a no-op rerun, a ``plateau_check``), and the
    plan is printed afresh each time, perhaps on another machine or load. None when there is no
    plan table or no such job."""
    plan_tsv, bench_dir = Path(plan_tsv), Path(bench_dir)
    if not plan_tsv.is_file():
        return None
    with plan_tsv.open(newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    jobs: dict[str, list[dict[str, str]]] = {}
    for r in rows:
        jobs.setdefault(r.get("job") or r["run_id"], []).append(r)
    planned = measured = 0.0
    matched = 0
    for job, runs in jobs.items():
        bench = bench_dir / f"{job}.tsv"
        took = benchmark_seconds(bench)
        if not all(r.get("est_s") for r in runs) or took is None or bench.stat().st_mtime < since:
            continue
        planned += sum(float(r["est_s"]) for r in runs)
        measured += took
        matched += len(runs)
    if not matched or planned <= 0:
        return None
    return (
        f"training jobs: {matched} of the plan's {len(rows)} runs ran in this invocation; their "
        "own times sum "
        f"to {measured:,.0f} s against {planned:,.0f} s planned "
        f"({measured / planned - 1:+.0%}; {plan_tsv}, {bench_dir})"
    )
