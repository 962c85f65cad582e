"""End to end: a tiny CNN on generated data through `lpdt train`."""

import csv
import json

import pytest

from lpdt.cli import main
from lpdt.config import load_config
from lpdt.train import train

BASE = [
    "data.dataset=synthetic", "data.train_subset=1920", "data.test_subset=200",
    "model.name=tiny_cnn", "topology.nodes=8", "train.batch_size=64", "train.epochs=3",
    "train.final_gossip_rounds=3", "schedule.warmup_epochs=0", "schedule.milestones=[]",
    "optim.lr=0.1", "threads=1", "device=cpu",
]  # fmt: skip


def cfg(*extra):
    return load_config(None, BASE + list(extra))


def test_lpdt_train_writes_outputs_and_learns(tmp_path, capsys):
    out = tmp_path / "run"
    rc = main(["train", *sum((["--set", o] for o in BASE), []), "--out", str(out)])
    assert rc == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["status"] == "ok" and m["run_id"] == cfg().run_id()
    assert m["dataset"] == {**m["dataset"], "name": "synthetic", "stand_in": False}
    f = m["final"]
    assert f["acc_node_mean"] > 50 and f["acc_avg_model"] > 50  # 10 classes: chance is 10 %
    assert f["acc_node_min"] <= f["acc_node_mean"] <= f["acc_node_max"]
    rows = list(csv.DictReader((out / "history.csv").open()))
    assert [r["epoch"] for r in rows] == ["0", "1", "2", "final"]
    assert float(rows[0]["acc_node_mean"]) > 0  # evaluated every epoch
    # bytes: 30 iterations x 3 epochs + 3 final rounds, one dense message per node per round
    c = m["communication"]
    p = m["model"]["params"]
    assert c["bytes_per_message"] == 4 * (p + 1)
    assert c["bytes_per_node"] == 4 * (p + 1) * (30 * 3 + 3)
    assert c["gb_per_node_8bit_analytic"] == pytest.approx(c["gb_per_node"] / 4)
    assert not (out / "checkpoint.pt").exists()
    assert (out / "config.yaml").exists()
    assert "final (after 3 gossip rounds)" in capsys.readouterr().out


def test_same_seed_same_numbers_and_completed_run_is_skipped(tmp_path):
    a = train(
        cfg("algorithm.compression.name=topk", "ratio=0.9"), tmp_path / "a", log=lambda s: None
    )
    b = train(
        cfg("algorithm.compression.name=topk", "ratio=0.9"), tmp_path / "b", log=lambda s: None
    )
    assert a["final"] == b["final"]
    logs = []
    again = train(
        cfg("algorithm.compression.name=topk", "ratio=0.9"), tmp_path / "a", log=logs.append
    )
    assert again == a and "already complete" in logs[0]


@pytest.mark.parametrize("extra", [(), ("precision.mode=int8",)])
def test_killed_run_resumes_to_identical_result(tmp_path, extra):
    if extra and not _has_int8():
        pytest.skip("8-bit layers not available")
    c = cfg("algorithm.name=deepsqueeze", "algorithm.compression.name=topk", "ratio=0.9",
            "optim.qgm=true", *extra)  # fmt: skip
    full = train(c, tmp_path / "full", log=lambda s: None)

    class Killed(Exception):
        pass

    def killer(line):
        if line.startswith("epoch 2/3"):
            raise Killed  # dies after epoch 1's checkpoint, during epoch 2's bookkeeping

    with pytest.raises(Killed):
        train(c, tmp_path / "cut", log=killer)
    assert (tmp_path / "cut" / "checkpoint.pt").exists()
    assert not (tmp_path / "cut" / "metrics.json").exists()
    resumed = train(c, tmp_path / "cut", resume=True, log=lambda s: None)
    assert resumed["final"] == full["final"]
    assert resumed["communication"] == full["communication"]


def _has_int8():
    try:
        import lpdt.layers.quant  # noqa: F401
    except ImportError:
        return False
    return True


def test_divergence_ends_cleanly(tmp_path):
    out = tmp_path / "div"
    rc = main(["train", *sum((["--set", o] for o in BASE), []), "--set", "optim.lr=1e6",
               "--set", "optim.momentum=0.99", "--out", str(out)])  # fmt: skip
    assert rc == 3
    m = json.loads((out / "metrics.json").read_text())
    assert m["status"] == "diverged" and m["final"] == {}
    assert len(m["history"]) >= 1


def test_bad_config_exits_2_with_one_line(tmp_path, capsys):
    assert main(["train", "--set", "topology.name=star", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "topology.name" in err[0] and "directed_ring" in err[0]
