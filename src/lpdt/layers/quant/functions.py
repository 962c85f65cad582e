"""Autograd functions of the 8-bit scheme: straight-through quantisers and gradient bifurcation.

- ``ste``/``ste_minmax``: quantise in the forward, identity in the backward (no clipping mask),
  written as plain tensor arithmetic (``straight_through``), not as an autograd.Function;
- ``quantize_grad``: identity in the forward, the backward quantises the gradient (per tensor
  [g.min, g.max], stochastic rounding): the reference's ``quantize_grad``;
- the stochastic ones take the noise ``seed`` (the step's, ``quantizers.step_seed()``, or None
  for a fresh draw) and their call site's ``salt``; a backward uses the seed of its forward;
- ``biprec_conv2d``/``biprec_linear`` (gradient bifurcation, Banner et al.): the layer runs once
  in the forward; in the backward the gradient passed to the previous layer is computed from the
  quantised output gradient Q(g) and the weight gradient from the fp32 g. The backward uses the
  public ``torch.nn.grad`` helpers, so the whole step traces under ``torch.compile``.

At 32 bits every function is the identity / the plain layer (no autograd node added).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.grad import conv2d_input, conv2d_weight

from lpdt.layers.quant.quantizers import is_vmapped, quantize, quantize_minmax, step_seed


def straight_through(x: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """``q`` in the forward, the identity from ``x`` in the backward (``q`` carries no gradient).

    ``(x - x.detach()) + q`` is ``q`` exactly: ``x - x`` is +0 for every finite ``x`` and
    ``0 + q`` is ``q`` (a -0.0 in ``q`` becomes +0.0, the same value), and its gradient with
    respect to ``x`` is the incoming gradient, unscaled. It is plain tensor arithmetic rather than
    an ``autograd.Function``, so ``torch.compile`` traces it like any other operation instead of
    speculating a forward and a backward per call (docs/engine.md, "Compiled steps").
    """
    # Eagerly, a tensor without a gradient skips the two operations. Inside a compiled graph
    # ``x.requires_grad`` is not to be trusted: under ``torch.func.grad`` (the batched step) dynamo
    # traces it as False, and the weights' gradients came out all zeros; there the arithmetic
    # is always written (inductor fuses it; the value is ``q`` either way).
    if not torch.is_grad_enabled() or (not torch.compiler.is_compiling() and not x.requires_grad):
        return q
    return (x - x.detach()) + q


# The Functions below keep ``forward`` apart from ``setup_context`` and let torch generate their
# vmap rule, so that the held nodes' step can run them under ``torch.func.vmap`` (batched nodes,
# ``lpdt.engine.batched``): each node's backward then quantises with its own range and seed.
class _QuantGrad(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x: torch.Tensor, bits: int, seed: torch.Tensor, salt: int) -> torch.Tensor:  # noqa: D102
        return x.view_as(x)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:  # noqa: D102
        _, ctx.bits, seed, ctx.salt = inputs
        ctx.save_for_backward(seed)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor | None, ...]:  # noqa: D102
        (seed,) = ctx.saved_tensors
        return quantize_minmax(g, ctx.bits, True, seed, ctx.salt), None, None, None


def stored(q: torch.Tensor) -> torch.Tensor:
    """``q`` itself; inside a compiled graph, an instruction to inductor to write ``q`` to memory.

    Without it inductor inlines a quantised activation (range, noise hash, rounding) into every
    kernel that reads it: Range-EvoNorm's chunk-range reduction recomputed it element by element,
    where the index hash made inductor give up vectorising the loop. Stored once, every reader
    loads it (compiled 8-bit ResNet-8 node step at the claims' shape, two runs each: 1.48 / 1.50x
    -> 1.44 / 1.47x the fp32 one; docs/engine.md). The values are the same; only where they are
    computed changes.

    ``prims.inductor_force_stride_order`` is inductor's own operation for "this tensor must exist
    in memory with these strides" (eagerly a no-op when they already match); ``lpdt.engine.steps``
    imports ``torch._inductor.inductor_prims``, which registers it, before compiling.
    """
    # Under vmap (the batched step) ``q.stride()`` is one node's view, not the stacked tensor's
    # layout, and forcing it failed while tracing (a storage out of bounds): left to inductor.
    if not torch.compiler.is_compiling() or is_vmapped():
        return q
    return torch.ops.prims.inductor_force_stride_order(q, q.stride())


def ste(
    x: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor, bits: int, stochastic: bool, salt: int = 0
) -> torch.Tensor:
    """Quantised ``x`` over ``[lo, hi]`` whose gradient passes straight through (activations;
    the quantised values are ``stored`` once in a compiled graph)."""
    if bits >= 32:
        return x
    seed = step_seed() if stochastic else None
    q = quantize(x.detach(), lo.detach(), hi.detach(), bits, stochastic, seed, salt)
    return straight_through(x, stored(q))


def ste_minmax(x: torch.Tensor, bits: int) -> torch.Tensor:
    """``x`` quantised over its own [min, max] (nearest), straight-through gradient."""
    return x if bits >= 32 else straight_through(x, quantize_minmax(x, bits))


def quantize_grad(x: torch.Tensor, bits: int, salt: int = 0) -> torch.Tensor:
    """Identity whose backward quantises the incoming gradient (stochastic, per tensor)."""
    return x if bits >= 32 else _QuantGrad.apply(x, bits, step_seed(), salt)


class _BiprecConv(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(  # noqa: D102
        xq: torch.Tensor,
        wq: torch.Tensor,
        bias: torch.Tensor | None,
        stride: Any,
        padding: Any,
        dilation: Any,
        groups: int,
        grad_bits: int,
        seed: torch.Tensor,
        salt: int,
    ) -> torch.Tensor:
        return F.conv2d(xq, wq, bias, stride, padding, dilation, groups)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:  # noqa: D102
        xq, wq, bias, stride, padding, dilation, groups, grad_bits, seed, salt = inputs
        ctx.save_for_backward(xq, wq, seed)
        ctx.conf = (stride, padding, dilation, groups, grad_bits, bias is not None, salt)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor | None, ...]:  # noqa: D102
        xq, wq, seed = ctx.saved_tensors
        stride, padding, dilation, groups, grad_bits, has_bias, salt = ctx.conf
        gx = gw = gb = None
        if ctx.needs_input_grad[0]:
            gq = quantize_minmax(g, grad_bits, True, seed, salt)
            gx = conv2d_input(xq.shape, wq, gq, stride, padding, dilation, groups)
        if ctx.needs_input_grad[1]:
            gw = conv2d_weight(xq, wq.shape, g, stride, padding, dilation, groups)
        if has_bias and ctx.needs_input_grad[2]:
            gb = g.sum((0, 2, 3))
        return gx, gw, gb, None, None, None, None, None, None, None


class _BiprecLinear(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(  # noqa: D102
        xq: torch.Tensor,
        wq: torch.Tensor,
        bias: torch.Tensor | None,
        grad_bits: int,
        seed: torch.Tensor,
        salt: int,
    ) -> torch.Tensor:
        return F.linear(xq, wq, bias)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:  # noqa: D102
        xq, wq, bias, grad_bits, seed, salt = inputs
        ctx.save_for_backward(xq, wq, seed)
        ctx.grad_bits, ctx.has_bias, ctx.salt = grad_bits, bias is not None, salt

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor | None, ...]:  # noqa: D102
        xq, wq, seed = ctx.saved_tensors
        gx = gw = gb = None
        if ctx.needs_input_grad[0]:
            gx = quantize_minmax(g, ctx.grad_bits, True, seed, ctx.salt) @ wq
        g2 = g.reshape(-1, g.shape[-1])
        if ctx.needs_input_grad[1]:
            gw = g2.t() @ xq.reshape(-1, xq.shape[-1])
        if ctx.has_bias and ctx.needs_input_grad[2]:
            gb = g2.sum(0)
        return gx, gw, gb, None, None, None


def biprec_conv2d(
    xq: torch.Tensor,
    wq: torch.Tensor,
    bias: torch.Tensor | None,
    stride: Any,
    padding: Any,
    dilation: Any,
    groups: int,
    grad_bits: int,
    salt: int = 0,
) -> torch.Tensor:
    """``F.conv2d`` with gradient bifurcation (plain conv at 32 gradient bits)."""
    if grad_bits >= 32:
        return F.conv2d(xq, wq, bias, stride, padding, dilation, groups)
    return _BiprecConv.apply(
        xq, wq, bias, stride, padding, dilation, groups, grad_bits, step_seed(), salt
    )


def biprec_linear(
    xq: torch.Tensor, wq: torch.Tensor, bias: torch.Tensor | None, grad_bits: int, salt: int = 0
) -> torch.Tensor:
    """``F.linear`` with gradient bifurcation (plain linear at 32 gradient bits)."""
    if grad_bits >= 32:
        return F.linear(xq, wq, bias)
    return _BiprecLinear.apply(xq, wq, bias, grad_bits, step_seed(), salt)
