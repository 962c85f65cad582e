"""Simulated 8-bit training (Banner et al., as in the authors' code; docs/int8.md).

Everything is *fake quantisation*: tensors stay fp32 but take at most 2^b values. One idea per
file:

- ``spec``: what is quantised and how (``QuantSpec`` from ``PrecisionConfig``);
- ``quantizers``: the uniform quantiser (plain tensor functions, fusable by ``torch.compile``);
- ``kernel``: the same quantiser as one C++ loop for the eager CPU path (the same bits);
- ``fused``: the same quantiser compiled once into one kernel for the eager path off the CPU
  (the same bits);
- ``functions``: the autograd functions (straight-through estimators, gradient quantisation,
  gradient bifurcation for conv / linear);
- ``modules``: the 8-bit layers (``QConv2d``, ``QLinear``, ``QAdd``, Range-EvoNorm, Range-BN);
- ``convert``: full-precision model -> 8-bit model.

No ``.item()`` or Python branch on tensor values: ranges and steps stay tensors (no host-device
synchronisation per layer), and the whole forward/backward traces into one compiled graph.
"""

from lpdt.layers.quant.convert import convert_to_int8, gossip_buffer_names, int8_norm
from lpdt.layers.quant.functions import quantize_grad, ste, ste_minmax
from lpdt.layers.quant.modules import (
    QAdd,
    QConv2d,
    QLinear,
    QRangeBatchNormAct2d,
    QRangeEvoNorm,
    QuantMeasure,
    qparam,
)
from lpdt.layers.quant.quantizers import quantize, quantize_minmax
from lpdt.layers.quant.spec import ALLOWED_BITS, MIN_STEP, RANGE_MOMENTUM, QuantSpec

__all__ = [
    "ALLOWED_BITS",
    "MIN_STEP",
    "RANGE_MOMENTUM",
    "QAdd",
    "QConv2d",
    "QLinear",
    "QRangeBatchNormAct2d",
    "QRangeEvoNorm",
    "QuantMeasure",
    "QuantSpec",
    "convert_to_int8",
    "gossip_buffer_names",
    "int8_norm",
    "qparam",
    "quantize",
    "quantize_grad",
    "quantize_minmax",
    "ste",
    "ste_minmax",
]
