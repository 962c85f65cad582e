"""The uniform quantiser itself: plain tensor functions, no autograd, no state.

Written as a handful of out-of-place elementwise operations and reductions so that
``torch.compile`` fuses each call into one or two kernels (one reduction for the range, one pass
for subtract / divide / noise / clamp / round / rescale). The rounding noise comes from torch's
own generator (``torch.rand_like``): eager draws it from the global generator, a compiled graph
from inductor's in-kernel generator seeded from it, so ``torch.manual_seed`` decides both (the
two streams differ; the distribution is the same).
"""

from __future__ import annotations

import torch

from lpdt.layers.quant.spec import MIN_STEP

_MASK32 = 0xFFFFFFFF


def _hash_dither(x: torch.Tensor) -> torch.Tensor:
    """U(-1/2, 1/2) noise on 2^16 levels shaped like ``x``: hash(index, seed), fusable.

    A 32-bit integer hash (Wellons' "lowbias32" constants, all below 2^31 so that int64
    products never overflow) of ``index * golden + seed``; the top 16 bits give the level, as
    fine as fp32 itself near 255 (unbiased to within 2^-17 of a step).
    """
    seed = torch.randint(0, 2**31, (1,), device=x.device)
    h = torch.arange(x.numel(), device=x.device, dtype=torch.int64).view(x.shape)
    h = (h * 0x9E3779B1 + seed) & _MASK32
    h = ((h ^ (h >> 16)) * 0x21F0AAAD) & _MASK32
    h = ((h ^ (h >> 15)) * 0x735A2D97) & _MASK32
    h = h ^ (h >> 15)
    return ((h >> 16).to(x.dtype) + 0.5) * 2.0**-16 - 0.5


def _lane_dither(x: torch.Tensor) -> torch.Tensor:
    """U(-1/2, 1/2) noise on 2^16 levels shaped like ``x``: 64-bit words in 16-bit lanes."""
    n = x.numel()
    words = torch.empty((n + 3) // 4, dtype=torch.int64, device=x.device)
    words.random_(-(2**63), 2**63 - 1)  # the full 64 bits (random_() leaves the sign bit 0)
    lanes = words.view(torch.int16)[:n].to(x.dtype).view(x.shape)  # uniform on [-2^15, 2^15)
    return (lanes + 0.5) * 2.0**-16


def dither(x: torch.Tensor) -> torch.Tensor:
    """Rounding noise U(-1/2, 1/2) on 2^16 levels shaped like ``x`` (eager: 16-bit lanes of
    64-bit random words; compiled: an in-kernel hash)."""
    if torch.compiler.is_compiling():
        return _hash_dither(x)
    return _lane_dither(x)


def quantize(
    x: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor, bits: int, stochastic: bool
) -> torch.Tensor:
    """Uniform asymmetric quantisation of ``x`` to ``bits`` bits over ``[lo, hi]``.

    q = round(clamp((x - lo)/step + xi, 0, 2^b - 1)), output q*step + lo with
    step = max((hi - lo)/(2^b - 1), 1e-8); xi ~ U[-1/2, 1/2) when ``stochastic`` (unbiased inside
    the range), else 0. ``lo``/``hi`` are tensors (no host synchronisation). 32 bits: a copy.
    """
    if bits >= 32:
        return x.clone()
    levels = float(2**bits - 1)
    step = ((hi - lo) / levels).clamp_min(MIN_STEP)
    q = (x - lo).div_(step)  # in place on fresh tensors: fewer allocations eager, same graph
    if stochastic:
        q.add_(dither(q))
    return q.clamp_(0.0, levels).round_().mul_(step).add_(lo)


def quantize_minmax(x: torch.Tensor, bits: int, stochastic: bool = False) -> torch.Tensor:
    """Quantise ``x`` over its own per-tensor [min, max] (weights: nearest; gradients: stochastic)."""
    if bits >= 32:
        return x
    x = x.detach()
    return quantize(x, x.amin(), x.amax(), bits, stochastic)


def batch_range(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The activation range of a batch: the batch means of the per-sample min and max, ``[1]`` each."""
    xs = x.detach().reshape(x.shape[0], -1)
    return xs.amin(-1).mean().reshape(1), xs.amax(-1).mean().reshape(1)
