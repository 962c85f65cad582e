"""Layers: normalisations (BN, GN, EvoNorm-S0, Range-EvoNorm, Range-BN) and 8-bit quantization."""

from __future__ import annotations

import torch
from torch import nn


class Add(nn.Module):
    """Residual addition as a module, so that 8-bit conversion can swap it for a quantized add."""

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a + b
