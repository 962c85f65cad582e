"""The quantisers as operators for compiled graphs, and the rounding arithmetic they share.

``quantizers`` calls these operators only while ``torch.compile`` traces; eagerly it runs the
same arithmetic as tensor operations (``to_levels``, ``noise_hash``) or the C++ kernel.

- ``lpdt::dither_hash(seed, shape, salt)``: the rounding noise's 16-bit levels;
- ``lpdt::quantize_levels(x, lo, hi, seed, levels, salt)``: ``quantize``'s rounding to
  ``levels`` + 1 levels over [lo, hi], stochastic when a seed is given.

Why operators: inductor lowers each to one pointwise expression (``lowering``) instead of the
dozens of graph nodes the tensor operations trace to, which were most of the 8-bit step's
compile time. Each has a vmap rule, so the batched step (``torch.func.vmap`` over the held
nodes) compiles them too: the nodes' operands are stacked on a leading axis and their seeds key
one block each (the rows form), which gives each node the bits of its own call. Neither has an
autograd formula: the quantisers' gradients are routed around them (``functions``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from lpdt.layers.quant import lowering
from lpdt.layers.quant.noise_hash import index_hash, low32_, mix_, noise_from_levels, salted
from lpdt.layers.quant.spec import MIN_STEP


def to_levels(
    x: torch.Tensor,
    lo: torch.Tensor,
    hi: torch.Tensor,
    levels: float,
    noise: torch.Tensor | None,
    in_place: bool = True,
) -> torch.Tensor:
    """round(clamp((x - lo)/step + noise, 0, levels)) * step + lo, step = max((hi - lo)/levels,
    MIN_STEP): ``quantize``'s arithmetic as tensor operations, in place on fresh tensors (fewer
    allocations eagerly). ``in_place=False`` clamps out of place (vmap has no batching rule for
    an in-place clamp: it would loop)."""
    step = ((hi - lo) / levels).clamp_min(MIN_STEP)
    q = (x - lo).div_(step)
    if noise is not None:
        q.add_(noise)
    q = q.clamp_(0.0, levels) if in_place else q.clamp(0.0, levels)
    return q.round_().mul_(step).add_(lo)


def stacked(t: torch.Tensor, dim: int | None, n: int) -> torch.Tensor:
    """A vmap rule's operand with its node axis first (an unbatched one repeated n times, as a
    view; one whose node axis is first already, as it is: no view dispatched); also
    ``vmap_ops``' and ``fused``'."""
    if dim is None:
        return t.expand(n, *t.shape)
    return t if dim == 0 else t.movedim(dim, 0)


# -- the noise ---------------------------------------------------------------------------------


@torch.library.custom_op("lpdt::dither_hash", mutates_args=())
def dither_hash(seed: torch.Tensor, shape: Sequence[int], salt: int) -> torch.Tensor:
    """The 16-bit noise levels (int64, [0, 2^16)) of ``seed.shape + shape``: each element of the
    integer tensor ``seed`` keys its own block of ``shape``, whose elements are counted from 0
    in row-major order. A 0-d seed: one block (``dither`` of one tensor); ``[n]``: n blocks
    (``dither``'s rows, and the vmap rule's stacked nodes). On ``seed``'s device."""
    blocks = seed.reshape(-1, 1).to(torch.int64)
    key = mix_(low32_(blocks + salted(salt), True), True)
    count = 1
    for size in shape:
        count *= size
    h = index_hash(count, key, seed.device, wide=True, fresh=True)
    return h.view(*seed.shape, *shape)


@dither_hash.register_fake
def _dither_hash_fake(seed: torch.Tensor, shape: Sequence[int], salt: int) -> torch.Tensor:
    lowering.register()  # traced now: inductor may lower the graph next
    return seed.new_empty((*seed.shape, *shape), dtype=torch.int64)


@dither_hash.register_vmap
def _dither_hash_vmap(
    info: Any, in_dims: tuple[int | None, ...], seed: torch.Tensor, shape: Sequence[int], salt: int
) -> tuple[torch.Tensor, int]:
    return dither_hash(stacked(seed, in_dims[0], info.batch_size), shape, salt), 0


# -- the rounding ------------------------------------------------------------------------------


@torch.library.custom_op("lpdt::quantize_levels", mutates_args=())
def quantize_levels(
    x: torch.Tensor,
    lo: torch.Tensor,
    hi: torch.Tensor,
    seed: torch.Tensor | None,
    levels: float,
    salt: int,
) -> torch.Tensor:
    """``to_levels`` of ``x`` over ``lo`` / ``hi`` (shaped like ``x``: expanded views), with
    ``dither_hash``'s noise where ``seed`` is given: its ``seed.dim()`` leading axes of ``x``
    are the blocks its elements key (0-d: one; ``[n]``: the rows)."""
    noise = None
    if seed is not None:
        levels_h = dither_hash(seed, x.shape[seed.dim() :], salt)
        noise = noise_from_levels(levels_h, x.dtype)
    return to_levels(x, lo, hi, levels, noise)


@quantize_levels.register_fake
def _quantize_levels_fake(x: torch.Tensor, *_: Any) -> torch.Tensor:
    lowering.register()  # traced now: inductor may lower the graph next
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@quantize_levels.register_vmap
def _quantize_levels_vmap(
    info: Any, in_dims: tuple[int | None, ...], *args: Any
) -> tuple[torch.Tensor, int]:
    """The operands (x, lo, hi, seed) with the node axis first; levels and salt as they are."""
    n = info.batch_size
    operands = [a if a is None else stacked(a, d, n) for a, d in zip(args[:4], in_dims)]
    return quantize_levels(*operands, *args[4:]), 0
