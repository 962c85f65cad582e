"""Inductor lowerings of the quantisers' operators: each operator becomes one pointwise expression.

Traced as tensor operations, one stochastic quantiser call is about 50 graph nodes (the noise
hash about 36 of them, the rounding about 15), and an 8-bit ResNet-20 step makes hundreds of
calls: inductor's lowering, fusion and code generation of those nodes were most of the 8-bit
step's compile time (docs/notebook/2026-11-28-8bit-compile-time.md). As one node per call they
lower in one go, and inductor still fuses each into the kernels around it.

- ``lpdt::dither_hash`` (``noise_hash``): the 16-bit noise levels, int64;
- ``lpdt::quantize_levels`` (``quantizers``): ``quantize``'s rounding to the levels over a range,
  with the noise when stochastic;
- ``lpdt::quant_grad_nodes`` (``vmap_ops``, the batched step's gradient quantiser): its
  forward, a copy of its operand, as that copy (``register_copy``).

Each expression performs the operations of the eager tensor code in the same order with the
same types, so that the bits are the same (``tests/layers/test_quant.py`` compares them).
``register`` is called by the operators' fake implementations, which run when a graph is
traced, so that an eager process never imports the compiler. ``torch._inductor.lowering`` is a
private API, checked on torch 2.11 and 2.14.1; without the lowerings inductor would call the
operators' eager implementations (the same bits, more kernels).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from lpdt.layers.quant.noise_hash import GOLDEN, MASK32, ROUNDS, salted
from lpdt.layers.quant.spec import MIN_STEP

_registered = False
_copies: set[Any] = set()


def _compiler() -> tuple[Any, Any, Any]:
    """Inductor's ``Pointwise``, ``register_lowering`` and ``ops``. The compiler is imported here
    and not at the top: an eager process never loads it. Outside the fake-tensor mode that
    called us, so that the import's own tensors are real."""
    from torch.utils._python_dispatch import _disable_current_modes

    with _disable_current_modes():
        from torch._inductor.ir import Pointwise
        from torch._inductor.lowering import register_lowering
        from torch._inductor.virtualized import ops
    return Pointwise, register_lowering, ops


def register_copy(op: Any) -> None:
    """Lower ``op``, an operator whose output is a copy of its first operand, as that copy: a
    pointwise read that inductor fuses into the kernels around it (once per process and op)."""
    if op in _copies:
        return
    pointwise, register_lowering, _ = _compiler()

    @register_lowering(op, type_promotion_kind=None)
    def _copy(x: Any, *_: Any) -> Any:
        return pointwise.create(
            device=x.get_device(),
            dtype=x.get_dtype(),
            inner_fn=x.make_loader(),
            ranges=list(x.get_size()),
        )

    _copies.add(op)


def register() -> None:
    """Teach inductor the quantisers' operators (once per process)."""
    global _registered
    if _registered:
        return
    import sympy  # type: ignore[import-untyped]

    Pointwise, register_lowering, ops = _compiler()

    def constant(value: int) -> Any:
        return ops.constant(value, torch.int64)

    def mix(h: Any) -> Any:
        for shift, multiplier in ROUNDS:
            h = ops.bitwise_xor(h, ops.bitwise_right_shift(h, constant(shift)))
            if multiplier is not None:
                h = ops.bitwise_and(ops.mul(h, constant(multiplier)), constant(MASK32))
        return h

    def hash_levels(
        load_seed: Callable[[Sequence[Any]], Any],
        blocks: int,
        shape: Sequence[Any],
        salt: int,
    ) -> Callable[[Sequence[Any]], Any]:
        """The noise level (int64, [0, 2^16)) at an index of ``[*seed blocks, *shape]``:
        ``operators.dither_hash``'s arithmetic."""
        strides: list[Any] = []
        stride: Any = 1
        for size in reversed(shape):
            strides.insert(0, stride)
            stride = stride * size

        def level(index: Sequence[Any]) -> Any:
            s = ops.to_dtype(load_seed(index[:blocks]), torch.int64)
            key = mix(ops.bitwise_and(ops.add(s, constant(salted(salt))), constant(MASK32)))
            flat = sum((i * st for i, st in zip(index[blocks:], strides)), sympy.Integer(0))
            h = ops.bitwise_and(ops.add(ops.index_expr(flat, torch.int64), key), constant(MASK32))
            h = ops.bitwise_and(ops.mul(h, constant(GOLDEN)), constant(MASK32))
            return ops.bitwise_right_shift(mix(h), constant(16))

        return level

    @register_lowering(torch.ops.lpdt.dither_hash.default, type_promotion_kind=None)
    def _dither_hash(seed: Any, shape: Sequence[Any], salt: int) -> Any:
        blocks = list(seed.get_size())
        level = hash_levels(seed.make_loader(), len(blocks), shape, salt)
        return Pointwise.create(
            device=seed.get_device(),
            dtype=torch.int64,
            inner_fn=level,
            ranges=[*blocks, *shape],
        )

    @register_lowering(torch.ops.lpdt.quantize_levels.default, type_promotion_kind=None)
    def _quantize_levels(
        x: Any, lo: Any, hi: Any, seed: Any | None, levels: float, salt: int
    ) -> Any:
        size = list(x.get_size())
        dtype = x.get_dtype()
        load_x, load_lo, load_hi = x.make_loader(), lo.make_loader(), hi.make_loader()
        if seed is not None:
            blocks = len(seed.get_size())
            level = hash_levels(seed.make_loader(), blocks, size[blocks:], salt)

        def value(c: float) -> Any:
            return ops.constant(c, dtype)

        def inner_fn(index: Sequence[Any]) -> Any:
            # operators.to_levels' tensor operations, in order
            low = load_lo(index)
            step = ops.maximum(
                ops.truediv(ops.sub(load_hi(index), low), value(levels)), value(MIN_STEP)
            )
            q = ops.truediv(ops.sub(load_x(index), low), step)
            if seed is not None:  # dither: (level + 0.5) * 2^-16 - 0.5
                u = ops.add(ops.to_dtype(level(index), dtype), value(0.5))
                q = ops.add(q, ops.sub(ops.mul(u, value(2.0**-16)), value(0.5)))
            q = ops.minimum(ops.maximum(q, value(0.0)), value(levels))
            return ops.add(ops.mul(ops.round(q), step), low)

        return Pointwise.create(device=x.get_device(), dtype=dtype, inner_fn=inner_fn, ranges=size)

    _registered = True
