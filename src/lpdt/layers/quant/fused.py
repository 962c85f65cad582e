"""The quantiser compiled into one kernel for the eager tensor path (a GPU running eagerly).

Eagerly off the CPU, ``quantizers.quantize`` was its tensor operations: about forty per
stochastic call (the noise hash, then the rounding), each a kernel launch on a GPU, and an eager
8-bit ResNet-20 node step calls it 219 times. (The CPU has its own one-pass C++ loop,
``kernel``.) Here the same arithmetic, the operator ``lpdt::quantize_levels``, is compiled once
per process by ``torch.compile``; inductor lowers it to one expression (``lowering``), so a call
is one kernel with the same bits (``tests/layers/test_quant_fused.py``).

It is the eager implementation of the operator ``lpdt::quantize_fused`` (same arguments as
``quantize_levels``), for two reasons:

- ``lpdt.engine.opcount``'s dispatch mode counts it as the one operation it is and runs it
  below the mode (dynamo compiles nothing while a dispatch mode is active);
- its vmap rule stacks the held nodes (the batched eager step), so one call serves them all.

**One graph for every call site and shape.** The graphs are compiled with dynamic shapes, and
the operands are flattened to one row per seed (``[N]`` for a 0-d seed, ``[n, N]`` for a row
of seeds; the noise counts elements in row-major order, so flattening keeps it). The call
site's salt is folded into the seed: ``(seed + salted(salt)) & MASK32`` with salt 0 keys the
same noise as (seed, salt) (``noise_hash``). The offset is passed as a Python integer, which
dynamo keeps symbolic; it is raised by 2^32 (the same low 32 bits) so that it is never 0 or 1,
the values dynamo specialises on. So a process compiles a few graphs: stochastic one seed,
stochastic rows, nearest with one range, nearest with a range per node (the batched step), and
each again for an operand that is not contiguous or a tensor made under ``inference_mode``.

**When.** ``LPDT_QUANT_FUSED``: unset or ``auto``, off the CPU (the CPU runs ``kernel``);
``1``, wherever the tensor path runs (the CPU too, with ``LPDT_QUANT_KERNEL=0``: the path a GPU
takes, for tests and counts); ``0``, never (the tensor operations). The first call compiles
(seconds; once per process); a graph that cannot compile is an error, not a silent fallback.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch

from lpdt.errors import LpdtError
from lpdt.layers.quant.noise_hash import MASK32, salted
from lpdt.layers.quant.operators import quantize_levels, stacked

ENV = "LPDT_QUANT_FUSED"  # "auto" (default): off the CPU; "1": everywhere; "0": never
_MODES = ("auto", "1", "0")
# Added to the salt's offset: the same low 32 bits, and an integer dynamo never specialises.
_NOT_ZERO_OR_ONE = 2**32

_compiled: dict[str, Callable[..., torch.Tensor]] = {}


class FusedSettingError(LpdtError, ValueError):
    """``LPDT_QUANT_FUSED`` holds something other than auto, 1 or 0."""


def enabled(device: torch.device) -> bool:
    """Whether ``quantizers.quantize``'s eager tensor path on ``device`` calls the fused
    operator (``LPDT_QUANT_FUSED``, above)."""
    mode = os.environ.get(ENV, "auto").strip() or "auto"
    if mode not in _MODES:
        raise FusedSettingError(f"{ENV}={mode!r}: must be one of {', '.join(_MODES)}")
    return mode == "1" or (mode == "auto" and device.type != "cpu")


def _stochastic(
    x: torch.Tensor,
    lo: torch.Tensor,
    hi: torch.Tensor,
    seed: torch.Tensor,
    offset: int,
    levels: float,
) -> torch.Tensor:
    """The compiled graph's body, stochastic: the salt is in ``offset``."""
    return quantize_levels(x, lo, hi, (seed + offset).bitwise_and_(MASK32), levels, 0)


def _nearest(x: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor, levels: float) -> torch.Tensor:
    """The compiled graph's body, round to nearest."""
    return quantize_levels(x, lo, hi, None, levels, 0)


def compiled(kind: str) -> Callable[..., torch.Tensor]:
    """The compiled body ``kind`` ("stochastic" or "nearest"), compiled on its first call."""
    if kind not in ("stochastic", "nearest"):
        raise ValueError(f"unknown fused body {kind!r}: stochastic or nearest")
    if kind not in _compiled:
        body: Callable[..., torch.Tensor] = _stochastic if kind == "stochastic" else _nearest
        _compiled[kind] = torch.compile(body, fullgraph=True, dynamic=True)
    return _compiled[kind]


def quantize(
    x: torch.Tensor,
    lo: torch.Tensor,
    hi: torch.Tensor,
    seed: torch.Tensor | None,
    levels: float,
    salt: int,
) -> torch.Tensor:
    """``quantize_fused``, called directly where nothing needs the operator (no dispatch mode,
    no torch.func transform such as vmap: the operator's own dispatch costs about 60 us a call
    eagerly)."""
    x = x.contiguous()  # a copy, if any, is made (and counted) out here: the graph reshapes x
    wrapped = torch._C._functorch.is_functorch_wrapped_tensor
    if torch._C._len_torch_dispatch_stack() > 0 or any(
        t is not None and wrapped(t) for t in (x, lo, hi, seed)
    ):
        return quantize_fused(x, lo, hi, seed, levels, salt)
    return _fused(x, lo, hi, seed, levels, salt)


def _fused(
    x: torch.Tensor,
    lo: torch.Tensor,
    hi: torch.Tensor,
    seed: torch.Tensor | None,
    levels: float,
    salt: int,
) -> torch.Tensor:
    """``lpdt::quantize_levels(x, lo, hi, seed, levels, salt)``, the same bits, as one compiled
    kernel; ``lo`` and ``hi`` need only broadcast to ``x``. Called eagerly only
    (``quantizers``): the operator below is never traced."""
    flat = _operands(x, lo, hi, seed)
    with torch.no_grad():  # one graph whatever the caller's grad mode (the operands need none)
        if seed is None:
            out = compiled("nearest")(*flat, levels)
        else:
            offset = salted(salt) + _NOT_ZERO_OR_ONE
            out = compiled("stochastic")(*flat, seed, offset, levels)
    return out.view(x.shape)


# The same as the operator ``lpdt::quantize_fused`` (its eager implementation; vmap rule below).
quantize_fused = torch.library.custom_op("lpdt::quantize_fused", mutates_args=())(_fused)


def _operands(
    x: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor, seed: torch.Tensor | None
) -> list[torch.Tensor]:
    """``x``, ``lo`` and ``hi`` as the compiled graph takes them: ``x`` as ``[*lead, N]`` and
    each range as ``[*lead, 1]``, where ``lead`` are ``x``'s leading dimensions that the seed's
    blocks or the ranges' values run over (none, for one seed and one range: ``[N]`` and
    ``[1]``; the node axis under vmap; the rows of ``dither``'s rows form). The noise counts the
    elements after the seed's blocks in row-major order, so the flattening keeps its bits.
    Never views (``detach``): dynamo guards a view's base, whose shape differs from call to
    call, and would compile a graph for each."""
    ranges = [t.expand(x.shape) for t in (lo, hi)]
    k = max([0 if seed is None else seed.dim(), *(_varying(t) for t in ranges)])
    if k == 0:  # one range (most calls): its value is where the view starts
        return [t.detach() for t in (x.reshape(-1), *(r.as_strided((1,), (1,)) for r in ranges))]
    lead = x.shape[:k]
    first = (*[slice(None)] * k, *[slice(0, 1)] * (x.dim() - k))  # a range's value per row
    flat = [_size_one_strides(t[first].reshape(*lead, 1)) for t in ranges]
    return [t.detach() for t in (x.reshape(*lead, -1), *flat)]


def _size_one_strides(t: torch.Tensor) -> torch.Tensor:
    """``t`` with stride 1 in its dimensions of size 1 (the same elements): dynamo guards those
    strides too, and a range row taken from an expanded tensor (stride 0) or not (stride 1)
    compiled a graph each: three of ``nearest`` for one thread count in a batched eager 8-bit
    step, and a worker that changed its thread count twice hit dynamo's recompile limit
    (an error with ``fullgraph``; the H200 of 2026-11-30)."""
    strides = [1 if size == 1 else stride for size, stride in zip(t.shape, t.stride(), strict=True)]
    return t if strides == list(t.stride()) else t.as_strided(t.shape, strides)


def _varying(t: torch.Tensor) -> int:
    """How many leading dimensions ``t`` (an expanded range) varies over: those up to its last
    dimension of size above 1 whose stride is not 0."""
    k = 0
    for i, (size, stride) in enumerate(zip(t.shape, t.stride(), strict=True)):
        if size != 1 and stride != 0:
            k = i + 1
    return k


@quantize_fused.register_vmap
def _quantize_fused_vmap(
    info: Any,
    in_dims: tuple[int | None, ...],
    x: torch.Tensor,
    lo: torch.Tensor,
    hi: torch.Tensor,
    seed: torch.Tensor | None,
    levels: float,
    salt: int,
) -> tuple[torch.Tensor, int]:
    """The operands with the node axis first; a node's range keeps broadcasting to its ``x``
    (ones inserted after the node axis)."""
    n = info.batch_size
    xs = stacked(x, in_dims[0], n)

    def node_range(t: torch.Tensor, dim: int | None) -> torch.Tensor:
        t = stacked(t, dim, n)
        return t if t.dim() == xs.dim() else t.reshape(n, *[1] * (xs.dim() - t.dim()), *t.shape[1:])

    seeds = None if seed is None else stacked(seed, in_dims[3], n)
    lo, hi = node_range(lo, in_dims[1]), node_range(hi, in_dims[2])
    return quantize_fused(xs, lo, hi, seeds, levels, salt), 0
