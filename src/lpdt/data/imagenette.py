"""``imagenette``: the fast.ai ImageNet subset, read from class folders (ImageFolder order).

Transforms follow the reference (reference §1.3): train Resize(256) -> RandomResizedCrop(224) ->
flip -> normalise (ImageNet mean/std); test Resize(256) -> CenterCrop(224) -> normalise. Random
crops and flips are drawn from the ``generator`` argument so that runs are reproducible.

**Decoded once.** Decoding a JPEG and resizing it to 256 px is most of the reader's cost (about
2 of 2.6 ms an image of a training batch on the project's CPU: ``benchmarks/bench_readers.py``),
and an epoch meets every image once. So the first batch of a split decodes the split's images
(the subset the config keeps) once, with the same code as before, into one file of uint8 pixels
under ``<root>/.cache/imagenette/`` with an index beside it; every later batch, run and process
on the machine reads the pixels from that file, memory-mapped (the operating system keeps one
copy in memory for all of them; one process writes it while the others wait). The key of the
file covers the image files (path, size, time), the resize, the versions of PIL, torchvision and
torch that decoded them and the CPU's code path, so the pixels are the ones a decode would give
there, bit for bit. Where the cache cannot be written (a read-only data root), the reader says
so once and decodes every batch, keeping recently used images in a small LRU cache, as it did
before.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import time
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch

from lpdt.data.base import Dataset, DatasetError, balanced_subset, data_root, dataset_info
from lpdt.io import write_atomic, write_json_atomic

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
LAYOUTS = ("imagenette2", "imagenette2-320", "imagenette2-160", "imagenette")
DOWNSIZED_LAYOUTS = ("imagenette2-320", "imagenette2-160")  # fastai's smaller copies
_EXTENSIONS = (".jpg", ".jpeg", ".png")
_SYSTEM_FILES = {"thumbs.db", "desktop.ini"}  # Windows' own, passed over as hidden files are
RESIZE = 256  # the short side every image is decoded to (the reference's Resize(256))
# The decoded file's layout; a change of ``decode``'s arithmetic must change it too.
DECODED_VERSION = 1


def _find_root(root: Path) -> Path | None:
    for cand in [root / name for name in LAYOUTS] + [root]:
        if (cand / "train").is_dir() and (cand / "val").is_dir():
            return cand
    return None


def _scan(folder: Path, classes: list[str]) -> tuple[list[Path], np.ndarray]:
    """The images of each class folder under ``folder``, and their labels. Hidden files (a
    file manager's ``.DS_Store``) and Windows' ``Thumbs.db`` and ``desktop.ini`` are passed
    over; any other entry that is not a .jpg, .jpeg or .png image (a folder, a .webp) is
    refused: it would be left out of the run without a word."""
    files, labels, other = [], [], []
    for c, name in enumerate(classes):
        if not (folder / name).is_dir():
            continue  # a class with no folder here has no images (the caller says so)
        for p in sorted((folder / name).iterdir()):
            if p.suffix.lower() in _EXTENSIONS:
                files.append(p)
                labels.append(c)
            elif not p.name.startswith(".") and p.name.lower() not in _SYSTEM_FILES:
                other.append(p)
    if other:
        raise DatasetError(
            f"imagenette: {len(other)} {'entry' if len(other) == 1 else 'entries'} in the class "
            f"folders of {folder} {'is' if len(other) == 1 else 'are'} not "
            f"{', '.join(_EXTENSIONS)} images (a folder, another format), e.g. {other[0]}: "
            "convert them or move them out (they would be left out of the run)"
        )
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


def decode(path: Path) -> torch.Tensor:
    """The image at ``path`` as uint8 ``[3, H, W]``, resized to ``RESIZE`` px on the short side."""
    import torchvision.transforms.v2.functional as TF  # here: ~1 s to import, for this reader
    from PIL import Image

    try:
        with Image.open(path) as im:
            img = TF.pil_to_tensor(im.convert("RGB"))
    except Exception as e:
        raise DatasetError(f"corrupt image {path}: {e}") from None
    return TF.resize(img, [RESIZE], antialias=True)


class DecodedImages:
    """The images of one split, decoded, in one memory-mapped file of uint8 pixels: image ``i``
    is ``shapes[i]`` bytes from ``offsets[i]``."""

    def __init__(self, data: Path, offsets: list[int], shapes: list[tuple[int, int, int]]) -> None:
        self._pixels = np.memmap(data, dtype=np.uint8, mode="r")
        self._offsets, self._shapes = offsets, shapes

    def __getitem__(self, i: int) -> torch.Tensor:
        c, h, w = self._shapes[i]
        start = self._offsets[i]
        # a copy: the map is read-only, and the image is small (about 260 KB)
        return torch.from_numpy(np.array(self._pixels[start : start + c * h * w])).view(c, h, w)


def decoded_key(files: list[Path]) -> str:
    """What the decoded pixels depend on: the files (path, size, time), the resize, the file's
    layout, the libraries that decode and resize, and the CPU's code path."""
    import platform

    import PIL
    import torchvision

    stats = []
    for f in files:
        st = f.stat()
        stats.append([str(f.resolve()), st.st_size, st.st_mtime_ns])
    blob = {
        "version": DECODED_VERSION,
        "resize": RESIZE,
        "pil": PIL.__version__,
        "torchvision": torchvision.__version__,
        # torch's uint8 resize takes other code paths on other CPUs (AVX2 / AVX-512 / arm64
        # against the default), which round some pixels one level apart
        "torch": torch.__version__,
        "cpu": [platform.machine(), torch.backends.cpu.get_cpu_capability()],
        "files": stats,
    }
    return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()[:20]


def open_decoded(files: list[Path], cache_dir: Path | None, split: str) -> DecodedImages | None:
    """The decoded file of these ``files`` under ``cache_dir``, written first if there is none
    (or a damaged one); None without ``cache_dir``, or where it cannot be written (said once).

    One process writes it at a time (a lock file beside it); the others wait, at most
    ``LOCK_WAIT_S``, and then read what it wrote."""
    if cache_dir is None:
        return None
    base = cache_dir / f"{split}-{decoded_key(files)}"
    data, index = base.with_suffix(".u8"), base.with_suffix(".json")
    found = _read_index(index, data, len(files))
    if found is not None:
        return DecodedImages(data, *found)
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        with _exclusive(base.with_suffix(".lock"), split):
            found = _read_index(index, data, len(files))  # written while this one waited
            if found is not None:
                return DecodedImages(data, *found)
            return _write_decoded(files, data, index, split)
    except OSError as e:  # a read-only or full data root: decode every batch instead
        print(f"imagenette: cannot write {data} ({e}); decoding every batch instead", flush=True)
        return None


# How long a process waits for another one that is writing the same decoded file.
LOCK_WAIT_S = 1800.0


@contextlib.contextmanager
def _exclusive(path: Path, split: str) -> Iterator[None]:
    """Hold the lock ``path`` (a POSIX record lock, which NFS honours; the kernel drops it when
    its holder dies); waiting for another holder is said once and bounded by ``LOCK_WAIT_S``
    (then an ``OSError``)."""
    import fcntl

    with open(path, "ab") as f:
        deadline = time.monotonic() + LOCK_WAIT_S
        said = False
        while True:
            try:
                fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise OSError(f"waited {LOCK_WAIT_S:.0f} s for {path}") from None
                if not said:
                    print(f"imagenette: waiting for another process decoding the {split} images")
                    said = True
                time.sleep(0.5)
        try:
            yield
        finally:
            fcntl.lockf(f, fcntl.LOCK_UN)


def _write_decoded(files: list[Path], data: Path, index: Path, split: str) -> DecodedImages:
    """Decode ``files`` into ``data`` and write its ``index`` (an ``OSError`` where it cannot)."""
    what = "again (the file there was damaged)" if index.exists() else "once"
    print(
        f"imagenette: decoding the {len(files):,} {split} images {what} into {data} "
        f"(later batches and runs read them from there)",
        flush=True,
    )
    t0 = time.perf_counter()
    offsets: list[int] = []
    shapes: list[tuple[int, int, int]] = []

    def write(f: IO[bytes]) -> None:
        for path in files:
            img = decode(path)
            offsets.append(f.tell())
            shapes.append((int(img.shape[0]), int(img.shape[1]), int(img.shape[2])))
            f.write(img.numpy().tobytes())

    write_atomic(data, write)
    meta = {
        "version": DECODED_VERSION,
        "offsets": offsets,
        "shapes": shapes,
        "bytes": data.stat().st_size,
    }
    write_json_atomic(index, meta)
    print(f"imagenette: decoded {len(files):,} {split} images in {time.perf_counter() - t0:.1f} s")
    return DecodedImages(data, offsets, shapes)


def _read_index(
    index: Path, data: Path, images: int
) -> tuple[list[int], list[tuple[int, int, int]]] | None:
    """The offsets and shapes of a decoded file whose index and size agree; None otherwise."""
    try:
        meta = json.loads(index.read_text())
        offsets = [int(o) for o in meta["offsets"]]
        shapes = [(int(c), int(h), int(w)) for c, h, w in meta["shapes"]]
        ok = (
            meta["version"] == DECODED_VERSION
            and len(offsets) == len(shapes) == images
            and data.stat().st_size == int(meta["bytes"])
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return (offsets, shapes) if ok else None


class ImagenetteDataset(Dataset):
    def __init__(
        self, cfg: Any, folder: Path, cache_dir: Path | None = None, lru_size: int = 256
    ) -> None:
        classes = sorted(p.name for p in (folder / "train").iterdir() if p.is_dir())
        if not classes:
            raise DatasetError(f"imagenette: no class folders in {folder / 'train'}")
        val = folder / "val"
        held = val.iterdir() if val.is_dir() else iter(())
        extra = sorted(p.name for p in held if p.is_dir() and p.name not in classes)
        if extra:  # its images were left out of the test split without a word
            raise DatasetError(
                f"imagenette: {val} holds class folder(s) {', '.join(extra)} that "
                f"{folder / 'train'} has not (a run scores the classes it trains)"
            )
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
            empty = [name for c, name in enumerate(classes) if not (labels == c).any()]
            if empty:  # a run would learn and score fewer classes than it says, and end "ok"
                raise DatasetError(
                    f"imagenette: no images of class {', '.join(empty)} in {folder / sub} "
                    f"(every class of {folder / 'train'} needs some in train and val)"
                )
            keep = balanced_subset(labels, k)
            self._files[split] = [files[i] for i in keep]
            self._y[split] = torch.from_numpy(labels[keep])
        # Each split's decoded file, opened at its first batch (None: decode every batch).
        self._cache_dir = cache_dir
        self._decoded: dict[str, DecodedImages | None] = {}
        self._lru: OrderedDict[Path, torch.Tensor] = OrderedDict()
        self._lru_size = lru_size
        # The paper's Imagenette is the full-size one; a copy downsized to 160 or 320 px (decoded
        # up to RESIZE) is other data: named and recorded as a stand-in, so labelled everywhere.
        downsized = folder.name in DOWNSIZED_LAYOUTS
        self.info = dataset_info(
            cfg,
            folder.name if downsized else "imagenette",
            str(folder),
            len(classes),
            (3, 224, 224),
            stand_in=downsized,
            stand_in_for="imagenette" if downsized else None,
        )

    def labels(self, split: str) -> np.ndarray:
        return self._y[split].numpy()

    def _image(self, split: str, i: int) -> torch.Tensor:
        """Image ``i`` of ``split``, decoded and resized to ``RESIZE`` on the short side, uint8
        ``[3, H, W]``: from the split's decoded file, or decoded now where there is none."""
        if split not in self._decoded:
            self._decoded[split] = open_decoded(self._files[split], self._cache_dir, split)
        decoded = self._decoded[split]
        if decoded is not None:
            return decoded[i]
        path = self._files[split][i]
        if path in self._lru:
            self._lru.move_to_end(path)
            return self._lru[path]
        img = self._lru[path] = decode(path)
        if len(self._lru) > self._lru_size:
            self._lru.popitem(last=False)
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
            img = self._image(split, i)
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
        return x.sub_(mean).div_(std), self._y[split][idx]  # in place: the same values


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
    return ImagenetteDataset(cfg, folder, cache_dir=root / ".cache" / "imagenette")
