"""The typed checkpoint: what a run saves round-trips through ``torch.save``, an older plain-dict
checkpoint loads, and a file that is not a checkpoint is a one-line error."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from lpdt.config import load_config
from lpdt.engine.checkpoint import Checkpoint, CheckpointError
from lpdt.engine.run import Run
from lpdt.engine.rundir import load_checkpoint
from lpdt.record import HistoryRow
from tests.conftest import TINY


def _tiny() -> Run:
    cfg = load_config(
        None,
        [*TINY, "data.train_subset=64", "data.test_subset=32", "topology.nodes=2"]
        + ["train.batch_size=16"],
    )
    return Run(cfg, log=lambda s: None)


def test_a_runs_checkpoint_round_trips_through_torch_save(tmp_path):
    run = _tiny()
    run.train_epoch(0.1)
    run.epoch = 1
    run.history.append(HistoryRow(epoch=0, lr=0.1, train_loss=1.5, wall_s=2.0))
    ck = dataclasses.replace(run.checkpoint(), run_config=run.cfg.to_dict(), wall_s=2.0)
    path = tmp_path / "checkpoint.pt"
    torch.save(ck.to_dict(), path)
    back = load_checkpoint(run.cfg, path)
    assert back.epoch == 1 and back.nodes == [0, 1] and back.wall_s == 2.0
    assert back.history == [HistoryRow(epoch=0, lr=0.1, train_loss=1.5, wall_s=2.0)]
    assert torch.equal(back.x, ck.x) and torch.equal(back.w, ck.w)
    # restoring it into a fresh run gives the saved state
    fresh = _tiny()
    fresh.restore(back)
    assert torch.equal(fresh.state.x, run.state.x) and fresh.epoch == 1
    assert fresh.history == run.history and fresh.iterations == run.iterations


def test_an_older_plain_dict_checkpoint_loads_and_a_broken_one_is_named():
    run = _tiny()
    old = run.checkpoint().to_dict()
    del old["nodes"], old["run_config"], old["wall_s"], old["provenance"]  # keys added later
    old["history"] = [{"epoch": 0, "lr": 0.1, "train_loss": 1.5}]
    ck = Checkpoint.from_dict(old)
    assert ck.nodes is None and ck.wall_s is None and ck.run_config == {}
    assert ck.history == [HistoryRow(epoch=0, lr=0.1, train_loss=1.5)]
    del old["opt"]
    with pytest.raises(CheckpointError, match=r"ck\.pt: no 'opt'"):
        Checkpoint.from_dict(old, "ck.pt")
    with pytest.raises(CheckpointError, match="not a checkpoint"):
        Checkpoint.from_dict([1, 2], "ck.pt")


@pytest.mark.parametrize("damage", ["truncated", "empty", "text", "garbage", "directory"])
def test_a_damaged_checkpoint_is_named_not_a_traceback(tmp_path, damage):
    """A checkpoint cut short (a job killed while torch.save wrote it without lpdt's atomic
    rename, a copy that failed), emptied, replaced by text or by a directory: one error that
    names the file and what to do (it raised OSError, EOFError or UnpicklingError; the text
    "garbage" ValueError: "invalid literal for int() with base 10: 'arbage'", alone)."""
    run = _tiny()
    path = tmp_path / "checkpoint.pt"
    torch.save(run.checkpoint().to_dict(), path)
    whole = path.read_bytes()
    path.unlink()
    if damage == "directory":
        path.mkdir()
    else:
        texts = {"truncated": whole[: len(whole) // 2], "empty": b"", "garbage": b"garbage\n"}
        path.write_bytes(texts.get(damage, b"x\n"))
    with pytest.raises(CheckpointError, match=r"checkpoint\.pt: a damaged checkpoint.*--force"):
        load_checkpoint(run.cfg, path)


def test_an_unreadable_checkpoint_is_not_called_damaged(tmp_path, monkeypatch):
    """A checkpoint the user may not read (permission denied; simulated: the tests run as root,
    who reads it anyway) is not "damaged, delete it", which would throw its epochs away: one
    line saying to make it readable and resume."""
    run = _tiny()
    path = tmp_path / "checkpoint.pt"
    torch.save(run.checkpoint().to_dict(), path)

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(torch, "load", denied)
    with pytest.raises(CheckpointError, match=r"permission denied.*chmod u\+r.*--resume") as e:
        load_checkpoint(run.cfg, path)
    assert "delete" not in str(e.value) and "\n" not in str(e.value)
