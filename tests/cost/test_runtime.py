"""The plan's wall-time estimate: job packing and the images an evaluation reads."""

import pytest

from lpdt.config import load_config
from lpdt.cost import runtime


def test_packing_longest_first_on_two_slots():
    assert runtime.packed_wall_seconds([], 2) == 0
    assert runtime.packed_wall_seconds([5, 5, 5, 5], 2) == 10
    # LPT: 7 | 4+3 -> 7 (a naive in-order fill 3+4 | 7 would also give 7; 6,5,4,3: 6+3 | 5+4 = 9)
    assert runtime.packed_wall_seconds([3, 4, 7], 2) == 7
    assert runtime.packed_wall_seconds([3, 4, 5, 6], 2) == 9
    assert runtime.packed_wall_seconds([3, 4, 5, 6], 1) == 18


def _cfg(*extra):
    return load_config(None, ["model.name=resnet20", "data.dataset=fashion_mnist",
                              "data.image_size=16", "data.test_subset=1000", "topology.nodes=8",
                              "train.epochs=8", *extra]).to_dict()  # fmt: skip


def test_evaluated_images_full_vs_sharded():
    # eval_every 1000 > epochs: the last epoch + the final evaluation = 2 evaluations
    full = _cfg("train.eval_every=1000")
    sharded = _cfg("train.eval_every=1000", "train.node_eval=sharded")
    assert runtime.evaluated_images(full) == 2 * 9 * 1000  # 8 nodes + the average model
    assert runtime.evaluated_images(sharded) == 2 * 2 * 1000
    every = _cfg("train.eval_every=1", "train.node_eval=sharded")
    assert runtime.evaluated_images(every) == (8 + 1) * 2 * 1000


def test_run_seconds_uses_the_measured_cost_and_knows_what_it_does_not_know():
    cfg = _cfg("train.eval_every=1000", "train.node_eval=sharded")
    train_ms, eval_ms = runtime.STEP_MS[("resnet20", "fp32", 16)]
    expect = runtime.START_S + 48000 * train_ms / 1e3 + 4000 * eval_ms / 1e3
    assert runtime.run_seconds(cfg, 48000) == pytest.approx(expect)
    assert runtime.run_seconds(_cfg("data.image_size=24"), 48000) is None  # not measured
    assert runtime.run_seconds(cfg, None) is None
