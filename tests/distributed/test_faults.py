"""Faults in a distributed run: a killed rank stops the run with one error naming it, leaves no
process and no metrics.json behind, and ``--resume`` then reaches the uninterrupted result."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NODES = 4
ARGS = [
    "data.dataset=synthetic", "data.train_subset=1600", "data.test_subset=40",
    "model.name=tiny_cnn", f"topology.nodes={NODES}", "train.batch_size=32", "train.epochs=2",
    "train.final_gossip_rounds=2", "schedule.warmup_epochs=0", "schedule.milestones=[]",
    "threads=1", "device=cpu", "engine=distributed", "algorithm.name=choco",
    "algorithm.compression.name=topk", "algorithm.compression.ratio=0.9", "optim.qgm=true",
]  # fmt: skip
TIMEOUT_S = 240


def lpdt_train(out: Path, *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "lpdt.cli", "train", "--out", str(out), *extra]
    for a in ARGS:
        cmd += ["--set", a]
    env = {**os.environ, "LPDT_DIST_TIMEOUT_S": "60", "LPDT_DIST_GRACE_S": "10"}
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip


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


def test_killed_rank_stops_the_run_and_resume_reproduces_it(tmp_path):
    full_rc, _, full_err = finish(lpdt_train(tmp_path / "full"))
    assert full_rc == 0, full_err
    full = json.loads((tmp_path / "full" / "metrics.json").read_text())

    cut = tmp_path / "cut"
    p = lpdt_train(cut)
    workers: list[int] = []
    try:
        deadline = time.monotonic() + TIMEOUT_S
        # Epoch 1 done on every rank (each writes its own checkpoint, atomically; waiting for
        # rank 0's alone let a loaded machine kill rank 2 before it had saved): kill in epoch 2.
        while not all((cut / f"checkpoint.rank{r}.pt").exists() for r in range(NODES)):
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
    assert all((cut / f"checkpoint.rank{r}.pt").exists() for r in range(NODES))

    rc, _, err = finish(lpdt_train(cut, "--resume"))
    assert rc == 0, err
    resumed = json.loads((cut / "metrics.json").read_text())
    assert resumed["final"] == full["final"]
    assert resumed["communication"] == full["communication"]
    assert resumed["engine"] == "distributed"
    assert not list(cut.glob("checkpoint*.pt"))


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
    import torch

    (out / "metrics.json").unlink()
    (out / "config.yaml").unlink()
    torch.save({"run_config": first, "epoch": 1}, out / "checkpoint.rank0.pt")
    rc, _, err = finish(lpdt_train(out, "--resume", *other))
    assert rc == 2 and err.count("\n") == 1 and "optim.lr" in err, err
