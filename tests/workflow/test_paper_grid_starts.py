"""Every run of the paper grid starts (issue 54, item 0; slow).

The 289 runs are grouped by what decides whether a run can start: the model with its
normalisation and dropout masks (``model.dropout_noise``), the dataset at its input size, the
precision, the algorithm, the compressor, the topology and node count, the optimizer
(``start_group``). Each group's first run, as the grid writes its config, trains its first two
iterations on the CPU on small fake data in the real formats (CIFAR-10's python pickles, an
Imagenette folder of JPEGs, AG News CSV files, SentEval's SentLen file, DistilBERT from its
configuration with random weights, saved as ``save_pretrained`` writes it), then evaluates and
writes its record. Changed for the CPU and the fake data only: the data root and subsets, one
epoch of two iterations at two images a node, one final gossip round, the device, eager steps
(``train.compile`` is an execution key; a compiled step is checked by
tests/engine/test_steps.py), and a small curve.

The same pass checks that the price's step counts (``lpdt.plan.counts.COUNTS``) are today's
for every group's model (the operations of one node step within 10 %; an 8-bit row at most the
table's and at most 20 % under it: ``in_step_with_the_table``).
"""

from __future__ import annotations

import pickle
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lpdt import grid
from lpdt.config import config_from_dict, deep_merge
from lpdt.plan import counts, runtime

ROOT = Path(__file__).resolve().parents[2]
IMAGENETTE_CLASSES = [
    "n01440764",
    "n02102040",
    "n02979186",
    "n03000684",
    "n03028079",
    "n03394916",
    "n03417042",
    "n03425413",
    "n03445777",
    "n03888605",
]


def start_group(cfg: dict[str, Any]) -> tuple[Any, ...]:
    """What decides whether a run can start (not its skew, seed, ratio or schedule)."""
    return (
        cfg["model"]["name"],
        cfg["model"]["norm"],
        cfg["model"].get("dropout_noise", "generator"),
        cfg["data"]["dataset"],
        runtime.input_px(cfg),
        cfg["precision"]["mode"],
        cfg["algorithm"]["name"],
        cfg["algorithm"]["compression"]["name"],
        cfg["topology"]["name"],
        cfg["topology"]["nodes"],
        cfg["optim"]["name"],
        cfg["optim"]["qgm"],
    )


# The 8-bit rows of lpdt.plan.counts hold the code the GPU steps were measured with, on purpose
# (the launch model is fitted on them); since the step's table of noise keys today's 8-bit steps
# take 12-15 % fewer operations (8,719 against 10,153 for ResNet-20: counts.py says why), so an
# 8-bit row is current while today's count is at most the table's and not more than 20 % under
# it. Every other row within 10 %.
INT8_FEWER = 0.20


def in_step_with_the_table(key: tuple[str, str, str, int], ops: int) -> bool:
    """Whether ``ops``, today's count of one node step, is what ``COUNTS[key]`` should hold."""
    ratio = ops / counts.COUNTS[key].ops_train
    if key[2] == "int8":
        return 1 - INT8_FEWER <= ratio <= 1.0
    return abs(ratio - 1) <= 0.10


def write_fake_data(root: Path) -> None:
    """Small datasets in the formats the paper's readers read, and DistilBERT's files."""
    rng = np.random.default_rng(0)
    cifar = root / "cifar-10-batches-py"
    cifar.mkdir(parents=True)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {
            b"data": rng.integers(0, 256, (40, 3072), dtype=np.uint8),
            b"labels": [i % 10 for i in range(40)],
        }
        (cifar / name).write_bytes(pickle.dumps(batch))
    from PIL import Image

    for split, n in (("train", 8), ("val", 2)):
        for wnid in IMAGENETTE_CLASSES:
            d = root / "imagenette2" / split / wnid
            d.mkdir(parents=True)
            for i in range(n):
                arr = rng.integers(0, 256, (60, 80, 3), dtype=np.uint8)
                Image.fromarray(arr).save(d / f"img_{i}.JPEG")
    ag = root / "ag_news"
    ag.mkdir()
    for split in ("train", "test"):
        lines = [
            f'"{c}","title {c} {i}","a short description of item {i}"'
            for i in range(20)
            for c in (1, 2, 3, 4)
        ]
        (ag / f"{split}.csv").write_text("\n".join(lines) + "\n")
    sentlen = root / "sentlen"
    sentlen.mkdir()
    rows = [
        f"{split}\t{b}\t{' '.join(['word'] * (5 + 4 * b + i % 3))}"
        for split in ("tr", "va", "te")
        for b in range(6)
        for i in range(12)
    ]
    (sentlen / "sentence_length.txt").write_text("\n".join(rows) + "\n")
    from transformers.models.distilbert.modeling_distilbert import (
        DistilBertConfig,
        DistilBertModel,
    )

    # distilbert-base-uncased's architecture with random weights, saved as its checkpoint is: the
    # base model, no classification head (lpdt adds one with the task's labels)
    DistilBertModel(DistilBertConfig()).save_pretrained(root / "distilbert-base-uncased")


def on_the_cpu(cfg: dict[str, Any], root: Path) -> dict[str, Any]:
    """The grid's config, changed only for two iterations on the CPU on the fake data."""
    n = int(cfg["topology"]["nodes"])
    return deep_merge(
        cfg,
        {
            "device": "cpu",
            "threads": 1,
            "data": {"root": str(root), "train_subset": 4 * n * 2, "test_subset": 10},
            "train": {
                "epochs": 1,
                "batch_size": 2 * n,
                "max_iters_per_epoch": 2,
                "final_gossip_rounds": 1,
                "eval_batch_size": 10,
                "curve_images": 10,
                "compile": False,
                "checkpoint_every": 1,
            },
        },
    )


@pytest.mark.slow
def test_every_group_of_the_paper_grid_trains_its_first_iterations(tmp_path, capsys):
    from lpdt.engine.loop import train

    runs = grid.expand(grid.load(ROOT / "config/studies.yaml", ROOT / "config/scales/paper.yaml"))
    assert len(runs) == 289
    groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in runs.values():
        groups.setdefault(start_group(r.config), r.config)
    data = tmp_path / "data"
    write_fake_data(data)
    t0 = time.perf_counter()
    failed, stale = [], []
    times: list[tuple[float, tuple[Any, ...]]] = []
    recounted: set[tuple[str, str, str, int]] = set()
    for i, (group, cfg) in enumerate(groups.items()):
        key = counts.key(cfg, runtime.input_px(cfg))
        assert key in counts.COUNTS, f"no step counts for {key} (benchmarks/count_steps.py)"
        if key not in recounted:
            recounted.add(key)
            ops = counts.count_ops(*key)
            if not in_step_with_the_table(key, ops):
                stale.append((key, ops, counts.COUNTS[key].ops_train))
        t_group = time.perf_counter()
        try:
            rec = train(
                config_from_dict(on_the_cpu(cfg, data)), tmp_path / f"g{i}", log=lambda s: None
            )
            assert rec.status == "ok" and rec.final is not None, rec.status
            assert rec.time.iterations == 2
        except Exception as e:  # every group is tried; the failures are listed together
            failed.append((group, f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"))
        times.append((time.perf_counter() - t_group, group))
    took = time.perf_counter() - t0
    with capsys.disabled():
        print(f"\n{len(groups)} start groups of the paper grid's 289 runs: {took:.0f} s")
        for group, why in failed:
            print(f"  failed: {group}: {why}")
        for t, g in sorted(times, key=lambda x: x[0], reverse=True)[:3]:
            print(f"  {t:.0f} s  {g}")
    assert not failed, failed
    assert not stale, f"lpdt.plan.counts.COUNTS is stale (rerun benchmarks/count_steps.py): {stale}"
