"""What each run of a grid processes (``lpdt.plan.samples``): samples per run over all nodes."""

from __future__ import annotations

from lpdt.plan.samples import samples_per_run


def test_samples_per_run():
    cfg = {
        "topology": {"nodes": 8},
        "data": {"dataset": "x", "train_subset": 3200},
        "train": {"batch_size": 256, "epochs": 4, "max_iters_per_epoch": None},
    }
    assert samples_per_run(cfg) == 13 * 32 * 8 * 4  # ceil(400 / 32) iterations
    cfg["train"]["max_iters_per_epoch"] = 5
    assert samples_per_run(cfg) == 5 * 32 * 8 * 4


def test_samples_per_run_without_a_subset_reads_the_full_split_size():
    cfg = {
        "topology": {"nodes": 8},
        "data": {"dataset": "cifar10", "train_subset": None},
        "train": {"batch_size": 256, "epochs": 4, "max_iters_per_epoch": None},
    }
    # CIFAR-10's 50,000 training images: 6,250 per node, ceil(6250 / 32) = 196 iterations
    assert samples_per_run(cfg) == 196 * 32 * 8 * 4
    cfg["data"]["dataset"] = "x"  # a dataset of unknown size: no estimate
    assert samples_per_run(cfg) is None
