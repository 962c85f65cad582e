"""``imagenette``: the fast.ai ImageNet subset, read lazily from class folders (ImageFolder order).

Images are decoded per batch with PIL (a small LRU cache keeps recently used images, already
resized to 256 px on the short side), never held in memory in full. Transforms follow the
reference (reference §1.3): train Resize(256) -> RandomResizedCrop(224) -> flip -> normalise (ImageNet
mean/std); test Resize(256) -> CenterCrop(224) -> normalise. Random crops and flips are drawn from
the ``generator`` argument so that runs are reproducible.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lpdt.data.base import Dataset, DatasetError, balanced_subset, data_root, dataset_info

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
LAYOUTS = ("imagenette2", "imagenette2-320", "imagenette2-160", "imagenette")
_EXTENSIONS = (".jpg", ".jpeg", ".png")


def _find_root(root: Path) -> Path | None:
    for cand in [root / name for name in LAYOUTS] + [root]:
        if (cand / "train").is_dir() and (cand / "val").is_dir():
            return cand
    return None


def _scan(folder: Path, classes: list[str]) -> tuple[list[Path], np.ndarray]:
    files, labels = [], []
    for c, name in enumerate(classes):
        for p in sorted((folder / name).iterdir()):
            if p.suffix.lower() in _EXTENSIONS:
                files.append(p)
                labels.append(c)
    return files, np.asarray(labels, dtype=np.int64)


def _rrc_params(h: int, w: int, gen: torch.Generator | None) -> tuple[int, int, int, int]:
    """torchvision's RandomResizedCrop.get_params (scale 0.08-1, ratio 3/4-4/3) on ``gen``."""
    area = h * w
    log_ratio = (math.log(3 / 4), math.log(4 / 3))
    for _ in range(10):
        target = area * float(torch.empty(1).uniform_(0.08, 1.0, generator=gen))
        ratio = math.exp(float(torch.empty(1).uniform_(*log_ratio, generator=gen)))
        cw = int(round(math.sqrt(target * ratio)))
        ch = int(round(math.sqrt(target / ratio)))
        if 0 < cw <= w and 0 < ch <= h:
            top = int(torch.randint(0, h - ch + 1, (1,), generator=gen))
            left = int(torch.randint(0, w - cw + 1, (1,), generator=gen))
            return top, left, ch, cw
    ratio = w / h  # fallback: central crop
    if ratio < 3 / 4:
        cw, ch = w, int(round(w / (3 / 4)))
    elif ratio > 4 / 3:
        ch, cw = h, int(round(h * (4 / 3)))
    else:
        cw, ch = w, h
    return (h - ch) // 2, (w - cw) // 2, ch, cw


class ImagenetteDataset(Dataset):
    def __init__(self, cfg: Any, folder: Path, cache_size: int = 256) -> None:
        classes = sorted(p.name for p in (folder / "train").iterdir() if p.is_dir())
        if not classes:
            raise DatasetError(f"imagenette: no class folders in {folder / 'train'}")
        self.classes = classes
        self._files: dict[str, list[Path]] = {}
        self._y: dict[str, torch.Tensor] = {}
        for split, sub, k in (
            ("train", "train", cfg.train_subset),
            ("test", "val", cfg.test_subset),
        ):
            files, labels = _scan(folder / sub, classes)
            if not files:
                raise DatasetError(f"imagenette: no images in {folder / sub}/<class>/*.JPEG")
            keep = balanced_subset(labels, k)
            self._files[split] = [files[i] for i in keep]
            self._y[split] = torch.from_numpy(labels[keep])
        self._cache: OrderedDict[Path, torch.Tensor] = OrderedDict()
        self._cache_size = cache_size
        self.info = dataset_info(cfg, "imagenette", str(folder), len(classes), (3, 224, 224))

    def labels(self, split: str) -> np.ndarray:
        return self._y[split].numpy()

    def _load(self, path: Path) -> torch.Tensor:
        """Decoded image, resized to 256 on the short side, uint8 [3, H, W] (cached)."""
        if path in self._cache:
            self._cache.move_to_end(path)
            return self._cache[path]
        import torchvision.transforms.v2.functional as TF  # here: ~1 s to import, for this reader
        from PIL import Image

        try:
            with Image.open(path) as im:
                img = TF.pil_to_tensor(im.convert("RGB"))
        except Exception as e:
            raise DatasetError(f"corrupt image {path}: {e}") from None
        img = TF.resize(img, [256], antialias=True)
        self._cache[path] = img
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return img

    def batch(
        self,
        split: str,
        idx: torch.Tensor,
        augment: bool = False,
        generator: torch.Generator | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        import torchvision.transforms.v2.functional as TF

        idx = torch.as_tensor(idx, dtype=torch.long)
        out = []
        for i in idx.tolist():
            img = self._load(self._files[split][i])
            if augment and split == "train":
                top, left, ch, cw = _rrc_params(img.shape[1], img.shape[2], generator)
                img = TF.resized_crop(img, top, left, ch, cw, [224, 224], antialias=True)
                if float(torch.rand(1, generator=generator)) < 0.5:
                    img = img.flip(-1)
            else:
                img = TF.center_crop(img, [224, 224])
            out.append(img)
        x = torch.stack(out).float().div_(255.0)
        mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
        std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
        return (x - mean) / std, self._y[split][idx]


def load_imagenette(cfg: Any) -> ImagenetteDataset:
    root = data_root(cfg)
    folder = _find_root(root)
    if folder is None and cfg.download:
        import torchvision.datasets as tvd

        try:
            for split in ("train", "val"):
                tvd.Imagenette(str(root), split=split, size="full", download=True)
        except Exception as e:
            raise DatasetError(f"downloading imagenette into {root} failed: {e}") from None
        folder = _find_root(root)
    if folder is None:
        raise DatasetError(
            f"imagenette not found: expected {root}/imagenette2[-320|-160]/{{train,val}}/<wnid>/*.JPEG "
            f"(or {root}/imagenette/{{train,val}}); set data.download: true, or extract "
            f"imagenette2.tgz from https://github.com/fastai/imagenette into {root}"
        )
    return ImagenetteDataset(cfg, folder)
