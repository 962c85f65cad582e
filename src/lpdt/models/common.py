"""Initialisation shared by the vision models (reference §7).

Full precision (``init_fp_``, applied by every factory): conv weights ~ N(0, sqrt(2 / (k*k*C_out)))
(He, fan-out), conv biases 0, norms gamma=1 beta=0 v=1 (their constructors), Linear layers at the
PyTorch default. Low precision (``lpdt.layers.quant.convert.init_lp_``, the reference's ``init_modelq``, reference §7.1): the models decide
what it means through an ``init_lp_`` method (ResNets: zero gamma of each block's last norm,
fc ~ N(0, 0.01) with bias 0; VGG: nothing, as the reference has no LP init for VGG).
"""

from __future__ import annotations

import math

from torch import nn


def init_fp_(model: nn.Module) -> nn.Module:
    """The reference's full-precision init (``init_model``), in place; returns ``model``."""
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            k = m.kernel_size[0] * m.kernel_size[1]
            nn.init.normal_(m.weight, 0.0, math.sqrt(2.0 / (k * m.out_channels)))
            if m.bias is not None:
                nn.init.zeros_(m.bias)
    return model


def check_image_shape(
    name: str, input_shape: tuple[int, ...], min_size: int
) -> tuple[int, int, int]:
    """``(C, H, W)`` of an image input, or a clear error for token inputs / too small images."""
    if len(input_shape) != 3:
        raise ValueError(
            f"model {name!r} needs image inputs of shape (C, H, W); got input_shape={tuple(input_shape)}"
        )
    c, h, w = (int(s) for s in input_shape)
    if h < min_size or w < min_size:
        raise ValueError(
            f"model {name!r} needs images of at least {min_size}x{min_size} pixels; got {h}x{w}"
        )
    return c, h, w
