"""Datasets (the specs of their readers), the skew partitioner and text datasets.

Configs name a dataset by string (``data.dataset: cifar10``); ``load_dataset(cfg.data)`` returns
a ``lpdt.data.base.Dataset`` from the reader its spec names, and the planner reads the split
sizes from the spec. This module imports no torch (the workflow's DAG reads the specs): a
reader is named as ``"module:function"`` and imported on first use.

Adding one (docs/extending.md): write the reader ``fn(cfg: DataConfig) -> Dataset`` and register
its spec from the module that defines it, ``DATASETS.add("mine", DatasetSpec(impl=load_mine))``;
the built-ins are listed below.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from lpdt.registry import Registry, Spec

if TYPE_CHECKING:
    from lpdt.data.base import Dataset


@dataclass(frozen=True)
class DatasetSpec(Spec):
    """A dataset: ``impl(cfg: DataConfig)`` reads it (``lpdt.data.base.Dataset``)."""

    # Its split sizes without a subset, for the plan (``lpdt.plan.runtime``): training samples
    # (None: not known to the plan, so a run without ``train_subset`` has no estimate) and the
    # test examples one evaluation reads (None: the plan counts DEFAULT_TEST_SIZE): read them
    # with ``full_train_size`` / ``full_test_size``
    train_size: int | None = None
    test_size: int | None = None
    # The input side in px its reader gives a model when ``data.image_size`` is unset (the
    # plan's price; None: 32, CIFAR's)
    input_px: int | None = None
    # what its examples are: images ([C, H, W]) or token ids; a model must take the same
    # (``lpdt.models.ModelSpec.inputs``: the config check)
    inputs: Literal["image", "text"] = "image"
    # The most examples a split may ask for (``data.*_subset``; None: no bound). A generated
    # dataset draws its splits in memory at the size asked, so a typo of a few zeros would
    # allocate until the machine runs out.
    max_subset: int | None = None
    # Its reader resizes images to ``data.image_size`` (the in-memory image datasets); False:
    # the key is refused rather than ignored (Imagenette crops to 224 px)
    resized: bool = True


DATASETS: Registry[DatasetSpec] = Registry("dataset", DatasetSpec)

SYNTHETIC_SIZES = (512, 256)  # the generated dataset's splits when no subset is set
_IMAGES, _TEXT = "lpdt.data.images", "lpdt.data.text"
DATASETS.add("cifar10", DatasetSpec(f"{_IMAGES}:load_cifar10", 50000, 10000))
DATASETS.add("cifar100", DatasetSpec(f"{_IMAGES}:load_cifar100", 50000, 10000))
DATASETS.add("fashion_mnist", DatasetSpec(f"{_IMAGES}:load_fashion_mnist", 60000, 10000))
DATASETS.add(  # RandomResizedCrop / CenterCrop to 224 px (lpdt.data.imagenette)
    "imagenette",
    DatasetSpec("lpdt.data.imagenette:load_imagenette", 9469, 3925, input_px=224, resized=False),
)
DATASETS.add(  # its reader's sizes when no subset is set
    "synthetic",
    DatasetSpec(
        "lpdt.data.synthetic:load_synthetic",
        SYNTHETIC_SIZES[0],
        SYNTHETIC_SIZES[1],
        max_subset=50_000,  # CIFAR-10's training split; drawing it holds ~1.2 GB of floats
    ),
)
DATASETS.add("agnews", DatasetSpec(f"{_TEXT}:agnews", 120000, 7600, inputs="text"))
DATASETS.add(  # SentEval tr / te
    "sentlen", DatasetSpec(f"{_TEXT}:sentlen", 100000, 10000, inputs="text")
)
# Stand-ins from the installed fortunes files (their readers record what they stand in for)
DATASETS.add("fortunes4", DatasetSpec(f"{_TEXT}:fortunes4", inputs="text"))
DATASETS.add("sentlen_fortunes", DatasetSpec(f"{_TEXT}:sentlen_fortunes", inputs="text"))


DEFAULT_TEST_SIZE = 1000  # test examples of a dataset whose spec gives no test size


def full_train_size(dataset: str) -> int | None:
    """Training samples of ``dataset`` without a subset (``DatasetSpec.train_size``; None: not
    known to the plan, or a dataset not registered in this process)."""
    spec = DATASETS.find(dataset)
    return spec.train_size if spec else None


def full_test_size(dataset: str) -> int:
    """Test examples of ``dataset`` without a subset (``DatasetSpec.test_size``;
    DEFAULT_TEST_SIZE when not known)."""
    spec = DATASETS.find(dataset)
    return (spec.test_size if spec else None) or DEFAULT_TEST_SIZE


def load_dataset(cfg: Any) -> Dataset:
    """Read the dataset named by ``cfg.dataset`` (a ``DataConfig``) with its spec's reader."""
    return DATASETS.get(cfg.dataset).load()(cfg)
