"""The dataset interface every reader implements, plus the in-memory tensor dataset.

A dataset hands out *batches by index*: the engine owns sampling (one sampler per node over that
node's partition) and asks ``dataset.batch("train", idx, augment=True, generator=g)`` for the
tensors. Small datasets are held in memory as uint8 (images) or int64 token ids (text), and
augmentation runs on whole batches, which keeps the loader far cheaper than a training step.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lpdt.errors import LpdtError


class DatasetError(LpdtError, RuntimeError):
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
        for split, y in self._y.items():  # a damaged label file: say so before training
            check_labels(info.name, info.source, split, y.numpy(), info.num_classes)

    def labels(self, split: str) -> np.ndarray:
        return self._y[split].numpy()

    def batch(
        self,
        split: str,
        idx: torch.Tensor,
        augment: bool = False,
        generator: torch.Generator | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        x = self._x[split][idx]
        if self._transform is not None:
            x = self._transform(x, augment and split == "train", generator)
        return x, self._y[split][idx]


# --- helpers shared by every reader (image and text) -------------------------------------------


def check_labels(
    name: str, source: str, split: str, labels: np.ndarray, num_classes: int, every: bool = False
) -> None:
    """Refuse a split with no example or with a label outside ``0..num_classes - 1``, and with
    ``every`` (a reader's whole split, before any subset) one that lacks a class: a run would
    learn and score fewer classes than it says, and end "ok"."""
    y = np.asarray(labels)
    if len(y) == 0:  # else a traceback after an epoch (the accuracy curve's rows)
        raise DatasetError(f"{name} ({source}): no {split} examples: an empty or truncated file")
    bad = y[(y < 0) | (y >= num_classes)]
    if len(bad):
        raise DatasetError(
            f"{name} ({source}): {len(bad)} {split} label(s) outside 0..{num_classes - 1}, e.g. "
            f"{int(bad[0])}: a damaged or foreign label file"
        )
    missing = sorted(set(range(num_classes)) - {int(c) for c in np.unique(y)}) if every else []
    if missing:
        shown = ", ".join(map(str, missing[:10])) + (" ..." if len(missing) > 10 else "")
        raise DatasetError(
            f"{name} ({source}): no {split} example of class {shown} (of 0..{num_classes - 1}): "
            "a partial or foreign file; a run would learn and score fewer classes than it says"
        )


def dataset_info(
    cfg: Any,
    name: str,
    source: str,
    num_classes: int,
    input_shape: tuple[int, ...],
    input_kind: str = "image",
    stand_in: bool = False,
    stand_in_for: str | None = None,
) -> DatasetInfo:
    """Build a ``DatasetInfo`` that records stand-in status from the dataset *and* the config.

    A dataset that is itself a stand-in passes ``stand_in=True, stand_in_for=...``; a real dataset
    named in the config as standing in for another (``data.stand_in_for: cifar10``) becomes a
    stand-in too, so no substitution goes unrecorded.
    """
    cfg_for = getattr(cfg, "stand_in_for", None)
    if cfg_for:
        stand_in, stand_in_for = True, cfg_for
    return DatasetInfo(
        name=name,
        source=source,
        stand_in=bool(stand_in),
        stand_in_for=stand_in_for,
        num_classes=num_classes,
        input_kind=input_kind,
        input_shape=tuple(input_shape),
    )


def data_root(cfg: Any) -> Path:
    """The data root: ``cfg.root``, else ``$LPDT_DATA_ROOT``, else ``./data``."""
    root = getattr(cfg, "root", None) or os.environ.get("LPDT_DATA_ROOT") or "./data"
    return Path(root).expanduser()


def balanced_subset(labels: np.ndarray, k: int | None) -> np.ndarray:
    """Indices of a class-balanced, deterministic subset of ``k`` samples (all when ``k`` is None).

    Takes the first samples of each class in file order (no randomness, so the subset does not
    depend on any seed), round-robin over the classes: ``k // C`` per class, the remainder to the
    lowest class ids, and a class that runs out leaves its share to the others. Indices come back
    in file order.
    """
    labels = np.asarray(labels)
    n = len(labels)
    if k is None or k >= n:
        return np.arange(n, dtype=np.int64)
    if k < 1:
        raise ValueError(f"a subset must keep at least 1 sample, got {k}")
    order = np.argsort(labels, kind="stable")
    sorted_labels = labels[order]
    starts = np.searchsorted(sorted_labels, sorted_labels, side="left")
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n) - starts  # position of each sample within its class
    # Order samples by (rank within class, class) and keep the first k.
    pick = np.lexsort((labels, rank))[: int(k)]
    return np.sort(pick).astype(np.int64)
