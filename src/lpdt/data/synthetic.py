"""``synthetic``: a small generated image dataset for tests (class templates plus noise)."""

from __future__ import annotations

from typing import Any

import torch

from lpdt.data import SYNTHETIC_SIZES
from lpdt.data.base import DatasetInfo, TensorDataset


def make_synthetic(
    n_train: int = 512,
    n_test: int = 256,
    num_classes: int = 10,
    shape: tuple[int, int, int] = (3, 32, 32),
    noise: float = 60.0,
    seed: int = 0,
) -> TensorDataset:
    """Each class is a fixed random template; samples are the template plus Gaussian noise.

    Templates are random 4x4 colour patterns upsampled to the image size, so that classes differ
    in spatial structure *and* in their per-channel means: small CNNs with global pooling can
    learn them in a few dozen steps, which is what the engine tests need.
    """
    g = torch.Generator().manual_seed(seed)
    coarse = torch.rand((num_classes, shape[0], 4, 4), generator=g) * 255
    templates = torch.nn.functional.interpolate(coarse, size=shape[1:], mode="nearest")

    def draw(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.arange(n) % num_classes
        y = y[torch.randperm(n, generator=g)]
        x = templates[y] + noise * torch.randn((n, *shape), generator=g)
        return x.clamp(0, 255).to(torch.uint8), y

    train_x, train_y = draw(n_train)
    test_x, test_y = draw(n_test)

    def transform(x: torch.Tensor, augment: bool, gen: torch.Generator | None) -> torch.Tensor:
        return x.float().div_(127.5).sub_(1.0)

    info = DatasetInfo(
        name="synthetic",
        source="generated (lpdt.data.synthetic)",
        num_classes=num_classes,
        input_shape=shape,
    )
    return TensorDataset(info, train_x, train_y, test_x, test_y, transform)


def load_synthetic(cfg: Any) -> TensorDataset:
    """Generated at ``data.image_size`` px (None: 32; it was 32 px whatever was asked before
    2026-12-01)."""
    n_train = cfg.train_subset or SYNTHETIC_SIZES[0]
    n_test = cfg.test_subset or SYNTHETIC_SIZES[1]
    side = cfg.image_size or 32
    return make_synthetic(n_train=n_train, n_test=n_test, shape=(3, side, side))
