"""The kernels a compiled step would launch on a CUDA GPU, counted on a machine without one.

A small model's compiled step on a GPU costs about its number of kernel launches (docs/engine.md,
"On a GPU"), and inductor fuses differently for a GPU (Triton kernels) than for the CPU (C++
loop nests): the CPU's ``generated_kernel_count`` is not the GPU's. This module gets the GPU's
count without a GPU. While ``counting()`` is open, every ``torch.compile``d function compiles
for this machine as usual, and each graph inductor lowers (the forward and, at once, the
backward) is also lowered a second time as a CUDA graph:

- the step is traced on the CPU, with the layers' device-dependent formulas chosen as on a GPU
  (``lpdt.layers.formulas.as_device("cuda")``: EvoNorm's group variance as one ``var``, not the
  CPU's centred mean), so the step computes the same values, rounded otherwise, while counting;
- the graph is copied after AOT autograd's decompositions, joint-graph passes and partition,
  which ran for the CPU (the same for a GPU but for passes that look at the device, such as
  ``pad_mm``, which pads matmuls for CUDA); every device in the copy becomes ``cuda:0`` and its
  example inputs become fake CUDA tensors of the same shapes, strides and dtypes;
- inductor's ``compile_fx_inner`` lowers the copy with Triton scheduling: its post-grad passes,
  fusion and code generation are the GPU's. The device it asks about is an H100 / H200 (132 SMs,
  compute capability 9.0), answered by patching torch's CUDA device interface while it runs;
- code generation is all it runs: the Triton kernels are never compiled (``triton`` need not be
  installed) and the wrapper module is never loaded. Its source is read instead, and each
  ``.run(`` in it is one Triton kernel launch; library calls (inductor's extern kernels and the
  operators it falls back to: convolutions, matmuls, cuDNN / cuBLAS) are counted apart.

Checked against a GPU (docs/notebook/2026-11-29-cuda-kernels-without-a-gpu.md): on the code and
the torch 2.11 of the H200 measurement of 2026-11-28 it gives that measurement's 906 kernels for
the batched compiled 8-bit ResNet-20 x 8 round exactly, and its 222 for fp32 (230 while fp32's
EvoNorm took the CPU's formula, before the layers' formulas followed ``as_device``:
docs/notebook/2026-11-29-gpu-launches-in-the-price.md).

It relies on inductor's internals (``compile_fx``'s ``inner_compile``, ``GraphLowering``,
``AsyncCompile``), checked on torch 2.11 and 2.14; a torch that renames them fails loudly here,
not in training. On a machine with a CUDA device, count the real compile instead.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import torch

from lpdt.errors import LpdtError
from lpdt.layers.formulas import as_device
from lpdt.layers.quant import kernel

# What the device interface answers for cuda:0 while a copy is lowered: an H100 (the H200 has
# the same SMs and compute capability, which is what inductor's heuristics read).
GPU = types.SimpleNamespace(
    name="NVIDIA H100 80GB HBM3 (assumed by lpdt.engine.cudacount)",
    major=9,
    minor=0,
    multi_processor_count=132,
    regs_per_multiprocessor=65536,
    max_threads_per_multi_processor=2048,
    max_threads_per_block=1024,
    warp_size=32,
    total_memory=80 * 2**30,
    shared_memory_per_block_optin=232448,
    L2_cache_size=50 * 2**20,
    gcnArchName="",
    is_integrated=False,
)
CUDA = torch.device("cuda", 0)
_LAUNCH = re.compile(r"^\s*\w+\.run\(", re.M)
# A library kernel: inductor's extern kernels, and operators it falls back to (in the 8-bit step,
# ``convolution_backward`` of gradient bifurcation), each a call in the wrapper's code.
_EXTERN = re.compile(r"^(?!\s*#).*?(\bextern_kernels\.\w+\(|=\s*torch\.ops\.\w+\.\w+\.\w+\()", re.M)


@dataclass
class Lowered:
    """One graph lowered for CUDA: its Triton kernel launches and library calls."""

    backward: bool
    kernels: int
    extern: int
    restrided: int  # inputs given the CUDA forward's strides (saved activations of a backward)
    source: str = field(repr=False)
    # Why inductor would not record this graph as a CUDA graph on a GPU (``mode="reduce-overhead"``),
    # by its own checks that do not need one: an operator it refuses (a host read, a shape that
    # depends on values, an operator tagged ``cudagraph_unsafe``) or an input that is not a
    # tensor. None: nothing but a GPU would decide (inputs mutated in place must be static then,
    # which ``BatchedSteps`` marks them in that mode).
    cudagraph_blocker: str | None = None


@dataclass
class CudaLaunches:
    """Every graph lowered for CUDA while ``counting()`` was open, in order."""

    graphs: list[Lowered] = field(default_factory=list)

    @property
    def kernels(self) -> int:
        """Triton kernel launches of all graphs: one call of each compiled function, forward
        and backward."""
        return sum(g.kernels for g in self.graphs)

    @property
    def extern(self) -> int:
        """Library calls (extern kernels and fallback operators: convolutions, matmuls) of all
        graphs."""
        return sum(g.extern for g in self.graphs)


class _Generated(LpdtError):
    """Raised with the wrapper's source and the graph's output strides once code generation is
    done: nothing is loaded. Not an error, and caught in this module; an ``LpdtError`` as every
    exception class of lpdt is (tests/test_errors.py)."""

    def __init__(self, source: str, strides: list[tuple[int, ...] | None]) -> None:
        super().__init__("generated")
        self.source, self.strides = source, strides


@contextlib.contextmanager
def counting(options: dict[str, Any] | None = None) -> Iterator[CudaLaunches]:
    """While open, ``torch.compile`` (inductor, default mode) also lowers each graph for CUDA
    and records its launches in the yielded ``CudaLaunches``, and the layers choose their
    formulas as on a GPU (``as_device("cuda")``; the CPU's eager quantiser kernel is off, as
    ``LPDT_QUANT_KERNEL=0``, the path a GPU takes); ``options``: inductor options of every
    compile in it (added to the call's own, e.g. ``{"combo_kernels": True}``)."""
    if torch.cuda.is_available():
        raise RuntimeError(
            "lpdt.engine.cudacount is for machines without a GPU: count the real compile"
        )
    record = CudaLaunches()
    compile = torch.compile

    def compile_also_for_cuda(fn: Callable, **kw: Any) -> Callable:
        if (
            kw.pop("mode", None) not in (None, "default")
            or kw.pop("backend", "inductor") != "inductor"
        ):
            raise ValueError("lpdt.engine.cudacount counts inductor's default mode only")
        opts = {**(kw.pop("options", None) or {}), **(options or {})}
        return compile(fn, backend=functools.partial(_compile, record, opts), **kw)

    import torch._inductor.config as inductor_config

    # The options hold while the step is traced too: the layers read some of them there
    # (``split_reductions``: lpdt.layers.quant.quantizers._split_for_a_gpu).
    with (
        mock.patch.object(torch, "compile", compile_also_for_cuda),
        mock.patch.dict(os.environ, {kernel.ENV: "0"}),
        as_device("cuda"),
        inductor_config.patch(options or {}),
    ):
        yield record


def _compile(record: CudaLaunches, options: dict[str, Any], gm: Any, example_inputs: list) -> Any:
    """Dynamo's backend: inductor as ``torch.compile`` runs it (``options`` patched into its
    config), with an ``inner_compile`` that lowers each graph for CUDA too. The backward is
    lowered with the forward, not at the first backward call, so both are counted at once; AOT
    autograd's cache is off (a hit skips ``inner_compile``)."""
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config
    from torch._inductor import compile_fx

    # The CUDA forward's output strides: the backward's saved activations have them on a GPU
    # (inductor may lay them out otherwise than for the CPU, e.g. channels-last convolutions).
    forward_strides: list[tuple[int, ...] | None] = []

    def inner(graph: Any, inputs: list, **kwargs: Any) -> Any:
        saved = None if not kwargs.get("is_backward") else _saved_strides(forward_strides)
        lowered, strides = _lower_for_cuda(graph, inputs, kwargs, saved)
        if not lowered.backward:
            forward_strides[:] = strides
        record.graphs.append(lowered)
        return compile_fx.compile_fx_inner(graph, inputs, **kwargs)

    with (
        inductor_config.patch(options),
        # AOT autograd's cache would hand back a compiled function without lowering anything
        functorch_config.patch(force_non_lazy_backward_lowering=True, enable_autograd_cache=False),
    ):
        return compile_fx.compile_fx(gm, example_inputs, inner_compile=inner)


def _saved_strides(forward_strides: list) -> list[tuple[int, ...] | None]:
    """The strides of the tensors the forward saved for the backward, as the CUDA forward
    wrote them (AOT autograd's slice of the forward's outputs)."""
    from torch._guards import TracingContext

    context = TracingContext.try_get()
    meta = None if context is None else context.fw_metadata
    if meta is None or not forward_strides:
        raise RuntimeError("the backward was lowered without its forward's metadata")
    return forward_strides[meta.tensors_saved_for_backwards_slice]


def _lower_for_cuda(
    gm: Any, inputs: list, kwargs: dict[str, Any], saved: list[tuple[int, ...] | None] | None
) -> tuple[Lowered, list[tuple[int, ...] | None]]:
    """Lower a CUDA copy of ``gm`` with inductor (code generation only); ``saved``: for a
    backward, the strides of its saved activations (its first tensor inputs). Returns the
    launches and the copy's output strides."""
    import torch._inductor.config as inductor_config
    from torch._guards import detect_fake_mode
    from torch._inductor import compile_fx
    from torch._inductor.utils import BoxedBool

    mode = detect_fake_mode(inputs)
    if mode is None:
        raise RuntimeError("inductor's example inputs carry no fake mode")
    copy = torch.fx.GraphModule(gm, _cuda_graph(gm.graph, mode))
    fake = [_fake_cuda(mode, t) for t in inputs]
    restrided = 0
    if saved is not None:  # restrided as AOT autograd restrides the real backward's inputs
        first = next(i for i, t in enumerate(fake) if isinstance(t, torch.Tensor))
        for j, stride in enumerate(saved):
            t = fake[first + j]
            if stride is not None and tuple(t.stride()) != stride:
                fake[first + j] = _empty_cuda(mode, t, stride)
                restrided += 1
    # The lowering must not touch what the real compile is handed (its CUDA-graph flag and the
    # forward's device index, which a CUDA forward would set).
    kw = {**kwargs, "cudagraphs": BoxedBool(False)}
    kw.pop("boxed_forward_device_index", None)
    with _as_if_cuda(), inductor_config.patch(fx_graph_cache=False):
        try:
            compile_fx.compile_fx_inner(copy, fake, **kw)
        except Exception as error:  # inductor wraps it (InductorError.inner_exception)
            done = getattr(error, "inner_exception", error)
            if not isinstance(done, _Generated):
                raise
            source, strides = done.source, done.strides
        else:
            raise RuntimeError("inductor lowered the CUDA copy without generating its wrapper")
    kernels, extern = len(_LAUNCH.findall(source)), len(_EXTERN.findall(source))
    backward = bool(kwargs.get("is_backward"))
    blocker = _cudagraph_blocker(copy, fake)
    return Lowered(backward, kernels, extern, restrided, source, blocker), strides


def _cudagraph_blocker(gm: torch.fx.GraphModule, inputs: list) -> str | None:
    """The first reason inductor's checks before recording a CUDA graph give for ``gm`` (as in
    ``compile_fx``'s lowering and ``CompiledFxGraph``), of those that do not need a GPU."""
    from torch._inductor.utils import get_first_incompatible_cudagraph_node

    node = get_first_incompatible_cudagraph_node(gm)
    if node is not None:
        return f"operator {node.target} ({node.name})"
    allowed = (torch.Tensor, torch.SymInt, torch.Generator)
    others = sorted({type(t).__name__ for t in inputs if not isinstance(t, allowed)})
    return f"inputs that are not tensors ({', '.join(others)})" if others else None


def _cuda_graph(graph: torch.fx.Graph, mode: Any) -> torch.fx.Graph:
    """A copy of ``graph`` with every CPU device (in arguments and in the nodes' fake values)
    made ``cuda:0``."""
    copy = torch.fx.Graph()
    out = copy.graph_copy(graph, {})
    copy.output(out)
    for node in copy.nodes:
        node.args = _on_cuda(node.args)
        node.kwargs = {k: _on_cuda(v) for k, v in node.kwargs.items()}
        if "val" in node.meta:
            node.meta["val"] = _fake_cuda(mode, node.meta["val"])
    return copy


def _on_cuda(value: Any) -> Any:
    if isinstance(value, torch.device) and value.type == "cpu":
        return CUDA
    if isinstance(value, (list, tuple)):
        return type(value)(_on_cuda(v) for v in value)
    return value


def _fake_cuda(mode: Any, value: Any) -> Any:
    """A fake CUDA tensor like ``value`` (nested in lists and tuples too)."""
    if isinstance(value, torch.Tensor) and value.device.type == "cpu":
        return _empty_cuda(mode, value, value.stride())
    if isinstance(value, (list, tuple)):
        return type(value)(_fake_cuda(mode, v) for v in value)
    return value


def _empty_cuda(mode: Any, like: torch.Tensor, stride: tuple[int, ...]) -> torch.Tensor:
    """A fake CUDA tensor of ``like``'s shape, dtype and ``requires_grad``, with ``stride``."""
    with mode:
        t = torch.empty_strided(like.shape, stride, dtype=like.dtype, device=CUDA)
    return t.requires_grad_(like.requires_grad)


@contextlib.contextmanager
def _as_if_cuda() -> Iterator[None]:
    """Inductor's view of the machine while a copy is lowered: one CUDA GPU (``GPU``), Triton
    present, and code generation as the last step (``_Generated`` carries the wrapper's
    source instead of loading it; each kernel's source is dropped uncompiled)."""
    import torch._inductor.async_compile as async_compile
    import torch._inductor.graph as graph
    import torch._inductor.ir as ir
    import torch._inductor.scheduler as scheduler
    import torch.utils._triton as triton_utils
    from torch._dynamo.device_interface import CudaInterface
    from torch._inductor.runtime.hints import DeviceProperties

    def generated(self: Any, wrapper_code: Any) -> Any:
        strides = [
            tuple(int(s) for s in out.get_layout().stride)
            if isinstance(out, ir.IRNode) and out.has_tensor_output()
            else None
            for out in self.graph_outputs
        ]
        raise _Generated(wrapper_code.value, strides)

    patches: list[Any] = [
        mock.patch.object(CudaInterface, "get_device_properties", staticmethod(lambda d=None: GPU)),
        mock.patch.object(CudaInterface, "get_compute_capability", staticmethod(lambda d=None: 90)),
        mock.patch.object(CudaInterface, "current_device", staticmethod(lambda: 0)),
        mock.patch.object(CudaInterface, "is_available", staticmethod(lambda: True)),
        mock.patch.object(CudaInterface, "device_count", staticmethod(lambda: 1)),
        mock.patch.object(torch.cuda, "get_device_properties", lambda d=None: GPU),
        mock.patch.object(torch.cuda, "get_device_capability", lambda d=None: (9, 0)),
        mock.patch.object(torch.cuda, "device_count", lambda: 1),
        mock.patch.object(torch.cuda, "current_device", lambda: 0),
        mock.patch.object(triton_utils, "triton_hash_with_backend", lambda: "lpdt-cudacount"),
        mock.patch.object(scheduler, "has_triton", lambda: True),
        mock.patch.object(async_compile.AsyncCompile, "triton", lambda self, *a, **k: None),
        mock.patch.object(graph.GraphLowering, "_compile_to_module_lines", generated),
    ]
    with contextlib.ExitStack() as stack:
        for p in patches:
            stack.enter_context(p)
        try:
            yield
        finally:
            DeviceProperties.create.cache_clear()  # cached with the assumed GPU's answers
