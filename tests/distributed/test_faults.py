"""Faults in a distributed run: a killed rank stops the run with one error naming it, leaves no
process and no metrics.json behind, and ``--resume`` then reaches the uninterrupted result,
wherever the kill landed: mid-epoch, between a rank's move of its checkpoint to ``.prev`` and its
save of the new one, or before a rank's first save (the ranks agree on the newest epoch that all
of them can restore, or start from scratch). A rank that loses its peer says so in one line and
exits ``PEER_LOST``, whatever gloo's error; a run whose output's reader goes away (``lpdt train
... | head``) stops quietly with SIGPIPE's status, like the ``lpdt`` command."""

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

from lpdt.config import dump_config, load_config
from lpdt.engine.launch import free_port
from lpdt.engine.rundir import RECORD_COPY
from lpdt.engine.worker import PEER_LOST, lost_contact
from lpdt.io import READER_GONE
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


def lpdt_train(
    out: Path, *extra: str, fault: str | None = None, sets: tuple[str, ...] = ()
) -> subprocess.Popen:
    """``lpdt train`` of ARGS, then ``sets`` (later overrides win); ``fault``: the test-only
    ``LPDT_TEST_FAULT`` kill point (``<point>:<rank>:<epoch>``, see
    ``lpdt.engine.faults.fault_point``)."""
    cmd = [sys.executable, "-m", "lpdt.cli", "train", "--out", str(out), *extra]
    for a in (*ARGS, *sets):
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
    # Each other rank stopped with its one line (gloo's "Connection closed by peer" and the like
    # gave tracebacks), or was stopped by the launcher, silent, after LPDT_DIST_GRACE_S.
    assert "Traceback" not in err, err
    others = [line for line in err.splitlines() if not line.startswith("lpdt train: error:")]
    assert all(line.startswith("lpdt rank ") and "lost contact" in line for line in others), err
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
    # The complete run's record copy goes too: it would be put back (rundir.RECORD_COPY).
    for done in ("metrics.json", "config.yaml", RECORD_COPY):
        (out / done).unlink()
    torch.save({"run_config": first, "epoch": 1}, out / "checkpoint.rank0.pt")
    rc, _, err = finish(lpdt_train(out, "--resume", *other))
    assert rc == 2 and err.count("\n") == 1 and "optim.lr" in err, err


# Two ranks, the fault point's self-kill: a few seconds, in the default suite.
TWO_RANKS = [
    *TINY,
    "data.train_subset=640",
    "data.test_subset=40",
    "topology.nodes=2",
    "train.batch_size=32",
    "train.epochs=3",
    "train.max_iters_per_epoch=2",
    "engine=distributed",
]


def test_a_rank_that_loses_its_peer_says_so_in_one_line_and_exits_peer_lost(tmp_path):
    """Rank 1 dies (SIGKILL, at its first save); rank 0's next collective or receive fails with
    gloo's ``RuntimeError`` ("Connection closed by peer", "Read error ...: Connection reset by
    peer"): it prints the one lost-contact line and exits ``PEER_LOST``. It printed gloo's
    traceback and exited 1 (only torch's ``DistError`` was caught), which also let the launcher
    name it, not the killed rank, as the cause when both ended within one poll."""
    cfg = tmp_path / "config.yaml"
    cfg.write_text(dump_config(load_config(None, TWO_RANKS)))
    env = {
        **os.environ,
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "WORLD_SIZE": "2",
        "LOCAL_WORLD_SIZE": "2",
        "LPDT_DIST_TIMEOUT_S": "60",
        "LPDT_TEST_FAULT": "before-save:1:1",
    }
    cmd = [sys.executable, "-m", "lpdt.engine.worker", "--config", str(cfg), "--out", str(tmp_path)]
    procs = [
        subprocess.Popen(
            cmd,
            cwd=REPO,
            env={**env, "RANK": str(r), "LOCAL_RANK": str(r)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(2)
    ]
    try:
        errs = [pr.communicate(timeout=TIMEOUT_S)[1] for pr in procs]
    finally:
        for pr in procs:  # whatever happened: nothing left behind
            if pr.poll() is None:
                pr.kill()
                pr.wait()
    assert procs[1].returncode == -signal.SIGKILL, errs[1]
    assert procs[0].returncode == PEER_LOST, errs[0]
    assert errs[0].startswith("lpdt rank 0: stopped: lost contact with another rank (")
    assert errs[0].count("\n") == 1 and "Traceback" not in errs[0], errs[0]


GLOO = "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/"


@pytest.mark.parametrize(
    ("message", "lost"),
    [
        (
            GLOO + "pair.cc:561] Connection closed by peer [127.0.0.1]:19875. This is typically "
            "caused by a remote worker crashing.",
            True,
        ),
        (
            GLOO + "pair.cc:534] Read error [127.0.0.1]:23982: Connection reset by peer. This is "
            "typically caused by a remote worker hanging or bugs in the application.",
            True,
        ),
        (GLOO + "pair.cc:598] writev [10.0.0.2]:4242: Broken pipe", True),
        (GLOO + "pair.cc:810] Socket closed [127.0.0.1]:19875", True),
        (
            GLOO + "unbound_buffer.cc:81] Timed out waiting 60000ms for recv operation to complete",
            True,
        ),
        ("[../third_party/gloo/gloo/transport/uv/pair.cc:333] Connection closed by peer", True),
        # a bug, not a lost peer: a collective called with mismatched sizes, or any other error
        ("[enforce fail at " + GLOO[1:] + "pair.cc:248] op.nread == op.preamble.nbytes.", False),
        ("mat1 and mat2 shapes cannot be multiplied (32x10 and 12x4)", False),
        ("Connection closed by peer", False),  # not gloo's
    ],
)
def test_which_runtime_errors_are_a_lost_peer(message: str, lost: bool):
    """Gloo's errors for a closed, reset or silent connection are a lost peer; any other
    ``RuntimeError`` is a bug of the rank and keeps its traceback (``worker_main`` re-raises)."""
    assert lost_contact(RuntimeError(message)) is lost
    assert lost_contact(torch.distributed.DistNetworkError("store: connection reset"))


@pytest.mark.parametrize(
    ("rank", "world", "says"),
    [
        ("5", "2", "RANK=5 is outside 0..1 (WORLD_SIZE=2)"),
        ("-1", "2", "RANK=-1 is outside 0..1"),
        ("abc", "2", "RANK='abc' is not a whole number"),
        ("0", "0", "WORLD_SIZE=0: at least one process"),
    ],
)
def test_a_rank_the_world_cannot_hold_is_refused_at_once(monkeypatch, rank, world, says):
    """``RANK=5 WORLD_SIZE=2 lpdt train --set engine=distributed``: the rank waited for peers
    that never come, silently, until the rendezvous timed out (30 minutes by default)."""
    from lpdt.engine.worker import env_rank

    monkeypatch.setenv("RANK", rank)
    monkeypatch.setenv("WORLD_SIZE", world)
    with pytest.raises(ValueError) as e:
        env_rank()
    assert str(e.value).startswith(says), e.value
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert env_rank() == (1, 2)


def test_a_ranks_line_is_one_write(monkeypatch):
    """The ranks share the launcher's stdout and stderr; ``print`` writes a line and its newline apart, and
    under PYTHONUNBUFFERED two ranks' lines ran together in the slow suite ("...Connection reset
    by peer)lpdt rank 3: stopped: ...")."""
    import io as stdio

    from lpdt.engine.device import print_line

    class Writes(stdio.StringIO):
        def __init__(self) -> None:
            super().__init__()
            self.calls: list[str] = []

        def write(self, s: str) -> int:
            self.calls.append(s)
            return super().write(s)

    err = Writes()
    monkeypatch.setattr(sys, "stderr", err)
    print_line("lpdt rank 1: stopped: lost contact with another rank (Read error)", sys.stderr)
    assert err.calls == ["lpdt rank 1: stopped: lost contact with another rank (Read error)\n"]


def test_a_simulated_run_started_by_torchrun_is_refused(tmp_path, monkeypatch):
    """Under torchrun a config left on ``engine: simulated`` trained the whole simulation in
    every process, into one folder (the second then said "already complete")."""
    from lpdt.engine import train

    cfg = load_config(None, [*TINY, "topology.nodes=2"])
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match="WORLD_SIZE=2 \\(torchrun\\) with engine simulated"):
        train(cfg, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_a_ranks_one_line_error_is_its_traceback_under_lpdt_debug(tmp_path, monkeypatch, capsys):
    """The launcher says "(LPDT_DEBUG=1 for a traceback)", but the rank's ValueError stayed one
    line with it set: the rank now raises it (its traceback on stderr)."""
    from lpdt.engine import worker

    def refused(*args, **kwargs):
        raise ValueError("a refused run directory")

    config = tmp_path / "c.yaml"
    config.write_text(dump_config(load_config(None, [*TINY, "topology.nodes=2"])))
    monkeypatch.setattr(worker, "run_worker", refused)
    monkeypatch.setattr(worker, "_die_with_launcher", lambda: None)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    argv = ["--config", str(config), "--out", str(tmp_path / "run")]
    monkeypatch.delenv("LPDT_DEBUG", raising=False)
    assert worker.worker_main(argv) == worker.REFUSED
    assert capsys.readouterr().err == "lpdt rank 1: error: a refused run directory\n"
    monkeypatch.setenv("LPDT_DEBUG", "1")
    with pytest.raises(ValueError, match="a refused run directory"):
        worker.worker_main(argv)


@pytest.mark.slow  # 8 s of the default suite (2026-12-01)
def test_a_run_whose_output_reader_goes_away_stops_quietly(tmp_path):
    """``lpdt train --set engine=distributed ... | head -2``: rank 0's next line meets the closed
    pipe; it stops quietly, rank 1 (which loses it while the output's reader is gone) too, and
    ``lpdt train``, whose standard output is the same pipe, ends with SIGPIPE's status and
    nothing on stderr, as with the simulator. It printed rank 0's BrokenPipeError traceback,
    rank 1's gloo traceback and "rank 0 failed with exit code 1" (exit 2)."""
    out = tmp_path / "run"
    p = lpdt_train(out, sets=(*TWO_RANKS, "train.epochs=30", "train.max_iters_per_epoch=1"))
    assert p.stdout is not None
    workers: list[int] = []
    try:
        first = p.stdout.readline()  # the launcher's, before it starts the workers
        start = p.stdout.readline()  # rank 0's start line; 30 epochs' lines would follow
        workers = children(p.pid)  # both joined the group before rank 0's start line
        p.stdout.close()  # the reader goes, as `head -2` does
        rc, _, err = finish(p)
    finally:
        for pid in workers:  # whatever happened: nothing left behind
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
    assert first.startswith("engine distributed: starting 2 processes")
    assert start.startswith("run ")
    assert rc == READER_GONE and err == "", err
    assert len(workers) == 2 and not any(alive(pid) for pid in workers)
    assert not (out / "metrics.json").exists()


def test_a_ranks_checkpoint_without_resume_is_refused_before_any_worker_starts(tmp_path):
    """engine: distributed, a rank's checkpoint in --out and no --resume: the launcher refuses
    in one error naming --resume and --force, before starting a worker (each rank would have
    started from scratch over its file)."""
    from lpdt.engine import train
    from lpdt.engine.run import Run
    from lpdt.engine.rundir import RunDirError

    sets = [*TINY, "data.train_subset=64", "data.test_subset=32", "topology.nodes=2"]
    cfg = load_config(None, [*sets, "engine=distributed"])
    out = tmp_path / "run"
    out.mkdir()
    # a checkpoint of this config (the engine is an execution key: the same run)
    simulated = load_config(None, sets)
    ck = Run(simulated, log=lambda s: None).checkpoint().to_dict()
    torch.save({**ck, "run_config": simulated.to_dict()}, out / "checkpoint.rank1.pt")
    with pytest.raises(RunDirError, match=r"checkpoint\.rank1\.pt\): pass --resume .* --force"):
        train(cfg, out, log=lambda s: None)
