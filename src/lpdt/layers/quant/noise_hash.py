"""The rounding noise's hash: a counter-based 32-bit hash of (seed, salt, element index).

One hash, three forms that compute the same bits (``tests/layers/test_quant.py`` checks each
against the hash written in Python integers):

- Python integers (``key_int``): the key of (seed, salt), for a seed read on the CPU;
- tensor operations (``mix_``, ``index_hash``): int32 eagerly (products wrap), int64 with masks
  where ``wide`` (the operator's eager implementation);
- one operator for compiled graphs, ``lpdt::dither_hash``, whose inductor lowering writes the whole
  hash as one int64 pointwise expression. Traced as tensor operations, the hash is about 36 graph
  nodes per call site, and an 8-bit ResNet-20 step has 112 call sites: inductor's lowering,
  fusion and code generation of those nodes were about half the 8-bit step's compile time
  (docs/notebook/2026-11-28-8bit-compile-time.md). As one node the hash lowers in one go, and
  inductor still fuses it into the rounding kernel that reads it. The operator has a vmap rule,
  so the batched step (``torch.func.vmap`` over the held nodes) compiles it too.

The lowering is registered with inductor the first time the operator is traced (its fake
implementation runs then), so that eager processes never import the compiler and any
``torch.compile`` of the quantisers gets it. ``torch._inductor.lowering`` is a private API; the
lowering is checked on torch 2.11 and 2.14.1. Without it inductor would call the operator's eager
implementation: the same bits, more kernels.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

# Multipliers of the 32-bit hash (Wellons' "lowbias32"; 2^32 minus the golden-ratio constant
# 0x9E3779B9), all below 2^31: int64 products of 32-bit values never overflow, and each fits an
# int32 scalar.
GOLDEN = 0x61C88647
_M1 = 0x21F0AAAD
_M2 = 0x735A2D97
SALT = 0x632BE5AB  # spreads the salts over the 32-bit key space
MASK32 = 0xFFFFFFFF
_ROUNDS = ((16, _M1), (15, _M2), (15, None))  # (shift, multiplier) of the finaliser's rounds


def mix_(h: torch.Tensor, wide: bool, scratch: bool = True) -> torch.Tensor:
    """Wellons' lowbias32 finaliser on 32-bit values, **in place** (``h`` must be a fresh tensor).

    ``wide``: ``h`` is int64 holding values below 2^32, and each product is masked back to 32
    bits; otherwise ``h`` is int32 and products wrap by themselves (the shifts are masked to be
    logical on the signed type). Both give the same 32 bits. In place, and eagerly with one
    scratch tensor for the three shifts (``scratch``; not under vmap, which refuses ``out=``),
    because each allocation of a tensor the size of the activation costs page faults
    (allocation-bound eagerly: 2-4x slower out of place)."""
    buf = torch.empty_like(h) if scratch and not wide else None
    for shift, multiplier in _ROUNDS:
        if wide:
            h.bitwise_xor_(h.bitwise_right_shift(shift))
        else:
            shifted = torch.bitwise_right_shift(h, shift, out=buf)
            h.bitwise_xor_(shifted.bitwise_and_(2 ** (32 - shift) - 1))
        if multiplier is not None:
            low32_(h.mul_(multiplier), wide)
    return h


def mix_int(h: int) -> int:
    """``mix_`` on one 32-bit value in Python integers (the same bits)."""
    for shift, multiplier in _ROUNDS:
        h ^= h >> shift
        if multiplier is not None:
            h = (h * multiplier) & MASK32
    return h


def salted(salt: int) -> int:
    """The salt's offset of the key, in 32 bits."""
    return (salt * SALT) & MASK32


def key_int(seed: int, salt: int) -> int:
    """The 32-bit key of (seed, salt) in Python integers."""
    return mix_int((seed + salted(salt)) & MASK32)


def signed32(h: int) -> int:
    """A 32-bit value as the signed int32 with the same bits."""
    return h - 2**32 if h >= 2**31 else h


def low32_(h: torch.Tensor, wide: bool) -> torch.Tensor:
    """``h`` reduced to its low 32 bits in place: a mask in int64, nothing in int32 (it wraps)."""
    return h.bitwise_and_(MASK32) if wide else h


def index_hash(
    count: int,
    key: torch.Tensor | int,
    device: torch.device,
    wide: bool,
    fresh: bool,
    scratch: bool = True,
) -> torch.Tensor:
    """The top 16 bits of the hash of element indices 0..count-1 under ``key`` (int32 or int64;
    values in [0, 2^16)). ``key`` broadcasts against the indices (a column keys one row each);
    ``fresh``: the sum with the key must be a new tensor (a key wider than the indices, or under
    vmap, where the key is per node and the indices are not); ``scratch``: ``mix_``'s.

    The key is added before the multiply: a constant times the index alone is folded by
    inductor into the kernel's index arithmetic, int32 on a GPU, where Triton refuses products
    of 2^31 or more (a per-sample view made it 8192 x GOLDEN). Key-plus-index is a value."""
    h = torch.arange(count, device=device, dtype=torch.int64 if wide else torch.int32)
    h = h + key if fresh else h.add_(key)
    h = low32_(low32_(h, wide).mul_(GOLDEN), wide)
    h = mix_(h, wide, scratch).bitwise_right_shift_(16)
    return h if wide else h.bitwise_and_(0xFFFF)


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
    _register_lowering()  # traced now: inductor may lower the graph next
    return seed.new_empty((*seed.shape, *shape), dtype=torch.int64)


@dither_hash.register_vmap
def _dither_hash_vmap(
    info: Any, in_dims: tuple[int | None, ...], seed: torch.Tensor, shape: Sequence[int], salt: int
) -> tuple[torch.Tensor, int]:
    """Per node under vmap: the nodes' seeds stacked on a leading axis key one block each (the
    rows form), so node k's noise is what its own call would draw."""
    dim = in_dims[0]
    stacked = seed.expand(info.batch_size, *seed.shape) if dim is None else seed.movedim(dim, 0)
    return dither_hash(stacked, shape, salt), 0


_lowering_registered = False


def _register_lowering() -> None:
    """Teach inductor ``lpdt::dither_hash`` as one int64 pointwise expression (once)."""
    global _lowering_registered
    if _lowering_registered:
        return
    # The compiler is imported here and not above: an eager process never loads it. Outside the
    # fake-tensor mode that called us, so that the import's own tensors are real.
    import sympy  # type: ignore[import-untyped]
    from torch.utils._python_dispatch import _disable_current_modes

    with _disable_current_modes():
        from torch._inductor.ir import Pointwise
        from torch._inductor.lowering import register_lowering
        from torch._inductor.virtualized import ops

    def constant(value: int) -> Any:
        return ops.constant(value, torch.int64)

    def mix(h: Any) -> Any:
        for shift, multiplier in _ROUNDS:
            h = ops.bitwise_xor(h, ops.bitwise_right_shift(h, constant(shift)))
            if multiplier is not None:
                h = ops.bitwise_and(ops.mul(h, constant(multiplier)), constant(MASK32))
        return h

    @register_lowering(torch.ops.lpdt.dither_hash.default, type_promotion_kind=None)
    def _lower(seed: Any, shape: Sequence[Any], salt: int) -> Any:
        blocks = list(seed.get_size())
        load_seed = seed.make_loader()
        strides: list[Any] = []
        stride: Any = 1
        for size in reversed(shape):
            strides.insert(0, stride)
            stride = stride * size

        def inner_fn(index: Sequence[Any]) -> Any:
            s = ops.to_dtype(load_seed(index[: len(blocks)]), torch.int64)
            key = mix(ops.bitwise_and(ops.add(s, constant(salted(salt))), constant(MASK32)))
            flat = sum((i * st for i, st in zip(index[len(blocks) :], strides)), sympy.Integer(0))
            h = ops.bitwise_and(ops.add(ops.index_expr(flat, torch.int64), key), constant(MASK32))
            h = ops.bitwise_and(ops.mul(h, constant(GOLDEN)), constant(MASK32))
            return ops.bitwise_right_shift(mix(h), constant(16))

        return Pointwise.create(
            device=seed.get_device(),
            dtype=torch.int64,
            inner_fn=inner_fn,
            ranges=[*blocks, *shape],
        )

    _lowering_registered = True
