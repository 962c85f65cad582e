"""ResNets: CIFAR ResNet-20/54 (reference §7.1) and ImageNet-style ResNet-18 (reference §7.2).

Built only from ``nn.Conv2d``, ``nn.Linear``, the norm slots of ``lpdt.layers.norms`` and
``lpdt.layers.Add`` so that ``lpdt.layers.quant.convert_to_int8`` can swap modules one for one.

Block (reference ``BasicBlock``): conv3x3(s) -> norm [+ReLU] -> conv3x3 -> norm -> Add(shortcut)
[-> ReLU]. The bracketed ReLUs exist for BN-style norms only; EvoNorm/Range-EvoNorm carry their
own gate in *both* norms (also the one before the add) and nothing follows the add. Shortcut:
identity, or option B (1x1 conv, stride s, no bias -> norm without ReLU / gated norm) when the
stride or width changes. All convs have no bias.
"""

from __future__ import annotations

from typing import Any, cast

from torch import Tensor, nn

from lpdt.layers import Add
from lpdt.layers.norms import norm_layer, post_add_act
from lpdt.models.common import check_image_shape, init_fp_


class BasicBlock(nn.Module):
    """The two-conv residual block. Registration order = the reference's parameter order."""

    def __init__(self, cfg: Any, in_planes: int, planes: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.norm1 = norm_layer(cfg, planes, act=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.norm2 = norm_layer(cfg, planes, act=False)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False),
                norm_layer(cfg, planes, act=False),
            )
        self.add = Add()
        self.act = post_add_act(cfg.norm)

    def forward(self, x: Tensor) -> Tensor:
        out = self.norm2(self.conv2(self.norm1(self.conv1(x))))
        return self.act(self.add(out, self.shortcut(x)))


class ResNet(nn.Module):
    """stem -> stages of ``BasicBlock``s -> global average pool -> Linear.

    The pool is ``AdaptiveAvgPool2d(1)``: at the paper's resolutions it equals the reference's
    AvgPool2d(8) (CIFAR, 8x8 map) and AvgPool2d(7) (224 px, 7x7 map), and it also accepts other
    input sizes.
    """

    def __init__(
        self,
        cfg: Any,
        stem: nn.Sequential,
        stem_planes: int,
        planes: tuple[int, ...],
        blocks: tuple[int, ...],
        strides: tuple[int, ...],
        num_classes: int,
    ) -> None:
        super().__init__()
        self.stem = stem
        in_planes = stem_planes
        self.stages = nn.Sequential()
        for p, n, s in zip(planes, blocks, strides, strict=True):
            stage = nn.Sequential()
            for i in range(n):
                stage.append(BasicBlock(cfg, in_planes, p, s if i == 0 else 1))
                in_planes = p
            self.stages.append(stage)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(in_planes, num_classes)
        init_fp_(self)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc(self.flatten(self.pool(self.stages(self.stem(x)))))

    def init_lp_(self) -> None:
        """Reference ``init_modelq`` (reference §7.1): norms gamma=1 beta=0, then gamma=0 in each block's last
        norm (``norm2``, before the add: zero-init residual), fc ~ N(0, 0.01) with bias 0.

        Parameters are reached by attribute name (``stem.1``, ``norm1``, ``norm2``, ``shortcut.1``)
        so this also works after the 8-bit conversion has swapped the modules.
        """
        norms = [self.stem[1]]
        for block in self.blocks():
            norms += [block.norm1, block.norm2]
            if isinstance(block.shortcut, nn.Sequential):
                norms.append(block.shortcut[1])
        for m in norms:
            m.get_parameter("weight").fill_(1.0)
            m.get_parameter("bias").zero_()
        for block in self.blocks():
            block.norm2.get_parameter("weight").zero_()
        nn.init.normal_(self.fc.weight, 0.0, 0.01)
        nn.init.zeros_(self.fc.bias)

    def blocks(self) -> list[BasicBlock]:
        return [cast(BasicBlock, b) for stage in self.stages for b in stage.children()]


def resnet_cifar(cfg: Any, num_classes: int, input_shape: tuple[int, ...], depth: int) -> ResNet:
    """The reference's ``ResNet_cifar10``: n = (depth - 2) // 6 blocks per stage, widths 16/32/64."""
    c, _, _ = check_image_shape(f"resnet{depth}", input_shape, min_size=8)
    n = (depth - 2) // 6
    stem = nn.Sequential(
        nn.Conv2d(c, 16, 3, stride=1, padding=1, bias=False), norm_layer(cfg, 16, act=True)
    )
    return ResNet(cfg, stem, 16, (16, 32, 64), (n, n, n), (1, 2, 2), num_classes)


def resnet8(cfg: Any, num_classes: int, input_shape: tuple[int, ...]) -> ResNet:
    """CIFAR ResNet-8 (1 block per stage; 78,378 parameters with EvoNorm, 10 classes): the
    quick scale's claims model, about 0.4x ResNet-20's CPU time per step (docs/quick-scale.md)."""
    return resnet_cifar(cfg, num_classes, input_shape, depth=8)


def resnet20(cfg: Any, num_classes: int, input_shape: tuple[int, ...]) -> ResNet:
    """CIFAR ResNet-20 (3 blocks per stage; 273,258 parameters with EvoNorm, 10 classes)."""
    return resnet_cifar(cfg, num_classes, input_shape, depth=20)


def resnet54(cfg: Any, num_classes: int, input_shape: tuple[int, ...]) -> ResNet:
    """The reference's "ResNet-54": int((54-2)/6) = 8 blocks per stage (really 50 layers),
    760,458 parameters with EvoNorm, the paper's 0.76 M (reference §7.1, §14.16)."""
    return resnet_cifar(cfg, num_classes, input_shape, depth=54)


def resnet18(cfg: Any, num_classes: int, input_shape: tuple[int, ...]) -> ResNet:
    """ImageNet-style ResNet-18 for 224 px Imagenette (reference §7.2).

    Stem conv7x7 s2 -> norm [+ReLU] -> MaxPool 3x3 s2; stages 64/128/256/512 with 2 blocks each.
    Unlike the reference (reference §14.5), the configured norm is used everywhere and BN/GN stems get
    their ReLU. Smaller inputs work (global pooling) but shrink the maps fast: at 32 px the last
    stage sees 1x1 maps; the paper uses 224 px.
    """
    c, _, _ = check_image_shape("resnet18", input_shape, min_size=32)
    stem = nn.Sequential(
        nn.Conv2d(c, 64, 7, stride=2, padding=3, bias=False),
        norm_layer(cfg, 64, act=True),
        nn.MaxPool2d(3, stride=2, padding=1),
    )
    return ResNet(cfg, stem, 64, (64, 128, 256, 512), (2, 2, 2, 2), (1, 2, 2, 2), num_classes)
