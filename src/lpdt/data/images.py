"""In-memory image datasets: ``cifar10``, ``cifar100`` (fine labels) and ``fashion_mnist``.

All three are held as uint8 tensors and augmented per batch (``lpdt.data.transforms``).
Fashion-MNIST is presented in CIFAR shape (zero-padded 2 px to 32x32, 3 channels) so that the
CIFAR models run on it unchanged; it is the offline stand-in for CIFAR-10.

``data.image_size`` (default: the dataset's own 32 px) downsamples both splits once at load
(antialiased bilinear, rounded back to uint8), and the training crop's padding scales with it
(4 px at 32, 2 px at 16): a ResNet-20 step at 16 px costs about a third of one at 32 px.
"""

from __future__ import annotations

import gzip
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lpdt.data.base import (
    DatasetError,
    TensorDataset,
    balanced_subset,
    check_labels,
    data_root,
    dataset_info,
)
from lpdt.data.transforms import cifar_transform

CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)  # the reference's constants
CIFAR10_STD = (0.2023, 0.1994, 0.2010)
CIFAR100_MEAN = (0.5071, 0.4865, 0.4409)  # the commonly used CIFAR-100 training-set statistics
CIFAR100_STD = (0.2673, 0.2564, 0.2762)
# Computed once from the Fashion-MNIST training set *as the model sees it* (zero-padded to 32x32),
# pixel values / 255: see docs/data.md (the unpadded 28x28 statistics are 0.2860 / 0.3530).
FASHION_MNIST_MEAN = (0.2190,) * 3
FASHION_MNIST_STD = (0.3318,) * 3

DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")


def resize_images(x: torch.Tensor, size: int | None) -> torch.Tensor:
    """uint8 [N, C, H, W] -> uint8 [N, C, size, size] (antialiased bilinear); ``None``: unchanged."""
    if size is None or (x.shape[-2] == size and x.shape[-1] == size):
        return x
    out = []
    for chunk in x.split(4096):  # bounded float memory on the 60k-image training split
        y = torch.nn.functional.interpolate(
            chunk.float(), size=(size, size), mode="bilinear", antialias=True, align_corners=False
        )
        out.append(y.round_().clamp_(0, 255).to(torch.uint8))
    return torch.cat(out)


def _image_tensors(
    cfg: Any,
    splits: dict[str, tuple[torch.Tensor, torch.Tensor]],
    name: str,
    source: str,
    classes: int,
    mean: tuple[float, ...],
    std: tuple[float, ...],
) -> TensorDataset:
    """Subset, resize and wrap ``splits`` ({split: (uint8 x [N,C,32,32], y)}) as a dataset."""
    for split, (_, y) in splits.items():  # the whole split, before a subset takes part of it
        check_labels(name, source, split, y.numpy(), classes, every=True)
    size = cfg.image_size
    train_x, train_y = _subset(*splits["train"], cfg.train_subset)
    test_x, test_y = _subset(*splits["test"], cfg.test_subset)
    train_x, test_x = resize_images(train_x, size), resize_images(test_x, size)
    side = train_x.shape[-1]
    info = dataset_info(cfg, name, source, classes, (3, side, side))
    transform = cifar_transform(mean, std, channels=3, padding=max(1, round(4 * side / 32)))
    return TensorDataset(info, train_x, train_y, test_x, test_y, transform)


def _subset(x: torch.Tensor, y: torch.Tensor, k: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    keep = torch.from_numpy(balanced_subset(y.numpy(), k))
    return x[keep].contiguous(), y[keep].contiguous()


# --- CIFAR ---------------------------------------------------------------------------------------

_CIFAR: dict[str, dict[str, Any]] = {  # name -> its files and statistics
    "cifar10": {
        "folder": "cifar-10-batches-py",
        "train": [f"data_batch_{i}" for i in range(1, 6)],
        "test": ["test_batch"],
        "key": b"labels",
        "classes": 10,
        "mean": CIFAR10_MEAN,
        "std": CIFAR10_STD,
    },
    "cifar100": {
        "folder": "cifar-100-python",
        "train": ["train"],
        "test": ["test"],
        "key": b"fine_labels",
        "classes": 100,
        "mean": CIFAR100_MEAN,
        "std": CIFAR100_STD,
    },
}


def _read_cifar_file(path: Path, key: bytes) -> tuple[np.ndarray, np.ndarray]:
    try:
        with open(path, "rb") as f:
            d = pickle.load(f, encoding="bytes")
        data, labels = np.asarray(d[b"data"]), np.asarray(d[key])
        # a cast would wrap other pixels modulo 256 and cut fractional labels to whole ones
        if len(labels) == 0:
            raise ValueError("it holds no images")
        if data.dtype != np.uint8:
            raise ValueError(f"its images are {data.dtype}, not uint8")
        if labels.dtype.kind not in "iu":
            raise ValueError(f"its labels are {labels.dtype}, not whole numbers")
        data, labels = data.reshape(len(labels), 3, 32, 32), labels.astype(np.int64)
    except Exception as e:  # truncated pickle, wrong keys, wrong sizes
        raise DatasetError(f"corrupt CIFAR file {path}: {type(e).__name__}: {e}") from None
    return data, labels


def _find_cifar_dir(root: Path, spec: dict) -> Path | None:
    for cand in (root / spec["folder"], root):
        if (cand / spec["train"][0]).is_file():
            return cand
    return None


def load_cifar(cfg: Any, name: str) -> TensorDataset:
    spec = _CIFAR[name]
    root = data_root(cfg)
    folder = _find_cifar_dir(root, spec)
    if folder is None and cfg.download:
        import torchvision.datasets as tvd

        cls = tvd.CIFAR10 if name == "cifar10" else tvd.CIFAR100
        try:
            cls(str(root), train=True, download=True)
        except Exception as e:
            raise DatasetError(f"downloading {name} into {root} failed: {e}") from None
        folder = _find_cifar_dir(root, spec)
    if folder is None:
        raise DatasetError(
            f"{name} not found: expected {root / spec['folder']}/{{{','.join(spec['train'] + spec['test'])}}} "
            f"(torchvision's python layout); set data.download: true, or copy the extracted "
            f"'{spec['folder']}' folder into {root} (data root = data.root, $LPDT_DATA_ROOT or ./data)"
        )
    splits = {}
    for split in ("train", "test"):
        xs, ys = [], []
        for fname in spec[split]:
            path = folder / fname
            if not path.is_file():
                raise DatasetError(f"{name}: missing file {path} (expected {spec[split]})")
            x, y = _read_cifar_file(path, spec["key"])
            xs.append(x)
            ys.append(y)
        splits[split] = (torch.from_numpy(np.concatenate(xs)), torch.from_numpy(np.concatenate(ys)))
    return _image_tensors(
        cfg, splits, name, str(folder), spec["classes"], spec["mean"], spec["std"]
    )


def load_cifar10(cfg: Any) -> TensorDataset:
    return load_cifar(cfg, "cifar10")


def load_cifar100(cfg: Any) -> TensorDataset:
    return load_cifar(cfg, "cifar100")


# --- Fashion-MNIST -------------------------------------------------------------------------------

_FMNIST_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
_IDX_IMAGES, _IDX_LABELS = 2051, 2049  # magic numbers: 0x00000803 (uint8, 3-D), 0x00000801 (1-D)


def read_idx(path: Path, magic: int) -> np.ndarray:
    """Read an IDX file (optionally gzipped), checking its magic number and size."""
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rb") as f:
            raw = f.read()
    except (OSError, EOFError) as e:
        raise DatasetError(f"corrupt IDX file {path}: {e}") from None
    if len(raw) < 8:
        raise DatasetError(f"corrupt IDX file {path}: only {len(raw)} bytes")
    got = int.from_bytes(raw[:4], "big")
    if got != magic:
        raise DatasetError(f"corrupt IDX file {path}: magic number {got}, expected {magic}")
    ndim = magic & 0xFF
    header = 4 + 4 * ndim
    dims = [int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    if len(raw) != header + int(np.prod(dims)):
        raise DatasetError(
            f"corrupt IDX file {path}: {len(raw) - header} data bytes, expected shape {dims}"
        )
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(dims)


def _find_idx(folder: Path, stem: str) -> Path | None:
    for name in (stem + ".gz", stem):
        if (folder / name).is_file():
            return folder / name
    return None


def _find_fmnist_dir(root: Path, partial_ok: bool = False) -> Path | None:
    """The first folder that holds the four IDX files. A folder of the data root that holds
    some of them is a partial copy, which Debian's would replace silently: refused, or with
    ``partial_ok`` (``data.download``) None, so that torchvision completes the download."""
    stems = [s for pair in _FMNIST_FILES.values() for s in pair]
    for cand in (root / "FashionMNIST" / "raw", root / "fashion-mnist", root, DEBIAN_FASHION_MNIST):
        missing = [s for s in stems if not _find_idx(cand, s)]
        if not missing:
            return cand
        if len(missing) < len(stems) and cand != DEBIAN_FASHION_MNIST:
            if partial_ok:
                return None
            raise DatasetError(
                f"fashion_mnist: {cand} holds some of its files but not "
                f"{', '.join(m + '[.gz]' for m in missing)}: complete the copy, or remove it"
            )
    return None


def read_fashion_mnist(folder: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    """Images ``[N, 28, 28]`` and labels ``[N]`` (uint8) of one Fashion-MNIST split ("train" or
    "test") from a folder of IDX files (gzipped or not), e.g. ``DEBIAN_FASHION_MNIST``."""
    img_stem, lab_stem = _FMNIST_FILES[split]
    img_path, lab_path = _find_idx(folder, img_stem), _find_idx(folder, lab_stem)
    if img_path is None or lab_path is None:
        raise DatasetError(f"Fashion-MNIST {split} files ({img_stem}, {lab_stem}) not in {folder}")
    images, labels = read_idx(img_path, _IDX_IMAGES), read_idx(lab_path, _IDX_LABELS)
    if len(images) != len(labels):
        raise DatasetError(
            f"corrupt Fashion-MNIST: {img_path} has {len(images)} images, "
            f"{lab_path} {len(labels)} labels"
        )
    return images, labels


def load_fashion_mnist(cfg: Any) -> TensorDataset:
    root = data_root(cfg)
    folder = _find_fmnist_dir(root, partial_ok=cfg.download)
    if folder is None and cfg.download:
        import torchvision.datasets as tvd

        try:
            tvd.FashionMNIST(str(root), train=True, download=True)
        except Exception as e:
            raise DatasetError(f"downloading fashion_mnist into {root} failed: {e}") from None
        folder = _find_fmnist_dir(root)
    if folder is None:
        raise DatasetError(
            f"fashion_mnist not found: expected {{train,t10k}}-{{images-idx3,labels-idx1}}-ubyte[.gz] "
            f"in {root / 'FashionMNIST' / 'raw'} or {DEBIAN_FASHION_MNIST} "
            f"(apt install dataset-fashion-mnist), or set data.download: true"
        )
    splits = {}
    for split in _FMNIST_FILES:
        images, labels = read_fashion_mnist(folder, split)
        x = torch.from_numpy(images.copy())[:, None]  # [N, 1, 28, 28]
        x = torch.nn.functional.pad(x, (2, 2, 2, 2))  # CIFAR shape: 32x32
        splits[split] = (x, torch.from_numpy(labels.astype(np.int64)))
    return _image_tensors(
        cfg, splits, "fashion_mnist", str(folder), 10, FASHION_MNIST_MEAN, FASHION_MNIST_STD
    )
