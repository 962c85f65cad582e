"""Full-precision normalisation(-activation) layers: BN, GN, EvoNorm-S0, Range-EvoNorm, Range-BN.

Every module here fills one *norm slot* of a network and carries its activation inside it, so that
the 8-bit conversion (``lpdt.layers.quant``) can swap one module for one module and the cost model
can count operations by reading two class/instance attributes:

- ``norm_kind``: ``"batchnorm" | "groupnorm" | "evonorm" | "rangeen" | "rangebn"``;
- ``act_kind``: the activation applied inside the module: ``"relu"``, ``"none"`` (BN-style norms),
  ``"sigmoid"`` (EvoNorm-S0, Range-EvoNorm with ``act="sigmoid"``) or ``"hardsigmoid"``;
  ``has_act`` is ``act_kind != "none"``.

EvoNorm-S0 and Range-EvoNorm are *normalisation-activation* layers (paper eqs. 4-5): the sigmoid
gate x*sigma(v*x) replaces the ReLU, so networks using them have no separate ReLU anywhere (as the
reference). Sample-statistics norms (EvoNorm, Range-EvoNorm, GroupNorm) hold no buffers; the batch
norms keep running statistics as buffers, which stay local to each node (not gossiped).
"""

from __future__ import annotations

import math
from copy import deepcopy
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from lpdt.layers.formulas import compiled_for_a_gpu, formula_device

NORM_KINDS = ("batchnorm", "groupnorm", "evonorm", "rangeen", "rangebn")
# Norm-activation layers: their gate replaces the ReLU, so no separate ReLU follows them.
SELF_GATED = frozenset({"evonorm", "rangeen"})
RANGE_ESTIMATORS = ("chunked", "paper")
RANGE_CHUNKS = 16  # the reference's chunk count (Banner et al.'s estimator)
RANGE_EPS = 1e-5


def range_constant_chunked(s: int) -> float:
    """kappa(S) = 0.5*0.35*(1+sqrt(pi*ln 4)) / sqrt(2 ln S), S = elements per chunk (reference §6.3).

    It turns the mean chunk range of S Gaussian samples into an estimate of their std.
    """
    if s < 2:
        raise ValueError(
            f"range estimator needs >= 2 elements per chunk (ln(S)=0 at S=1); got S={s}"
        )
    return 0.5 * 0.35 * (1.0 + math.sqrt(math.pi * math.log(4.0))) / math.sqrt(2.0 * math.log(s))


def range_constant_paper(channels_per_group: int) -> float:
    """C(c/g) = 1 / sqrt(2 ln(c/g)) of paper eq. (5); undefined (infinite) for one channel per group."""
    if channels_per_group < 2:
        raise ValueError(
            "range_estimator 'paper' needs >= 2 channels per group: C(c/g) = 1/sqrt(2 ln(c/g)) is "
            f"infinite at c/g = {channels_per_group}; use fewer groups or range_estimator 'chunked'"
        )
    return 1.0 / math.sqrt(2.0 * math.log(channels_per_group))


def chunk_count(n: int, chunks: int = RANGE_CHUNKS) -> int:
    """The number of equal chunks to split ``n`` elements into: ``chunks`` if it divides ``n``.

    The reference requires divisibility (it holds for every paper model at its native resolution);
    otherwise we fall back to the largest divisor of ``n`` below ``chunks`` that leaves >= 2
    elements per chunk (kappa(S) needs S >= 2) instead of crashing.
    """
    for k in range(min(chunks, n // 2), 0, -1):
        if n % k == 0:
            return k
    return 1


def chunked_mean_range(x: torch.Tensor, chunks: int = RANGE_CHUNKS) -> tuple[torch.Tensor, int]:
    """Mean over equal contiguous chunks of the last dim of (chunk max - chunk min); also S.

    ``x``: ``[..., N]``. Returns the mean range ``[...]`` and the chunk size S.
    """
    n = x.shape[-1]
    k = chunk_count(n, chunks)
    xc = x.reshape(*x.shape[:-1], k, n // k)
    return value_range(xc).mean(-1), n // k


def value_range(x: torch.Tensor) -> torch.Tensor:
    """max - min over the last dim, differentiable.

    ``max(-1)``/``min(-1)`` (with indices) rather than ``amax``/``amin``: the gradient goes to one
    arg-max / arg-min element, as in Banner et al.'s code (``.max(-1)[0]``), instead of being split
    evenly over ties, which are common in 8-bit inputs; and the backward is 2.8x faster on CPU.
    Without a gradient to route (evaluation), ``amax``/``amin``: the same values without the
    indices (eagerly about 10 % of an 8-bit evaluation forward went to them). Decided by grad
    mode alone, not by ``x.requires_grad``: under vmap (the batched step) a node's view of a
    stacked tensor reports no gradient, and taking ``amax`` there split the gradient over ties,
    which made the batched 8-bit step's gradients differ from the sequential one's by 1-6 % per
    tensor, in float64 too (``tests/engine/test_batched.py``). Compiled for a GPU
    (``formula_device``), the same selection is written as a select whose backward fuses
    (``_picked``).
    """
    if not torch.is_grad_enabled():
        return x.amax(-1) - x.amin(-1)
    if compiled_for_a_gpu(x):
        return _picked(x, x.detach().argmax(-1, keepdim=True)) - _picked(
            x, x.detach().argmin(-1, keepdim=True)
        )
    return x.max(-1).values - x.min(-1).values


def _picked(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``x[..., index]`` (``index``: ``[..., 1]``) as the sum of ``x`` where the position is
    ``index`` and 0 elsewhere: the same value (adding zeros is exact), and the same gradient,
    the incoming one at ``index`` and 0 elsewhere.

    Why, compiled: this backward is a pointwise select that inductor fuses into the kernels
    around it, where ``max(-1)``'s is a scatter into zeros (the backward of one compiled range
    was five kernels, now one). The forward pays a second reduction over the row, fused with the
    one that finds the index where their loops agree. A compiled 8-bit ResNet-20 x 8 round on a
    GPU launches 752 kernels instead of 810 (counted with ``lpdt.engine.cudacount``;
    docs/notebook/2026-11-29-range-gradient-select.md). Eagerly the layers keep ``max(-1)``:
    on the CPU it is 2.7x faster, and on a GPU fewer launches. So does a step compiled for the
    CPU, where a launch costs nothing: there the select made the compiled 8-bit ResNet-20 node
    step 1.27x slower (one thread, alternating blocks in one process: 1.09-1.44x).
    """
    position = torch.arange(x.shape[-1], device=x.device)
    return torch.where(position == index, x, 0).sum(-1)


def range_scale(
    x: torch.Tensor, groups: int, estimator: str, chunks: int, eps: float
) -> torch.Tensor:
    """Range-EvoNorm's 1 / (constant * range + eps) per (sample, group): ``[B, G]``.

    ``estimator="chunked"``: the reference's mean chunk range with kappa(S); ``"paper"``: max - min
    over the group with C(c/g) = 1/sqrt(2 ln(c/g)) (paper eq. 5). Differentiable in ``x``.
    """
    xg = x.reshape(x.shape[0], groups, -1)
    if estimator == "paper":
        rng = value_range(xg)
        const = range_constant_paper(x.shape[1] // groups)
    else:
        rng, s = chunked_mean_range(xg, chunks)
        const = range_constant_chunked(s)
    return 1.0 / (rng * const + eps)


def check_groups(channels: int, groups: int, what: str) -> None:
    """Refuse a group count that does not divide the channels (also the 8-bit norms' check)."""
    if groups < 1 or channels % groups != 0:
        raise ValueError(f"{what}: {channels} channels are not divisible into {groups} groups")


def _gate(x: torch.Tensor, v: torch.Tensor, act: str) -> torch.Tensor:
    """x * sigma(v*x) (EvoNorm-S0) or x * hardsigmoid(v*x) (Range-EvoNorm, paper eq. 5).

    ``F.hardsigmoid(z)`` is exactly ``clamp(z/6 + 1/2, 0, 1)``, the reference's expression.
    """
    if act == "sigmoid":
        return x * torch.sigmoid(v * x)
    return x * F.hardsigmoid(v * x)


def scale_affine(
    n: torch.Tensor, scale: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor
) -> torch.Tensor:
    """n * scale[b, g] * gamma + beta in one full-size kernel (``scale``: ``[B, G]``).

    Folding the per-(sample, group) scale into gamma first (a tiny ``[B, C]`` tensor) saves two
    full-size passes compared with scaling and applying the affine separately.
    """
    b, c = n.shape[:2]
    g = scale.shape[1]
    s = scale.reshape(b, g, 1).expand(b, g, c // g).reshape(b, c, 1, 1) * weight
    return torch.addcmul(bias, n, s)


def group_variance(x: torch.Tensor, groups: int) -> torch.Tensor:
    """Biased variance of each sample's channel groups, ``[B, G]``.

    On CPU, ``Tensor.var`` is ~5x slower than mean((x - mean)^2) for these shapes (few long rows;
    it was a fifth of a ResNet-20 step); on GPU the single ``var`` kernel is faster (eager
    ResNet-20 EvoNorm step at batch 32 on an H100: 17.7 ms with ``var``, 27.9 ms centred).
    Same value either way. The formula follows ``formula_device`` (a CPU trace can take the GPU's:
    ``lpdt.layers.formulas``).
    """
    xg = x.reshape(x.shape[0], groups, -1)
    if formula_device(xg) == "cpu":
        return (xg - xg.mean(-1, keepdim=True)).square().mean(-1)
    return xg.var(-1, unbiased=False)


class _OptionalReLU:
    """Mixin for a torch norm class: its output, then a ReLU when ``act_kind == "relu"``."""

    act_kind: str

    @property
    def has_act(self) -> bool:
        return self.act_kind != "none"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = super().forward(x)  # type: ignore[misc]  # the torch norm after this mixin in the MRO
        return F.relu(y) if self.act_kind == "relu" else y


class BatchNormAct2d(_OptionalReLU, nn.BatchNorm2d):
    """``nn.BatchNorm2d`` followed by an optional ReLU (one norm slot of a BN network)."""

    norm_kind = "batchnorm"

    def __init__(self, channels: int, act: bool = True) -> None:
        super().__init__(channels)
        self.act_kind = "relu" if act else "none"


class GroupNormAct(_OptionalReLU, nn.GroupNorm):
    """``nn.GroupNorm`` (the reference trainer's 2 groups) followed by an optional ReLU."""

    norm_kind = "groupnorm"

    def __init__(self, channels: int, groups: int = 2, act: bool = True) -> None:
        check_groups(channels, groups, "GroupNorm")
        super().__init__(groups, channels)
        self.act_kind = "relu" if act else "none"


class EvoNormS0(nn.Module):
    """EvoNorm-S0 (paper eq. 4, reference §6.2): x*sigmoid(v*x) / sqrt(var_group(x) + eps) * gamma + beta.

    The variance is the biased variance of **x** per sample over each group's (C/G)*H*W elements;
    no running statistics, so train and eval behave the same.
    """

    norm_kind = "evonorm"
    act_kind = "sigmoid"
    has_act = True

    def __init__(self, channels: int, groups: int = 8, eps: float = 1e-5) -> None:
        super().__init__()
        check_groups(channels, groups, "EvoNorm")
        self.channels, self.groups, self.eps = channels, groups, eps
        self.weight = nn.Parameter(torch.ones(1, channels, 1, 1))
        self.bias = nn.Parameter(torch.zeros(1, channels, 1, 1))
        self.v = nn.Parameter(torch.ones(1, channels, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        var = group_variance(x, self.groups)
        return scale_affine(
            _gate(x, self.v, "sigmoid"), (var + self.eps).rsqrt(), self.weight, self.bias
        )

    def extra_repr(self) -> str:
        return f"{self.channels}, groups={self.groups}, eps={self.eps}"


class RangeEvoNorm(nn.Module):
    """Full-precision Range-EvoNorm: x*gate(v*x) / (range_estimate(x) + eps) * gamma + beta.

    ``estimator="chunked"`` (default, reference §6.3/§6.4): the group's (C/G)*H*W elements of each
    sample (channel-major) are split into 16 contiguous chunks of S elements; the divisor is
    kappa(S) * mean chunk range. ``estimator="paper"`` (paper eq. 5): C(c/g) * (max - min) over the
    whole group with C(c/g) = 1/sqrt(2 ln(c/g)). Both add eps = 1e-5 (the reference's; it keeps the
    paper formula finite for a constant group). ``act="hardsigmoid"`` is the paper's layer;
    ``act="sigmoid"`` is the reference's ``RangeEN_full``.
    """

    norm_kind = "rangeen"
    has_act = True

    def __init__(
        self,
        channels: int,
        groups: int = 8,
        estimator: str = "chunked",
        act: str = "hardsigmoid",
        chunks: int = RANGE_CHUNKS,
        eps: float = RANGE_EPS,
    ) -> None:
        super().__init__()
        check_groups(channels, groups, "Range-EvoNorm")
        if estimator not in RANGE_ESTIMATORS:
            raise ValueError(f"unknown range estimator {estimator!r}; allowed: chunked, paper")
        if act not in ("hardsigmoid", "sigmoid"):
            raise ValueError(
                f"unknown Range-EvoNorm activation {act!r}; allowed: hardsigmoid, sigmoid"
            )
        if estimator == "paper":
            range_constant_paper(channels // groups)  # fail at build time, not mid-training
        self.channels, self.groups, self.estimator = channels, groups, estimator
        self.act_kind, self.chunks, self.eps = act, chunks, eps
        self.weight = nn.Parameter(torch.ones(1, channels, 1, 1))
        self.bias = nn.Parameter(torch.zeros(1, channels, 1, 1))
        self.v = nn.Parameter(torch.ones(1, channels, 1, 1))

    def scale(self, x: torch.Tensor) -> torch.Tensor:
        """1 / (constant * range + eps) per (sample, group): ``[B, G]``."""
        return range_scale(x, self.groups, self.estimator, self.chunks, self.eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = _gate(x, self.v, self.act_kind)
        return scale_affine(n, self.scale(x), self.weight, self.bias)

    def extra_repr(self) -> str:
        return (
            f"{self.channels}, groups={self.groups}, estimator={self.estimator}, "
            f"act={self.act_kind}, eps={self.eps}"
        )


class RangeBatchNormAct2d(nn.Module):
    """Full-precision Range-BatchNorm (paper eq. 3, reference §6.5) followed by an optional ReLU.

    Training: per channel, mu = batch mean and s = 1 / (kappa(S) * mean chunk range + eps), where
    the channel's B*H*W values (sample-major) are split into 16 contiguous chunks of S values
    (Banner et al.'s estimator; the range of x equals that of x - mu). Eval: running mu and s.
    ``running_mean``/``running_scale`` are buffers (local to a node), updated as in PyTorch BN:
    ``r <- (1 - momentum) r + momentum * batch value``. The reference's RangeBN weights the batch
    value by 0.9, i.e. ``momentum=0.9``; we keep BatchNorm's 0.1 (documented in docs/models.md).
    """

    norm_kind = "rangebn"

    running_mean: torch.Tensor  # buffers (register_buffer), declared for the type checker
    running_scale: torch.Tensor

    def __init__(
        self,
        channels: int,
        act: bool = True,
        momentum: float = 0.1,
        chunks: int = RANGE_CHUNKS,
        eps: float = RANGE_EPS,
    ) -> None:
        super().__init__()
        self.channels, self.momentum, self.chunks, self.eps = channels, momentum, chunks, eps
        self.act_kind = "relu" if act else "none"
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels))
        self.register_buffer("running_mean", torch.zeros(channels))
        self.register_buffer("running_scale", torch.ones(channels))

    @property
    def has_act(self) -> bool:
        return self.act_kind != "none"

    def batch_stats(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-channel batch mean and range scale of ``x`` ``[B, C, H, W]``: two ``[C]`` tensors."""
        xc = x.transpose(0, 1).reshape(x.shape[1], -1)  # [C, B*H*W], sample-major
        rng, s = chunked_mean_range(xc, self.chunks)
        return xc.mean(-1), 1.0 / (rng * range_constant_chunked(s) + self.eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            mean, scale = self.batch_stats(x)
            with torch.no_grad():
                self.running_mean.lerp_(mean.detach(), self.momentum)
                self.running_scale.lerp_(scale.detach(), self.momentum)
        else:
            mean, scale = self.running_mean, self.running_scale
        y = (x - mean[:, None, None]) * (scale * self.weight)[:, None, None] + self.bias[
            :, None, None
        ]
        return F.relu(y) if self.act_kind == "relu" else y

    def extra_repr(self) -> str:
        return f"{self.channels}, act={self.act_kind}, momentum={self.momentum}, eps={self.eps}"


# The norms whose statistics are taken over the batch (BN, Range-BN, full precision or 8-bit):
# over one value per channel they compute nothing (BN's output is its bias, Range-BN's range 0).
BATCH_STATISTIC_KINDS = frozenset({"batchnorm", "rangebn"})


@torch.no_grad()
def batch_statistic_sizes(
    model: nn.Module, input_shape: tuple[int, ...]
) -> list[tuple[str, str, int]]:
    """(name, kind, H*W) of every batch-statistics norm of ``model`` (``BATCH_STATISTIC_KINDS``),
    in call order: the values per channel one example gives it. Found by passing one example
    through a copy of ``model`` in eval mode, with the random streams restored (an 8-bit model
    rounds stochastically in eval mode too), so ``model`` and the run are not touched; no
    forward at all when it has no such norm."""
    if not any(getattr(m, "norm_kind", None) in BATCH_STATISTIC_KINDS for m in model.modules()):
        return []
    probe = deepcopy(model).eval()
    sizes: list[tuple[str, str, int]] = []
    handles = [
        m.register_forward_hook(
            lambda m, args, out, name=name: sizes.append(
                (name, m.norm_kind, math.prod(args[0].shape[2:]))
            )
        )
        for name, m in probe.named_modules()
        if getattr(m, "norm_kind", None) in BATCH_STATISTIC_KINDS
    ]
    param = next(probe.parameters(), None)
    device = param.device if param is not None else torch.device("cpu")
    try:
        with torch.random.fork_rng(devices=[] if device.type == "cpu" else [device]):
            probe(torch.zeros(1, *input_shape, device=device))
    finally:
        for h in handles:
            h.remove()
    return sizes


def norm_layer(cfg: Any, channels: int, act: bool = True) -> nn.Module:
    """The norm slot for ``channels`` channels as chosen by ``cfg`` (a ``ModelConfig``).

    ``act``: whether a BN-style network applies a ReLU right after this norm (BN, GN, Range-BN).
    EvoNorm and Range-EvoNorm ignore it and always apply their gate, as the reference does (also
    in the norm just before a residual addition and in option-B shortcuts).
    """
    kind = cfg.norm
    if kind == "batchnorm":
        return BatchNormAct2d(channels, act=act)
    if kind == "groupnorm":
        return GroupNormAct(channels, groups=cfg.gn_groups, act=act)
    if kind == "evonorm":
        return EvoNormS0(channels, groups=cfg.groups)
    if kind == "rangeen":
        return RangeEvoNorm(
            channels,
            groups=cfg.groups,
            estimator=cfg.range_estimator,
            act=cfg.range_act,
            chunks=cfg.range_chunks,
        )
    if kind == "rangebn":
        return RangeBatchNormAct2d(channels, act=act)
    raise ValueError(f"unknown norm {kind!r}; allowed: {', '.join(NORM_KINDS)}")


def post_add_act(norm: str) -> nn.Module:
    """The activation after a residual addition: ReLU for BN-style norms, none for gated norms."""
    return nn.Identity() if norm in SELF_GATED else nn.ReLU()


NORM_MODULES = (BatchNormAct2d, GroupNormAct, EvoNormS0, RangeEvoNorm, RangeBatchNormAct2d)
