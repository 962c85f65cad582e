"""Gradient bifurcation over node-stacked tensors: the arithmetic of the 8-bit conv / linear
layers' forward and backward, written once for ``[n, ...]`` tensors (one row per node).

The node-by-node step runs it with n = 1 (``functions._BiprecConv``: ``x[None]``), where every
reshape below is a view and each operation is the one a plain layer runs (the same bits as
before this module existed); the batched step runs it with the held nodes stacked
(``vmap_ops``: the n replicas' convolutions become one grouped convolution, as functorch's own
batching rule makes them, and each node's output gradient is quantised with its own range and
noise seed: ``quantizers.quantize_minmax_nodes``).

Bifurcation (Banner et al.): the gradient passed to the previous layer is computed from the
quantised output gradient Q(g), the weight gradient from the fp32 g.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch.nn.grad import conv2d_input, conv2d_weight

from lpdt.layers.quant.quantizers import quantize_minmax_nodes

Grads = tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]


def _grouped(x: torch.Tensor) -> torch.Tensor:
    """``[n, B, C, H, W]`` as ``[B, n*C, H, W]`` (node-major channels; a view for n = 1)."""
    n, b, c = x.shape[:3]
    return x.transpose(0, 1).reshape(b, n * c, *x.shape[3:])


def _ungrouped(y: torch.Tensor, n: int) -> torch.Tensor:
    """``[B, n*O, H, W]`` back to ``[n, B, O, H, W]`` (a view)."""
    b, no = y.shape[:2]
    return y.view(b, n, no // n, *y.shape[2:]).transpose(0, 1)


def conv2d_nodes(
    x: torch.Tensor,
    w: torch.Tensor,
    bias: torch.Tensor | None,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    groups: int,
) -> torch.Tensor:
    """Each node's ``F.conv2d(x[k], w[k], bias[k])`` as one grouped convolution: ``[n, B, O, ...]``."""
    n = x.shape[0]
    b = None if bias is None else bias.reshape(-1)
    w2 = w.reshape(n * w.shape[1], *w.shape[2:])
    y = F.conv2d(_grouped(x), w2, b, stride, padding, dilation, n * groups)
    return _ungrouped(y, n)


def conv2d_nodes_backward(
    x: torch.Tensor,
    w: torch.Tensor,
    g: torch.Tensor,
    needs: tuple[bool, bool, bool],
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    groups: int,
    grad_bits: int,
    seeds: torch.Tensor | None,
    salt: int,
) -> Grads:
    """The gradients of ``conv2d_nodes`` for (x, w, bias) where ``needs`` asks: x's from each
    node's quantised output gradient, w's and bias's from the fp32 one."""
    n = x.shape[0]
    w2 = w.reshape(n * w.shape[1], *w.shape[2:])
    gx = gw = gb = None
    if needs[0]:
        gq = _grouped(quantize_minmax_nodes(g, grad_bits, seeds, salt))
        gx = conv2d_input(_grouped(x).shape, w2, gq, stride, padding, dilation, n * groups)
        gx = _ungrouped(gx, n)
    if needs[1]:
        gw = conv2d_weight(
            _grouped(x), w2.shape, _grouped(g), stride, padding, dilation, n * groups
        )
        gw = gw.view(w.shape)
    if needs[2]:
        gb = g.sum((1, 3, 4))
    return gx, gw, gb


def _matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a[k] @ b[k]`` for every node; for one node the 2-D product itself (the bits of the
    node-by-node step: a batched product of one may sum in another order)."""
    return (a[0] @ b[0]).unsqueeze(0) if a.shape[0] == 1 else a @ b


def linear_nodes(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """Each node's ``F.linear(x[k], w[k], bias[k])``: ``[n, ..., out]``."""
    n = x.shape[0]
    if n == 1:
        return F.linear(x[0], w[0], None if bias is None else bias[0]).unsqueeze(0)
    y = x.reshape(n, -1, x.shape[-1]) @ w.transpose(1, 2)
    if bias is not None:
        y = y + bias[:, None, :]
    return y.view(*x.shape[:-1], w.shape[1])


def linear_nodes_backward(
    x: torch.Tensor,
    w: torch.Tensor,
    g: torch.Tensor,
    needs: tuple[bool, bool, bool],
    grad_bits: int,
    seeds: torch.Tensor | None,
    salt: int,
) -> Grads:
    """The gradients of ``linear_nodes`` (bifurcated as ``conv2d_nodes_backward``)."""
    n = x.shape[0]
    g2 = g.reshape(n, -1, g.shape[-1])
    gx = gw = gb = None
    if needs[0]:
        gq = quantize_minmax_nodes(g, grad_bits, seeds, salt)
        gx = _matmul(gq.reshape(g2.shape), w).view(x.shape)
    if needs[1]:
        gw = _matmul(g2.transpose(1, 2), x.reshape(n, -1, x.shape[-1]))
    if needs[2]:
        gb = g2.sum(1)
    return gx, gw, gb
