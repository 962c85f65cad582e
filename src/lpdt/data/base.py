"""The dataset interface every reader implements, plus the in-memory tensor dataset.

A dataset hands out *batches by index*: the engine owns sampling (one sampler per node over that
node's partition) and asks ``dataset.batch("train", idx, augment=True, generator=g)`` for the
tensors. Small datasets are held in memory as uint8 (images) or int64 token ids (text), and
augmentation runs on whole batches, which keeps the loader far cheaper than a training step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np
import torch


class DatasetError(RuntimeError):
    """A dataset is missing or unreadable; the message says where it was expected and how to get it."""


@dataclass(frozen=True)
class DatasetInfo:
    name: str  # registry name, e.g. "fashion_mnist"
    source: str  # where the data came from (path, package, "generated")
    stand_in: bool = False  # True when this dataset stands in for a paper dataset
    stand_in_for: str | None = None  # e.g. "cifar10"
    num_classes: int = 10
    input_kind: str = "image"  # "image" (float [B,C,H,W]) or "tokens" (int64 [B,L])
    input_shape: tuple[int, ...] = (3, 32, 32)  # per-sample shape fed to the model

    def to_dict(self) -> dict:
        return asdict(self)


class Dataset:
    """Base class: subclasses set ``info`` and implement ``labels`` and ``batch``."""

    info: DatasetInfo

    def labels(self, split: str) -> np.ndarray:
        """All labels of ``split`` ("train" or "test") as an int64 numpy array."""
        raise NotImplementedError

    def __len__(self) -> int:
        return len(self.labels("train"))

    def batch(
        self,
        split: str,
        idx: torch.Tensor,
        augment: bool = False,
        generator: torch.Generator | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Model-ready inputs and int64 labels for the samples ``idx`` of ``split``."""
        raise NotImplementedError


BatchTransform = Callable[[torch.Tensor, bool, torch.Generator | None], torch.Tensor]


class TensorDataset(Dataset):
    """Train/test tensors held in memory; ``transform(x_raw, augment, gen)`` runs per batch."""

    def __init__(
        self,
        info: DatasetInfo,
        train_x: torch.Tensor,
        train_y: torch.Tensor,
        test_x: torch.Tensor,
        test_y: torch.Tensor,
        transform: BatchTransform | None = None,
    ) -> None:
        self.info = info
        self._x = {"train": train_x, "test": test_x}
        self._y = {"train": train_y.long(), "test": test_y.long()}
        self._transform = transform

    def labels(self, split: str) -> np.ndarray:
        return self._y[split].numpy()

    def batch(self, split, idx, augment=False, generator=None):
        x = self._x[split][idx]
        if self._transform is not None:
            x = self._transform(x, augment and split == "train", generator)
        return x, self._y[split][idx]
