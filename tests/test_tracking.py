"""MLflow tracking: store init, idempotent logging, 16 concurrent writers on one SQLite store."""

import csv
import json
import multiprocessing as mp
import shutil
from pathlib import Path

import pytest
import yaml

from lpdt import tracking

EPOCHS = 3


def fake_run_dir(root, i: int, status: str = "ok"):
    """A finished run directory as `lpdt train` writes it (docs/architecture.md)."""
    d = root / f"run{i:02d}"
    d.mkdir(parents=True)
    config = {"data": {"dataset": "synthetic"}, "partition": {"skew": i / 20}, "seed": i}
    history = [
        {"epoch": e, "lr": 0.1, "train_loss": 2.0 - e / 10 - i / 100, "acc_node_mean": 10 + e + i,
         "acc_avg_model": "" if e == 0 else 11 + e + i, "bytes_per_node": 1000 * (e + 1)}
        for e in range(EPOCHS)
    ]  # fmt: skip
    final = {"acc_node_mean": 50.0 + i, "acc_avg_model": 51.0 + i, "consensus_distance": 0.1}
    history.append({"epoch": "final", **final})
    with (d / "history.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=sorted({k for r in history for k in r}))
        w.writeheader()
        w.writerows(history)
    (d / "config.yaml").write_text(yaml.safe_dump(config))
    metrics = {
        "run_id": f"rid{i:02d}", "name": None, "status": status, "config": config,
        "dataset": {"name": "fashion_mnist", "stand_in": True, "stand_in_for": "cifar10"},
        "model": {"name": "tiny_cnn", "params": 1234}, "final": final,
        "communication": {"gb_per_node": 0.5}, "time": {"train_s": 3.0},
        "epochs_completed": EPOCHS,
    }  # fmt: skip
    (d / "metrics.json").write_text(json.dumps(metrics))
    return d


@pytest.fixture(scope="session")
def template_db(tmp_path_factory) -> Path:
    """One initialised store per session (creating the schema takes seconds); tests copy it."""
    path = tmp_path_factory.mktemp("template") / "mlflow.db"
    tracking.init_store(f"sqlite:///{path}", "lpdt")
    return path


def fresh_store(template_db: Path, directory: Path) -> str:
    # absolute URIs: MLflow caches one store per URI string, so a relative URI would keep
    # pointing at the first test's directory
    (directory / "results").mkdir(parents=True, exist_ok=True)
    shutil.copy(template_db, directory / "results" / "mlflow.db")
    return f"sqlite:///{directory}/results/mlflow.db"


@pytest.fixture()
def store(tmp_path, monkeypatch, template_db):
    monkeypatch.chdir(tmp_path)
    return fresh_store(template_db, tmp_path)


def _logged(uri: str):
    from mlflow.tracking import MlflowClient

    c = MlflowClient(uri)
    exp = c.get_experiment_by_name("lpdt")
    return c, c.search_runs([exp.experiment_id], max_results=1000)


def test_init_store_is_idempotent(store):
    assert tracking.init_store(store, "lpdt") == tracking.init_store(store, "lpdt")
    assert (tracking.sqlite_path(store)).is_file()


def test_log_run_logs_params_metrics_tags_artifacts_once(store, tmp_path):
    d = fake_run_dir(tmp_path / "runs", 3)
    mid = tracking.log_run(d, store, "lpdt", {"studies": "table3", "scale": "smoke"})
    c, runs = _logged(store)
    assert [r.info.run_id for r in runs] == [mid]
    r = runs[0]
    assert r.data.params["partition.skew"] == str(3 / 20)
    assert r.data.tags["lpdt_run_id"] == "rid03" and r.data.tags["studies"] == "table3"
    assert r.data.tags["stand_in"] == "true" and r.data.tags["stand_in_for"] == "cifar10"
    assert r.data.metrics["final.acc_node_mean"] == 53.0
    steps = [m.step for m in c.get_metric_history(mid, "acc_node_mean")]
    assert sorted(steps) == list(range(EPOCHS))
    # the empty (not evaluated) cell of epoch 0 is skipped, not logged as NaN
    assert [m.step for m in c.get_metric_history(mid, "acc_avg_model")] == [1, 2]
    arts = {a.path for a in c.list_artifacts(mid)}
    assert {"metrics.json", "history.csv", "config.yaml"} <= arts
    assert r.info.status == "FINISHED"
    # idempotent: a second call logs nothing new but refreshes tags
    again = tracking.log_run(d, store, "lpdt", {"studies": "fig4,table3", "scale": "smoke"})
    c, runs = _logged(store)
    assert again == mid and len(runs) == 1 and runs[0].data.tags["studies"] == "fig4,table3"


def test_partially_logged_run_is_replaced(store, tmp_path):
    d = fake_run_dir(tmp_path / "runs", 1)
    c, _ = _logged(store)
    exp = c.get_experiment_by_name("lpdt")
    c.create_run(exp.experiment_id, tags={"lpdt_run_id": "rid01"})  # no lpdt_logged tag
    mid = tracking.log_run(d, store, "lpdt")
    _, runs = _logged(store)
    assert [r.info.run_id for r in runs] == [mid]
    assert tracking.find_run(store, "lpdt", "rid01") == mid


def test_diverged_run_is_marked_failed(store, tmp_path):
    d = fake_run_dir(tmp_path / "runs", 2, status="diverged")
    tracking.log_run(d, store, "lpdt")
    _, runs = _logged(store)
    assert runs[0].info.status == "FAILED" and runs[0].data.tags["status"] == "diverged"


def test_missing_metrics_is_a_clear_error(store, tmp_path):
    with pytest.raises(tracking.TrackingError, match="metrics.json does not exist"):
        tracking.log_run(tmp_path / "nope", store, "lpdt")


def test_retry_backs_off_on_lock_only():
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise RuntimeError("(sqlite3.OperationalError) database is locked")
        return "ok"

    assert tracking.with_retry(flaky, base_s=0.001) == "ok" and len(calls) == 3
    with pytest.raises(ValueError):
        tracking.with_retry(lambda: (_ for _ in ()).throw(ValueError("other")), base_s=0.001)


def _worker(args):
    uri, d = args
    return tracking.log_run(d, uri, "lpdt", {"studies": "concurrency"})


def test_16_concurrent_writers_lose_nothing(template_db, tmp_path):
    """16 processes log at once into one pre-initialised SQLite store (as 16 training jobs do)."""
    uri = fresh_store(template_db, tmp_path)  # no client for it in this process before the fork
    dirs = [fake_run_dir(tmp_path / "runs", i) for i in range(16)]
    # fork: the children share the already imported MLflow, which keeps the test fast
    with mp.get_context("fork").Pool(16) as pool:
        ids = pool.map(_worker, [(uri, str(d)) for d in dirs])
    assert len(set(ids)) == 16
    c, runs = _logged(uri)
    assert len(runs) == 16
    by_rid = {r.data.tags["lpdt_run_id"]: r for r in runs}
    assert sorted(by_rid) == [f"rid{i:02d}" for i in range(16)]
    for i in range(16):
        r = by_rid[f"rid{i:02d}"]
        assert r.data.tags["lpdt_logged"] == "true"
        assert r.data.metrics["final.acc_node_mean"] == 50.0 + i
        assert len(c.get_metric_history(r.info.run_id, "train_loss")) == EPOCHS
        assert len(r.data.params) == 3


def test_sync_manifest_logs_missing_runs_and_tags_studies(store, tmp_path):
    d1, d2 = fake_run_dir(tmp_path / "runs", 1), fake_run_dir(tmp_path / "runs", 2)
    tracking.log_run(d1, store, "lpdt", {"studies": "table3"})
    manifest = {"scale": "quick", "studies": {
        "table3": {"kind": "grid", "runs": [{"run_id": "rid01", "dir": str(d1), "coords": {}}]},
        "fig4": {"kind": "grid", "runs": [{"run_id": "rid01", "dir": str(d1), "coords": {}},
                                          {"run_id": "rid02", "dir": str(d2), "coords": {}},
                                          {"run_id": "rid09", "dir": "absent", "coords": {}}]},
    }}  # fmt: skip
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    out = tracking.sync_manifest(tmp_path / "manifest.json", store, "lpdt")
    assert sorted(out) == ["rid01", "rid02"]
    _, runs = _logged(store)
    tags = {r.data.tags["lpdt_run_id"]: r.data.tags for r in runs}
    assert tags["rid01"]["studies"] == "fig4,table3" and tags["rid02"]["studies"] == "fig4"
    assert tags["rid01"]["scale"] == "quick"


def test_ui_without_store_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(tracking.TrackingError, match="no MLflow store"):
        tracking.ui("sqlite:///results/mlflow.db")


def test_command_line_init_log_sync_write_receipts(store, tmp_path):
    d = fake_run_dir(tmp_path / "runs", 4)
    assert tracking.main(["init", "--uri", store, "--out", str(tmp_path / "init.json")]) == 0
    assert json.loads((tmp_path / "init.json").read_text())["experiment"] == "lpdt"
    out = tmp_path / "log.json"
    argv = ["log", str(d), "--uri", store, "--tag", "scale=smoke", "--out", str(out)]
    assert tracking.main(argv) == 0
    mid = json.loads(out.read_text())["mlflow_run_id"]
    assert tracking.find_run(store, "lpdt", "rid04") == mid
    assert tracking.main(["log", str(tmp_path / "missing"), "--uri", store]) == 2


# -- provenance: tags come from the record, not from the machine that logs ----------------------


def test_relogging_from_another_commit_keeps_the_recorded_commit(store, tmp_path, monkeypatch):
    import subprocess

    from lpdt import provenance

    d = fake_run_dir(tmp_path / "runs", 5)
    m = json.loads((d / "metrics.json").read_text())
    m["provenance"] = {"git_commit": "a" * 40, "git_dirty": False, "host": "trainer",
                       "lpdt_version": "0.1.0"}  # fmt: skip
    (d / "metrics.json").write_text(json.dumps(m))
    mid = tracking.log_run(d, store, "lpdt", {"studies": "table3"})
    # log again from another checkout: a fresh git repository with its own commit as the working
    # directory, and the package's commit lookup answering another commit
    repo = tmp_path / "elsewhere"
    repo.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo)]
    for args in (["init", "-q"], ["commit", "-q", "--allow-empty", "-m", "x"]):
        subprocess.run([*git, *args], check=True, capture_output=True, timeout=30)
    monkeypatch.chdir(repo)
    monkeypatch.setattr(provenance, "git_state", lambda path=None: ("b" * 40, True))
    assert tracking.log_run(d, store, "lpdt", {"studies": "fig4,table3"}) == mid
    _, runs = _logged(store)
    tags = runs[0].data.tags
    assert tags["git_commit"] == "a" * 40 and tags["git_dirty"] == "false"
    assert tags["host"] == "trainer" and tags["studies"] == "fig4,table3"


def test_record_without_provenance_is_tagged_unknown(store, tmp_path):
    d = fake_run_dir(tmp_path / "runs", 6)
    tracking.log_run(d, store, "lpdt")
    _, runs = _logged(store)
    assert runs[0].data.tags["git_commit"] == "unknown"


# -- the store lock --------------------------------------------------------------------------------


def test_store_lock_wait_is_bounded(tmp_path):
    import fcntl
    import os
    import time

    uri = f"sqlite:///{tmp_path}/results/mlflow.db"
    with tracking.store_lock(uri):
        pass  # creates results/ and the lock file
    fd = os.open(tmp_path / "results" / "mlflow.db.lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another holder (flock: per open file)
        t0 = time.monotonic()
        with (
            pytest.raises(
                tracking.TrackingError, match=r"timed out after 0.3 s .*mlflow\.db\.lock"
            ),
            tracking.store_lock(uri, timeout_s=0.3),
        ):
            pass
        assert 0.3 <= time.monotonic() - t0 < 5
    finally:
        os.close(fd)
    with tracking.store_lock(uri, timeout_s=0.3):  # released with its holder
        pass


TRAIN = ["data.dataset=synthetic", "data.train_subset=64", "data.test_subset=32",
         "model.name=tiny_cnn", "topology.nodes=2", "train.batch_size=16", "train.epochs=1",
         "train.final_gossip_rounds=1", "train.eval_batch_size=32", "threads=1",
         "device=cpu"]  # fmt: skip


@pytest.mark.parametrize("n", [4, pytest.param(16, marks=pytest.mark.slow)])
def test_concurrent_lpdt_train_processes_create_one_fresh_store(tmp_path, n):
    """n `lpdt train --set tracking.mlflow=true` started at once against a store that does not
    exist yet: every run is logged completely, and the store stays readable."""
    import os
    import subprocess
    import sys
    import time

    uri = f"sqlite:///{tmp_path}/results/mlflow.db"
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "OMP_NUM_THREADS": "1"}
    procs = []
    try:
        for i in range(n):
            argv = [a for o in [*TRAIN, f"seed={i}", "tracking.mlflow=true",
                                f"tracking.uri={uri}"] for a in ("--set", o)]  # fmt: skip
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "lpdt.cli", "train", *argv, "--out", str(tmp_path / f"r{i}")],
                env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            ))  # fmt: skip
        deadline = time.monotonic() + 300
        outs = [p.communicate(timeout=max(1.0, deadline - time.monotonic()))[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=30)
    for p, out in zip(procs, outs):
        assert p.returncode == 0 and "could not log" not in out, out[-3000:]
    c, runs = _logged(uri)
    rids = {json.loads((tmp_path / f"r{i}" / "metrics.json").read_text())["run_id"]
            for i in range(n)}  # fmt: skip
    assert len(rids) == n
    assert sorted(r.data.tags["lpdt_run_id"] for r in runs) == sorted(rids)
    assert all(r.data.tags["lpdt_logged"] == "true" for r in runs)
    assert all(r.data.tags["git_commit"] != "" for r in runs)
