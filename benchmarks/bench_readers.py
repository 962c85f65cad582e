"""The image readers side by side: milliseconds an image of a training batch, with augmentation,
on fake files in the real formats (CIFAR-10's python pickles, an Imagenette folder of JPEGs).

The paper's price (``lpdt.plan.gpu``) measured CIFAR-10's data cost on a GPU host and carries it
to Imagenette by these readers' difference on the project's CPU. Each round reads one epoch of a
fresh dataset object in a random order, in batches of ``--batch``, one thread, after a warm-up
epoch (the imports, the files' first open and Imagenette's decoded file, written once, are not
counted): an epoch of the real Imagenette
(9,469 training images) meets each image once, as a fresh object does here. The Imagenette
images are ``--width`` x ``--height`` JPEGs of smooth content with noise at quality 90 (the
full-size Imagenette's images are ImageNet's, most about 500 x 375).

    .venv/bin/python benchmarks/bench_readers.py --out /tmp/readers.tsv

Prints and writes one row per reader: the median of ``--rounds`` epochs and their spread.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' CIFAR-10 writer
from tests.data.test_readers import write_cifar10  # noqa: E402

COLUMNS = ["reader", "images", "batch", "rounds", "ms_per_image", "ms_min", "ms_max", "torch"]


def write_imagenette(root: Path, images: int, width: int, height: int) -> None:
    """An ``imagenette2`` folder: ``images`` training JPEGs over two classes, two test ones."""
    from PIL import Image

    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:height, 0:width]
    for split, n in (("train", images), ("val", 2)):
        for i in range(n):
            d = root / "imagenette2" / split / ("n01440764", "n02102040")[i % 2]
            d.mkdir(parents=True, exist_ok=True)
            waves = [np.sin(xx / (9 + (i + c) % 13) + yy / (17 + c)) for c in range(3)]
            arr = np.stack([w * 90 + 128 + rng.normal(0, 8, w.shape) for w in waves], -1)
            Image.fromarray(arr.clip(0, 255).astype(np.uint8)).save(d / f"{i}.JPEG", quality=90)


def epoch_ms(dataset: str, root: Path, batch: int, seed: int) -> float:
    """Milliseconds an image of one epoch of a fresh dataset object, augmented, in random order."""
    from lpdt.config import DataConfig
    from lpdt.data import load_dataset

    ds = load_dataset(DataConfig(dataset=dataset, root=str(root)))
    n = len(ds.labels("train"))
    gen = torch.Generator().manual_seed(seed)
    order = torch.randperm(n, generator=gen)
    t0 = time.perf_counter()
    for start in range(0, n, batch):
        ds.batch("train", order[start : start + batch], True, gen)
    return (time.perf_counter() - t0) * 1e3 / n


def measure(dataset: str, root: Path, args: argparse.Namespace) -> dict[str, object]:
    epoch_ms(dataset, root, args.batch, seed=-1 % 2**31)  # warm-up: imports, first file opens
    times = [epoch_ms(dataset, root, args.batch, seed=r) for r in range(args.rounds)]
    return {
        "reader": dataset,
        "images": args.images,
        "batch": args.batch,
        "rounds": args.rounds,
        "ms_per_image": round(statistics.median(times), 4),
        "ms_min": round(min(times), 4),
        "ms_max": round(max(times), 4),
        "torch": torch.__version__,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="TSV to write (one row per reader)")
    ap.add_argument("--images", type=int, default=512, help="training images per reader")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3, help="epochs timed per reader (median)")
    ap.add_argument("--width", type=int, default=500)
    ap.add_argument("--height", type=int, default=375)
    ap.add_argument("--threads", type=int, default=1, help="torch's threads (the price: 1)")
    args = ap.parse_args(argv)
    if args.images < args.batch or args.rounds < 1:
        ap.error("--images must be at least --batch, and --rounds at least 1")
    torch.set_num_threads(args.threads)
    rows = []
    with tempfile.TemporaryDirectory(prefix="lpdt-readers-") as tmp:
        root = Path(tmp)
        write_cifar10(root, per_batch=max(1, args.images // 5))  # five training batches
        write_imagenette(root, args.images, args.width, args.height)
        for dataset in ("cifar10", "imagenette"):
            row = measure(dataset, root, args)
            rows.append(row)
            print(
                f"{dataset:<11} {row['ms_per_image']:.4f} ms an image "
                f"({row['ms_min']:.4f}-{row['ms_max']:.4f}, {args.rounds} epochs of {args.images})",
                flush=True,
            )
    ratio = float(rows[1]["ms_per_image"]) / float(rows[0]["ms_per_image"])  # type: ignore[arg-type]
    diff = float(rows[1]["ms_per_image"]) - float(rows[0]["ms_per_image"])  # type: ignore[arg-type]
    print(f"imagenette - cifar10: {diff:.4f} ms an image (ratio {ratio:.1f}x)")
    if args.out:
        with args.out.open("w", newline="") as f:
            w = csv.DictWriter(f, COLUMNS, delimiter="\t")
            w.writeheader()
            w.writerows(rows)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
