"""Simulated 8-bit training (Banner et al. as in the reference, §5 and §6.3-6.5).

Everything is *fake quantisation*: tensors stay fp32 but take at most 2^b values. Scheme:

- weights (and biases, v, gamma, beta, the norm scale): per-tensor [min, max], round to nearest;
- input activations of every conv / linear / norm / residual-add operand: range = batch mean of the
  per-sample min and max in training, a running range in evaluation (r <- 0.1 r + 0.9 batch,
  the reference's rule); rounding stochastic by default (the reference's argument-order bug,
  also at test time) or nearest (``precision.act_rounding``);
- gradient bifurcation (§5.3): the gradient passed to the previous layer is quantised (per-tensor
  [g.min, g.max], stochastic rounding), the weight gradient is the fp32 gradient. Each conv /
  linear runs **once** in the forward; its backward calls ``convolution_backward`` twice (input
  gradient from the quantised output gradient, weight gradient from the fp32 one) instead of the
  reference's two forward convs;
- straight-through estimator without clipping mask for every quantiser.

No ``.item()`` or Python branch on tensor values: ranges, steps and zero points stay tensors, so
there is no host-device synchronisation per layer. 32 bits means "not quantised".
"""

from __future__ import annotations

import copy
import threading
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from lpdt.layers import Add
from lpdt.layers.norms import (
    NORM_MODULES,
    RANGE_CHUNKS,
    RANGE_EPS,
    RANGE_ESTIMATORS,
    _check_groups,
    chunked_mean_range,
    range_constant_chunked,
    range_constant_paper,
    range_scale,
)

ALLOWED_BITS = (4, 8, 16, 32)
MIN_STEP = 1e-8  # the reference's lower bound on the quantisation step
RANGE_MOMENTUM = 0.9  # weight of the batch value in the running range (reference: r <- 0.1r + 0.9b)


@dataclass(frozen=True)
class QuantSpec:
    """Bit widths and rounding of one converted model (from ``PrecisionConfig``)."""

    weight_bits: int = 8
    act_bits: int = 8
    grad_bits: int = 8
    act_stochastic: bool = True
    gossip_ranges: bool = True

    @classmethod
    def from_config(cls, cfg) -> QuantSpec:
        for key in ("weight_bits", "act_bits", "grad_bits"):
            bits = getattr(cfg, key)
            if bits not in ALLOWED_BITS:
                raise ValueError(
                    f"precision.{key}={bits} is not supported; allowed: 4, 8, 16, 32 (no quantisation)"
                )
        if cfg.act_rounding not in ("stochastic", "nearest"):
            raise ValueError(
                f"precision.act_rounding={cfg.act_rounding!r}; allowed: stochastic, nearest"
            )
        return cls(
            weight_bits=cfg.weight_bits,
            act_bits=cfg.act_bits,
            grad_bits=cfg.grad_bits,
            act_stochastic=cfg.act_rounding == "stochastic",
            gossip_ranges=bool(cfg.gossip_ranges),
        )


# ---------------------------------------------------------------- quantisers (no autograd)


_DITHER_SCALE = 2.0**-16
# Below this many 64-bit words torch's own generator is cheaper than seeding a numpy one (~20 us).
_NUMPY_NOISE_MIN_WORDS = 4096
_LARGE = 1 << 16  # elements: above this, amin + amax beat aminmax on CPU


_THREAD = threading.local()  # one numpy generator per thread (state set and draw are two calls)


def _random_words(n: int, device: torch.device) -> torch.Tensor:
    """``n`` uniform 64-bit integers (int64) on ``device``, driven by torch's global generator.

    On CPU, large draws come from numpy's SFC64, whose 256-bit state is three fresh words from
    torch's generator (and a counter) per call: 4.3x faster than torch's mt19937 ``random_``
    (0.37 vs 1.58 ms for the 131k words of a ResNet-20 stage-1 activation at batch 32,
    measured), which was a sixth of an 8-bit step. Setting the state costs 2 us where
    constructing a seeded generator costs 20 us (x112 draws per step). Taking the state from
    torch keeps ``torch.manual_seed`` in charge of reproducibility. Reading it back (``tolist``)
    is no host-device synchronisation: this branch only runs for CPU tensors.
    """
    if device.type == "cpu" and n >= _NUMPY_NOISE_MIN_WORDS:
        bitgen = getattr(_THREAD, "sfc64", None)
        if bitgen is None:
            bitgen = _THREAD.sfc64 = np.random.SFC64()
        state = bitgen.state
        state["state"]["state"][:3] = torch.empty(3, dtype=torch.int64).random_().tolist()
        state["state"]["state"][3] = 1
        bitgen.state = state
        return torch.from_numpy(bitgen.random_raw(n).view(np.int64))
    r = torch.empty(n, dtype=torch.int64, device=device)
    return r.random_(-(2**63), 2**63 - 1)


def _int16_noise_like(x: torch.Tensor) -> torch.Tensor:
    """Uniform integers on [-2^15, 2^15) shaped like ``x``, as ``x.dtype``: the rounding noise.

    Drawn as 64-bit integers split into four 16-bit lanes: a quarter of the generator calls of
    ``torch.rand_like``. 16 bits of noise are as fine as fp32 itself near 255
    (2^-16 ~ 255 * 2^-24), so stochastic rounding stays unbiased to within 2^-17 of a step.
    """
    n = x.numel()
    words = _random_words((n + 3) // 4, x.device)
    return words.view(torch.int16)[:n].to(x.dtype).reshape(x.shape)


@torch.no_grad()
def quantize(
    x: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor, bits: int, stochastic: bool
) -> torch.Tensor:
    """Uniform asymmetric quantisation of ``x`` to ``bits`` bits over ``[lo, hi]`` (reference §5.1).

    q = round(clamp((x - lo)/step + xi, 0, 2^b - 1)), output q*step + lo; xi ~ U[-1/2, 1/2) when
    stochastic (unbiased inside the range), else 0. ``lo``/``hi`` are tensors (no sync).
    """
    if bits >= 32:
        return x.clone()
    levels = float(2**bits - 1)
    # Few one-element ops (each costs a dispatch, ~100 per step in weights alone) and few
    # full-size passes: subtract, divide, (noise,) clamp, round, scale back.
    step = (hi - lo).div_(levels).clamp_min_(MIN_STEP)
    if stochastic:  # xi = (r + 1/2) / 2^16 for r uniform on the int16 range: (-1/2, 1/2);
        # the + 1/2 / 2^16 goes into the subtracted offset rather than a full-size pass.
        q = x.sub(lo - step * (_DITHER_SCALE / 2)).div_(step)
        q.add_(_int16_noise_like(q), alpha=_DITHER_SCALE)
    else:
        q = x.sub(lo).div_(step)
    q.clamp_(0.0, levels).round_()
    return q.mul_(step).add_(lo)


def quantize_minmax(x: torch.Tensor, bits: int, stochastic: bool = False) -> torch.Tensor:
    """Quantise ``x`` over its own per-tensor [min, max] (weights: nearest; gradients: stochastic)."""
    if bits >= 32:
        return x
    x = x.detach()
    # aminmax is one dispatch (weights, norm parameters); two vectorised reductions are faster
    # on large tensors (gradients) on CPU.
    lo, hi = x.aminmax() if x.numel() < _LARGE else (x.amin(), x.amax())
    return quantize(x, lo, hi, bits, stochastic)


@torch.no_grad()
def quantize_minmax_many(xs: tuple[torch.Tensor, ...], bits: int) -> tuple[torch.Tensor, ...]:
    """``quantize_minmax(x, bits)`` (nearest) of every tensor in ``xs``, in a few batched kernels.

    One concatenation, two multi-tensor reductions and six passes over the concatenated values
    instead of about ten one-element ops per tensor: an 8-bit ResNet-20 has 86 weight-like
    parameters, and their per-tensor dispatch cost 8 % of a 2-thread CPU step (measured). Same
    values as the per-tensor path.
    """
    if bits >= 32:
        return tuple(xs)
    levels = float(2**bits - 1)
    flat = torch.cat([x.detach().reshape(-1) for x in xs])
    hi = torch.stack(torch._foreach_max(xs))
    lo = torch.stack(torch._foreach_max(torch._foreach_neg(xs))).neg_()
    step = (hi - lo).div_(levels).clamp_min_(MIN_STEP)
    sizes = [x.numel() for x in xs]
    counts = torch.tensor(sizes).to(flat.device, non_blocking=True)
    lo_e = lo.repeat_interleave(counts, output_size=flat.numel())
    step_e = step.repeat_interleave(counts, output_size=flat.numel())
    q = flat.sub_(lo_e).div_(step_e).clamp_(0.0, levels).round_().mul_(step_e).add_(lo_e)
    return tuple(t.view_as(x) for t, x in zip(q.split(sizes), xs))


# ---------------------------------------------------------------- autograd functions


class _STE(torch.autograd.Function):
    """Quantise over [lo, hi] in the forward, identity in the backward (no clipping mask)."""

    @staticmethod
    def forward(ctx, x, lo, hi, bits: int, stochastic: bool):  # noqa: D102
        return quantize(x, lo, hi, bits, stochastic)

    @staticmethod
    def backward(ctx, g):  # noqa: D102
        return g, None, None, None, None


class _STEMinMax(torch.autograd.Function):
    """Per-tensor min/max quantisation with a straight-through backward."""

    @staticmethod
    def forward(ctx, x, bits: int):  # noqa: D102
        return quantize_minmax(x, bits)

    @staticmethod
    def backward(ctx, g):  # noqa: D102
        return g, None


class _STEMinMaxMany(torch.autograd.Function):
    """``quantize_minmax_many`` with a straight-through backward (one autograd node for all)."""

    @staticmethod
    def forward(ctx, bits: int, *xs):  # noqa: D102
        return quantize_minmax_many(xs, bits)

    @staticmethod
    def backward(ctx, *gs):  # noqa: D102
        return (None, *gs)


class _QuantGrad(torch.autograd.Function):
    """Identity in the forward; the backward quantises the gradient (stochastic, per tensor)."""

    @staticmethod
    def forward(ctx, x, bits: int):  # noqa: D102
        ctx.bits = bits
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):  # noqa: D102
        return quantize_minmax(g, ctx.bits, stochastic=True), None


def ste(x: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor, bits: int, stochastic: bool):
    """Quantised ``x`` whose gradient passes straight through (identity at 32 bits)."""
    return x if bits >= 32 else _STE.apply(x, lo, hi, bits, stochastic)


def ste_minmax(x: torch.Tensor, bits: int) -> torch.Tensor:
    """``x`` quantised over its own [min, max] (nearest), straight-through gradient."""
    return x if bits >= 32 else _STEMinMax.apply(x, bits)


def quantize_grad(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Identity whose backward quantises the incoming gradient (the reference's ``quantize_grad``)."""
    return x if bits >= 32 else _QuantGrad.apply(x, bits)


class _BiprecConv(torch.autograd.Function):
    """conv2d(xq, wq) once; backward: input grad from Q(g), weight/bias grads from fp32 g (§5.3)."""

    @staticmethod
    def forward(ctx, xq, wq, bias, stride, padding, dilation, groups, grad_bits):  # noqa: D102
        ctx.save_for_backward(xq, wq)
        ctx.conf = (stride, padding, dilation, groups, grad_bits, bias is not None)
        return F.conv2d(xq, wq, bias, stride, padding, dilation, groups)

    @staticmethod
    def backward(ctx, g):  # noqa: D102
        xq, wq = ctx.saved_tensors
        stride, padding, dilation, groups, grad_bits, has_bias = ctx.conf
        conv_bwd = torch.ops.aten.convolution_backward
        args = (stride, padding, dilation, False, [0, 0], groups)
        gx = gw = gb = None
        bias_sizes = [wq.shape[0]] if has_bias else None
        if grad_bits >= 32:  # no bifurcation needed: one call for all gradients
            mask = [ctx.needs_input_grad[0], ctx.needs_input_grad[1], has_bias]
            gx, gw, gb = conv_bwd(g, xq, wq, bias_sizes, *args, mask)
            return gx, gw, gb, None, None, None, None, None
        if ctx.needs_input_grad[0]:
            gq = quantize_minmax(g, grad_bits, stochastic=True)
            gx = conv_bwd(gq, xq, wq, None, *args, [True, False, False])[0]
        if ctx.needs_input_grad[1] or (has_bias and ctx.needs_input_grad[2]):
            _, gw, gb = conv_bwd(g, xq, wq, bias_sizes, *args, [False, True, has_bias])
        return gx, gw, gb, None, None, None, None, None


class _BiprecLinear(torch.autograd.Function):
    """linear(xq, wq) once; backward: input grad from Q(g), weight/bias grads from fp32 g."""

    @staticmethod
    def forward(ctx, xq, wq, bias, grad_bits):  # noqa: D102
        ctx.save_for_backward(xq, wq)
        ctx.grad_bits, ctx.has_bias = grad_bits, bias is not None
        return F.linear(xq, wq, bias)

    @staticmethod
    def backward(ctx, g):  # noqa: D102
        xq, wq = ctx.saved_tensors
        gx = gw = gb = None
        if ctx.needs_input_grad[0]:
            gx = quantize_minmax(g, ctx.grad_bits, stochastic=True) @ wq
        g2 = g.reshape(-1, g.shape[-1])
        if ctx.needs_input_grad[1]:
            gw = g2.t() @ xq.reshape(-1, xq.shape[-1])
        if ctx.has_bias and ctx.needs_input_grad[2]:
            gb = g2.sum(0)
        return gx, gw, gb, None


# ---------------------------------------------------------------- modules


class QuantMeasure(nn.Module):
    """Input-activation quantiser with a running range (reference ``QuantMeasure``).

    Training: range = batch mean of per-sample min / max; the running range is updated in place,
    ``r <- 0.1 r + 0.9 batch`` (in place because the engine turns these buffers into views of its
    flat gossip tensor). Eval: the running range. Buffers ``running_min``/``running_max`` (shape
    [1]) are listed in ``gossip_buffers`` when the ranges travel with the model (reference §5.5).
    """

    def __init__(self, bits: int = 8, stochastic: bool = True, gossip: bool = True) -> None:
        super().__init__()
        self.bits, self.stochastic = bits, stochastic
        self.register_buffer("running_min", torch.zeros(1))
        self.register_buffer("running_max", torch.zeros(1))
        self.gossip_buffers: tuple[str, ...] = ("running_min", "running_max") if gossip else ()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.bits >= 32:
            return x
        if self.training:
            with torch.no_grad():
                # amin/amax rather than aminmax(dim=-1): 24x faster on CPU (measured).
                xs = x.detach().reshape(x.shape[0], -1)
                lo, hi = xs.amin(-1).mean().reshape(1), xs.amax(-1).mean().reshape(1)
                self.running_min.lerp_(lo, RANGE_MOMENTUM)
                self.running_max.lerp_(hi, RANGE_MOMENTUM)
        else:
            lo, hi = self.running_min, self.running_max
        return ste(x, lo, hi, self.bits, self.stochastic)

    def extra_repr(self) -> str:
        return f"bits={self.bits}, stochastic={self.stochastic}, gossip={bool(self.gossip_buffers)}"


_BATCH_ATTR = "_lpdt_quantized_params"  # {name: quantised tensor} for the current forward


def qparam(module: nn.Module, name: str) -> torch.Tensor | None:
    """Parameter ``name`` of a quantised module, quantised to ``spec.weight_bits`` (own range).

    Taken from the batch that ``quantize_parameters_hook`` made for the current forward of the
    converted model when there is one, else quantised on its own (a module used by itself).
    """
    batch = module.__dict__.get(_BATCH_ATTR)
    if batch is not None:
        return batch.get(name)
    p = getattr(module, name)
    return None if p is None else ste_minmax(p, module.spec.weight_bits)


def quantize_parameters_hook(model: nn.Module, args) -> None:
    """Forward pre-hook of a converted model: quantise every ``quantized_params`` at once.

    One ``_STEMinMaxMany`` for the whole model instead of one autograd call per parameter
    (same values, straight-through gradients); the results live on the modules for this
    forward only (``clear_parameters_hook`` removes them, also when the forward raises).
    """
    owners = [
        (m, n)
        for m in model.modules()
        for n in getattr(m, "quantized_params", ())
        if getattr(m, n) is not None
    ]
    if not owners or owners[0][0].spec.weight_bits >= 32:
        return
    quantized = _STEMinMaxMany.apply(
        owners[0][0].spec.weight_bits, *(getattr(m, n) for m, n in owners)
    )
    for (m, n), q in zip(owners, quantized):
        m.__dict__.setdefault(_BATCH_ATTR, {})[n] = q


def clear_parameters_hook(model: nn.Module, args, output) -> None:
    """Forward hook (``always_call``): drop the batch ``quantize_parameters_hook`` made."""
    for m in model.modules():
        m.__dict__.pop(_BATCH_ATTR, None)


def _quantized_operands(layer: QConv2d | QLinear, x: torch.Tensor):
    """Quantised input (running range), weight and bias (own [min, max]) of a QConv2d/QLinear."""
    return layer.quantize_input(x), qparam(layer, "weight"), qparam(layer, "bias")


class QConv2d(nn.Conv2d):
    """Conv2d with quantised input and weights and gradient bifurcation (reference ``QConv2d``)."""

    quantized_params = ("weight", "bias")

    def __init__(self, *args, spec: QuantSpec = QuantSpec(), **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if self.padding_mode != "zeros" or isinstance(self.padding, str):
            raise ValueError("QConv2d supports numeric zero padding only")
        self.spec = spec
        self.quantize_input = QuantMeasure(spec.act_bits, spec.act_stochastic, spec.gossip_ranges)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xq, wq, bq = _quantized_operands(self, x)
        return _BiprecConv.apply(
            xq, wq, bq, self.stride, self.padding, self.dilation, self.groups, self.spec.grad_bits
        )


class QLinear(nn.Linear):
    """Linear with quantised input and weights and gradient bifurcation (reference ``QLinear``)."""

    quantized_params = ("weight", "bias")

    def __init__(self, *args, spec: QuantSpec = QuantSpec(), **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.spec = spec
        self.quantize_input = QuantMeasure(spec.act_bits, spec.act_stochastic, spec.gossip_ranges)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xq, wq, bq = _quantized_operands(self, x)
        return _BiprecLinear.apply(xq, wq, bq, self.spec.grad_bits)


class QAdd(nn.Module):
    """Quantised residual addition (reference ``Qsum``): Q(a) + Q(b), gradient quantised (§5.4)."""

    def __init__(self, spec: QuantSpec = QuantSpec()) -> None:
        super().__init__()
        self.spec = spec
        self.quantize_a = QuantMeasure(spec.act_bits, spec.act_stochastic, spec.gossip_ranges)
        self.quantize_b = QuantMeasure(spec.act_bits, spec.act_stochastic, spec.gossip_ranges)

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return quantize_grad(self.quantize_a(a) + self.quantize_b(b), self.spec.grad_bits)


def _expand_group_scale(scale: torch.Tensor, channels: int) -> torch.Tensor:
    """``[B, G]`` per-group scale -> ``[B, C, 1, 1]``."""
    b, g = scale.shape
    return scale.reshape(b, g, 1).expand(b, g, channels // g).reshape(b, channels, 1, 1)


class QRangeEvoNorm(nn.Module):
    """8-bit Range-EvoNorm (reference ``RangeEN``, §6.3); carries its hard-sigmoid gate.

    x <- Q_act(x); n = x * hardsigmoid(Q(v) x); s = 1 / (const * range + eps) per (sample, group),
    s <- Q(s) (per tensor, straight-through, the gradient flows through the range into x);
    out = n * s * Q(gamma) + Q(beta); the output gradient is quantised. ``estimator="chunked"``
    (default): the reference's 16-chunk mean range with kappa(S); ``"paper"``: max - min over the
    group with C(c/g) = 1/sqrt(2 ln(c/g)) (paper eq. 5).
    """

    norm_kind = "rangeen"
    act_kind = "hardsigmoid"
    has_act = True
    quantized_params = ("v", "weight", "bias")

    def __init__(
        self,
        channels: int,
        groups: int = 8,
        estimator: str = "chunked",
        spec: QuantSpec = QuantSpec(),
        chunks: int = RANGE_CHUNKS,
        eps: float = RANGE_EPS,
    ) -> None:
        super().__init__()
        _check_groups(channels, groups, "Range-EvoNorm")
        if estimator not in RANGE_ESTIMATORS:
            raise ValueError(f"unknown range estimator {estimator!r}; allowed: chunked, paper")
        if estimator == "paper":
            range_constant_paper(channels // groups)
        self.channels, self.groups, self.estimator = channels, groups, estimator
        self.chunks, self.eps, self.spec = chunks, eps, spec
        self.weight = nn.Parameter(torch.ones(1, channels, 1, 1))
        self.bias = nn.Parameter(torch.zeros(1, channels, 1, 1))
        self.v = nn.Parameter(torch.ones(1, channels, 1, 1))
        self.quantize_input = QuantMeasure(spec.act_bits, spec.act_stochastic, spec.gossip_ranges)

    def scale(self, x: torch.Tensor) -> torch.Tensor:
        """1 / (const * range + eps) per (sample, group): ``[B, G]`` (differentiable)."""
        return range_scale(x, self.groups, self.estimator, self.chunks, self.eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.quantize_input(x)
        n = x * F.hardsigmoid(x * qparam(self, "v"))
        s = ste_minmax(self.scale(x), self.spec.weight_bits)
        gamma = qparam(self, "weight")
        out = torch.addcmul(qparam(self, "bias"), n, _expand_group_scale(s, self.channels) * gamma)
        return quantize_grad(out, self.spec.grad_bits)

    def extra_repr(self) -> str:
        return f"{self.channels}, groups={self.groups}, estimator={self.estimator}, eps={self.eps}"


class QRangeBatchNormAct2d(nn.Module):
    """8-bit Range-BatchNorm (reference ``RangeBN``, §6.5) followed by an optional ReLU.

    x <- Q_act(x); training: per-channel batch mean and s = 1/(kappa(S) * mean chunk range + eps)
    over the channel's B*H*W values in 16 chunks; running statistics (local buffers) follow the
    reference's rule r <- 0.1 r + 0.9 batch; eval uses them. out = (x - mu) Q(s) Q(gamma) + Q(beta),
    output gradient quantised, then the ReLU (the reference's RangeBN has none; the paper's
    "Range BN + ReLU" rows count one).
    """

    norm_kind = "rangebn"
    quantized_params = ("weight", "bias")

    def __init__(
        self,
        channels: int,
        act: bool = True,
        spec: QuantSpec = QuantSpec(),
        momentum: float = RANGE_MOMENTUM,
        chunks: int = RANGE_CHUNKS,
        eps: float = RANGE_EPS,
    ) -> None:
        super().__init__()
        self.channels, self.momentum, self.chunks, self.eps = channels, momentum, chunks, eps
        self.act_kind = "relu" if act else "none"
        self.spec = spec
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
                self.running_mean.lerp_(mean.detach(), self.momentum)
                self.running_scale.lerp_(scale.detach(), self.momentum)
        else:
            mean, scale = self.running_mean, self.running_scale
        k = ste_minmax(scale, self.spec.weight_bits) * qparam(self, "weight")
        y = (x - mean[:, None, None]) * k[:, None, None] + qparam(self, "bias")[:, None, None]
        y = quantize_grad(y, self.spec.grad_bits)
        return F.relu(y) if self.act_kind == "relu" else y

    def extra_repr(self) -> str:
        return f"{self.channels}, act={self.act_kind}, momentum={self.momentum}, eps={self.eps}"


# ---------------------------------------------------------------- conversion


def _is_norm(m: nn.Module) -> bool:
    return isinstance(m, (*NORM_MODULES, nn.BatchNorm2d, nn.GroupNorm))


def _channels(m: nn.Module) -> int:
    for attr in ("channels", "num_features", "num_channels"):
        if hasattr(m, attr):
            return int(getattr(m, attr))
    raise ValueError(f"cannot read the channel count of norm module {type(m).__name__}")


@torch.no_grad()
def _copy_affine(src: nn.Module, dst: nn.Module) -> None:
    """Carry gamma / beta / v over (shapes differ between BN-style [C] and EvoNorm [1,C,1,1])."""
    for name in ("weight", "bias", "v"):
        a, b = getattr(src, name, None), getattr(dst, name, None)
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
            b.copy_(a.reshape(b.shape))


def _convert_norm(m: nn.Module, spec: QuantSpec, model_cfg) -> nn.Module:
    c = _channels(m)
    if model_cfg.norm == "rangebn":
        act = getattr(m, "act_kind", "relu") != "none"
        q: nn.Module = QRangeBatchNormAct2d(c, act=act, spec=spec)
    else:
        q = QRangeEvoNorm(
            c,
            groups=model_cfg.groups,
            estimator=model_cfg.range_estimator,
            spec=spec,
            chunks=model_cfg.range_chunks,
        )
    _copy_affine(m, q)
    return q


@torch.no_grad()
def _convert_conv(m: nn.Conv2d, spec: QuantSpec) -> QConv2d:
    q = QConv2d(
        m.in_channels, m.out_channels, m.kernel_size, m.stride, m.padding, m.dilation,
        m.groups, m.bias is not None, spec=spec,
    )  # fmt: skip
    q.weight.copy_(m.weight)
    if m.bias is not None:
        q.bias.copy_(m.bias)
    return q.to(m.weight.device)


@torch.no_grad()
def _convert_linear(m: nn.Linear, spec: QuantSpec) -> QLinear:
    q = QLinear(m.in_features, m.out_features, m.bias is not None, spec=spec)
    q.weight.copy_(m.weight)
    if m.bias is not None:
        q.bias.copy_(m.bias)
    return q.to(m.weight.device)


def _swap(module: nn.Module, spec: QuantSpec, model_cfg, linear_only: bool) -> None:
    gated = model_cfg is not None and model_cfg.norm != "rangebn"
    for name, child in list(module.named_children()):
        new: nn.Module | None = None
        if isinstance(child, nn.Linear) and not isinstance(child, QLinear):
            new = _convert_linear(child, spec)
        elif linear_only:
            pass
        elif isinstance(child, nn.Conv2d) and not isinstance(child, QConv2d):
            new = _convert_conv(child, spec)
        elif _is_norm(child) and not isinstance(child, (QRangeEvoNorm, QRangeBatchNormAct2d)):
            new = _convert_norm(child, spec, model_cfg)
        elif isinstance(child, Add):
            new = QAdd(spec)
        if new is not None:
            setattr(module, name, new)
        else:
            _swap(child, spec, model_cfg, linear_only)
    # Range-EvoNorm carries its gate: a block's ReLU after the residual add (BN-style nets) goes,
    # as in the reference's LP ResNets (no activation after the add).
    has_qadd = isinstance(getattr(module, "add", None), QAdd)
    if not linear_only and gated and has_qadd and isinstance(getattr(module, "act", None), nn.ReLU):
        module.act = nn.Identity()


def convert_to_int8(model: nn.Module, precision_cfg, model_cfg=None, linear_only: bool = False):
    """The 8-bit (simulated) version of a full-precision model; the input model is not modified.

    Swaps every ``nn.Conv2d`` -> ``QConv2d``, ``nn.Linear`` -> ``QLinear``, norm slot -> 8-bit
    Range-EvoNorm (or 8-bit Range-BN + ReLU for ``model_cfg.norm == 'rangebn'``) and
    ``lpdt.layers.Add`` -> ``QAdd``; copies the weights; then applies the model's low-precision
    init (``lpdt.models.init_lp_``, reference §7.1) unless ``precision_cfg.lp_init`` is false
    (then the full-precision model's weights stay as they are). ``linear_only=True`` swaps only
    ``nn.Linear`` (transformers) and keeps the weights as they are (no LP init).
    """
    spec = QuantSpec.from_config(precision_cfg)
    if model_cfg is None and not linear_only:
        raise ValueError("convert_to_int8 needs model_cfg (norm, groups) unless linear_only=True")
    model = copy.deepcopy(model)
    _swap(model, spec, model_cfg, linear_only)
    model.register_forward_pre_hook(quantize_parameters_hook)
    model.register_forward_hook(clear_parameters_hook, always_call=True)
    if not linear_only and precision_cfg.lp_init:
        from lpdt.models.common import init_lp_

        init_lp_(model)
    return model


def gossip_buffer_names(model: nn.Module) -> list[str]:
    """Fully qualified names of the buffers the engine gossips (for tests and the cost model)."""
    out = []
    for mod_name, mod in model.named_modules():
        for b in getattr(mod, "gossip_buffers", ()):
            out.append(f"{mod_name}.{b}" if mod_name else b)
    return out
