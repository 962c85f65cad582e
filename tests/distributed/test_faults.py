"""Faults in a distributed run: a killed rank stops the run with one error naming it, leaves no
process and no metrics.json behind, and ``--resume`` then reaches the uninterrupted result,
wherever the kill landed: mid-epoch, between a rank's move of its checkpoint to ``.prev`` and its
save of the new one, or before a rank's first save (the ranks agree on the newest epoch that all
of them can restore, or start from scratch)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.conftest import TINY

REPO = Path(__file__).resolve().parents[2]
NODES = 4
ARGS = [
    *TINY,
    "data.train_subset=1600",
    "data.test_subset=40",
    f"topology.nodes={NODES}",
    "train.batch_size=32",
    "train.epochs=3",
    "train.final_gossip_rounds=2",
    "engine=distributed",
    "algorithm.name=choco",
    "algorithm.compression.name=topk",
    "algorithm.compression.ratio=0.9",
    "optim.qgm=true",
]
TIMEOUT_S = 240


def lpdt_train(out: Path, *extra: str, fault: str | None = None) -> subprocess.Popen:
    """``lpdt train`` of ARGS; ``fault``: the test-only ``LPDT_TEST_FAULT`` kill point
    (``<point>:<rank>:<epoch>``, see ``lpdt.engine.faults.fault_point``)."""
    cmd = [sys.executable, "-m", "lpdt.cli", "train", "--out", str(out), *extra]
    for a in ARGS:
        cmd += ["--set", a]
    env = {**os.environ, "LPDT_DIST_TIMEOUT_S": "60", "LPDT_DIST_GRACE_S": "10"}
    env.pop("LPDT_TEST_FAULT", None)
    if fault is not None:
        env["LPDT_TEST_FAULT"] = fault
    return subprocess.Popen(
        cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(c) for c in path.read_text().split()] if path.exists() else []


def rank_of(pid: int) -> int | None:
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    for item in env:
        if item.startswith(b"RANK="):
            return int(item[5:])
    return None


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


def finish(p: subprocess.Popen) -> tuple[int, str, str]:
    try:
        out, err = p.communicate(timeout=TIMEOUT_S)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return p.returncode, out, err


@pytest.fixture(scope="module")
def full(tmp_path_factory) -> dict:
    """The uninterrupted run's record."""
    out = tmp_path_factory.mktemp("full")
    rc, _, err = finish(lpdt_train(out))
    assert rc == 0, err
    return json.loads((out / "metrics.json").read_text())


def assert_resumes_to(full: dict, cut: Path) -> str:
    """``--resume`` in ``cut`` completes with the uninterrupted run's final numbers and leaves no
    checkpoint; returns its stdout (rank 0's log)."""
    rc, out, err = finish(lpdt_train(cut, "--resume"))
    assert rc == 0, err
    resumed = json.loads((cut / "metrics.json").read_text())
    print(f"uninterrupted: {full['final']}\nresumed:       {resumed['final']}")  # pytest -s
    assert resumed["final"] == full["final"]
    assert resumed["communication"] == full["communication"]
    assert [r["train_loss"] for r in resumed["history"]] == [
        r["train_loss"] for r in full["history"]
    ]
    assert resumed["engine"] == "distributed"
    assert not list(cut.glob("checkpoint*.pt"))
    return out


def epoch_of(path: Path) -> int:
    return int(torch.load(path, weights_only=False)["epoch"])


# slow (47-65 s with its uninterrupted run, the default suite's longest test; the simulator's
# killed runs (tests/engine/test_loop.py) and the distributed engine's equality to the
# simulator stay in the default suite): make test-slow runs it with the kills below
@pytest.mark.slow
def test_killed_rank_stops_the_run_and_resume_reproduces_it(tmp_path, full):
    cut = tmp_path / "cut"
    p = lpdt_train(cut)
    workers: list[int] = []
    try:
        deadline = time.monotonic() + TIMEOUT_S
        # Rank 0 has saved epoch 1: rank 2 may be anywhere around its own save (before it, in
        # it, or in epoch 2); resume must reach the uninterrupted result from any of these.
        while not (cut / "checkpoint.rank0.pt").exists():
            assert p.poll() is None and time.monotonic() < deadline, "run ended before the kill"
            time.sleep(0.02)
        workers = children(p.pid)
        victim = next(pid for pid in workers if rank_of(pid) == 2)
        os.kill(victim, signal.SIGKILL)
        killed_at = time.monotonic()
        rc, _, err = finish(p)
        stopped_s = time.monotonic() - killed_at
    finally:
        for pid in workers:  # whatever happened: nothing left behind
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
    assert rc == 2
    assert "rank 2 was killed by SIGKILL" in err
    assert err.count("lpdt train: error:") == 1
    assert stopped_s < 30
    assert not any(alive(pid) for pid in workers)
    assert not (cut / "metrics.json").exists()
    assert_resumes_to(full, cut)


# slow (23 s; a killed rank's resume is in the default suite): make test-slow runs it
@pytest.mark.slow
def test_rank_killed_between_moving_its_checkpoint_and_saving_resumes_from_the_epoch_before(
    tmp_path, full
):
    """Rank 2 dies after moving its epoch-1 checkpoint to ``.prev``, before writing epoch 2's;
    the others have saved epoch 2. All resume from epoch 1."""
    cut = tmp_path / "cut"
    rc, _, err = finish(lpdt_train(cut, fault="after-rename:2:2"))
    assert rc == 2 and "rank 2 was killed by SIGKILL" in err, err
    assert not (cut / "checkpoint.rank2.pt").exists()
    assert epoch_of(cut / "checkpoint.rank2.prev.pt") == 1
    for r in (0, 1, 3):  # they finished epoch 2 with rank 2, then saved it
        assert epoch_of(cut / f"checkpoint.rank{r}.pt") == 2
        assert epoch_of(cut / f"checkpoint.rank{r}.prev.pt") == 1
    log = assert_resumes_to(full, cut)
    assert "checkpoint.rank0.prev.pt after epoch 1" in log


# slow (24 s on the reference VM): make test-slow runs it
@pytest.mark.slow
def test_rank_killed_before_its_first_save_makes_resume_start_from_scratch(tmp_path, full):
    """Rank 2 dies before its first save, the others have saved epoch 1: no epoch is common to
    all ranks, so ``--resume`` starts from scratch (and still reaches the same result)."""
    cut = tmp_path / "cut"
    rc, _, err = finish(lpdt_train(cut, fault="before-save:2:1"))
    assert rc == 2 and "rank 2 was killed by SIGKILL" in err, err
    assert not list(cut.glob("checkpoint.rank2*"))
    assert [epoch_of(cut / f"checkpoint.rank{r}.pt") for r in (0, 1, 3)] == [1, 1, 1]
    log = assert_resumes_to(full, cut)
    assert "starting from scratch" in log


# slow (35 s; the simulator's check is in the default suite on the reference VM): make test-slow runs it
@pytest.mark.slow
def test_run_dir_of_another_config_is_refused_and_force_overwrites_it(tmp_path):
    """As with the simulator: another config's run directory or checkpoint is refused with
    exit 2 and one line naming the key; ``--force`` runs over it."""
    out = tmp_path / "run"
    one_epoch = ["--set", "train.epochs=1"]
    rc, _, err = finish(lpdt_train(out, *one_epoch))
    assert rc == 0, err
    first = json.loads((out / "metrics.json").read_text())["config"]

    other = [*one_epoch, "--set", "optim.lr=0.05"]
    rc, _, err = finish(lpdt_train(out, *other))
    assert rc == 2 and err.count("\n") == 1 and "optim.lr" in err, err

    rc, _, err = finish(lpdt_train(out, "--force", *other))
    assert rc == 0, err
    assert json.loads((out / "metrics.json").read_text())["config"]["optim"]["lr"] == 0.05

    # A killed run of the first config: only its checkpoint is left (its config is read first).
    (out / "metrics.json").unlink()
    (out / "config.yaml").unlink()
    torch.save({"run_config": first, "epoch": 1}, out / "checkpoint.rank0.pt")
    rc, _, err = finish(lpdt_train(out, "--resume", *other))
    assert rc == 2 and err.count("\n") == 1 and "optim.lr" in err, err
