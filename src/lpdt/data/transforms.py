"""Batched image transforms on uint8 tensors: CIFAR-style crop + flip, and normalisation.

Augmentation runs on a whole batch at once (one pad, one gather, one ``torch.where``) and draws
all randomness from the ``generator`` argument, so the loader costs a small fraction of a training
step and a run is reproducible from its seeds.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F


def random_crop_flip(
    x: torch.Tensor, padding: int = 4, generator: torch.Generator | None = None
) -> torch.Tensor:
    """RandomCrop(H, padding) + RandomHorizontalFlip per sample, vectorised over ``x`` [B,C,H,W]."""
    b, c, h, w = x.shape
    padded = F.pad(x, (padding, padding, padding, padding))
    oy = torch.randint(0, 2 * padding + 1, (b,), generator=generator)
    ox = torch.randint(0, 2 * padding + 1, (b,), generator=generator)
    flip = torch.rand(b, generator=generator) < 0.5
    rows = oy[:, None] + torch.arange(h)  # [B, H]
    cols = ox[:, None] + torch.arange(w)  # [B, W]
    # Flipping the column index list flips the crop: one gather does crop and flip together.
    cols = torch.where(flip[:, None], cols.flip(1), cols)
    bi = torch.arange(b)[:, None, None]
    out = padded.permute(0, 2, 3, 1)[bi, rows[:, :, None], cols[:, None, :]]  # [B, H, W, C]
    return out.permute(0, 3, 1, 2).contiguous()


def normalize(x: torch.Tensor, mean: tuple[float, ...], std: tuple[float, ...]) -> torch.Tensor:
    """uint8 [B,C,H,W] -> float32, ``(x/255 - mean) / std`` per channel."""
    m = torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1)
    s = torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1)
    return (x.float().div_(255.0) - m).div_(s)


def cifar_transform(
    mean: tuple[float, ...], std: tuple[float, ...], channels: int = 3, padding: int = 4
) -> Callable[[torch.Tensor, bool, torch.Generator | None], torch.Tensor]:
    """The reference's CIFAR pipeline (crop with ``padding``, flip, normalise) as a batch
    transform; grey inputs are repeated to 3 channels."""

    def transform(x: torch.Tensor, augment: bool, gen: torch.Generator | None) -> torch.Tensor:
        if augment:
            x = random_crop_flip(x, padding, gen)
        out = normalize(x, mean, std)
        if out.shape[1] != channels:
            out = out.expand(-1, channels, -1, -1).contiguous()
        return out

    return transform
