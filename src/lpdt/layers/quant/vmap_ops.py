"""The 8-bit layers' gradient side as custom operators, for the batched step (``torch.func.vmap``).

Why operators and not ``autograd.Function``: dynamo refuses vmap over an autograd.Function
("You tried to vmap over ApplyTemplate, but it does not have vmap support": the generated vmap
rule is lost when dynamo wraps the Function, pytorch#129845), so the batched 8-bit step could
not compile. A ``torch.library.custom_op`` with a vmap rule compiles (``fullgraph=True``, on
torch 2.11 and 2.14.1).

Two operators per layer:

- the *per-node* operator (``lpdt::quant_grad``, ``lpdt::biprec_conv2d``, ``lpdt::biprec_linear``)
  is what a layer calls under vmap; it has only a vmap rule (and a plain forward, but no
  autograd formula: outside vmap a backward through it is an error), which stacks its operands
  on a leading node axis and calls
- the *node-stacked* operator (``..._nodes``), which holds the autograd formula: the backward of
  the bifurcated conv / linear (``nodes``) and of the gradient quantiser, each node with its own
  range and noise seed.

So the batched step takes its gradient with ordinary autograd from outside the vmap
(``lpdt.engine.batched``): ``torch.func.grad`` inside a vmap cannot run a custom operator's
autograd formula (it asks for an autograd.Function), and an autograd.Function cannot be called
inside a vmap rule (no kernel for the vmap mode). Outside vmap the layers call the sequential
autograd Functions of ``functions``, which run the same ``nodes`` arithmetic with n = 1.

The operators' forward is opaque to inductor for the convolution and the linear layer: the extern
kernel they run anyway. The gradient quantiser's forward is a copy (an operator's output may not
alias its input), which inductor lowers as a copy fused into the kernels around it
(``lowering.register_copy``): as the operator's own, it was a kernel of its own on a GPU (30 in a
batched 8-bit ResNet-20 forward), which also kept the next activation quantiser's range out of
the kernel that makes its operand (docs/notebook/2026-11-30-fused-gradient-quantiser-copy.md).
"""

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from lpdt.layers.quant import lowering
from lpdt.layers.quant.nodes import (
    Grads,
    conv2d_nodes,
    conv2d_nodes_backward,
    linear_nodes,
    linear_nodes_backward,
)
from lpdt.layers.quant.operators import stacked
from lpdt.layers.quant.quantizers import quantize_minmax_nodes


def _needs(ctx: Any) -> tuple[bool, bool, bool]:
    """Which of (x, w, bias) a conv / linear backward must give a gradient (bias: if it has one)."""
    need = ctx.needs_input_grad
    return need[0], need[1], ctx.has_bias and need[2]


# -- the gradient quantiser: identity forward, quantised gradient backward -----------------------


def _quant_grad_forward(x: torch.Tensor, bits: int, seed: torch.Tensor, salt: int) -> torch.Tensor:
    return x.clone()  # an operator's output may not alias its input


# The gradient quantiser of node-stacked ``x``: the identity forward (a copy); the backward
# quantises each node's gradient ``g[k]`` with ``seeds[k]``.
quant_grad_nodes = torch.library.custom_op(
    "lpdt::quant_grad_nodes", _quant_grad_forward, mutates_args=()
)


@quant_grad_nodes.register_fake
def _quant_grad_nodes_fake(
    x: torch.Tensor, bits: int, seed: torch.Tensor, salt: int
) -> torch.Tensor:
    # traced now: inductor may lower the graph next, and fuse the copy
    lowering.register_copy(torch.ops.lpdt.quant_grad_nodes.default)
    return _quant_grad_forward(x, bits, seed, salt)


def quant_grad_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    """What the gradient quantiser's backward keeps (also ``functions._QuantGrad``'s)."""
    _, ctx.bits, seeds, ctx.salt = inputs
    ctx.save_for_backward(seeds)


def _quant_grad_backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
    (seeds,) = ctx.saved_tensors
    return quantize_minmax_nodes(g, ctx.bits, seeds, ctx.salt), None, None, None


quant_grad_nodes.register_autograd(_quant_grad_backward, setup_context=quant_grad_setup)


# One node's gradient quantiser under vmap: its vmap rule calls ``quant_grad_nodes``, which holds
# the backward (outside vmap an operator without an autograd formula: backward through it is an
# error, and the layers call ``functions`` there instead).
quant_grad = torch.library.custom_op("lpdt::quant_grad", _quant_grad_forward, mutates_args=())
quant_grad.register_fake(_quant_grad_forward)


def _quant_grad_vmap(
    info: Any, in_dims: tuple[Any, ...], x: torch.Tensor, bits: int, seed: torch.Tensor, salt: int
) -> tuple[torch.Tensor, int]:
    n = info.batch_size
    out = quant_grad_nodes(stacked(x, in_dims[0], n), bits, stacked(seed, in_dims[2], n), salt)
    return out, 0


quant_grad.register_vmap(_quant_grad_vmap)


# -- the convolution with gradient bifurcation --------------------------------------------------


def _conv2d_nodes(
    x: torch.Tensor,
    w: torch.Tensor,
    bias: torch.Tensor | None,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    groups: int,
    grad_bits: int,
    seeds: torch.Tensor,
    salt: int,
) -> torch.Tensor:
    return conv2d_nodes(x, w, bias, stride, padding, dilation, groups)


# Each node's convolution (``nodes.conv2d_nodes``), whose backward bifurcates.
biprec_conv2d_nodes = torch.library.custom_op(
    "lpdt::biprec_conv2d_nodes", _conv2d_nodes, mutates_args=()
)
biprec_conv2d_nodes.register_fake(_conv2d_nodes)


def conv_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    """What the bifurcated convolution's backward keeps (also ``functions._BiprecConv``'s)."""
    x, w, bias, stride, padding, dilation, groups, grad_bits, seeds, salt = inputs
    ctx.save_for_backward(x, w, seeds)
    ctx.conf = (stride, padding, dilation, groups, grad_bits, salt)
    ctx.has_bias = bias is not None


def conv_grads(
    ctx: Any, x: torch.Tensor, w: torch.Tensor, g: torch.Tensor, seeds: torch.Tensor | None
) -> Grads:
    """The gradients of (x, w, bias) the backward is asked for, from node-stacked tensors."""
    stride, padding, dilation, groups, grad_bits, salt = ctx.conf
    return conv2d_nodes_backward(
        x, w, g, _needs(ctx), stride, padding, dilation, groups, grad_bits, seeds, salt
    )


def _conv_backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
    x, w, seeds = ctx.saved_tensors
    return (*conv_grads(ctx, x, w, g, seeds), None, None, None, None, None, None, None)


biprec_conv2d_nodes.register_autograd(_conv_backward, setup_context=conv_setup)


def _conv2d(
    x: torch.Tensor,
    w: torch.Tensor,
    bias: torch.Tensor | None,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    groups: int,
    grad_bits: int,
    seed: torch.Tensor,
    salt: int,
) -> torch.Tensor:
    return F.conv2d(x, w, bias, stride, padding, dilation, groups)


# One node's bifurcated convolution under vmap (its rule calls ``biprec_conv2d_nodes``).
biprec_conv2d = torch.library.custom_op("lpdt::biprec_conv2d", _conv2d, mutates_args=())
biprec_conv2d.register_fake(_conv2d)


def _biprec_conv2d_vmap(
    info: Any,
    in_dims: tuple[Any, ...],
    x: torch.Tensor,
    w: torch.Tensor,
    bias: torch.Tensor | None,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    groups: int,
    grad_bits: int,
    seed: torch.Tensor,
    salt: int,
) -> tuple[torch.Tensor, int]:
    n = info.batch_size
    b = None if bias is None else stacked(bias, in_dims[2], n)
    out = biprec_conv2d_nodes(
        stacked(x, in_dims[0], n),
        stacked(w, in_dims[1], n),
        b,
        stride,
        padding,
        dilation,
        groups,
        grad_bits,
        stacked(seed, in_dims[8], n),
        salt,
    )
    return out, 0


biprec_conv2d.register_vmap(_biprec_conv2d_vmap)


# -- the linear layer with gradient bifurcation -------------------------------------------------


def _linear_nodes(
    x: torch.Tensor,
    w: torch.Tensor,
    bias: torch.Tensor | None,
    grad_bits: int,
    seeds: torch.Tensor,
    salt: int,
) -> torch.Tensor:
    return linear_nodes(x, w, bias)


# Each node's linear layer (``nodes.linear_nodes``), whose backward bifurcates.
biprec_linear_nodes = torch.library.custom_op(
    "lpdt::biprec_linear_nodes", _linear_nodes, mutates_args=()
)
biprec_linear_nodes.register_fake(_linear_nodes)


def linear_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    """What the bifurcated linear layer's backward keeps (also ``functions._BiprecLinear``'s)."""
    x, w, bias, ctx.grad_bits, seeds, ctx.salt = inputs
    ctx.save_for_backward(x, w, seeds)
    ctx.has_bias = bias is not None


def linear_grads(
    ctx: Any, x: torch.Tensor, w: torch.Tensor, g: torch.Tensor, seeds: torch.Tensor | None
) -> Grads:
    """The gradients of (x, w, bias) the backward is asked for, from node-stacked tensors."""
    return linear_nodes_backward(x, w, g, _needs(ctx), ctx.grad_bits, seeds, ctx.salt)


def _linear_backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
    x, w, seeds = ctx.saved_tensors
    return (*linear_grads(ctx, x, w, g, seeds), None, None, None)


biprec_linear_nodes.register_autograd(_linear_backward, setup_context=linear_setup)


def _linear(
    x: torch.Tensor,
    w: torch.Tensor,
    bias: torch.Tensor | None,
    grad_bits: int,
    seed: torch.Tensor,
    salt: int,
) -> torch.Tensor:
    return F.linear(x, w, bias)


# One node's bifurcated linear layer under vmap (its rule calls ``biprec_linear_nodes``).
biprec_linear = torch.library.custom_op("lpdt::biprec_linear", _linear, mutates_args=())
biprec_linear.register_fake(_linear)


def _biprec_linear_vmap(
    info: Any,
    in_dims: tuple[Any, ...],
    x: torch.Tensor,
    w: torch.Tensor,
    bias: torch.Tensor | None,
    grad_bits: int,
    seed: torch.Tensor,
    salt: int,
) -> tuple[torch.Tensor, int]:
    n = info.batch_size
    b = None if bias is None else stacked(bias, in_dims[2], n)
    out = biprec_linear_nodes(
        stacked(x, in_dims[0], n),
        stacked(w, in_dims[1], n),
        b,
        grad_bits,
        stacked(seed, in_dims[4], n),
        salt,
    )
    return out, 0


biprec_linear.register_vmap(_biprec_linear_vmap)
