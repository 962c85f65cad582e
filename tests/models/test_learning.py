"""ResNet-20 learns with every norm: a short single-node run on a Fashion-MNIST subset.

Reads the Debian package's IDX files directly (/usr/share/datasets/fashion-mnist); skipped when
they are missing. Images are padded 28 -> 32 and repeated to 3 channels (the CIFAR model's input).
"""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from lpdt.config import ModelConfig
from lpdt.data.images import DEBIAN_FASHION_MNIST, read_fashion_mnist
from lpdt.models import make_model

ROOT = DEBIAN_FASHION_MNIST
N_TRAIN, N_TEST, EPOCHS, BATCH, LR = 640, 500, 5, 32, 0.01


def _read(split: str, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The first n images (padded to 3 x 32 x 32, normalised) and labels of a split."""
    images, labels = read_fashion_mnist(ROOT, split)
    x = torch.from_numpy(images[:n, None].astype(np.float32) / 255.0)
    x = F.pad((x - 0.286) / 0.353, (2, 2, 2, 2)).repeat(1, 3, 1, 1)  # 3 x 32 x 32
    return x, torch.from_numpy(labels[:n].astype(np.int64))


@pytest.fixture(scope="module")
def fmnist():
    if not (ROOT / "t10k-labels-idx1-ubyte.gz").is_file():
        pytest.skip(f"Fashion-MNIST not installed under {ROOT} (Debian: dataset-fashion-mnist)")
    return _read("train", N_TRAIN), _read("test", N_TEST)


def _train_and_eval(norm: str, data) -> tuple[float, float]:
    (xtr, ytr), (xte, yte) = data
    torch.manual_seed(0)
    model = make_model("resnet20", ModelConfig(norm=norm), 10, (3, 32, 32))
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9, nesterov=True)
    g = torch.Generator().manual_seed(0)
    t0 = time.perf_counter()
    model.train()
    for _ in range(EPOCHS):
        perm = torch.randperm(N_TRAIN, generator=g)
        for i in range(0, N_TRAIN, BATCH):
            idx = perm[i : i + BATCH]
            loss = F.cross_entropy(model(xtr[idx]), ytr[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        acc = float((model(xte).argmax(1) == yte).float().mean()) * 100
    return acc, time.perf_counter() - t0


# slow (about 20 s a norm on the 2-core VM); the default suite trains the tiny models end to end
# (tests/engine) and `make report` trains ResNet-8 with EvoNorm
@pytest.mark.slow
@pytest.mark.parametrize("norm", ["evonorm", "batchnorm", "groupnorm", "rangeen", "rangebn"])
def test_resnet20_learns_with_every_norm(fmnist, norm):
    acc, _ = _train_and_eval(norm, fmnist)
    assert acc > 40.0, f"{norm}: {acc:.1f}% after {EPOCHS} epochs on {N_TRAIN} samples"
