"""Loader cost per batch vs a ResNet-20 training step (design principle 6: fast by construction).

Measures ms per augmented batch of 32 for ``fashion_mnist`` (the offline CIFAR-10 stand-in) and
``synthetic``, and a ResNet-20 forward+backward+SGD step at batch 32 on the same machine, and
prints the ratio. If ``resnet20`` is not registered, a fixed 100 ms reference step is used (and
said so).

    .venv/bin/python benchmarks/bench_loader.py [--batches 200] [--steps 20]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from lpdt.config import DataConfig, ModelConfig
from lpdt.data import DatasetError, load_dataset

BATCH = 32


def loader_ms(name: str, batches: int) -> tuple[float, float]:
    """Median and mean ms per batch (the median is robust to other jobs preempting us)."""
    ds = load_dataset(DataConfig(dataset=name))
    n = len(ds)
    g = torch.Generator().manual_seed(0)
    idx = [torch.randint(0, n, (BATCH,), generator=g) for _ in range(batches)]
    ds.batch("train", idx[0], augment=True, generator=g)  # warm-up
    times = []
    for i in idx:
        t0 = time.perf_counter()
        ds.batch("train", i, augment=True, generator=g)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3, statistics.mean(times) * 1e3


def step_ms(steps: int) -> tuple[float, str]:
    from lpdt.models import MODELS

    if "resnet20" not in MODELS:
        return 100.0, "fixed 100 ms reference (resnet20 not registered)"
    model = MODELS.get("resnet20")(ModelConfig(), 10, (3, 32, 32))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(BATCH, 3, 32, 32), torch.randint(0, 10, (BATCH,))

    def step() -> None:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    for _ in range(3):
        step()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3, "measured ResNet-20 (EvoNorm) step, median"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    ref, how = step_ms(args.steps)
    print(
        f"training step, batch {BATCH}: {ref:.1f} ms ({how}); torch threads {torch.get_num_threads()}"
    )
    for name in ("fashion_mnist", "synthetic"):
        try:
            ms, mean = loader_ms(name, args.batches)
        except DatasetError as e:
            print(f"{name}: skipped ({e})")
            continue
        print(
            f"{name:>14}: median {ms:.3f} ms (mean {mean:.3f}) / batch of {BATCH} with augmentation = "
            f"{100 * ms / ref:.2f} % of the measured step, {ms:.2f} % of a nominal 100 ms step"
        )


if __name__ == "__main__":
    main()
