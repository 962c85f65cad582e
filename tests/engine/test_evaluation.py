"""Evaluation (``lpdt.engine.evaluation``): the held nodes evaluated together equal node-by-node
evaluation; the per-epoch accuracy curve (``train.curve_images``) changes nothing of the run;
evaluating on the full split does draw from an 8-bit node's stream (why ``train.eval_every`` is
part of a run's identity)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch

from lpdt import grid, record
from lpdt.config import load_config
from lpdt.engine.evaluation import curve_rows, curve_streams, evaluate_nodes
from lpdt.engine.loop import train
from lpdt.engine.run import Run
from tests.conftest import TINY

ROOT = Path(__file__).resolve().parents[2]
BASE = [
    *TINY,
    "data.train_subset=480",
    "data.test_subset=130",  # not a multiple of the nodes or the batch: ragged shards
    "topology.nodes=4",
    "train.batch_size=32",
    "train.epochs=3",
    "train.final_gossip_rounds=2",
    "train.eval_batch_size=48",
    "optim.lr=0.1",
]
INT8 = ["precision.mode=int8", "model.norm=rangeen"]  # stochastic rounding, 8-bit gradients


def cfg(*extra: str):
    return load_config(None, [*BASE, *extra])


def _trained(*extra: str) -> Run:
    """A run whose nodes differ (a few iterations, as after some training)."""
    run = Run(cfg(*extra), log=lambda s: None)
    run.state.train()
    for _ in range(3):
        assert torch.isfinite(run.iteration(0.1))
    return run


@pytest.mark.parametrize("precision", [[], INT8], ids=["fp32", "int8"])
@pytest.mark.parametrize("sharded", [False, True], ids=["full", "sharded"])
def test_batched_evaluation_equals_node_by_node(precision, sharded):
    """One vmapped forward over the stacked replicas gives each node the accuracy of its own
    forward, node by node, and leaves every node's random stream where node-by-node evaluation
    leaves it (8-bit: the same noise seeds drawn in the same order)."""
    run = _trained("train.batch_nodes=true", *precision)
    st, n_test = run.state, len(run.data.labels("test"))
    rows = [torch.arange(i, n_test, 4) if sharded else None for i in range(4)]
    before = run.streams.state_dict()
    results, streams = [], []
    for stacked in (None, run._stacked()):
        run.streams.load_state_dict(before)
        with st.debiased():
            accs = evaluate_nodes(
                st.models, run.data, run.device, 48, run.steps, rows, run.streams.node, stacked
            )
        results.append(accs)
        streams.append(run.streams.state_dict()["cpu"])
    assert run._stacked() is not None
    assert len(set(results[0])) > 1, results  # the nodes differ: the test can tell them apart
    _assert_same_accuracies(results[1], results[0], precision, n_test // (4 if sharded else 1))
    for a, b in zip(*streams, strict=True):
        assert torch.equal(a, b)
    if precision:  # 8-bit evaluation does draw from the node streams
        assert not all(torch.equal(a, b) for a, b in zip(before["cpu"], streams[0], strict=True))


def test_batched_curve_draws_what_node_by_node_draws():
    """The curve's streams continue from one evaluation batch to the next: evaluated batched
    (entered once per batch) each node draws the noise seeds it draws node by node (entered once
    per node). Until 2026-11-30 each entry reseeded the curve's stream, so every batch of a node
    drew the same seed batched, and the curve depended on ``train.batch_nodes`` whenever a
    node's share spanned more than one evaluation batch (here 4 batches of 8)."""
    run = _trained("train.batch_nodes=true", *INT8)
    st = run.state
    subset = curve_rows(run.data.labels("test"), 128, 4)
    shards = [subset[i::4] for i in range(4)]
    results, states = [], []
    for stacked in (None, run._stacked()):
        streams = curve_streams(run.cfg.seed, run.group.ids, 0, run.device)
        with st.debiased():
            results.append(
                evaluate_nodes(
                    st.models,
                    run.data,
                    run.device,
                    8,
                    run.curve_steps,
                    shards,
                    streams.node,
                    stacked,
                )
            )
        states.append(streams.cpu)
    fresh = curve_streams(run.cfg.seed, run.group.ids, 0, run.device).cpu
    for a, b, c in zip(*states, fresh, strict=True):
        assert torch.equal(a, b)
        assert not torch.equal(a, c)  # the evaluation drew from them
    _assert_same_accuracies(results[1], results[0], INT8, 32)


def test_sharded_evaluation_with_fewer_test_images_than_nodes_is_refused_before_training():
    """A node whose share of the test split is empty has no accuracy: the run stops at its
    start with the reason (it raised ZeroDivisionError in the final evaluation, after training)."""
    from lpdt.config import ConfigError

    with pytest.raises(ConfigError, match="train.node_eval: sharded .* 3 images"):
        Run(cfg("train.node_eval=sharded", "data.test_subset=3"), log=lambda s: None)
    Run(cfg("train.node_eval=sharded", "data.test_subset=4"), log=lambda s: None)


def test_run_evaluates_batched_where_it_trains_batched():
    """``Run.evaluate_all`` of a batched run (``train.batch_nodes: true``) equals the same state
    evaluated node by node (the same run with its batched step switched off)."""
    run = _trained("train.batch_nodes=true", *INT8)
    stream_state = run.streams.state_dict()
    batched = run.evaluate_all()
    run.streams.load_state_dict(stream_state)
    run.batched = None
    assert run._stacked() is None
    node_by_node = run.evaluate_all()
    assert node_by_node.keys() == batched.keys()
    n_test = len(run.data.labels("test"))
    for key in batched:
        _assert_same_accuracies([batched[key]], [node_by_node[key]], INT8, n_test)


def test_batched_evaluation_reads_the_ranges_the_nodes_hold_now():
    """The gossiped 8-bit ranges that a batched evaluation reads are the nodes' own, as gossip
    and the final rounds left them, not the training step's copies from before the gossip."""
    run = _trained("train.batch_nodes=true", "algorithm.name=choco", *INT8)
    run.final_gossip()  # forwards and gossip after the last step: the ranges move again
    stacked = run._stacked()
    assert stacked is not None
    held = [dict(m.named_buffers()) for m in run.state.models]
    gossiped = [name for name in stacked.buffers if name.endswith(("running_min", "running_max"))]
    assert gossiped
    moved = 0
    for name in gossiped:
        want = torch.stack([b[name] for b in held])
        assert torch.equal(stacked.buffers[name], want), name
        moved += not torch.equal(run.batched.buffers[name], want)  # the step's own copies
    assert moved > 0  # the step's copies went stale: the check above can tell


def _assert_same_accuracies(
    got: list[float], want: list[float], precision: list[str], images: int
) -> None:
    """fp32: equal. 8-bit: each within one test image. The grouped convolution of the batched
    forward sums in another order than each node's own, and in float32 a value within rounding
    of a quantisation level may land one level apart and flip one prediction (the batched
    training step is equal to float64 rounding in float64: tests/engine/test_batched.py)."""
    if not precision:
        assert got == want
        return
    assert got == pytest.approx(want, abs=100.0 / images + 1e-9), (got, want)


def _finished(tmp_path: Path, name: str, *extra: str) -> record.RunRecord:
    return train(cfg(*extra), tmp_path / name, log=lambda s: None)


@pytest.mark.parametrize("precision", [[], INT8], ids=["fp32", "int8"])
def test_the_curve_changes_nothing_of_the_run(tmp_path, precision):
    """A run with the curve and one without: the same run id, final metrics, bytes and history
    but for the curve's column (and what measures the process: wall time, system metrics). The
    curve draws from its own stream (8-bit rounding noise) and restores the nodes' rows."""
    with_curve = _finished(tmp_path, "a", "train.curve_images=60", "train.eval_every=2", *precision)
    without = _finished(tmp_path, "b", "train.curve_images=0", "train.eval_every=2", *precision)
    assert with_curve.run_id == without.run_id
    assert with_curve.final == without.final
    assert with_curve.communication == without.communication
    keep = set(record.HISTORY_FIELDS) - set(record.MEASURED_FIELDS) - {"acc_subset_node_mean"}
    for a, b in zip(with_curve.history, without.history, strict=True):
        assert {k: getattr(a, k) for k in keep} == {k: getattr(b, k) for k in keep}
    curve = [r.acc_subset_node_mean for r in with_curve.history]
    assert all(c is not None for c in curve[:-1]) and curve[-1] is None  # every epoch; not final
    assert all(r.acc_subset_node_mean is None for r in without.history)
    rows = (tmp_path / "a" / record.HISTORY_FILE).read_text().splitlines()
    assert "acc_subset_node_mean" in rows[0].split(",")


def test_evaluation_on_the_full_split_moves_8bit_training_not_fp32(tmp_path):
    """Why ``train.eval_every`` stays in the run id: an 8-bit run evaluated every epoch draws
    rounding-noise seeds from its nodes' streams, and the training after it differs from the
    same run evaluated at the end only; an fp32 run draws nothing and ends the same."""
    finals = {}
    for name, precision in (("fp32", []), ("int8", INT8)):
        for every in (1, 1000):
            rec = _finished(tmp_path, f"{name}{every}", f"train.eval_every={every}", *precision)
            finals[name, every] = rec.final
    assert finals["fp32", 1] == finals["fp32", 1000]
    assert finals["int8", 1] != finals["int8", 1000]


def test_the_curve_point_is_the_mean_node_accuracy_on_the_fixed_subset():
    """At initialisation all nodes hold one model, so the curve's point (each node on its share
    of the subset, their mean) is that model's accuracy on the subset up to the shares' sizes;
    the subset is class-balanced, the same for every run, and at least one image per node."""
    run = Run(cfg("train.curve_images=40"), log=lambda s: None)
    labels = run.data.labels("test")
    subset = curve_rows(labels, 40, 4)
    assert len(subset) == 40 and torch.equal(subset, curve_rows(labels, 40, 4))
    counts = torch.bincount(torch.as_tensor(labels)[subset], minlength=10)
    assert int(counts.max() - counts.min()) <= 1
    assert len(curve_rows(labels, 2, 4)) == 4 and len(curve_rows(labels, 10**6, 4)) == len(labels)
    few = curve_rows(labels[:3], 500, 4)  # a split smaller than the nodes: each node gets one
    assert few.tolist() == [0, 1, 2, 0]
    point = run.evaluate_curve(0)["acc_subset_node_mean"]
    st = run.state
    with st.debiased():
        (whole,) = evaluate_nodes(
            st.models[:1], run.data, run.device, 48, run.curve_steps, [subset], lambda k: _null()
        )
    assert point == pytest.approx(whole, abs=1e-9)  # 4 shares of 10 images: the mean is exact


def _null():
    import contextlib

    return contextlib.nullcontext()


# The quick scale's run ids before the curve was added (2cec63e..): sha1 of the sorted ids.
QUICK_IDS = (89, "12e35e283759f39b95e564e9bb0477763aaa3ff9")


def test_the_quick_scale_run_ids_did_not_move():
    """``train.curve_images`` is an execution key: the 89 quick-scale run ids are those of the
    code before it (and a change to the curve's default cannot move them)."""
    spec = grid.load(ROOT / "config/studies.yaml", ROOT / "config/scales/quick.yaml")
    ids = sorted(grid.expand(spec))
    assert (len(ids), hashlib.sha1(" ".join(ids).encode()).hexdigest()) == QUICK_IDS
    assert load_config(None, ["train.curve_images=7"]).run_id() == load_config(None, []).run_id()
    assert json.dumps(cfg().to_dict()["train"]["curve_images"]) == "500"
