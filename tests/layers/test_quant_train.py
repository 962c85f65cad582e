"""Does an 8-bit ResNet-20 train about as well as the fp32 model? Fashion-MNIST subset, slow.

Data: 3,000 training and 1,000 test images, downsampled to 16x16 (a third of the compute of
28 px) so that a budget at which the reference's LP init no longer dominates fits a slow test.
fp32 is the EvoNorm model with its own init, int8 the 8-bit Range-EvoNorm model with the
reference's LP init (zero gamma in each block's last norm), as in the paper's comparison. At
~100 steps that init alone costs ~15 points (measured; docs/int8.md), the quantisation about
nothing. Single node: 8 epochs at batch 32 (750 steps). 8 nodes: the real engine
(``lpdt.train.train``, directed ring, Choco-SGD, no compression), 16 epochs at 16 images per
node per step (368 steps per node). SGD lr 0.05 for both.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import lpdt.train
from lpdt.config import ModelConfig, PrecisionConfig, RunConfig
from lpdt.data.base import DatasetInfo, TensorDataset
from lpdt.data.images import DEBIAN_FASHION_MNIST, read_fashion_mnist
from lpdt.layers.quant import convert_to_int8
from lpdt.models import MODELS

ROOT = DEBIAN_FASHION_MNIST
N_TRAIN, N_TEST, SIZE, EPOCHS = 3000, 1000, 16, 8
ENGINE_EPOCHS = 16  # 8 nodes: 23 iterations per epoch (each node takes 16 images per step)
LR = 0.05
TOLERANCE = 3.0  # "within a few points" (percentage points of test accuracy)


def _read(split: str, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The first ``n`` images of a split, normalised and downsampled to SIZE, and their labels."""
    images, labels = read_fashion_mnist(ROOT, split)
    x = (torch.from_numpy(images[:n, None].astype(np.float32)) / 255.0 - 0.286) / 0.353
    x = F.interpolate(x, size=SIZE, mode="bilinear", antialias=True, align_corners=False)
    return x, torch.from_numpy(labels[:n].astype(np.int64))


@pytest.fixture(scope="module")
def data():
    if not ROOT.exists():
        pytest.skip("Debian dataset-fashion-mnist not installed")
    return _read("train", N_TRAIN), _read("test", N_TEST)


def _train_eval(model: torch.nn.Module, data, batch: int = 32) -> float:
    (xtr, ytr), (xte, yte) = data
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    gen = torch.Generator().manual_seed(0)
    for _ in range(EPOCHS):
        model.train()
        for idx in torch.randperm(len(xtr), generator=gen).split(batch):
            opt.zero_grad()
            F.cross_entropy(model(xtr[idx]), ytr[idx]).backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        pred = torch.cat([model(x).argmax(1) for x in xte.split(250)])
    return 100.0 * (pred == yte).float().mean().item()


@pytest.mark.slow
def test_int8_resnet20_single_node_within_a_few_points_of_fp32(data):
    mcfg = ModelConfig(name="resnet20", norm="evonorm")
    torch.manual_seed(0)
    fp = MODELS.get("resnet20")(mcfg, 10, (1, SIZE, SIZE))
    q = convert_to_int8(fp, PrecisionConfig(mode="int8"), mcfg)
    acc_fp, acc_q = _train_eval(fp, data), _train_eval(q, data)
    print(f"single node: fp32 {acc_fp:.1f}%  int8 {acc_q:.1f}%")
    assert acc_fp > 75.0
    assert acc_q > acc_fp - TOLERANCE, f"fp32 {acc_fp:.1f}% vs int8 {acc_q:.1f}%"


def _engine_accuracy(precision: str, data, tmp_path: Path, monkeypatch) -> float:
    (xtr, ytr), (xte, yte) = data
    info = DatasetInfo(name="fashion_mnist_16px", source=str(ROOT), input_shape=(1, SIZE, SIZE))
    monkeypatch.setattr(
        lpdt.train, "load_dataset", lambda cfg: TensorDataset(info, xtr, ytr, xte, yte)
    )
    cfg = RunConfig()
    cfg.topology.nodes = 8
    cfg.algorithm.name = "choco"
    cfg.precision.mode = precision
    cfg.model.norm = "rangeen" if precision == "int8" else "evonorm"
    cfg.data.augment = False
    cfg.optim.lr = LR
    cfg.train.epochs, cfg.train.batch_size = ENGINE_EPOCHS, 128
    cfg.train.final_gossip_rounds, cfg.train.eval_every = 10, 1000
    cfg.schedule.warmup_epochs, cfg.schedule.milestones = 0, [ENGINE_EPOCHS - 2]
    metrics = lpdt.train.train(cfg, tmp_path / precision, log=lambda s: None)
    return float(metrics["final"]["acc_node_mean"])


@pytest.mark.slow
@pytest.mark.xfail(
    strict=True,  # an unexpected pass fails the run: then drop this marker
    reason="known gap on 8 nodes: measured fp32 85.7 % vs int8 82.1 % (lr 0.05, 16 epochs); "
    "lr 0.1: 86.2 vs 83.2 at 16 epochs, 86.7 vs 81.8 at 24 (an int8 loss spike at epoch 15)",
)
def test_int8_resnet20_8_nodes_within_a_few_points_of_fp32(data, tmp_path, monkeypatch):
    acc_fp = _engine_accuracy("fp32", data, tmp_path, monkeypatch)
    acc_q = _engine_accuracy("int8", data, tmp_path, monkeypatch)
    print(f"8 nodes (mean node accuracy): fp32 {acc_fp:.1f}%  int8 {acc_q:.1f}%")
    assert acc_fp > 70.0
    assert acc_q > acc_fp - TOLERANCE, f"fp32 {acc_fp:.1f}% vs int8 {acc_q:.1f}%"
