"""What one training step of a model does, counted on the CPU: the GPU price's work
(``lpdt.plan.gpu``).

Per (model, normalisation, precision, input px or tokens), one node's step:

- ``ops_train`` / ``ops_eval``: the eager aten operations of a training step (forward, loss,
  backward) and of an evaluation forward, every operation the dispatcher runs (views included:
  each costs dispatcher time, and on a GPU every other one is a kernel launch). Independent of the
  batch size. 8-bit models are counted on the tensor-operation path a GPU takes
  (``LPDT_QUANT_KERNEL=0``: the CPU's C++ quantiser kernel off).
- ``flops_train`` / ``flops_eval``: FLOPs per sample of the convolutions and matrix products
  (``torch.utils.flop_counter``: forward and backward / forward).
- ``bytes_train`` / ``bytes_eval``: bytes per sample that the operations write (outputs of every
  operation that is not a view): the elementwise traffic of a large input (Imagenette's 224 px),
  which the memory bandwidth bounds.
- ``kernels_train`` / ``kernels_eval``: the kernels inductor generates for the compiled step
  on the CPU (``torch._inductor.metrics.generated_kernel_count``, a cold compile: C++ loop
  nests), where counted; None: not counted (the price takes ``ops x`` the counted models'
  ratio). They size a compiled step's time in the launch model: they fit the H100's measured
  compiled steps at least as well as a GPU's own launches (``LAUNCHES``) do
  (docs/notebook/2026-11-29-gpu-launches-in-the-price.md).
- ``compiled_bytes_train``: bytes per sample that the compiled training step's kernels read and
  write (inductor's own count, ``GraphLowering.count_bytes``, over its fused kernels and the
  extern convolutions and products), where counted. Fused kernels keep intermediates in
  registers, so a compiled step of many small operations (EvoNorm, the 8-bit layers) moves far
  fewer bytes than its operations write eagerly; where not counted, the price derives it from
  ResNet-20's counted rows (``lpdt.plan.gpu.traffic``).

``LAUNCHES`` holds what a compiled step launches on a GPU, the floor's count
(``count_launches``).

``COUNTS`` holds the others for the paper grid's models, counted by
``benchmarks/count_steps.py`` (the commit and date with the table); ``count_step`` counts one
model (the slow test of the paper grid's first iterations recounts them). Nothing here imports
torch at module level.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StepCounts:
    """One node step's work (see the module's docstring); per sample where it scales with the
    batch."""

    ops_train: int
    ops_eval: int
    flops_train: float
    flops_eval: float
    bytes_train: float
    bytes_eval: float
    kernels_train: int | None = None
    kernels_eval: int | None = None
    params: int = 0  # trainable parameters (10 classes)
    dropout: bool = False  # random operations: the batched step refuses it (runs node by node)
    compiled_bytes_train: float | None = None


# (model, norm, precision, px or tokens) -> counts. Counted 2026-11-28 on the project's 2-core CPU,
# torch 2.14.1, the code of 6238600 with the 8-bit layers as they stood in the working tree that
# day (issue 51 in progress: its operation counts move with that work; recount with
# `python benchmarks/count_steps.py`), 10 classes (AG News 4, SentLen 6 differ in the last layer
# only). Kernels: cold compiles, ResNet-20 (the 8-bit one's training step only) and, since
# 2026-11-29, VGG-11 (with nn.Dropout, as its other counts) and ResNet-54 (`count_steps.py
# --kernels vgg11`, `--kernels resnet54`: ResNet-54's fp32 kernels had been derived 39 % high,
# 1,047 against 753 counted); the other models' compiled kernels are priced as ops x the
# counted rows' kernels / ops of the same precision.
# The 8-bit rows are the code the H100 / H200 steps of ``lpdt.plan.gpu`` were measured with, which
# the launch model is fitted on: since the evening of 2026-11-28 the step's table of noise keys
# (``quantizers._step_keys``) takes 13-19 % fewer eager operations (ResNet-20 10,153 -> 8,719,
# VGG-11 3,640 -> 3,207, ResNet-54 24,883 -> 21,304; `benchmarks/count_steps.py`), so the eager
# 8-bit prices are high by up to that share until a GPU measures the new code and both are
# recounted together (the compiled kernels did not move). ``compiled_bytes_train``: ResNet-20's,
# VGG-11's and ResNet-54's rows, counted 2026-11-29 on the project's VM (an Intel Xeon that day; `python
# benchmarks/count_steps.py --kernels resnet20`, then vgg11 and resnet54, the code of 4b0f476;
# the derived bytes had been -4 % / +20 % (VGG-11 fp32 / 8-bit) and +4 % / +5 % (ResNet-54) off). The 8-bit rows'
# other numbers are the older code's (above); their compiled bytes are today's compiled step,
# which the table of noise keys did not change (that table serves the eager path only). The
# other models' compiled bytes are derived (``lpdt.plan.gpu.traffic``). Since 2026-11-29 a GPU's
# eager 8-bit step rounds each quantiser in one compiled kernel (``lpdt.layers.quant.fused``:
# ResNet-20's node step 6,459 -> 2,161 launches on the CPU count), whose host cost is not an aten
# operation's; the eager 8-bit rows stay the measured code's until a GPU times the fused step.
COUNTS: dict[tuple[str, str, str, int], StepCounts] = {
    ("distilbert", "evonorm", "fp32", 128): StepCounts(
        1170, 251, 3.352e10, 1.087e10, 1.809e08, 4.37e07, None, None, 66961162, True
    ),
    ("distilbert", "rangeen", "int8", 128): StepCounts(
        7109, 3064, 3.352e10, 1.087e10, 1.415e09, 6.384e08, None, None, 66961162, True
    ),
    ("resnet18", "evonorm", "fp32", 224): StepCounts(
        1263, 354, 1.065e10, 3.627e09, 2.591e08, 7.501e07, None, None, 11186442, False
    ),
    ("resnet18", "rangeen", "int8", 224): StepCounts(
        9572, 4489, 1.065e10, 3.627e09, 1.51e09, 7.465e08, None, None, 11186442, False
    ),
    ("resnet20", "batchnorm", "fp32", 32): StepCounts(
        308, 96, 2.44e08, 8.163e07, 5.506e06, 2.704e06, 276, 41, 272474, False, 1.333e07
    ),
    ("resnet20", "evonorm", "fp32", 32): StepCounts(
        1324, 371, 2.44e08, 8.163e07, 2.088e07, 5.973e06, 311, 104, 273258, False, 2.285e07
    ),
    ("resnet20", "groupnorm", "fp32", 32): StepCounts(
        350, 75, 2.44e08, 8.163e07, 5.506e06, 2.704e06, None, None, 272474, False, 1.344e07
    ),
    ("resnet20", "rangebn", "fp32", 32): StepCounts(
        1736, 264, 2.44e08, 8.163e07, 1.594e07, 4.309e06, None, None, 272474, False, 2.003e07
    ),
    ("resnet20", "rangeen", "fp32", 32): StepCounts(
        1450, 434, 2.44e08, 8.163e07, 1.777e07, 4.4e06, 441, 83, 273258, False, 2.468e07
    ),
    # kernels_train: benchmarks/bench_launches.py, a cold compile of the node step on this CPU,
    # torch 2.14.1, commit 511f83c (docs/notebook/2026-11-28-8bit-compiles-batched.md)
    ("resnet20", "rangeen", "int8", 32): StepCounts(
        10153, 4769, 2.44e08, 8.163e07, 1.407e08, 6.99e07, 905, None, 273258, False, 3.341e07
    ),
    ("resnet54", "evonorm", "fp32", 32): StepCounts(
        3184, 896, 6.687e08, 2.232e08, 5.074e07, 1.459e07, 753, 254, 760458, False, 5.571e07
    ),
    ("resnet54", "rangeen", "int8", 32): StepCounts(
        24883, 11684, 6.687e08, 2.232e08, 3.496e08, 1.726e08, 2272, 543, 760458, False, 8.123e07
    ),
    ("vgg11", "evonorm", "fp32", 32): StepCounts(
        549, 148, 9.147e08, 3.061e08, 1.574e07, 4.645e06, 173, 49, 9496522, True, 1.801e07
    ),
    ("vgg11", "evonorm", "fp32", 224): StepCounts(
        552, 149, 4.474e10, 1.497e10, 7.672e08, 2.263e08, 175, 57, 9496522, True, 8.792e08
    ),
    ("vgg11", "rangeen", "int8", 32): StepCounts(
        3640, 1697, 9.147e08, 3.061e08, 6.556e07, 2.73e07, 379, 112, 9496522, True, 2.101e07
    ),
    ("vgg11", "rangeen", "int8", 224): StepCounts(
        3643, 1698, 4.474e10, 1.497e10, 3.198e09, 1.33e09, 385, 115, 9496522, True, 1.02e09
    ),
}

# (model, norm, precision, px) -> (training step, evaluation forward): what the compiled step of
# one node launches on a GPU, the Triton kernels inductor generates for CUDA plus its library
# calls (convolutions, matmuls), at per-node batch 32, lowered without a GPU by
# ``lpdt.engine.cudacount`` (``count_launches``; ``benchmarks/count_steps.py --kernels`` prints
# them). The GPU's own least time per step counts these (``lpdt.plan.gpu.launches``: each kernel
# occupies the device however fast the host launches it). Counted 2026-11-29 on the project's
# CPU, torch 2.14.1, the code of 6ab2621 with ``lpdt.layers.formulas`` (EvoNorm's group variance
# as a GPU computes it); the 8-bit rows are today's step, not the older code of their other
# counts. VGG-11's fp32 step at 224 px with inductor's mix-order reduction off: with it on, its
# lowering for CUDA fails ("AssertionError: 256 v.s. 8192", torch 2.11 and 2.14.1). The
# Range-EvoNorm rows (fp32 and 8-bit) recounted the same way on the code of 501b81b, whose
# range compiled for a GPU routes its gradient by a select (``norms.value_range``; they were 289,
# 831, 2,041, 357 and 393: docs/notebook/2026-11-29-range-gradient-select.md). The four 8-bit
# rows recounted again on the code of the sixteenth session's changes (compiled for a GPU: a
# norm's parameters quantised together, long ranges in two reductions, the batch means as masked
# sums; they were 761 / 245, 1,871 / 605, 362 / 126 and 328 / 126:
# docs/notebook/2026-11-29-stacked-parameter-quantisers.md). Recounted on the seventeenth
# session's code (a range over rows longer than 8,192 values split by hand also where the row
# is not a multiple of it: the convolutions' weights; they were 558 / 183, 1,368 / 453,
# 286 / 94 and 250 / 94: docs/notebook/2026-11-30-test-suite-cold-compiles.md).
LAUNCHES: dict[tuple[str, str, str, int], tuple[int, int]] = {
    ("resnet20", "batchnorm", "fp32", 32): (146, 62),
    ("resnet20", "evonorm", "fp32", 32): (185, 104),
    ("resnet20", "rangeen", "fp32", 32): (218, 104),
    ("resnet20", "rangeen", "int8", 32): (541, 166),
    ("resnet54", "evonorm", "fp32", 32): (441, 254),
    ("resnet54", "rangeen", "int8", 32): (1321, 406),
    ("vgg11", "evonorm", "fp32", 224): (170, 56),
    ("vgg11", "evonorm", "fp32", 32): (151, 50),
    ("vgg11", "rangeen", "int8", 224): (284, 94),
    ("vgg11", "rangeen", "int8", 32): (250, 94),
}


def key(cfg: dict[str, Any], px: int) -> tuple[str, str, str, int]:
    """The ``COUNTS`` key of a run config at its input size ``px``."""
    return (cfg["model"]["name"], cfg["model"]["norm"], cfg["precision"]["mode"], px)


# Operations that only make a new view of a tensor: they write nothing.
_VIEWS = frozenset(
    {
        "view",
        "_unsafe_view",
        "as_strided",
        "t",
        "transpose",
        "expand",
        "permute",
        "unsqueeze",
        "squeeze",
        "detach",
        "alias",
        "slice",
        "select",
        "_reshape_alias",
        "split",
        "split_with_sizes",
        "unbind",
        "view_as",
        "unfold",
        "narrow",
        "diagonal",
        "lift_fresh",
    }
)


def _counted(fn: Any) -> tuple[int, float, float]:
    """(operations, bytes written, FLOPs) of one call of ``fn()``."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import FlopCounterMode

    class Count(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops, self.bytes = 0, 0.0

        def __torch_dispatch__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            out = func(*args, **(kwargs or {}))
            self.ops += 1
            if func.overloadpacket.__name__ not in _VIEWS:
                for t in out if isinstance(out, tuple | list) else (out,):
                    if isinstance(t, torch.Tensor):
                        self.bytes += t.numel() * t.element_size()
            return out

    with Count() as c:
        fn()
    with FlopCounterMode(display=False) as f:
        fn()
    return c.ops, c.bytes, float(f.get_total_flops())


def _built(
    model: str, norm: str, precision: str, px: int, classes: int = 10
) -> tuple[Any, Any, Any]:
    """(the model as the grid builds it, with random weights, its eager ``Steps``, a function
    batch size -> generated inputs), on the CPU, on the tensor operations a GPU runs."""
    os.environ["LPDT_QUANT_KERNEL"] = "0"  # the tensor operations a GPU runs
    import torch

    from lpdt.config import load_config
    from lpdt.engine.steps import Steps
    from lpdt.models import MODELS, build_model

    spec = MODELS.find(model)
    text = spec is not None and spec.inputs == "text"
    sets = [f"model.name={model}", f"model.norm={norm}", f"precision.mode={precision}"]
    # a text model reads a text dataset (the config check); only the model is built from it
    texts = ["model.pretrained=false", "data.dataset=agnews"] if text else []
    cfg = load_config(None, [*sets, "device=cpu", *texts])
    shape = (px,) if text else (3, px, px)
    torch.manual_seed(0)
    net = build_model(cfg, classes, shape)

    def inputs(b: int) -> tuple[torch.Tensor, torch.Tensor]:
        gen = torch.Generator().manual_seed(b)
        x = (
            torch.randint(1000, 2000, (b, px), generator=gen)
            if text
            else torch.randn(b, *shape, generator=gen)
        )
        return x, torch.randint(0, classes, (b,), generator=gen)

    return net, Steps(net), inputs


def count_ops(model: str, norm: str, precision: str, px: int) -> int:
    """The eager operations of one node's training step (``StepCounts.ops_train``), alone: one
    step at batch 2 (the slow test of the paper grid checks the table with it)."""
    net, steps, inputs = _built(model, norm, precision, px)
    x, y = inputs(2)
    net.train()
    steps.train_step(net, x, y)  # warm
    return _counted(lambda: steps.train_step(net, x, y))[0]


def count_step(model: str, norm: str, precision: str, px: int, classes: int = 10) -> StepCounts:
    """Count one node step of a model built as the grid builds it (random weights; text models
    from their configuration), on the CPU, at batch sizes 2 and 4 (per-sample work is the
    difference over 2 samples: what does not scale with the batch, such as the weights'
    gradients, drops out)."""
    import torch

    net, steps, inputs = _built(model, norm, precision, px, classes)
    out: dict[str, list[tuple[int, float, float]]] = {"train": [], "eval": []}
    for b in (2, 4):
        x, y = inputs(b)
        net.train()
        steps.train_step(net, x, y)  # warm: lazy state, first-call paths
        out["train"].append(_counted(lambda: steps.train_step(net, x, y)))  # noqa: B023
        net.eval()
        out["eval"].append(_counted(lambda: steps.predict(net, x)))  # noqa: B023
    (ops_t, b2t, f2t), (_, b4t, f4t) = out["train"]
    (ops_e, b2e, f2e), (_, b4e, f4e) = out["eval"]
    return StepCounts(
        params=sum(p.numel() for p in net.parameters() if p.requires_grad),
        dropout=any(isinstance(m, torch.nn.Dropout) for m in net.modules()),
        ops_train=ops_t,
        ops_eval=ops_e,
        flops_train=(f4t - f2t) / 2,
        flops_eval=(f4e - f2e) / 2,
        bytes_train=(b4t - b2t) / 2,
        bytes_eval=(b4e - b2e) / 2,
    )


def _cold_compiles() -> None:
    """Every compile from here on in this process starts cold, as on a fresh machine: a
    throw-away inductor cache folder and no FX graph cache (a count must see inductor's work,
    not a cache hit)."""
    import tempfile

    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="lpdt-count-")
    import torch._inductor.config as inductor_config

    inductor_config.fx_graph_cache = False


def count_kernels(model: str, norm: str, precision: str, px: int) -> tuple[int, int, float]:
    """Kernels inductor generates for the compiled training step and evaluation forward of one
    node, and the training step's bytes per sample read and written by its kernels
    (``StepCounts.compiled_bytes_train``: the difference of batches 4 and 2, like
    ``count_step``'s). Cold compiles into a throw-away cache, minutes on a 2-core CPU."""
    _cold_compiles()
    import torch
    from torch._inductor import compile_fx, metrics

    from lpdt.engine.steps import Steps

    # Inductor counts the bytes its kernels move only while its metrics logger is enabled for
    # INFO; enabled here directly (torch._logging.set_logs ignores a call when TORCH_LOGS is
    # set), with no handler, so nothing is printed, and put back after.
    log = compile_fx.inductor_metrics_log
    level = log.level
    log.setLevel(logging.INFO)
    moved: list[float] = []
    train = evaluation = 0
    try:
        for b in (2, 4):
            torch._dynamo.reset()  # each batch size compiles its own graphs, counted alone
            net, _, inputs = _built(model, norm, precision, px)
            x, y = inputs(b)
            steps = Steps(net, compile=True, log=lambda s: None)
            metrics.reset()
            net.train()
            steps.train_step(net, x, y)
            moved.append(float(metrics.num_bytes_accessed))
            if b == 2:
                train = metrics.generated_kernel_count
                metrics.reset()
                net.eval()
                steps.predict(net, x)
                evaluation = metrics.generated_kernel_count
    finally:
        log.setLevel(level)
    if min(moved) <= 0:
        raise RuntimeError(f"inductor counted no bytes for {model} {norm} {precision} ({moved})")
    return train, evaluation, (moved[1] - moved[0]) / 2


def count_launches(
    model: str,
    norm: str,
    precision: str,
    px: int,
    batch: int = 32,
    options: dict[str, Any] | None = None,
) -> tuple[tuple[int, int], tuple[int, int]]:
    """Launches on a GPU of one node's compiled training step and of its evaluation forward,
    each as (Triton kernels, library calls such as convolutions and matmuls) of the graphs
    inductor lowers for CUDA, counted without a GPU by ``lpdt.engine.cudacount``, at per-node
    batch ``batch`` (inductor splits a reduction by its size), with inductor ``options``
    (``cudacount.counting``). ``LAUNCHES`` holds the sums. Cold compiles into a throw-away
    cache, minutes on a 2-core CPU."""
    _cold_compiles()
    net, _, inputs = _built(model, norm, precision, px)
    import torch

    from lpdt.engine import cudacount
    from lpdt.engine.steps import Steps

    torch._dynamo.reset()
    x, y = inputs(batch)
    out = []
    with cudacount.counting(options) as record:
        compiled = Steps(net, compile=True, log=lambda s: None)
        for train in (True, False):
            start = len(record.graphs)
            net.train(train)
            if train:
                compiled.train_step(net, x, y)
            else:
                compiled.predict(net, x)
            graphs = record.graphs[start:]
            if not graphs:
                raise RuntimeError(f"nothing compiled for {model} {norm} {precision} {px}")
            out.append((sum(g.kernels for g in graphs), sum(g.extern for g in graphs)))
    return out[0], out[1]
