"""``tiny_cnn``: a very small CNN for tests and engine benchmarks (no normalisation layers)."""

from __future__ import annotations

from typing import Any

from torch import nn


def tiny_cnn(cfg: Any, num_classes: int, input_shape: tuple[int, ...]) -> nn.Module:
    """Two convolutions and a linear layer; any image size of at least 2 px."""
    c = input_shape[0]
    return nn.Sequential(
        nn.Conv2d(c, 8, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(16, num_classes),
    )
