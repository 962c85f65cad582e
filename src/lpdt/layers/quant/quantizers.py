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
    q = (x - lo) / step
    if stochastic:
        q = q + (torch.rand_like(q) - 0.5)
    return q.clamp(0.0, levels).round() * step + lo


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
