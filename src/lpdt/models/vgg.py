"""VGG-11 with the paper's modified classifier (reference §7.3).

Features (cfg 'A'): conv3x3 (bias=True) -> norm [+ReLU unless EvoNorm/Range-EvoNorm] for
64, M, 128, M, 256, 256, M, 512, 512, M, 512, 512, M (M = MaxPool2d(2, 2)).
Classifier: Dropout(0.5) -> Linear(512, 512) -> ReLU -> Linear(512, classes) (the paper's
"hidden size 512"). At 32 px the features are already 1x1x512 and, as in the reference, no
pooling layer follows them; larger inputs (224 px: 7x7 features) get the reference's global
average (AvgPool2d(7) there; ``AdaptiveAvgPool2d(1)`` here, which also fits other sizes).
"""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from lpdt.layers.norms import norm_layer
from lpdt.models.common import check_image_shape, init_fp_

VGG11_CFG: tuple[int | str, ...] = (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M")


class VGG(nn.Module):
    """features -> global average pool -> flatten -> classifier."""

    def __init__(
        self,
        cfg: Any,
        layers: tuple[int | str, ...],
        in_channels: int,
        num_classes: int,
        feature_hw: tuple[int, int] = (1, 1),
        hidden: int = 512,
    ) -> None:
        super().__init__()
        self.features = nn.Sequential()
        c = in_channels
        for item in layers:
            if item == "M":
                self.features.append(nn.MaxPool2d(2, 2))
            else:
                self.features.append(nn.Conv2d(c, int(item), 3, padding=1, bias=True))
                self.features.append(norm_layer(cfg, int(item), act=True))
                c = int(item)
        # No pool on 1x1 features (CIFAR), so the cost model sees the reference's layers.
        self.pool = nn.Identity() if feature_hw == (1, 1) else nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.classifier = nn.Sequential(
            nn.Dropout(0.5),
            nn.Linear(c, hidden),
            nn.ReLU(),
            nn.Linear(hidden, num_classes),
        )
        init_fp_(self)

    def forward(self, x: Tensor) -> Tensor:
        return self.classifier(self.flatten(self.pool(self.features(x))))

    def init_lp_(self) -> None:
        """The reference has no LP init for VGG (its RangeEN gamma stays ~U(0,1)); we keep the FP
        init (gamma = 1) and document the difference."""


def vgg11(cfg: Any, num_classes: int, input_shape: tuple[int, ...]) -> VGG:
    """VGG-11 (9,496,522 parameters with EvoNorm, 10 classes); 32 px (CIFAR) or 224 px inputs."""
    c, h, w = check_image_shape("vgg11", input_shape, min_size=32)
    pools = VGG11_CFG.count("M")
    return VGG(cfg, VGG11_CFG, c, num_classes, feature_hw=(h >> pools, w >> pools))
