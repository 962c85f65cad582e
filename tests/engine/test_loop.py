"""End to end: a tiny CNN on generated data through `lpdt train`."""

import csv
import datetime as dt
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from lpdt import record
from lpdt.cli import main
from lpdt.config import RunConfig, load_config
from lpdt.engine import rundir
from lpdt.engine.loop import train
from lpdt.record import RunRecord
from tests.conftest import TINY

BASE = [
    *TINY,
    "data.train_subset=1920",
    "data.test_subset=200",
    "topology.nodes=8",
    "train.batch_size=64",
    "train.epochs=3",
    "train.final_gossip_rounds=3",
    "optim.lr=0.1",
]


# For tests that compare two runs exactly (a resumed run, a rerun, a restored record) and read
# no accuracy or iteration count: a quarter of BASE's data, 7-8 iterations per epoch, so every
# state a checkpoint must keep still carries across iterations (about 3.5x faster per run).
SMALL = ("data.train_subset=480", "data.test_subset=64")


def cfg(*extra):
    return load_config(None, BASE + list(extra))


class Killed(Exception):
    """Raised from a run's log, to stop it at a line as a kill would."""


def stop_at(c: RunConfig, out: Path, line: str, resume: bool = False) -> None:
    """Train ``c`` in ``out`` and stop it where its log starts a line with ``line`` (the epochs
    before it are checkpointed: it stops during the next one's bookkeeping)."""

    def log(text: str) -> None:
        if text.startswith(line):
            raise Killed

    with pytest.raises(Killed):
        train(c, out, resume=resume, log=log)


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
        cfg(*SMALL, "algorithm.compression.name=topk", "ratio=0.9"),
        tmp_path / "a",
        log=lambda s: None,
    )
    b = train(
        cfg(*SMALL, "algorithm.compression.name=topk", "ratio=0.9"),
        tmp_path / "b",
        log=lambda s: None,
    )
    assert isinstance(a, RunRecord) and a.final == b.final
    logs = []
    again = train(
        cfg(*SMALL, "algorithm.compression.name=topk", "ratio=0.9"),
        tmp_path / "a",
        log=logs.append,
    )
    # the complete run is read from its metrics.json: the same type, the same record
    assert isinstance(again, RunRecord) and "already complete" in logs[0]
    assert again.to_dict() == a.to_dict() == record.read(tmp_path / "a").to_dict()


def test_a_complete_run_whose_files_were_removed_is_put_back_not_trained(tmp_path):
    """Snakemake removes a job's outputs (metrics.json, history.csv, config.yaml) before it
    reruns it and after it fails; a complete run has no checkpoint, so the rerun trained it from
    scratch. Its record's copy now puts it back; --force still trains it; a damaged copy is not
    used."""
    c = cfg(*SMALL, "algorithm.compression.name=topk", "ratio=0.9")
    a = train(c, tmp_path / "a", log=lambda s: None)
    files = {n: (tmp_path / "a" / n).read_bytes() for n in rundir.RECORD_FILES}
    for name in rundir.RECORD_FILES:
        (tmp_path / "a" / name).unlink()
    logs: list[str] = []
    again = train(c, tmp_path / "a", log=logs.append)
    assert "put back from .record-copy.json" in logs[0] and "already complete" in logs[1], logs
    assert not any(x.startswith("epoch") for x in logs), logs
    assert again.to_dict() == a.to_dict()
    assert {n: (tmp_path / "a" / n).read_bytes() for n in rundir.RECORD_FILES} == files
    # metrics.json cut short (it was a dead end, "not valid JSON", beside the good copy)
    (tmp_path / "a" / record.METRICS_FILE).write_bytes(files[record.METRICS_FILE][:100])
    logs.clear()
    assert train(c, tmp_path / "a", log=logs.append).to_dict() == a.to_dict()
    assert "put back from .record-copy.json" in logs[0] and "not valid JSON" in logs[0], logs
    assert (tmp_path / "a" / record.METRICS_FILE).read_bytes() == files[record.METRICS_FILE]
    # a copy whose record is not valid is not written back (it was, under "put back")
    copy = json.loads((tmp_path / "a" / rundir.RECORD_COPY).read_text())
    (tmp_path / "a" / rundir.RECORD_COPY).write_text(
        json.dumps({**copy, record.METRICS_FILE: '{"run_id": 1}'})
    )
    (tmp_path / "a" / record.METRICS_FILE).write_text("{")
    with pytest.raises(record.RecordError, match="not valid JSON"):
        train(c, tmp_path / "a", log=logs.append)
    assert (tmp_path / "a" / record.METRICS_FILE).read_text() == "{"
    (tmp_path / "a" / record.METRICS_FILE).unlink()
    (tmp_path / "a" / rundir.RECORD_COPY).write_text("{not json")
    logs.clear()
    train(c, tmp_path / "a", log=logs.append)
    assert "damaged (JSONDecodeError), not used" in logs[0]
    assert any(x.startswith("epoch") for x in logs), logs  # trained
    logs.clear()
    train(c, tmp_path / "a", force=True, log=logs.append)
    assert any(x.startswith("epoch") for x in logs), logs


@pytest.mark.parametrize("extra", [(), ("precision.mode=int8",)])
def test_killed_run_resumes_to_identical_result(tmp_path, extra):
    c = cfg(
        *SMALL,
        "algorithm.name=deepsqueeze",
        "algorithm.compression.name=topk",
        "ratio=0.9",
        "optim.qgm=true",
        *extra,
    )
    full, resumed = killed_and_resumed(c, tmp_path)
    assert resumed.final == full.final
    assert resumed.communication == full.communication


def killed_and_resumed(c: RunConfig, tmp_path: Path) -> tuple[RunRecord, RunRecord]:
    """The run of ``c`` uninterrupted, and the same run killed after epoch 1's checkpoint (of 3)
    and resumed."""
    full = train(c, tmp_path / "full", log=lambda s: None)
    stop_at(
        c, tmp_path / "cut", "epoch 2/3"
    )  # after epoch 1's checkpoint, in epoch 2's bookkeeping
    assert (tmp_path / "cut" / "checkpoint.pt").exists()
    assert not (tmp_path / "cut" / "metrics.json").exists()
    return full, train(c, tmp_path / "cut", resume=True, log=lambda s: None)


def test_checkpoint_every_k_epochs_saves_those_epochs_and_resumes_from_the_last(tmp_path):
    c = cfg(*SMALL, "train.checkpoint_every=2")
    assert c.run_id() == cfg(*SMALL).run_id()  # an execution key: the same run
    full = train(c, tmp_path / "full", log=lambda s: None)
    ck = tmp_path / "cut" / "checkpoint.pt"
    stop_at(c, tmp_path / "cut", "epoch 2/3")  # epoch 1 is not a multiple of 2: nothing saved
    assert not ck.exists()
    # after epoch 2's line its checkpoint is saved, then 3 runs
    stop_at(c, tmp_path / "cut", "epoch 3/3", resume=True)
    assert torch.load(ck, weights_only=False)["epoch"] == 2
    lines: list[str] = []
    resumed = train(c, tmp_path / "cut", resume=True, log=lines.append)
    assert any("resum" in line and "epoch 2" in line for line in lines), lines
    assert resumed.final == full.final


def test_divergence_ends_cleanly(tmp_path):
    out = tmp_path / "div"
    rc = main(
        [
            "train",
            *sum((["--set", o] for o in BASE), []),
            "--set",
            "optim.lr=1e6",
            "--set",
            "optim.momentum=0.99",
            "--out",
            str(out),
        ]
    )
    assert rc == 3
    m = json.loads((out / "metrics.json").read_text())
    assert m["status"] == "diverged" and m["final"] == {}
    assert len(m["history"]) >= 1
    # no final gossip rounds ran: the messages are the training rounds', as the bytes say
    c = m["communication"]
    assert c["messages_per_node"] == c["bytes_per_node"] / c["bytes_per_message"]


def test_a_non_finite_loss_mid_epoch_makes_that_epoch_diverge():
    """The loss is read on the host once an epoch (``Run.train_epoch``), not every iteration:
    one non-finite mean loss in the middle of an epoch still makes that epoch's result NaN,
    with every node's weights finite (only the loss check can have caught it)."""
    from lpdt.engine.run import Run

    run = Run(cfg(), log=lambda s: None)
    mean, calls = run.group.mean, []

    def poisoned(rows: torch.Tensor) -> torch.Tensor:
        calls.append(rows.shape)
        out = mean(rows)
        return out.new_full(out.shape, math.nan) if len(calls) == 2 else out

    run.group.mean = poisoned  # type: ignore[method-assign]
    assert math.isnan(run.train_epoch(0.1))
    assert run.iterations == run.iters > 2  # the epoch ran to its end
    assert bool(run.state.finite_rows().all())
    # and without the poison the same epoch is finite
    clean = Run(cfg(), log=lambda s: None)
    assert math.isfinite(clean.train_epoch(0.1))


@pytest.mark.parametrize(
    ("settings", "says"),
    [
        (["train.batch_size=4"], "train.batch_size=4 over topology.nodes=4 is 1 example per node"),
        (["data.train_subset=36"], "a node's 9 training examples at train.batch_size=32 over"),
    ],
)
def test_a_batch_norm_that_would_see_one_value_per_channel_is_a_config_error(settings, says):
    """ResNet-18 at 32 px ends in 1x1 feature maps: a batch of one example there (one per node,
    or the rest of a node's partition at the end of a pass) gave BN torch's error, at the first
    such batch (after an epoch of training for the rest of a pass), naming no setting."""
    from lpdt.config import ConfigError
    from lpdt.engine.run import Run

    base = [*TINY, "model.name=resnet18", "model.norm=batchnorm", "topology.nodes=4"]
    cfg = load_config(None, [*base, "data.train_subset=16", "train.batch_size=32", *settings])
    with pytest.raises(ConfigError, match=says) as e:
        Run(cfg, log=lambda s: None)
    assert "batchnorm layer stages.3.0.norm1" in str(e.value) and "model.norm" in str(e.value)
    # two examples in every batch (a partition of 10 at 8 per node), or a norm of each example
    for ok in (["data.train_subset=40"], ["data.train_subset=36", "model.norm=evonorm"]):
        Run(load_config(None, [*base, "train.batch_size=32", "data.test_subset=8", *ok]))
    # a run that never draws the short batch: one iteration an epoch, a pass of two
    capped = ["train.epochs=1", "train.max_iters_per_epoch=1", "train.final_gossip_rounds=0"]
    Run(load_config(None, [*base, "train.batch_size=32", "data.train_subset=36", *capped]))


def test_bad_config_exits_2_with_one_line(tmp_path, capsys):
    assert main(["train", "--set", "topology.name=star", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "topology.name" in err[0] and "directed_ring" in err[0]


# -- run records: provenance, run-directory checks, live history, progress ----------------------

ONE_EPOCH = ["train.epochs=1", "data.train_subset=640", "data.test_subset=100"]


def _argv(*overrides):
    return sum((["--set", o] for o in (*BASE, *overrides)), [])


def test_metrics_record_provenance(tmp_path):
    m = train(cfg(*ONE_EPOCH), tmp_path / "r", log=lambda s: None)
    p = m.provenance
    assert p.lpdt_version == m.versions.lpdt and p.device == "cpu"
    assert p.host and p.torch and p.command
    started, finished = (dt.datetime.fromisoformat(t) for t in (p.started, p.finished))
    assert started.utcoffset() == dt.timedelta(0) and started <= finished
    repo = Path(__file__).resolve().parents[2]
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, timeout=10
    )
    import lpdt

    if head.returncode == 0 and Path(lpdt.__file__).resolve().is_relative_to(repo):
        # the code that ran is this checkout's
        assert p.git_commit == head.stdout.strip() and isinstance(p.git_dirty, bool)


def test_system_metrics_are_recorded_per_epoch_and_for_the_run(tmp_path):
    """CPU share, peak memory, threads and images/s in every epoch's row and in the record's
    ``system`` section, with values a real run can have (threads=1: torch runs one intra-op
    thread, so the process cannot use much more than one core)."""
    import os
    import resource

    m = train(
        cfg("train.epochs=2", "data.train_subset=640", "data.test_subset=100"),
        tmp_path / "r",
        log=lambda s: None,
    )
    cores = os.cpu_count()
    epochs = [r for r in m.history if r.epoch != "final"]
    assert len(epochs) == 2
    for r in epochs:
        assert 0 < r.cpu_share <= 100 * 1.5 / cores + 1e-9, r  # at most ~1 core of `cores`
        assert 10 < r.peak_rss_mb < 64 * 1024 and r.threads >= 1
        assert r.images_per_s > 0
    # images/s of the epochs agree with the run's own figure (same images, same training time)
    mean_ips = 640 * 2 / sum(640 / r.images_per_s for r in epochs)
    assert mean_ips == pytest.approx(m.time.images_per_s, rel=1e-6)
    s = m.system
    assert s.cpu_count == cores and (s.cpu_model is None or s.cpu_model.strip())
    assert s.cpu_s > 0 and 0 < s.cpu_share <= 100 * 1.5 / cores + 1e-9
    # the peak is this process's (the test's) peak so far: the run's is no more than it
    own_peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    assert epochs[0].peak_rss_mb <= epochs[1].peak_rss_mb <= s.peak_rss_mb <= own_peak_mb
    assert s.threads_max >= max(r.threads for r in epochs)
    rows = list(csv.DictReader((tmp_path / "r" / "history.csv").open()))
    assert float(rows[0]["cpu_share"]) == epochs[0].cpu_share and rows[-1]["threads"] == ""


def test_git_state_outside_a_checkout_is_none(tmp_path):
    from lpdt import provenance

    assert provenance.git_state(tmp_path) == (None, None)


def test_output_dir_of_another_config_is_refused(tmp_path, capsys):
    out = str(tmp_path / "run")
    assert main(["train", *_argv(*ONE_EPOCH), "--out", out]) == 0
    capsys.readouterr()
    # complete run, other config: refused (not "already complete"), naming the keys
    assert main(["train", *_argv(*ONE_EPOCH, "optim.lr=0.05", "skew=0.5"), "--out", out]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "optim.lr, partition.skew" in err[0] and "--force" in err[0]
    # execution settings are not part of the config's identity
    assert main(["train", *_argv(*ONE_EPOCH, "threads=2", "name=x"), "--out", out]) == 0
    assert "already complete" in capsys.readouterr().out
    # --force overwrites
    assert main(["train", *_argv(*ONE_EPOCH, "optim.lr=0.05"), "--out", out, "--force"]) == 0
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert m["config"]["optim"]["lr"] == 0.05


def test_checkpoint_of_another_config_is_refused(tmp_path, capsys):
    c = cfg("train.epochs=2")
    out = tmp_path / "cut"

    stop_at(c, out, "epoch 2/2")
    assert (out / "checkpoint.pt").exists()
    other = ["train.epochs=2", "partition.skew=0.4"]
    # config.yaml of the started run differs
    assert main(["train", *_argv(*other), "--out", str(out), "--resume"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "config.yaml" in err[0] and "partition.skew" in err[0]
    # config.yaml replaced by the other config's: the checkpoint itself still says no
    (out / "config.yaml").write_text(yaml.safe_dump(cfg(*other).to_dict()))
    assert main(["train", *_argv(*other), "--out", str(out), "--resume"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "checkpoint.pt" in err[0] and "partition.skew" in err[0]
    # without --resume as with it: another config's, not "a checkpoint of this run: --resume"
    assert main(["train", *_argv(*other), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "partition.skew" in err[0] and "--resume" not in err[0], err


def test_a_checkpoint_is_not_overwritten_without_resume_or_force(tmp_path, capsys):
    """A started run's checkpoint and no --resume: refused in one line that names --resume and
    --force, the checkpoint untouched (the run had started again from its start, with a note,
    and overwritten a long run's epochs); --resume continues it, and --force starts again."""
    c = cfg(*SMALL, "train.epochs=2")
    out = tmp_path / "cut"

    stop_at(c, out, "epoch 2/2")
    ck = (out / "checkpoint.pt").read_bytes()
    argv = ["train", *_argv(*SMALL, "train.epochs=2"), "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "checkpoint.pt" in err[0], err
    assert "--resume" in err[0] and "--force" in err[0], err
    assert (out / "checkpoint.pt").read_bytes() == ck and not (out / "metrics.json").exists()
    # --resume with --force: --force discarded the checkpoint without a word (before 2026-12-01)
    assert main([*argv, "--resume", "--force"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pass one of them" in err[0], err
    assert (out / "checkpoint.pt").read_bytes() == ck
    assert main([*argv, "--resume"]) == 0
    assert "resumed from" in capsys.readouterr().out
    lines: list[str] = []
    train(c, out, force=True, log=lines.append)
    assert not any("resumed" in line for line in lines) and any(
        line.startswith("epoch 1/2") for line in lines
    ), lines


def test_the_other_engines_checkpoint_is_refused_not_left_behind(tmp_path):
    """``engine`` is an execution key: a run started by one engine may be run by the other,
    which cannot read its checkpoint. It trained from the start beside it (--resume found
    nothing of its own) and left it in the run directory. Now: refused in one line naming the
    engine to resume with, before anything runs; --force discards both engines' files."""
    from lpdt.engine.launch import launch_local
    from lpdt.engine.rundir import RunDirError, forced, open_run_dir

    c = cfg(*SMALL, "train.epochs=1")
    dist = cfg(*SMALL, "train.epochs=1", "engine=distributed")
    sim_out, dist_out = tmp_path / "sim", tmp_path / "dist"
    for out, name in ((sim_out, "checkpoint.rank1.pt"), (dist_out, "checkpoint.pt")):
        out.mkdir()
        (out / name).write_bytes(b"another engine's checkpoint")
    with pytest.raises(
        RunDirError,
        match=r"distributed engine \(checkpoint\.rank1\.pt\).*"
        r"engine: distributed and --resume, or pass --force",
    ):
        train(c, sim_out, resume=True, log=lambda s: None)
    with pytest.raises(RunDirError, match=r"simulated engine \(checkpoint\.pt\)"):
        launch_local(dist, dist_out, resume=True, log=lambda s: None)
    assert (sim_out / "checkpoint.rank1.pt").exists() and (dist_out / "checkpoint.pt").exists()
    # --force: nothing checked; the files go once the new run has started (rundir.forced)
    assert open_run_dir(c, sim_out, True, [sim_out / "checkpoint.pt"], print) is None
    assert (sim_out / "checkpoint.rank1.pt").exists()
    forced(sim_out)
    assert not any(sim_out.iterdir())


@pytest.mark.parametrize("damage", ["", "seed: [1,\n", "just text\n"])
def test_a_damaged_config_yaml_beside_a_checkpoint_is_written_again(tmp_path, damage):
    """A started run's config.yaml emptied, cut short or replaced: a note, and --resume
    continues from the checkpoint (checked against the config on its own) to the numbers of an
    uninterrupted run. It was "a run of another config (differs in: no config); pass --force",
    which would have discarded the checkpoint."""
    c = cfg(*SMALL, "train.epochs=2")

    full = train(c, tmp_path / "full", log=lambda s: None)
    out = tmp_path / "cut"
    stop_at(c, out, "epoch 2/2")
    (out / "config.yaml").write_text(damage)
    lines: list[str] = []
    resumed = train(c, out, resume=True, log=lines.append)
    assert any("config.yaml is damaged" in line for line in lines), lines
    assert any(line.startswith("resumed from") for line in lines), lines
    assert resumed.final == full.final
    assert yaml.safe_load((out / "config.yaml").read_text()) == c.to_dict()


def test_progress_lines_have_iteration_loss_throughput_and_eta(tmp_path, monkeypatch):
    import lpdt.engine.loop as lt

    monkeypatch.setattr(lt, "PROGRESS_EVERY_S", 0.0)
    lines = []
    train(cfg("train.epochs=2"), tmp_path / "p", log=lines.append)
    progress = [s for s in lines if s.startswith("  epoch ")]
    # every iteration but each epoch's last (30 per epoch) and the run's first (its time may
    # include a compile, so rates start after it)
    assert len(progress) == 2 * 29 - 1
    assert progress[0].startswith("  epoch 1/2 iter 2/30  loss ")
    assert all("img/s" in s and "ETA " in s for s in progress)
    assert "ETA" in next(s for s in lines if s.startswith("epoch 1/2"))


@pytest.mark.parametrize(
    "sig",
    # SIGKILL slow since 2026-12-02: the resume is the same, and SIGTERM's line is new
    [signal.SIGTERM, pytest.param(signal.SIGKILL, marks=pytest.mark.slow)],
)
def test_killed_process_resumes_with_continuous_history_and_wall_time(tmp_path, sig):
    """SIGTERM (what SLURM and Snakemake send) or SIGKILL a real `lpdt train` once its first
    checkpoint exists, then --resume: history.csv (written every epoch) continues where it
    stopped, and wall_s keeps growing. SIGTERM ends it as Ctrl-C does, with one line (it ended
    with status 143 and no word)."""
    epochs = 8
    extra = [*SMALL, f"train.epochs={epochs}"]
    out = tmp_path / "run"
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "lpdt.cli", "train", *_argv(*extra), "--out", str(out)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        while not (out / "checkpoint.pt").exists():
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "no checkpoint after 120 s"
            time.sleep(0.005)
        proc.send_signal(sig)
        proc.wait(timeout=30)
        err = proc.stderr.read().decode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        proc.stderr.close()
    assert proc.returncode == (128 + sig if sig == signal.SIGTERM else -sig), err[-2000:]
    if sig == signal.SIGTERM:
        assert err.splitlines()[-1] == (
            "lpdt train: stopped by SIGTERM (--resume continues a run from its last checkpoint)"
        )
    assert not (out / "metrics.json").exists(), "the run ended before it was killed"
    before = list(csv.DictReader((out / "history.csv").open()))
    assert 1 <= len(before) < epochs and [r["epoch"] for r in before] == [
        str(e) for e in range(len(before))
    ]
    m = train(cfg(*extra), out, resume=True, log=lambda s: None)
    rows = list(csv.DictReader((out / "history.csv").open()))
    assert [r["epoch"] for r in rows] == [str(e) for e in range(epochs)] + ["final"]
    walls = [float(r["wall_s"]) for r in rows]
    assert all(a < b for a, b in zip(walls, walls[1:])), walls
    assert walls[0] == pytest.approx(float(before[0]["wall_s"]))
    assert m.time.total_s >= walls[-1]


def test_one_lpdt_train_at_a_time_in_a_run_folder(tmp_path):
    """Two runs of other configs into one folder at once both ended "ok", one record lost (the
    checks come before the run starts): the second is refused while the first holds the lock,
    naming its pid. A folder made for a run that did not start is not left behind."""
    from lpdt.engine import train as engine_train
    from lpdt.engine.rundir import LOCK_FILE, RunDirError, locked
    from lpdt.errors import LpdtError

    out = tmp_path / "run"
    with locked(out):  # as a running lpdt train holds it
        assert (out / LOCK_FILE).read_text() == f"{os.getpid()}\n"
        with pytest.raises(RunDirError, match=rf"{out} is in use by another lpdt train \(pid"):
            engine_train(cfg("train.epochs=1"), out, log=lambda s: None)
    assert not out.exists()  # made for the lock, nothing else in it
    fresh = tmp_path / "fresh"
    with pytest.raises(LpdtError, match="cifar10 not found"):  # a run that cannot start
        engine_train(cfg("train.epochs=1", "data.dataset=cifar10", "data.root=/no"), fresh)
    assert not fresh.exists()


def test_a_killed_writes_temporary_files_go_and_a_failed_force_keeps_the_run(tmp_path, capsys):
    """A process killed while it wrote a checkpoint left ``.checkpoint.pt.<random>.tmp`` behind
    for good: the next run in the folder removes the run's own (another program's stays). A
    ``--force`` whose run could not start (its dataset missing) deleted the complete run."""
    out = tmp_path / "run"
    argv = ["train", *_argv(*SMALL, "train.epochs=1"), "--out", str(out)]
    assert main(argv) == 0
    kept = (out / "metrics.json").read_text()
    bad = ["--set", "data.dataset=cifar10", "--set", "data.root=/no", "--force"]
    assert main([*argv, *bad]) == 2 and "cifar10 not found" in capsys.readouterr().err
    assert (out / "metrics.json").read_text() == kept and (out / ".record-copy.json").exists()
    stale = [out / ".checkpoint.pt.k1ll3d00.tmp", out / ".history.csv.abcdefgh.tmp"]
    for p in [*stale, out / ".notes.tmp"]:
        p.write_bytes(b"partial")
    assert main([*argv, "--set", "train.epochs=2"]) == 2  # another config: refused, and
    assert not any(p.exists() for p in stale) and (out / ".notes.tmp").exists()  # swept


def test_a_distributed_force_that_cannot_start_keeps_the_run(tmp_path, capsys):
    """The distributed engine discarded the old run before its workers built theirs (the
    launcher, and rank 0 before the rendezvous): now each rank builds its run first, and the
    writer discards once every rank has (a barrier before any save)."""
    out = tmp_path / "run"
    argv = ["train", *_argv(*SMALL, "train.epochs=1", "topology.nodes=2"), "--out", str(out)]
    argv += ["--set", "engine=distributed", "--set", "threads=1"]
    assert main(argv) == 0
    kept = (out / "metrics.json").read_text()
    bad = ["--set", "data.dataset=cifar10", "--set", "data.root=/no", "--force"]
    assert main([*argv, *bad]) == 2
    assert (out / "metrics.json").read_text() == kept and (out / ".record-copy.json").exists()
    capsys.readouterr()


def test_a_complete_run_on_a_folder_that_cannot_be_written_is_still_read(tmp_path, monkeypatch):
    """The lock file could not be made on a read-only mount, and a complete run there became
    an error; it is read as before (a run that trains there fails on its own)."""
    import errno

    from lpdt.engine import rundir
    from lpdt.engine import train as engine_train

    out = tmp_path / "run"
    c = cfg(*SMALL, "train.epochs=1")
    done = engine_train(c, out, log=lambda s: None)

    def read_only(path, *args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system", str(path))

    monkeypatch.setattr(rundir, "open", read_only, raising=False)  # the lock file's open
    lines: list[str] = []
    assert engine_train(c, out, log=lines.append).to_dict() == done.to_dict()
    assert "already complete" in lines[-1]


def test_a_config_file_in_the_run_folder_is_not_overwritten(tmp_path, monkeypatch, capsys):
    """``--config config.yaml --out .`` replaced the user's file (its comments) with the run's
    resolved config; a config the run wrote itself may be given back."""
    monkeypatch.chdir(tmp_path)
    text = "# mine\n" + yaml.safe_dump(
        {"data": {"dataset": "synthetic"}, "model": {"name": "tiny_cnn"}, "device": "cpu"}
    )
    Path("config.yaml").write_text(text)
    assert main(["train", "--config", "config.yaml", "--out", "."]) == 2
    assert "keep your config outside --out ." in capsys.readouterr().err
    assert Path("config.yaml").read_text() == text
    # a run's own config.yaml, as an earlier lpdt wrote it (a key fewer): given back, it runs
    run = Path("run")
    assert main(["train", *_argv(*SMALL, "train.epochs=1"), "--out", str(run)]) == 0
    own = (run / "config.yaml").read_text()
    (run / "config.yaml").write_text("\n".join(x for x in own.split("\n") if x != "name: null"))
    assert "name: null" in own
    assert main(["train", "--config", str(run / "config.yaml"), "--out", str(run)]) == 0


def test_a_checkpoint_past_the_runs_epochs_is_refused(tmp_path):
    """A checkpoint without its config (an older one) of a longer run: resumed, it wrote a record
    of 57 epochs under train.epochs=10, "ok"."""
    import torch

    out = tmp_path / "run"
    stop_at(cfg(*SMALL, "train.epochs=4"), out, "epoch 3/4")  # after epoch 2
    ck = torch.load(out / "checkpoint.pt", weights_only=False)
    del ck["run_config"]
    alone = tmp_path / "alone"  # the checkpoint without the run's other files
    alone.mkdir()
    torch.save(ck, alone / "checkpoint.pt")
    with pytest.raises(ValueError, match="past this run's train.epochs=1: it is another run's"):
        train(cfg(*SMALL, "train.epochs=1"), alone, resume=True, log=lambda s: None)


def test_version(capsys):
    import lpdt

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"lpdt {lpdt.__version__}"


def test_sharded_node_evaluation_covers_the_test_split_once():
    """At initialisation every node holds the same model, so the mean of its per-shard accuracies
    (each test image evaluated once, by one node) equals that model's whole-split accuracy, while
    the shards themselves differ (min < max); full evaluation gives min = mean = max."""
    from lpdt.engine.run import Run

    full = Run(cfg("data.test_subset=400"), log=lambda s: None).evaluate_all()
    run = Run(cfg("data.test_subset=400", "train.node_eval=sharded"), log=lambda s: None)
    sharded = run.evaluate_all()
    assert full["acc_node_min"] == full["acc_node_mean"] == full["acc_node_max"]
    assert sharded["acc_node_mean"] == pytest.approx(full["acc_avg_model"], abs=1e-9)
    assert sharded["acc_avg_model"] == full["acc_avg_model"]
    assert sharded["acc_node_min"] < sharded["acc_node_max"]


def test_one_process_train_refuses_the_distributed_engine_without_a_group(tmp_path):
    """``lpdt.engine.loop.train`` is one process's part of a run: ``engine: distributed`` goes through
    ``lpdt.engine.train`` (the CLI's entry point), which starts one process per node."""
    with pytest.raises(ValueError, match="engine: distributed runs one process per node"):
        train(cfg("engine=distributed"), tmp_path / "run", log=lambda s: None)
    assert not (tmp_path / "run").exists()


def test_plan_counts_the_evaluations_a_run_makes(tmp_path):
    """lpdt.plan.runtime.evaluated_images (the plan's estimate) counts the evaluations this loop
    really makes: every eval_every epochs but the last, then the final one; and the accuracy
    curve's subset (train.curve_images) after every epoch."""
    from lpdt.plan import runtime

    c = cfg("train.epochs=3", "train.eval_every=1", "data.train_subset=320", "data.test_subset=50")
    m = train(c, tmp_path / "r", log=lambda s: None)
    evaluations = [r for r in m.history if r.acc_node_mean is not None]
    curve = [r for r in m.history if r.acc_subset_node_mean is not None]
    per_eval = (c.topology.nodes + 1) * 50 if c.train.node_eval == "full" else 2 * 50
    assert len(evaluations) == 3  # after epochs 1 and 2, and the final one
    assert len(curve) == 3 and c.train.curve_images > 50  # every epoch, the whole (small) split
    assert runtime.full_eval_images(c.to_dict()) == len(evaluations) * per_eval
    assert runtime.evaluated_images(c.to_dict()) == len(evaluations) * per_eval + 3 * 50


def _history_numbers(path: Path) -> list[dict[str, str]]:
    """history.csv without the columns that time or measure the machine."""
    timing = ("wall_s", "cpu_share", "peak_rss_mb", "threads", "images_per_s")
    rows = csv.DictReader(path.open())
    return [{k: v for k, v in r.items() if k not in timing} for r in rows]


def test_several_runs_in_one_process_are_the_runs_their_own_processes_make(tmp_path, capsys):
    """Repeated --config / --out (the workflow's batches of seeds) train the runs in turn, and
    each is bit for bit the run its own process makes: here an 8-bit run trained after another
    seed, against the same config trained alone by a fresh `lpdt train` process."""
    from lpdt.config import dump_config

    paths = []
    for seed in (7, 8):
        p = tmp_path / f"seed{seed}.yaml"
        p.write_text(dump_config(cfg(*ONE_EPOCH, "precision.mode=int8", f"seed={seed}")))
        paths.append(p)
    argv = ["train", "--config", str(paths[0]), "--out", str(tmp_path / "a")]
    argv += ["--config", str(paths[1]), "--out", str(tmp_path / "b")]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "--- run 1 of 2" in out and "--- run 2 of 2" in out
    alone = subprocess.run(
        [sys.executable, "-m", "lpdt.cli", "train", "--config", str(paths[1])]
        + ["--out", str(tmp_path / "alone")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert alone.returncode == 0, alone.stderr[-2000:]
    second, own = record.read(tmp_path / "b"), record.read(tmp_path / "alone")
    assert second.run_id == own.run_id and second.final == own.final
    assert second.communication == own.communication
    assert _history_numbers(tmp_path / "b/history.csv") == _history_numbers(
        tmp_path / "alone/history.csv"
    )


def test_a_failed_run_of_several_is_one_line_and_the_others_still_run(tmp_path, capsys):
    from lpdt.config import dump_config

    (tmp_path / "c.yaml").write_text(dump_config(cfg(*ONE_EPOCH)))
    (tmp_path / "other.yaml").write_text(dump_config(cfg(*ONE_EPOCH, "optim.lr=0.05")))
    assert (
        main(["train", "--config", str(tmp_path / "other.yaml"), "--out", str(tmp_path / "x")]) == 0
    )
    capsys.readouterr()
    argv = ["train", "--config", str(tmp_path / "c.yaml"), "--out", str(tmp_path / "x")]
    argv += ["--config", str(tmp_path / "c.yaml"), "--out", str(tmp_path / "y")]
    assert main(argv) == 2  # x holds a run of another config: refused; y still trained
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith(f"lpdt train: error in run {tmp_path / 'x'}: ")
    assert err[-1] == "lpdt train: 1 of 2 runs complete, 1 failed"
    assert record.read(tmp_path / "y").status == "ok"
    # one run folder inside another (the second run's files in the first's folder)
    argv = ["train", "--config", "a.yaml", "--config", "b.yaml", "--out", "m8", "--out", "m8/sub"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--out m8/sub lies inside --out m8" in err[0], err
    # one --out per --config
    assert main(["train", "--config", "a.yaml", "--config", "b.yaml", "--out", "o"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "2 --config need as many --out (got 1)" in err[0]


def notes_of(c, out: Path) -> tuple[list[str], list[str]]:
    """The notes a training of ``c`` into ``out`` printed after its first line, and all it
    printed."""
    lines: list[str] = []
    train(c, out, log=lines.append)
    return [x for x in lines if x.startswith("note: ")], lines


def test_a_subset_larger_than_its_split_is_a_note(tmp_path):
    """``data.train_subset=100000`` on Fashion-MNIST's 60,000 images trained on all of them
    without a line (the record says how many were used)."""
    c = cfg(  # BASE, on the tiny CNN
        "data.dataset=fashion_mnist",
        "data.train_subset=100000",
        "data.test_subset=64",
        "topology.nodes=2",
        "train.epochs=1",
        "train.max_iters_per_epoch=1",
        "train.final_gossip_rounds=1",
        "train.curve_images=0",
    )
    notes, lines = notes_of(c, tmp_path / "run")
    assert notes == [
        "note: data.train_subset 100,000 is more than the 60,000 train examples of "
        "fashion_mnist: all 60,000 are used"
    ], lines


def test_a_batch_larger_than_every_partition_is_a_note(tmp_path):
    """``train.batch_size=512`` over 2 nodes of 100 examples each trained one short batch per
    epoch, and the run's first line said only ``1 it/epoch``."""
    c = cfg(
        "data.train_subset=200",
        "data.test_subset=64",
        "topology.nodes=2",
        "train.batch_size=512",
        "train.epochs=1",
        "train.final_gossip_rounds=1",
        "train.curve_images=0",
    )
    notes, lines = notes_of(c, tmp_path / "run")
    assert notes == [
        "note: train.batch_size 512 over 2 nodes is 256 per node, more than the largest "
        "partition's 100 training examples: each epoch is one batch of a node's whole partition"
    ], lines
    # a batch that fits the partitions: no note
    notes, lines = notes_of(cfg(*ONE_EPOCH, "topology.nodes=2"), tmp_path / "fits")
    assert not notes, lines


def test_settings_the_run_does_not_use_are_a_note(tmp_path):
    """``model.norm=rangeen`` on ``tiny_cnn`` (no norm layer, 8 bits here) trained the model as
    it is, silently; the default norm on such a model says nothing (the test above). A
    BN-style norm at 8 bits trains 8-bit Range-EvoNorm: a note says so, and that a ResNet has
    the slot in both precisions (``has_norm``)."""
    from types import SimpleNamespace

    from lpdt.engine.console import settings_notes
    from lpdt.layers.quant.convert import convert_to_int8, has_norm
    from lpdt.models.resnet import resnet8

    c = cfg(*ONE_EPOCH, "model.norm=rangeen", "precision.mode=int8", "train.curve_images=0")
    notes, lines = notes_of(c, tmp_path / "run")
    assert notes == [
        "note: settings that change nothing in this run: model.norm=rangeen (tiny_cnn has no "
        "norm layer)"
    ], lines
    bn = cfg("model.name=resnet8", "model.norm=batchnorm", "precision.mode=int8")
    resnet = resnet8(bn.model, 10, (3, 12, 12))
    int8 = convert_to_int8(resnet, bn.precision, bn.model)
    assert has_norm(resnet) and has_norm(int8)
    run = SimpleNamespace(state=SimpleNamespace(models=[int8]))
    assert settings_notes(bn, run) == [  # type: ignore[arg-type]
        "note: model.norm=batchnorm at 8 bits trains 8-bit Range-EvoNorm, as every norm but "
        "Range-BN (model.norm=rangebn) does (docs/int8.md)"
    ]


def test_resume_with_nothing_to_resume_says_so(tmp_path):
    """``--resume`` into a folder with no checkpoint (a mistyped ``--out``) trained a new run
    from its start without a word (before 2026-12-01)."""
    lines: list[str] = []
    train(cfg(*SMALL, "train.epochs=1"), tmp_path / "new", resume=True, log=lines.append)
    assert (
        f"note: --resume: no checkpoint to resume in {tmp_path / 'new'}; starting at epoch 1"
        in lines
    )


def test_more_threads_than_cores_is_a_note_and_past_the_largest_machines_a_config_error(
    monkeypatch,
):
    """threads=4096 on 2 cores ran a 1-epoch tiny run for minutes without a word; 100,000
    crashed the process (a segmentation fault in OpenMP) instead of a config error."""
    from lpdt.config import ConfigError
    from lpdt.config.checks import MAX_THREADS
    from lpdt.engine.console import threads_note

    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert threads_note(cfg("threads=2")) is None and threads_note(cfg("threads=null")) is None
    assert threads_note(cfg("threads=64")) == (
        "note: threads=64 on a machine of 2 cores: the threads take turns, which is slower than "
        "one per core (threads: null uses them all)"
    )
    assert cfg(f"threads={MAX_THREADS}").threads == MAX_THREADS
    with pytest.raises(ConfigError, match=f"'threads': must be between 1 and {MAX_THREADS}"):
        cfg(f"threads={MAX_THREADS + 1}")
