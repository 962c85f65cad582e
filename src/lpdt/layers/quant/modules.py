"""8-bit modules: each fills the slot of one full-precision module (reference ``QConv2d`` etc.).

Scheme (Banner et al. as in the authors' code; docs/int8.md):

- weights (and biases, v, gamma, beta, the norm scale): per-tensor [min, max], round to nearest,
  quantised inside the module's own forward (``torch.compile`` fuses them into the step);
- input activations of every conv / linear / norm / residual-add operand: range = batch mean of
  the per-sample min and max in training, a running range in evaluation (r <- 0.1 r + 0.9 batch);
  rounding stochastic by default (the authors' code also rounds stochastically at test time) or
  nearest (``precision.act_rounding``);
- gradient bifurcation for conv / linear, quantised output gradients for norms and residual adds;
- straight-through estimator without clipping mask for every quantiser.

Every module that rounds stochastically has a ``noise_salt`` (an int, 0 when built; the index of
the module in ``model.modules()`` after ``convert_to_int8``): the noise of one step is a hash of
(the step's seed, the salt, the element index), so the call sites of a step draw independent
noise, and eager and compiled steps draw the same (``quantizers``).
"""

from __future__ import annotations

from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from lpdt.layers.norms import (
    RANGE_CHUNKS,
    RANGE_EPS,
    RANGE_ESTIMATORS,
    check_groups,
    chunked_mean_range,
    range_constant_chunked,
    range_constant_paper,
    range_scale,
    scale_affine,
)
from lpdt.layers.quant.functions import (
    biprec_conv2d,
    biprec_linear,
    quantize_grad,
    ste,
    ste_minmax,
    ste_minmax_each,
)
from lpdt.layers.quant.quantizers import batch_range, is_vmapped
from lpdt.layers.quant.spec import DEFAULT_SPEC, RANGE_MOMENTUM, QuantSpec


def qparam(module: nn.Module, name: str) -> torch.Tensor | None:
    """Parameter ``name`` of a quantised module, quantised to ``spec.weight_bits`` (own range);
    None where the module has none (a convolution without bias)."""
    p = getattr(module, name)
    return None if p is None else qweight(module, name)


def qweight(module: nn.Module, name: str) -> torch.Tensor:
    """Parameter ``name``, which the module always has, quantised as ``qparam`` does."""
    spec = cast(QuantSpec, module.spec)  # every quantised module holds its QuantSpec
    return ste_minmax(getattr(module, name), spec.weight_bits)


def qweights(module: nn.Module, *names: str) -> list[torch.Tensor]:
    """Parameters ``names``, which the module always has, all of one shape, each quantised as
    ``qweight`` does (together: ``ste_minmax_each``)."""
    spec = cast(QuantSpec, module.spec)
    return ste_minmax_each([getattr(module, name) for name in names], spec.weight_bits)


def update_running(
    running: torch.Tensor, batch: torch.Tensor, momentum: float = RANGE_MOMENTUM
) -> None:
    """``running <- lerp(running, batch, momentum)`` in place (the buffer may be a view of the
    engine's flat tensor). Under vmap (the batched step) out of place and copied back: vmap has no
    batching rule for an in-place lerp (it would loop over the nodes); the same values."""
    if is_vmapped():
        running.copy_(torch.lerp(running, batch, momentum))
    else:
        running.lerp_(batch, momentum)


class QuantMeasure(nn.Module):
    """Input-activation quantiser with a running range (reference ``QuantMeasure``).

    Training: range = batch mean of per-sample min / max; the running range is updated in place,
    ``r <- 0.1 r + 0.9 batch`` (in place because the engine turns these buffers into views of its
    flat gossip tensor). Eval: the running range. Buffers ``running_min``/``running_max`` (shape
    [1]) are listed in ``gossip_buffers`` when the ranges travel with the model.
    """

    running_min: torch.Tensor  # buffers (register_buffer), declared for the type checker
    running_max: torch.Tensor

    def __init__(self, bits: int = 8, stochastic: bool = True, gossip: bool = True) -> None:
        super().__init__()
        self.bits, self.stochastic = bits, stochastic
        self.register_buffer("running_min", torch.zeros(1))
        self.register_buffer("running_max", torch.zeros(1))
        self.gossip_buffers: tuple[str, ...] = ("running_min", "running_max") if gossip else ()
        self.noise_salt = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.bits >= 32:
            return x
        if self.training:
            lo, hi = batch_range(x)
            with torch.no_grad():
                update_running(self.running_min, lo)
                update_running(self.running_max, hi)
        else:
            lo, hi = self.running_min, self.running_max
        return ste(x, lo, hi, self.bits, self.stochastic, self.noise_salt)

    def extra_repr(self) -> str:
        return f"bits={self.bits}, stochastic={self.stochastic}, gossip={bool(self.gossip_buffers)}"


class QConv2d(nn.Conv2d):
    """Conv2d with quantised input and weights and gradient bifurcation (reference ``QConv2d``)."""

    def __init__(self, *args: Any, spec: QuantSpec = DEFAULT_SPEC, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.padding_mode != "zeros" or isinstance(self.padding, str):
            raise ValueError("QConv2d supports numeric zero padding only")
        self.spec, self.noise_salt = spec, 0
        self.quantize_input = QuantMeasure(spec.act_bits, spec.act_stochastic, spec.gossip_ranges)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return biprec_conv2d(
            self.quantize_input(x),
            qweight(self, "weight"),
            qparam(self, "bias"),
            self.stride,
            self.padding,
            self.dilation,
            self.groups,
            self.spec.grad_bits,
            self.noise_salt,
        )


class QLinear(nn.Linear):
    """Linear with quantised input and weights and gradient bifurcation (reference ``QLinear``)."""

    def __init__(self, *args: Any, spec: QuantSpec = DEFAULT_SPEC, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.spec, self.noise_salt = spec, 0
        self.quantize_input = QuantMeasure(spec.act_bits, spec.act_stochastic, spec.gossip_ranges)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return biprec_linear(
            self.quantize_input(x),
            qweight(self, "weight"),
            qparam(self, "bias"),
            self.spec.grad_bits,
            self.noise_salt,
        )


class QAdd(nn.Module):
    """Quantised residual addition (reference ``Qsum``): Q(a) + Q(b), gradient quantised."""

    def __init__(self, spec: QuantSpec = DEFAULT_SPEC) -> None:
        super().__init__()
        self.spec, self.noise_salt = spec, 0
        self.quantize_a = QuantMeasure(spec.act_bits, spec.act_stochastic, spec.gossip_ranges)
        self.quantize_b = QuantMeasure(spec.act_bits, spec.act_stochastic, spec.gossip_ranges)

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        out = self.quantize_a(a) + self.quantize_b(b)
        return quantize_grad(out, self.spec.grad_bits, self.noise_salt)


class QRangeEvoNorm(nn.Module):
    """8-bit Range-EvoNorm (reference ``RangeEN``); carries its hard-sigmoid gate.

    x <- Q_act(x); n = x * hardsigmoid(Q(v) x); s = 1 / (const * range + eps) per (sample, group),
    s <- Q(s) (per tensor, straight-through, the gradient flows through the range into x);
    out = n * s * Q(gamma) + Q(beta); the output gradient is quantised. ``estimator="chunked"``
    (default): the reference's 16-chunk mean range with kappa(S); ``"paper"``: max - min over the
    group with C(c/g) = 1/sqrt(2 ln(c/g)) (paper eq. 5).
    """

    norm_kind = "rangeen"
    act_kind = "hardsigmoid"
    has_act = True

    def __init__(
        self,
        channels: int,
        groups: int = 8,
        estimator: str = "chunked",
        spec: QuantSpec = DEFAULT_SPEC,
        chunks: int = RANGE_CHUNKS,
        eps: float = RANGE_EPS,
    ) -> None:
        super().__init__()
        check_groups(channels, groups, "Range-EvoNorm")
        if estimator not in RANGE_ESTIMATORS:
            raise ValueError(f"unknown range estimator {estimator!r}; allowed: chunked, paper")
        if estimator == "paper":
            range_constant_paper(channels // groups)
        self.channels, self.groups, self.estimator = channels, groups, estimator
        self.chunks, self.eps, self.spec, self.noise_salt = chunks, eps, spec, 0
        self.weight = nn.Parameter(torch.ones(1, channels, 1, 1))
        self.bias = nn.Parameter(torch.zeros(1, channels, 1, 1))
        self.v = nn.Parameter(torch.ones(1, channels, 1, 1))
        self.quantize_input = QuantMeasure(spec.act_bits, spec.act_stochastic, spec.gossip_ranges)

    def scale(self, x: torch.Tensor) -> torch.Tensor:
        """1 / (const * range + eps) per (sample, group): ``[B, G]`` (differentiable)."""
        return range_scale(x, self.groups, self.estimator, self.chunks, self.eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.quantize_input(x)
        v, weight, bias = qweights(self, "v", "weight", "bias")
        n = x * F.hardsigmoid(x * v)
        s = ste_minmax(self.scale(x), self.spec.weight_bits)
        out = scale_affine(n, s, weight, bias)
        return quantize_grad(out, self.spec.grad_bits, self.noise_salt)

    def extra_repr(self) -> str:
        return f"{self.channels}, groups={self.groups}, estimator={self.estimator}, eps={self.eps}"


class QRangeBatchNormAct2d(nn.Module):
    """8-bit Range-BatchNorm (reference ``RangeBN``) followed by an optional ReLU.

    x <- Q_act(x); training: per-channel batch mean and s = 1/(kappa(S) * mean chunk range + eps)
    over the channel's B*H*W values in 16 chunks; running statistics (local buffers) follow the
    reference's rule r <- 0.1 r + 0.9 batch; eval uses them. out = (x - mu) Q(s) Q(gamma) + Q(beta),
    output gradient quantised, then the ReLU (the reference's RangeBN has none; the paper's
    "Range BN + ReLU" rows count one).
    """

    norm_kind = "rangebn"
    running_mean: torch.Tensor  # buffers (register_buffer), declared for the type checker
    running_scale: torch.Tensor

    def __init__(
        self,
        channels: int,
        act: bool = True,
        spec: QuantSpec = DEFAULT_SPEC,
        momentum: float = RANGE_MOMENTUM,
        chunks: int = RANGE_CHUNKS,
        eps: float = RANGE_EPS,
    ) -> None:
        super().__init__()
        self.channels, self.momentum, self.chunks, self.eps = channels, momentum, chunks, eps
        self.act_kind = "relu" if act else "none"
        self.spec, self.noise_salt = spec, 0
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels))
        self.register_buffer("running_mean", torch.zeros(channels))
        self.register_buffer("running_scale", torch.ones(channels))
        self.quantize_input = QuantMeasure(spec.act_bits, spec.act_stochastic, spec.gossip_ranges)

    @property
    def has_act(self) -> bool:
        return self.act_kind != "none"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.quantize_input(x)
        if self.training:
            xc = x.transpose(0, 1).reshape(x.shape[1], -1)  # [C, B*H*W], sample-major
            rng, s = chunked_mean_range(xc, self.chunks)
            mean, scale = xc.mean(-1), 1.0 / (rng * range_constant_chunked(s) + self.eps)
            with torch.no_grad():
                update_running(self.running_mean, mean.detach(), self.momentum)
                update_running(self.running_scale, scale.detach(), self.momentum)
        else:
            mean, scale = self.running_mean, self.running_scale
        scale, weight, bias = ste_minmax_each(
            [scale, self.weight, self.bias], self.spec.weight_bits
        )
        k = scale * weight
        y = (x - mean[:, None, None]) * k[:, None, None] + bias[:, None, None]
        y = quantize_grad(y, self.spec.grad_bits, self.noise_salt)
        return F.relu(y) if self.act_kind == "relu" else y

    def extra_repr(self) -> str:
        return f"{self.channels}, act={self.act_kind}, momentum={self.momentum}, eps={self.eps}"
