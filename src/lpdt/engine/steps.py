"""The per-node computations of a run, eager or compiled (``train.compile``).

``Steps.train_step(model, x, y)`` is one node's forward, loss and backward (gradients land in the
model's ``.grad``, i.e. in the node's row of the engine's gradient matrix); ``Steps.predict`` is
the evaluation forward. With ``train.compile: true`` both are ``torch.compile``d *functions of
the model*, not compiled modules: dynamo lifts the parameters and buffers to graph inputs, so all
n node replicas (same class, same shapes) share one compiled graph per mode (train / eval) and a
run pays the compile once, not n times. AOTAutograd compiles the backward with the forward.

Compiled code is cached on disk by inductor (FX graph and AOTAutograd caches) under
``TORCHINDUCTOR_CACHE_DIR``; lpdt defaults it to ``~/.cache/lpdt/torchinductor`` (instead of
torch's ``/tmp/torchinductor_$USER``) so that the cache survives reboots and every job of the
workflow on a machine reuses it (the default is set when ``lpdt`` is imported: importing
``torch._dynamo`` writes torch's own default into the environment). Measured on a 2-core CPU (docs/engine.md): a first ResNet-20
training-step compile takes about 40 s (fp32) / 80 s (8-bit); with the cache warm about 4 s /
8 s (dynamo still traces the model in every process; AOTAutograd's cache also serves the 8-bit
graphs, whose custom autograd Functions it would skip by default: see ``Steps.__init__``).

Shapes: each compiled function is specialised to the batch size of its first call, and a batch of
any other size (an epoch's short last batch, which the sampler does not drop; the last batch of an
evaluation shard) runs the same function eagerly. Letting torch compile a second graph with a
dynamic batch size instead cost about 45 s per 8-bit run on the reference CPU, more than the
compiled step saves in a short run; one short batch in ~48 costs almost nothing eagerly. Eager
and compiled steps compute the same function (up to floating-point rounding of fused kernels).

Rounding noise (8-bit models): each training step and each evaluation forward draws one noise
seed from torch's generator (the node's stream) *outside* the compiled function and runs under
``noise_seed``; the quantisers hash it with their call site and element index in plain tensor
ops. So an eager and a compiled step draw the same noise, and a compiled graph holds no random
ops of its own (docs/int8.md). fp32 models draw nothing.

Random ops (dropout: VGG-11's classifier) draw from torch's generator in a compiled step too
(inductor's ``fallback_random``): inductor would otherwise generate its own in-graph random
numbers, and an eager and a compiled run of one run id would differ like two dropout streams.
Models without random ops compile to the same graph either way.

Compiler options: inductor's CPU layout optimisation (channels-last convolutions) is turned off
for 8-bit models: their per-sample range reductions then read memory contiguously (measured: the
compiled 8-bit ResNet-20 step 1.2x slower with it on). fp32 models keep torch's default.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import time
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from lpdt.engine.device import Log

# How many Steps of this process compile (see Steps.__init__, the recompile limit).
_compiling_steps = 0


def _train_step(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(model(x), y)


def _predict(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return model(x).argmax(1)


# Compile 8-bit models node by node on CUDA anyway (tests/test_cuda.py; the batched step compiles
# there without it).
CUDA_INT8_ENV = "LPDT_COMPILE_INT8_ON_CUDA"


# The oldest torch whose compiled 8-bit step is verified equal to the eager one
# (tests/engine/test_steps.py and tests/layers/test_quant.py on torch 2.11.0 and 2.12.1 CPU,
# 2.13.0 and the pinned 2.14.1). The all-zero gradients of the compiled step on torch 2.11 (a GPU
# machine's, 2026-11-26, its CPU too) were a torch 2.11 bug met by lpdt code of that day: dynamo
# drops the gradient through a custom autograd.Function whose forward returns a tensor that it
# changed in place (``(x * 1).mul_(2)``, an ``out=`` result); the straight-through quantisers were
# such Functions (``quantize`` ends in ``.add_(lo)``) until commit 4e88b46 wrote them as plain
# arithmetic (``functions.straight_through``), which compiles right on 2.11.
# tests/engine/test_steps.py checks that no Function of the 8-bit layers does it again. Older
# torch (not tried) runs the 8-bit step eagerly.
MIN_TORCH_COMPILED_INT8 = (2, 11)


def torch_version(version: str | None = None) -> tuple[int, int]:
    """(major, minor) of a torch version string such as '2.14.1+cu130' (default: this torch)."""
    major, minor = (version or torch.__version__).split("+")[0].split(".")[:2]
    return int(major), int(minor)


def _on_cuda(model: nn.Module) -> bool:
    return any(p.device.type == "cuda" for p in model.parameters())


def is_quantized(model: nn.Module) -> bool:
    """Whether ``model`` holds 8-bit layers (their activation quantisers)."""
    from lpdt.layers.quant import QuantMeasure

    return any(isinstance(m, QuantMeasure) for m in model.modules())


def compile_allowed(model: nn.Module, log: Log = print, batched: bool = False) -> bool:
    """Whether ``model``'s step may be compiled here; says in one line why not (8-bit models on
    torch older than ``MIN_TORCH_COMPILED_INT8``, or on CUDA node by node unless
    ``CUDA_INT8_ENV`` is set). The batched 8-bit step (``batched``) compiles on CUDA: on an H200
    (torch 2.11, 2026-11-28) it compiled with no fallback, equalled the eager node-by-node steps
    (float32 within rounding-level flips, float64 to 6e-8) and trained like the CPU run; the
    compiled node-by-node 8-bit step has not run there yet."""
    if not is_quantized(model):
        return True
    if torch_version() < MIN_TORCH_COMPILED_INT8:
        log(
            f"train.compile: the compiled 8-bit step needs torch >= "
            f"{'.'.join(map(str, MIN_TORCH_COMPILED_INT8))} (the oldest verified: "
            f"docs/engine.md, 'On a GPU'); this is torch {torch.__version__}, so it runs eagerly"
        )
        return False
    if _on_cuda(model) and not batched and not os.environ.get(CUDA_INT8_ENV):
        log(
            "train.compile: the compiled node-by-node 8-bit step is not yet verified on CUDA "
            "(docs/engine.md, 'On a GPU'; the batched one is: train.batch_nodes); running it "
            f"eagerly (set {CUDA_INT8_ENV}=1 to compile it anyway)"
        )
        return False
    return True


# torch's CUDA build on a machine without a GPU logs two warnings at a process's first compile
# that concern GPU code only: Triton is missing (FLOP counts of Triton kernels) and no CUDA
# runtime was found (cpp_extension's CUDA_HOME). A CPU run's log read them as faults.
CPU_ONLY_WARNINGS = {
    "torch.utils.flop_counter": "triton not found",
    "torch.utils.cpp_extension": "No CUDA runtime is found",
}


class _DropStart(logging.Filter):
    """Drops the records whose message starts with ``start``."""

    def __init__(self, start: str) -> None:
        super().__init__()
        self.start = start

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.start)


def quiet_cpu_only_warnings() -> None:
    """Without a GPU, drop ``CPU_ONLY_WARNINGS`` from torch's loggers (once per process)."""
    if torch.cuda.is_available():
        return
    for name, start in CPU_ONLY_WARNINGS.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropStart) for f in logger.filters):
            logger.addFilter(_DropStart(start))


def prepare_compile(mode: str, quantized: bool, options: dict | None = None) -> dict:
    """Set torch's process-wide compiler flags that lpdt's compiled steps need, and return the
    keyword arguments of their ``torch.compile`` call. Each call counts one more compiled step
    of this process (the recompile limit: see below). ``options``: more inductor options
    (``mode`` "default" only; a benchmark's experiment, e.g. ``{"combo_kernels": True}``: other
    options make another compiled graph, not a reuse of one compiled without them)."""
    quiet_cpu_only_warnings()  # before the imports that log them
    # Imported here, not at the top: ``torch._dynamo`` costs about 1 s of every process that
    # imports the engine (2-core VM), and a process that trains eagerly never needs it.
    import torch._dynamo.config
    import torch._functorch.config  # not imported by ``import torch``
    import torch._inductor.config

    # The 8-bit layers are custom autograd.Functions; AOTAutograd's on-disk cache skips graphs
    # holding one unless allowed, and then every process re-traces the joint graph (8-bit
    # ResNet-20: a warm compile of 20 s instead of 8 s). The cache key is computed from the
    # traced graph, which holds the Functions' traced forward and backward bodies, so a
    # changed backward is a new key (tests/engine/test_steps.py checks it across processes).
    torch._functorch.config.autograd_cache_allow_custom_autograd_functions = True
    # Dropout masks from torch's generator, as eager (``train.compile`` is no identity key).
    torch._inductor.config.fallback_random = True
    # Registers prims.inductor_force_stride_order, which the 8-bit quantisers use to have a
    # quantised activation stored once instead of recomputed in each kernel that reads it
    # (lpdt.layers.quant.functions.stored).
    importlib.import_module("torch._inductor.inductor_prims")  # 0.8 s: only when compiling
    # The quantisers' operators are in a traced graph by name only: their sources join the
    # caches' key (lpdt.layers.quant.cache_key), unless the process set a pass of its own.
    if torch._inductor.config.post_grad_custom_post_pass is None:
        from lpdt.layers.quant.cache_key import SourceKey

        torch._inductor.config.post_grad_custom_post_pass = SourceKey()
    kw: dict = {}
    if mode != "default":
        if options:
            raise ValueError(f"inductor options {options} need the default mode, not {mode!r}")
        kw["mode"] = mode
    elif quantized or options:
        kw["options"] = {**({"layout_optimization": False} if quantized else {}), **(options or {})}
    # Every compiled step of a process compiles the same function, so all its models' graphs
    # share one dynamo cache per function, whose recompile limit (8) would make the ninth
    # model of a process (a notebook, a test session) run eagerly, with only a warning in
    # torch's log. Each step adds at most one graph per function (other shapes run eagerly).
    global _compiling_steps
    _compiling_steps += 1
    limit = torch._dynamo.config.recompile_limit
    torch._dynamo.config.recompile_limit = max(limit, _compiling_steps)
    return kw


class Steps:
    """One node's training step and evaluation forward, shared by every node of a run."""

    _EAGER: dict[str, Callable] = {"train": _train_step, "predict": _predict}

    def __init__(
        self,
        model: nn.Module,
        compile: bool = False,
        mode: str = "default",
        log: Log = print,
        compile_eval: bool = True,
        compile_train: bool = True,
    ) -> None:
        self.log = log
        self._compiled: dict[str, Callable] = {}  # "train" / "predict" -> compiled function
        self._size: dict[str, int] = {}  # the batch size each compiled function is specialised to
        from lpdt.layers.quant.convert import draws_noise

        # Each call draws a noise seed for the 8-bit quantisers' rounding, and each training step
        # also for hashed dropout (the identity when evaluating).
        self.quantized = is_quantized(model)
        self.noisy = draws_noise(model)
        # CUDA graphs (mode "reduce-overhead"): a graph's outputs live in memory that its next
        # replay overwrites, so each call marks a new step and copies what it returns.
        self._graphs = False
        if not (compile and (compile_train or compile_eval) and compile_allowed(model, log)):
            return
        kw = prepare_compile(mode, self.quantized)
        self._graphs = mode == "reduce-overhead"
        if compile_train:  # false: the batched step trains (lpdt.engine.batched)
            self._compiled["train"] = torch.compile(_train_step, dynamic=False, **kw)
        if compile_eval:
            self._compiled["predict"] = torch.compile(_predict, dynamic=False, **kw)

    @property
    def compiled(self) -> frozenset[str]:
        """What runs compiled: "train" and/or "predict" (empty: everything eagerly)."""
        return frozenset(self._compiled)

    def train_step(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Forward, loss and backward of one node; returns the detached loss."""
        fn, first = self._function("train", x)
        with self._timed("train", first), self._noise(x.device, self.noisy):
            self._mark_step()
            loss = fn(model, x, y)
            loss.backward()
        return self._kept(loss.detach())

    @torch.no_grad()
    def predict(self, model: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """Predicted classes of one node's model (the caller sets eval mode)."""
        fn, first = self._function("predict", x)
        with self._timed("predict", first), self._noise(x.device, self.quantized):
            self._mark_step()
            return self._kept(fn(model, x))

    def _mark_step(self) -> None:
        if self._graphs:
            torch.compiler.cudagraph_mark_step_begin()

    def _kept(self, out: torch.Tensor) -> torch.Tensor:
        """``out``, copied out of a CUDA graph's memory when the step replays graphs."""
        return out.clone() if self._graphs else out

    def _noise(self, device: torch.device, draw: bool) -> contextlib.AbstractContextManager:
        """``draw``: one noise seed for this call, drawn from torch's generator."""
        if not draw:
            return contextlib.nullcontext()
        from lpdt.layers.quant.quantizers import draw_seed, noise_seed

        return noise_seed(draw_seed(device))

    def _function(self, what: str, x: torch.Tensor) -> tuple[Callable, bool]:
        """The function for this batch, and whether this call compiles it: the compiled one when
        there is one and the batch has the size its graph is specialised to (the first call's),
        else the eager one."""
        if what not in self._compiled:
            return self._EAGER[what], False
        first = what not in self._size
        if self._size.setdefault(what, x.shape[0]) != x.shape[0]:
            return self._EAGER[what], False
        return self._compiled[what], first

    @contextlib.contextmanager
    def _timed(self, what: str, first: bool) -> Iterator[None]:
        """Log the first (compiling) call of a compiled function and how long it took."""
        if not first:
            yield
            return
        step = "training step" if what == "train" else "evaluation forward"
        cache = os.environ["TORCHINDUCTOR_CACHE_DIR"]  # set when lpdt is imported
        self.log(f"compiling the {step} (torch.compile, cache {cache})")
        t0 = time.perf_counter()
        yield
        self.log(f"  compiled the {step} in {time.perf_counter() - t0:.1f} s (first call included)")
