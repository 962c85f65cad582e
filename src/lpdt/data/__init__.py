"""Datasets (registry + readers), the skew partitioner and text datasets.

Configs name datasets by string; ``load_dataset(cfg.data)`` returns a ``Dataset``
(see ``lpdt.data.base``). Readers register themselves on import below.
"""

from __future__ import annotations

from collections.abc import Callable

from lpdt.data.base import Dataset, DatasetError, DatasetInfo, TensorDataset
from lpdt.registry import Registry

DatasetFactory = Callable[..., Dataset]  # fn(cfg: DataConfig) -> Dataset
DATASETS: Registry[DatasetFactory] = Registry("dataset")


def load_dataset(cfg) -> Dataset:
    """Build the dataset named by ``cfg.dataset`` (a ``DataConfig``)."""
    return DATASETS.get(cfg.dataset)(cfg)


# Readers register themselves on import.
from lpdt.data import (  # noqa: E402,F401
    imagenette,
    images,
    synthetic,
    text,
)

__all__ = ["DATASETS", "Dataset", "DatasetError", "DatasetInfo", "TensorDataset", "load_dataset"]
