"""A tiny network whose operation counts and memory are computed by hand in the tests."""

from __future__ import annotations

import torch
from torch import nn

from lpdt.layers import Add
from lpdt.layers.norms import RangeBatchNormAct2d, RangeEvoNorm

TINY_SHAPE = (2, 8, 8)


class Tiny(nn.Module):
    """conv(2->4, 3x3) -> norm -> conv(4->4, 3x3, s2) + shortcut conv(4->4, 1x1, s2) -> add
    -> relu -> relu (the same module twice) -> avgpool -> linear(4->3)."""

    def __init__(self, norm: str = "rangeen") -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(2, 4, 3, padding=1, bias=False)
        self.norm1 = RangeEvoNorm(4, groups=2) if norm == "rangeen" else RangeBatchNormAct2d(4)
        self.conv2 = nn.Conv2d(4, 4, 3, stride=2, padding=1, bias=False)
        self.short = nn.Conv2d(4, 4, 1, stride=2, bias=False)
        self.add = Add()
        self.relu = nn.ReLU()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm1(self.conv1(x))
        y = self.relu(self.relu(self.add(self.conv2(h), self.short(h))))
        return self.fc(torch.flatten(self.pool(y), 1))
