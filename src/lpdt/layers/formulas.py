"""Which device a layer's formula is chosen for.

Some layers compute one value by a different formula per device, the faster one for each
(EvoNorm's group variance: ``lpdt.layers.norms.group_variance``). They ask ``formula_device``
rather than the tensor's device, so that ``as_device("cuda")`` can make a CPU trace take a GPU's
formula: ``lpdt.engine.cudacount`` counts the kernels a GPU would launch from graphs traced on
the CPU.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

_DEVICE: str | None = None  # set by as_device; dynamo guards on it like any global it reads


def formula_device(t: torch.Tensor) -> str:
    """The device type whose formula a layer computes ``t`` with: ``t``'s own, unless
    ``as_device`` says otherwise."""
    return _DEVICE or t.device.type


def tracing() -> bool:
    """Whether the code runs while ``torch.compile`` traces it into a graph: under dynamo, and
    also where AOT autograd traces a custom operator's backward formula after dynamo, which
    torch 2.11 does with ``torch.compiler.is_compiling()`` false (torch 2.14.1: true). There
    the 8-bit backward took the eager GPU path's fused quantiser, an operator inductor cannot
    trace, and the batched 8-bit step did not compile on a GPU (H200, 2026-11-30). A compile
    sets its tracing context for both. (Under dynamo ``is_compiling()`` is true first, so dynamo
    never traces the context lookup.)"""
    return torch.compiler.is_compiling() or torch._guards.TracingContext.try_get() is not None


def compiled_for_a_gpu(t: torch.Tensor) -> bool:
    """Whether ``t`` is being traced into a graph compiled for a GPU (``formula_device``),
    where a formula costs its kernel launches more than its passes over memory."""
    return tracing() and formula_device(t) != "cpu"


@contextlib.contextmanager
def as_device(kind: str) -> Iterator[None]:
    """While open, layers choose their formulas as on a ``kind`` device ("cuda", "cpu"): the
    same values up to float rounding, computed otherwise."""
    global _DEVICE
    before, _DEVICE = _DEVICE, kind
    try:
        yield
    finally:
        _DEVICE = before
