"""Autograd functions of the 8-bit scheme: straight-through quantisers and gradient bifurcation.

- ``ste``/``ste_minmax``/``ste_minmax_each``: quantise in the forward, identity in the backward
  (no clipping mask), written as plain tensor arithmetic (``straight_through``), not as an
  autograd.Function;
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

from lpdt.layers.formulas import compiled_for_a_gpu, tracing
from lpdt.layers.quant import vmap_ops
from lpdt.layers.quant.nodes import Grads
from lpdt.layers.quant.quantizers import (
    draw_seed,
    is_vmapped,
    quantize,
    quantize_minmax,
    row_ranges,
    step_seed,
)


def straight_through(x: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """``q`` in the forward, the identity from ``x`` in the backward (``q`` carries no gradient).

    ``(x - x.detach()) + q`` is ``q`` exactly: ``x - x`` is +0 for every finite ``x`` and
    ``0 + q`` is ``q`` (a -0.0 in ``q`` becomes +0.0, the same value), and its gradient with
    respect to ``x`` is the incoming gradient, unscaled. It is plain tensor arithmetic rather than
    an ``autograd.Function``, so ``torch.compile`` traces it like any other operation instead of
    speculating a forward and a backward per call (docs/engine.md, "Compiled steps").
    """
    # Eagerly, a tensor without a gradient skips the two operations. Inside a compiled graph
    # ``x.requires_grad`` is not to be trusted (under ``torch.func.grad`` dynamo traced it as
    # False, and the weights' gradients came out all zeros), nor under vmap (a node's view of a
    # stacked tensor reports no gradient; autograd tracks the stacked one outside the vmap):
    # there the arithmetic is always written (inductor fuses it; the value is ``q`` either way).
    if not torch.is_grad_enabled():
        return q
    if not (tracing() or is_vmapped() or x.requires_grad):
        return q
    return (x - x.detach()) + q


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
    if not tracing() or is_vmapped():
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


def ste_minmax_each(xs: list[torch.Tensor], bits: int) -> list[torch.Tensor]:
    """``[ste_minmax(x, bits) for x in xs]`` for tensors of one shape: each over its own
    [min, max], the same values and gradients.

    Compiled for a GPU (``compiled_for_a_gpu``), the tensors are stacked and quantised by rows:
    one reduction and one rounding for all of them, which inductor generates as one kernel
    where each tensor alone was one or two (a range kernel, its rounding fused into a reader),
    and the backward's recomputation likewise: the compiled 8-bit ResNet-20 x 8 round on a GPU's
    count 752 -> 709 kernels (docs/notebook/2026-11-29-stacked-parameter-quantisers.md). On the
    CPU each is quantised alone: there the stacked form generated more loop nests (924 -> 936
    for the node step) and no faster step (one process, alternating blocks: 0.93-1.03x).
    """
    if bits >= 32:
        return list(xs)
    if not compiled_for_a_gpu(xs[0]):
        return [ste_minmax(x, bits) for x in xs]
    stacked = torch.stack(xs)
    rows = stacked.detach().reshape(len(xs), -1)
    lo, hi = row_ranges(rows, 1, keepdim=True)
    q = quantize(rows, lo, hi, bits, stochastic=False).view(stacked.shape)
    return list(straight_through(stacked, q).unbind(0))


def quantize_grad(x: torch.Tensor, bits: int, salt: int = 0) -> torch.Tensor:
    """Identity whose backward quantises the incoming gradient (stochastic, per tensor)."""
    if bits >= 32 or not torch.is_grad_enabled():
        return x
    if is_vmapped():
        return vmap_ops.quant_grad(x, bits, _seed(x), salt)
    return _QuantGrad.apply(x, bits, step_seed(), salt)


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
    """``F.conv2d`` with gradient bifurcation (the plain conv at 32 gradient bits, and without
    a gradient: the forward is the same)."""
    if grad_bits >= 32 or not torch.is_grad_enabled():
        return F.conv2d(xq, wq, bias, stride, padding, dilation, groups)
    if is_vmapped():
        return vmap_ops.biprec_conv2d(
            xq, wq, bias, stride, padding, dilation, groups, grad_bits, _seed(xq), salt
        )
    return _BiprecConv.apply(
        xq, wq, bias, stride, padding, dilation, groups, grad_bits, step_seed(), salt
    )


def biprec_linear(
    xq: torch.Tensor, wq: torch.Tensor, bias: torch.Tensor | None, grad_bits: int, salt: int = 0
) -> torch.Tensor:
    """``F.linear`` with gradient bifurcation (the plain linear at 32 gradient bits, and without
    a gradient)."""
    if grad_bits >= 32 or not torch.is_grad_enabled():
        return F.linear(xq, wq, bias)
    if is_vmapped():
        return vmap_ops.biprec_linear(xq, wq, bias, grad_bits, _seed(xq), salt)
    return _BiprecLinear.apply(xq, wq, bias, grad_bits, step_seed(), salt)


def _seed(x: torch.Tensor) -> torch.Tensor:
    """The step's noise seed (``quantizers.step_seed``; the batched step always sets one), or
    a fresh one: the operators under vmap take a tensor. (The Functions take None for a fresh
    draw in the backward, as ``quantize_minmax`` makes it.)"""
    seed = step_seed()
    return draw_seed(x.device) if seed is None else seed


# The node-by-node step's gradient side: autograd Functions over the node-stacked arithmetic of
# ``nodes`` with one node (under vmap the layers call ``vmap_ops``' operators instead: dynamo
# cannot vmap over an autograd.Function). ``forward`` is kept apart from ``setup_context``, the
# form torch.func asks of a Function.
class _QuantGrad(torch.autograd.Function):
    @staticmethod
    def forward(x: torch.Tensor, bits: int, seed: torch.Tensor, salt: int) -> torch.Tensor:  # noqa: D102
        return x.view_as(x)

    setup_context = staticmethod(vmap_ops.quant_grad_setup)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor | None, ...]:  # noqa: D102
        (seed,) = ctx.saved_tensors  # one node: quantize_minmax_nodes' arithmetic for n = 1
        return quantize_minmax(g, ctx.bits, True, seed, ctx.salt), None, None, None


class _BiprecConv(torch.autograd.Function):
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

    setup_context = staticmethod(vmap_ops.conv_setup)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor | None, ...]:  # noqa: D102
        xq, wq, seed = ctx.saved_tensors
        grads = vmap_ops.conv_grads(ctx, xq[None], wq[None], g[None], seed)
        return (*_one_node(grads), None, None, None, None, None, None, None)


class _BiprecLinear(torch.autograd.Function):
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

    setup_context = staticmethod(vmap_ops.linear_setup)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor | None, ...]:  # noqa: D102
        xq, wq, seed = ctx.saved_tensors
        grads = vmap_ops.linear_grads(ctx, xq[None], wq[None], g[None], seed)
        return (*_one_node(grads), None, None, None)


def _one_node(grads: Grads) -> Grads:
    """The one node's gradients of node-stacked ones (n = 1)."""
    gx, gw, gb = (None if t is None else t[0] for t in grads)
    return gx, gw, gb
