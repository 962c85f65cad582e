"""The price of a run on one H100 (``snakemake plan --config scale=paper``): seconds, a low-high
range and the basis of every number (docs/compute.md, "The paper's price").

Only one kind of run was ever timed whole on a GPU (the Table 3 ResNet-20 cell, fp32, node by
node), and what runs now differs from it (``train.batch_nodes: auto`` batches the ResNets on
CUDA). So the price of a run is assembled from parts, each measured where it was measured
(``STEP_ROWS``; the Table 3 job's ``GOSSIP_MS``, ``DATA_MS_PER_IMAGE``, ``COMPILE_S``) and otherwise derived from what a step does, counted on the CPU
(``lpdt.plan.counts``):

    run = start + compile + iterations x (step + data + gossip) + evaluation + final rounds

- **step** (one iteration of all n nodes): on a GPU at these batch sizes a step costs its kernel
  launches; ``LaunchModel`` fits the H100's cost per launch to the measured steps (eager: a
  fixed cost plus one per aten operation, 6 rows; compiled: one per generated kernel, 3 rows) and
  the batched step's factor to its two measured rounds. The GPU's own work (FLOPs at an assumed
  rate, bytes written at an assumed bandwidth: ``ASSUMED``) runs beside the launches: the price
  takes the larger, its high end the sum. A step that was measured is priced as measured.
- **data**: the training images' loading and augmentation on the host, per image: CIFAR-10's
  measured on the H100's host (the Table 3 job less its step and gossip), another dataset's
  that plus what its reader costs beyond CIFAR-10's on the project's CPU (``READER_MS``:
  Imagenette's JPEGs decoded once, cropped to 224 px per batch), the tokenised text datasets'
  assumed.
- **gossip**: the optimizer step, compression and mixing per iteration, measured on the Table 3
  job, plus the memory traffic and top-k selection of larger models (``ASSUMED``).
- **evaluation**: every evaluation on the test split and the accuracy curve
  (``runtime.full_eval_images``, ``runtime.curve_images``), priced as forwards (batched where
  the nodes train batched, ``lpdt.engine.evaluation``).

k jobs per GPU are priced only where measured (``H100_SHARE``: ResNet-20 jobs node by node); a
batched job runs alone on its GPU in the price. Nothing here imports torch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from lpdt.decentral.catalog import COMPRESSORS
from lpdt.models import MODELS
from lpdt.plan import counts as counts_mod
from lpdt.plan import runtime

MACHINE = "one NVIDIA H100 80GB (torch 2.11.0+cu130)"
Mode = Literal["eager", "compiled"]


@dataclass(frozen=True)
class StepRow:
    """A step timed on the H100: one node's step (``nodes`` 1) or a batched round of ``nodes``
    nodes, at per-node batch ``batch``; ms per step or round."""

    model: str
    norm: str
    precision: str
    px: int
    batch: int
    mode: Mode
    nodes: int
    ms: float
    source: str


_MODELS_MD = "docs/models.md, Speed"
_H100_27 = "docs/notebook/2026-11-27-h100.md"
STEP_ROWS: tuple[StepRow, ...] = (
    StepRow("resnet20", "batchnorm", "fp32", 32, 32, "eager", 1, 9.5, _MODELS_MD),
    StepRow("resnet20", "groupnorm", "fp32", 32, 32, "eager", 1, 10.4, _MODELS_MD),
    StepRow("resnet20", "evonorm", "fp32", 32, 32, "eager", 1, 167.5 / 8, _H100_27),
    StepRow("resnet20", "rangeen", "fp32", 32, 32, "eager", 1, 29.0, _MODELS_MD),
    StepRow("resnet20", "rangebn", "fp32", 32, 32, "eager", 1, 30.0, _MODELS_MD),
    StepRow("resnet20", "rangeen", "int8", 32, 32, "eager", 1, 1353.0 / 8, _H100_27),
    StepRow("resnet20", "batchnorm", "fp32", 32, 32, "compiled", 1, 8.6, _MODELS_MD),
    StepRow("resnet20", "evonorm", "fp32", 32, 32, "compiled", 1, 79.75 / 8, _H100_27),
    StepRow("resnet20", "rangeen", "fp32", 32, 32, "compiled", 1, 11.9, _MODELS_MD),
    StepRow("resnet20", "evonorm", "fp32", 32, 32, "compiled", 8, 15.75, _H100_27),
    StepRow("resnet20", "rangeen", "int8", 32, 32, "eager", 8, 431.6, _H100_27),
)
# The Table 3 job (ResNet-20, 8-node ring, CHOCO 99 % top-k, per-node batch 32, fp32 compiled
# node by node; docs/notebook/2026-11-25-h100-first-run.md, 2026-11-27-h100.md): 30.3 s per
# epoch of 196 iterations = 154.6 ms an iteration, of which the step 79.75 ms; the same job on
# generated images (no reader): 2,544 images/s = 100.6 ms an iteration. Hence per iteration
# gossip, optimizer and compression 100.6 - 79.75 = 20.9 ms, and the CIFAR-10 reader with its
# augmentation 154.6 - 100.6 = 54.0 ms for 256 images; the compile (first call) 20.8 s node by
# node, about 50 s batched (the first 3 batched rounds took 54.4 s). A job's start-up: the CPU
# reference's as it stood when these were priced (8 s, fitted 2026-11-25; the CPU's own fell
# to 4 s on 2026-11-29, runtime.START_S), not measured on a GPU host, whose CUDA start adds to it.
GOSSIP_MS = 20.9
DATA_MS_PER_IMAGE = {"cifar10": 54.0 / 256}
COMPILE_S = {"node": 20.8, "batched": 50.0}
START_S = 8.0
# The batched compiled 8-bit round against the fp32 one, measured side by side on one H200
# (torch 2.11, ResNet-20 x 8, per-node batch 32, 32 px; docs/notebook/2026-11-28-h200.md):
# 25.75 / 10.03 ms. An 8-bit run that trains batched and compiled is priced at this multiple of
# its model's fp32 step on the H100 (the H200's fp32 round, 10.03 ms, ran faster than the
# H100's 15.75: the ratio, not the H200's times, carries over). That run's code (511f83c)
# launched 906 Triton kernels a batched 8-bit round against fp32's 222; the code of today
# launches 600 on the same torch (``lpdt.engine.cudacount``; docs/int8.md, "Launches (what a
# GPU pays for)"), so the ratio is likely high for what runs now. It is kept until a GPU
# measures the current code: how a round's time follows its kernels was never measured (two
# programs, two points).
INT8_BATCHED_COMPILED = 25.75 / 10.03
# Its first compile against fp32's, the same H200 run and code: 137.1 / 40.1 s.
INT8_COMPILE = 137.1 / 40.06
# The readers on the project's 2-core CPU, ms an image of an augmented training batch of 32, one
# thread (``benchmarks/bench_readers.py``, 2026-11-29, fake files in the real formats; Imagenette:
# 500 x 375 JPEGs, read from its decoded file: docs/notebook/2026-11-29-imagenette-reader.md). A
# dataset's data cost is CIFAR-10's measured one plus what its reader costs beyond CIFAR-10's:
# the measured term is about ten times CIFAR-10's reader (0.21 against 0.02 ms an image), and
# what else it holds does not grow with the reader's work, as a ratio of readers would have it
# (which priced Imagenette at 63x CIFAR-10's term, from readers timed on a loaded VM). The text
# datasets are tokenised once and indexed (assumed: 0.05x CIFAR-10's reader).
_CIFAR_READER_MS = 0.0188
READER_MS = {
    "cifar10": _CIFAR_READER_MS,
    "imagenette": 0.4994,
    "agnews": 0.05 * _CIFAR_READER_MS,
    "sentlen": 0.05 * _CIFAR_READER_MS,
}


def reader_ms(dataset: str) -> float:
    """What ``dataset``'s reader costs an image (``READER_MS``; CIFAR-10's for a dataset not in
    it)."""
    return READER_MS.get(dataset, _CIFAR_READER_MS)


def reader_extra_ms(dataset: str) -> float:
    """What ``dataset``'s reader costs an image beyond CIFAR-10's (0 for a dataset not in
    ``READER_MS``)."""
    return reader_ms(dataset) - _CIFAR_READER_MS


def data_ms_per_image(dataset: str) -> float:
    """The host's data cost of one training image (or text) of ``dataset`` on the H100's host."""
    return DATA_MS_PER_IMAGE["cifar10"] + reader_extra_ms(dataset)


# Not measured on a GPU: (low, central, high) of what the price assumes.
ASSUMED: dict[str, tuple[float, float, float]] = {
    "conv_tflops": (300.0, 150.0, 75.0),  # TF32 convolutions (cuDNN's default), effective
    "matmul_tflops": (50.0, 35.0, 20.0),  # fp32 matrix products (torch's default: no TF32)
    "hbm_tbps": (3.0, 2.0, 1.2),  # memory bandwidth for the bytes a step moves (``traffic``)
    "gossip_passes": (10.0, 20.0, 30.0),  # passes over the [n, P] state per iteration
    "topk_ns": (0.1, 0.25, 0.5),  # ns per gossiped entry of top-k's selection
    "data": (0.7, 1.0, 1.5),  # the host's reader cost against the measured / derived one
    "gossip_ms": (0.7, 1.0, 1.3),  # the measured gossip term, carried to other models
    # A kernel's least time on the GPU itself (a few elements; the launch's host side hidden by
    # other jobs on the same GPU): only the floor under k jobs per GPU uses it (``Price.work``).
    "kernel_busy_us": (1.5, 3.0, 5.0),
}
# A measured step's own spread (the same step measured twice: 9.97 / 11.8 ms compiled, 17.7 /
# 20.9 ms eager): its price is used within this factor.
MEASURED_SPREAD = (0.85, 1.0, 1.15)

# k training jobs on one H100 at once (config gpu_jobs_per_gpu): model -> {k: s(k)}, the slowdown
# of each job (its images/s alone over its images/s with k at once). Measured 2026-11-27 on
# ResNet-20 jobs node by node (benchmarks/bench_gpu.py, jobs part: 2,544 / 5,091 / 9,340 /
# 12,070 / 12,690 images/s per GPU for k = 1 / 2 / 4 / 8 / 12). A batched job (the default on
# CUDA) has no measured factor: the price runs it alone on its GPU.
H100_SHARE: dict[str, dict[int, float | None]] = {
    "resnet8": {8: None},
    "resnet20": {1: 1.0, 2: 1.0, 4: 1.09, 8: 1.69, 12: 2.41},
    "resnet54": {8: None},
    "vgg11": {4: None},
    "resnet18": {2: None},
    "minilm": {2: None},
}


def share_slowdown(model: str, k: int, batched: bool = False) -> float | None:
    """s(k) (``H100_SHARE``): 1.0 for k = 1, None where not measured (a batched job: always)."""
    if k == 1:
        return 1.0
    return None if batched else H100_SHARE.get(model, {}).get(k)


@dataclass(frozen=True)
class LaunchModel:
    """The H100's cost per launch, fitted to ``STEP_ROWS``: an eager node step costs
    ``eager_a_ms + eager_op_ms x operations``, a compiled one ``kernel_ms x kernels``; a batched
    round ``batched_compiled`` (compiled) or ``batched_eager`` (eager) times one node step's
    launches. ``eager_err`` / ``compiled_err``: the largest relative error of the fit on a row
    left out of it (``leave_one_out``)."""

    eager_a_ms: float
    eager_op_ms: float
    kernel_ms: float
    batched_compiled: float
    batched_eager: float
    eager_err: float
    compiled_err: float


def _counts(row: StepRow) -> counts_mod.StepCounts:
    return counts_mod.COUNTS[(row.model, row.norm, row.precision, row.px)]


def kernels(c: counts_mod.StepCounts, precision: str, train: bool = True) -> float:
    """Kernels of a compiled step: counted, else operations x the counted ratio of its
    precision (``kernels_ratio``)."""
    k = c.kernels_train if train else c.kernels_eval
    if k is not None:
        return float(k)
    return (c.ops_train if train else c.ops_eval) * kernels_ratio(precision, train)


def kernels_ratio(precision: str, train: bool = True) -> float:
    """Kernels / eager operations of the models whose compiled step was counted, of this
    precision (else fp32's)."""
    for p in (precision, "fp32"):
        pairs = [
            (c.kernels_train if train else c.kernels_eval, c.ops_train if train else c.ops_eval)
            for (_, _, prec, _), c in counts_mod.COUNTS.items()
            if prec == p and (c.kernels_train if train else c.kernels_eval) is not None
        ]
        if pairs:
            return sum(float(k or 0) for k, _ in pairs) / sum(o for _, o in pairs)
    raise ValueError("no compiled kernel counts in lpdt.plan.counts.COUNTS")


def launches(key: tuple[str, str, str, int], precision: str, train: bool = True) -> float:
    """What the compiled step of ``COUNTS[key]`` launches on a GPU (Triton kernels and library
    calls): counted (``counts.LAUNCHES``), else its CPU kernels (``kernels``) x the counted rows'
    launches / kernels of its precision (else fp32's)."""
    i = 0 if train else 1
    if key in counts_mod.LAUNCHES:
        return float(counts_mod.LAUNCHES[key][i])
    c = counts_mod.COUNTS[key]
    for p in (precision, "fp32"):
        pairs = [
            (float(n[i]), kernels(counts_mod.COUNTS[k], p, train))
            for k, n in counts_mod.LAUNCHES.items()
            if k[2] == p and k in counts_mod.COUNTS
        ]
        if pairs:
            return (
                kernels(c, precision, train) * sum(a for a, _ in pairs) / sum(k for _, k in pairs)
            )
    return kernels(c, precision, train)


def _fit_eager(rows: Sequence[StepRow]) -> tuple[float, float]:
    """(a, per op) by least squares in relative error."""
    xs = [float(_counts(r).ops_train) for r in rows]
    ys = [r.ms for r in rows]
    # minimise sum ((a + b x - y) / y)^2: normal equations in the weighted variables
    w = [1.0 / y for y in ys]
    s11 = sum(wi * wi for wi in w)
    s12 = sum(wi * wi * x for wi, x in zip(w, xs, strict=True))
    s22 = sum((wi * x) ** 2 for wi, x in zip(w, xs, strict=True))
    t1 = sum(wi * wi * y for wi, y in zip(w, ys, strict=True))
    t2 = sum(wi * wi * x * y for wi, x, y in zip(w, xs, ys, strict=True))
    det = s11 * s22 - s12 * s12
    return (t1 * s22 - t2 * s12) / det, (s11 * t2 - s12 * t1) / det


def _fit_compiled(rows: Sequence[StepRow]) -> float:
    """Per kernel, through the origin, in relative error."""
    ks = [kernels(_counts(r), r.precision) for r in rows]
    return sum(1.0 for _ in rows) / sum(k / r.ms for k, r in zip(ks, rows, strict=True))


def _node_rows(mode: Mode) -> list[StepRow]:
    return [r for r in STEP_ROWS if r.mode == mode and r.nodes == 1]


def leave_one_out(mode: Mode) -> list[tuple[StepRow, float]]:
    """Each measured node step of ``mode`` priced by the fit of the other rows: (row, price /
    measured - 1)."""
    rows, out = _node_rows(mode), []
    for i, row in enumerate(rows):
        rest = rows[:i] + rows[i + 1 :]
        c = _counts(row)
        if mode == "eager":
            a, b = _fit_eager(rest)
            ms = a + b * c.ops_train
        else:
            ms = _fit_compiled(rest) * kernels(c, row.precision)
        out.append((row, ms / row.ms - 1.0))
    return out


def fit() -> LaunchModel:
    """The launch model fitted to every measured step (``STEP_ROWS``)."""
    a, b = _fit_eager(_node_rows("eager"))
    k = _fit_compiled(_node_rows("compiled"))
    batched = {r.mode: r for r in STEP_ROWS if r.nodes > 1}
    rc, re_ = batched["compiled"], batched["eager"]
    return LaunchModel(
        eager_a_ms=a,
        eager_op_ms=b,
        kernel_ms=k,
        batched_compiled=rc.ms / (k * kernels(_counts(rc), rc.precision)),
        batched_eager=(re_.ms - a) / (b * _counts(re_).ops_train),
        eager_err=max(abs(e) for _, e in leave_one_out("eager")),
        compiled_err=max(abs(e) for _, e in leave_one_out("compiled")),
    )


@dataclass(frozen=True)
class Price:
    """One run on the H100: seconds (central, low, high), of which evaluation, and the basis."""

    seconds: float
    low: float
    high: float
    eval_s: float
    basis: str
    batched: bool
    # (low, central, high) seconds of the GPU's own work in the run: per step (and forward) the
    # larger of its FLOPs and bytes at the assumed rates and its launches at each one's least
    # time on the GPU (``ASSUMED``), without the host's side of launching, reading data and
    # gossiping. However many jobs share a GPU, a run takes at least this much of it: the floor
    # under k jobs per GPU.
    work: tuple[float, float, float]

    def scaled(self, f: float) -> Price:
        return dataclasses.replace(
            self, seconds=self.seconds * f, low=self.low * f, high=self.high * f
        )


def batched_on(cfg: Mapping[str, Any], c: counts_mod.StepCounts) -> bool:
    """Whether the run trains its nodes batched on CUDA (``train.batch_nodes``: auto is on for
    a model without ``nn.Dropout``, ``lpdt.engine.batched.use_batched``; hashed dropout,
    ``model.dropout_noise: hash``, replaces it)."""
    setting = cfg["train"].get("batch_nodes", "auto")
    hashed = cfg["model"].get("dropout_noise", "generator") == "hash"
    return (not c.dropout or hashed) if setting == "auto" else bool(setting)


def compiles(cfg: Mapping[str, Any], batched: bool) -> bool:
    """Whether the run's training step is compiled on CUDA: ``train.compile``, and for an 8-bit
    model only batched (``lpdt.engine.steps.compile_allowed``: the node-by-node 8-bit step runs
    eagerly there until it is verified)."""
    return bool(cfg["train"].get("compile")) and (cfg["precision"]["mode"] == "fp32" or batched)


def _measured_row(cfg: Mapping[str, Any], px: int, mode: Mode, batched: bool) -> StepRow | None:
    n, b = int(cfg["topology"]["nodes"]), runtime.per_node_batch(cfg)
    want = (cfg["model"]["name"], cfg["model"]["norm"], cfg["precision"]["mode"], px, b, mode)
    for r in STEP_ROWS:
        if (r.model, r.norm, r.precision, r.px, r.batch, r.mode) == want and r.nodes == (
            n if batched else 1
        ):
            return r
    return None


def _work_ms(flops: float, moved: float, text: bool, images: float, i: int) -> float:
    """The GPU's own time for ``images`` samples of ``flops`` FLOPs and ``moved`` bytes each:
    the FLOPs at the assumed rate plus the bytes at the assumed bandwidth (ms; ``i``: low,
    central, high)."""
    rate = ASSUMED["matmul_tflops" if text else "conv_tflops"][i] * 1e12
    return images * (flops / rate + moved / (ASSUMED["hbm_tbps"][i] * 1e12)) * 1e3


# The normalisation and precision of the rows whose compiled bytes carry over to other models
# (``traffic``): fp32 EvoNorm, the paper's full-precision norm.
_BASE = ("evonorm", "fp32")


def traffic(key: tuple[str, str, str, int], compiled: bool) -> float:
    """Bytes the training step of ``COUNTS[key]`` moves per sample: eagerly, what its
    operations write, read again (``2 x bytes_train``); compiled, what its kernels read and
    write, counted (``compiled_bytes_train``) or derived. Derived: the model's fp32 EvoNorm
    step, its eager bytes times the counted rows' compiled / eager ratio (``traffic_ratio``);
    another normalisation or precision, that times ResNet-20's compiled bytes of it over its
    fp32 EvoNorm's (the 8-bit layers add their quantisers to the same activations: 1.46x;
    VGG-11's, counted, 1.17x)."""
    c = counts_mod.COUNTS[key]
    if not compiled:
        return 2 * c.bytes_train
    if c.compiled_bytes_train is not None:
        return c.compiled_bytes_train
    model, norm, precision, px = key
    base = (model, *_BASE, px)
    ref = {
        k[1:3]: r.compiled_bytes_train for k, r in counts_mod.COUNTS.items() if k[0] == "resnet20"
    }
    other, fp32 = ref.get((norm, precision)), ref.get(_BASE)
    if (norm, precision) != _BASE and base in counts_mod.COUNTS and other and fp32:
        return traffic(base, True) * other / fp32
    return 2 * c.bytes_train * traffic_ratio(norm, precision)


def traffic_ratio(norm: str, precision: str) -> float:
    """Compiled over eager bytes moved (``traffic``) of the counted rows with this normalisation
    and precision, pooled by bytes (ResNet-20's and VGG-11's; fusion saves most where a
    normalisation is many small operations, EvoNorm's 0.55-0.57x, the 8-bit layers' 0.12-0.16x;
    BatchNorm's and GroupNorm's single native kernels read more than their writes count, 1.2x),
    else of all counted rows of the precision; 1 where none is counted."""
    for match in (lambda k: k[1:3] == (norm, precision), lambda k: k[2] == precision):
        pairs = [
            (r.compiled_bytes_train, 2 * r.bytes_train)
            for k, r in counts_mod.COUNTS.items()
            if match(k) and r.compiled_bytes_train is not None
        ]
        if pairs:
            return sum(a or 0.0 for a, _ in pairs) / sum(b for _, b in pairs)
    return 1.0


def launch_ms(
    lm: LaunchModel,
    c: counts_mod.StepCounts,
    precision: str,
    mode: Mode,
    nodes: int,
    batched: bool,
    train: bool,
) -> float:
    """Launch time of one step (``train``) or evaluation forward of ``nodes`` nodes."""
    ops = c.ops_train if train else c.ops_eval
    if mode == "compiled":
        one = lm.kernel_ms * kernels(c, precision, train)
        return one * (lm.batched_compiled if batched else nodes)
    if batched:
        return lm.eager_a_ms + lm.batched_eager * lm.eager_op_ms * ops
    return nodes * (lm.eager_a_ms + lm.eager_op_ms * ops)


def _gpu_ms(work_ms: float, launches: float, busy_ms: float) -> float:
    """The GPU's least time for ``work_ms`` of FLOPs and bytes spread over ``launches`` kernels
    that each take at least ``busy_ms``: the larger of the two (a lower bound; the sum of each
    kernel's larger one is more)."""
    return max(work_ms, launches * busy_ms)


def _combine(launch: float, work: float, i: int) -> float:
    """Launches and the GPU's work overlap (the larger counts); the high end adds them."""
    return launch + work if i == 2 else max(launch, work)


def run_price(
    cfg: Mapping[str, Any],
    samples: int | None,
    lm: LaunchModel | None = None,
    int8_as_fp32: float | None = None,
    reader_only: bool = False,
) -> Price | None:
    """The run's price on one H100 (None: its dataset size or its model's counts unknown).
    ``int8_as_fp32``: price an 8-bit run's step and forwards at this multiple of the same
    model's fp32 step (compiled and batched as fp32's); by default an 8-bit run that trains
    batched and compiled is priced so, at ``INT8_BATCHED_COMPILED``. ``reader_only``: the data
    term is the dataset's reader alone (``READER_MS``), as it would be if the host's work no
    longer added to the GPU's (a lever, not measured: ``DATA_MS_PER_IMAGE`` was measured with a
    loop that waited for the GPU every iteration)."""
    if samples is None:
        return None
    lm = lm or fit()
    n, b = int(cfg["topology"]["nodes"]), runtime.per_node_batch(cfg)
    px, name, precision = runtime.input_px(cfg), cfg["model"]["name"], cfg["precision"]["mode"]
    key = counts_mod.key(dict(cfg), px)
    c = counts_mod.COUNTS.get(key)
    if c is None:
        return None
    spec = MODELS.find(name)
    text = spec is not None and spec.inputs == "text"
    batched = batched_on(cfg, c)
    mode: Mode = "compiled" if compiles(cfg, batched) else "eager"
    factor, cs, prec = 1.0, c, precision
    if int8_as_fp32 is None and precision == "int8" and mode == "compiled":
        int8_as_fp32 = INT8_BATCHED_COMPILED  # measured beside fp32 (H200), not counted
    if int8_as_fp32 and precision == "int8":
        cs = counts_mod.COUNTS.get((name, "evonorm", "fp32", px), c)
        factor, prec = int8_as_fp32, "fp32"
        mode = "compiled" if cfg["train"].get("compile") else "eager"
    row = None if factor != 1.0 else _measured_row(cfg, px, mode, batched)
    iters = samples / (n * b)
    dataset = cfg["data"]["dataset"]
    data_ms = reader_ms(dataset) if reader_only else data_ms_per_image(dataset)
    measured_data = dataset == "cifar10" and not reader_only
    sparse = COMPRESSORS.get(cfg["algorithm"]["compression"]["name"]).sparse
    entries = n * ((spec.gossiped if spec else None) or c.params)
    full, curve = runtime.full_eval_images(cfg), runtime.curve_images(cfg)
    eval_bs = int(cfg["train"].get("eval_batch_size") or 256)
    curve_chunk = max(1, min(eval_bs, -(-int(cfg["train"].get("curve_images") or 0) // n)))
    eval_compiled = mode == "compiled" and cfg["train"].get("compile_eval", True) and not batched
    rounds = int(cfg["train"].get("final_gossip_rounds") or 0)
    # The GPU's launches per training iteration and per evaluated image, for the floor
    # (``Price.work``): a batched forward evaluates n models at once, the average model alone.
    train_launches = launches(key, precision) if mode == "compiled" else float(c.ops_train)
    train_launches *= 1 if batched else n
    one_forward = launches(key, precision, False) if eval_compiled else float(c.ops_eval)
    node_launches = c.ops_eval / (n * eval_bs) if batched else one_forward / eval_bs
    curve_launches = c.ops_eval / (curve_chunk * (n if batched else 1))
    # Bytes moved per sample: the training step's as it runs (``traffic``), an evaluation
    # forward's written and read again.
    train_moved, eval_moved = traffic(key, mode == "compiled"), 2 * c.bytes_eval
    totals, evals, works = [], [], []
    for i in range(3):
        spread = MEASURED_SPREAD[i]
        if row is not None:
            launch = row.ms * (1 if batched else n) * spread
        else:
            err = lm.compiled_err if mode == "compiled" else lm.eager_err
            launch = launch_ms(lm, cs, prec, mode, n, batched, True) * (1 + (i - 1) * err)
            launch *= factor
        step_work = _work_ms(c.flops_train, train_moved, text, n * b, i)
        step = _combine(launch, step_work, i)
        data = n * b * data_ms * (spread if measured_data else ASSUMED["data"][i])
        gossip = gossip_work = 0.0
        if n > 1:
            gossip_work = entries * 4 * ASSUMED["gossip_passes"][i] / (ASSUMED["hbm_tbps"][i] * 1e9)
            gossip_work += entries * ASSUMED["topk_ns"][i] / 1e6 if sparse else 0.0
            gossip = GOSSIP_MS * ASSUMED["gossip_ms"][i] + gossip_work
        busy_ms = ASSUMED["kernel_busy_us"][i] / 1e3
        err = lm.compiled_err if eval_compiled else lm.eager_err
        node_eval_mode: Mode = "compiled" if eval_compiled else "eager"
        one = launch_ms(lm, cs, prec, node_eval_mode, 1, False, False) * factor
        per_node = (
            (launch_ms(lm, cs, prec, "eager", n, True, False) * factor / (n * eval_bs))
            if batched
            else one / eval_bs
        )
        per_curve = (
            launch_ms(lm, cs, prec, "eager", n, True, False) * factor / (n * curve_chunk)
            if batched
            else (lm.eager_a_ms + lm.eager_op_ms * cs.ops_eval) * factor / curve_chunk
        )
        eval_work = _work_ms(c.flops_eval, eval_moved, text, 1, i)
        node_images = full * n / (n + 1) if cfg["train"].get("node_eval") != "sharded" else full / 2
        eval_ms = (
            node_images * _combine(per_node * (1 + (i - 1) * err), eval_work, i)
            + (full - node_images) * _combine(one / eval_bs * (1 + (i - 1) * err), eval_work, i)
            + curve * _combine(per_curve * (1 + (i - 1) * err), eval_work, i)
        )
        final_ms = rounds * (n * (lm.eager_a_ms + lm.eager_op_ms * cs.ops_eval) + gossip + data)
        compile_s = 0.0
        if mode == "compiled":
            ref = counts_mod.COUNTS[("resnet20", "evonorm", "fp32", 32)]
            size = kernels(cs, prec) / kernels(ref, "fp32")
            compile_s = COMPILE_S["batched" if batched else "node"] * size
            compile_s *= INT8_COMPILE if precision == "int8" else 1.0
        total_ms = iters * (step + data + gossip) + eval_ms + final_ms
        totals.append(START_S + compile_s + total_ms / 1e3)
        evals.append(eval_ms / 1e3)
        works.append(
            (
                iters * (_gpu_ms(step_work, train_launches, busy_ms) + gossip_work)
                + node_images * _gpu_ms(eval_work, node_launches, busy_ms)
                + (full - node_images) * _gpu_ms(eval_work, one_forward / eval_bs, busy_ms)
                + curve * _gpu_ms(eval_work, curve_launches, busy_ms)
                + rounds * (gossip_work + n * c.ops_eval * busy_ms)
            )
            / 1e3
        )
    return Price(
        seconds=totals[1],
        low=totals[0],
        high=totals[2],
        eval_s=evals[1],
        basis=_basis(row, mode, batched, c, prec, dataset, factor),
        batched=batched,
        work=(works[0], works[1], works[2]),
    )


def _basis(
    row: StepRow | None,
    mode: Mode,
    batched: bool,
    c: counts_mod.StepCounts,
    precision: str,
    dataset: str,
    factor: float,
) -> str:
    """``measured`` (the step measured, with the measured job's data and gossip) or ``derived:``
    what was derived from what."""
    how = f"{'batched' if batched else 'node by node'} {mode}"
    extra = reader_extra_ms(dataset)
    data = "" if dataset == "cifar10" else f"; data: {dataset} reader {extra:+.3g} ms an image"
    if row is not None:
        return f"measured ({how} step: {row.source}; gossip, data: Table 3 job){data}"
    if factor != 1.0:
        return f"derived ({how} step at {factor:.3g}x the fp32 step){data}"
    what = (
        f"{kernels(c, precision):.0f} kernels x compiled fit"
        if mode == "compiled"
        else f"{c.ops_train} ops x eager fit"
    )
    return f"derived ({how} step: {what}){data}"
