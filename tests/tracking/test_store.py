"""MLflow tracking: store init, idempotent logging, 16 concurrent writers on one SQLite store."""

import contextlib
import dataclasses
import json
import multiprocessing as mp
import re
import shutil
from pathlib import Path

import pytest
import yaml

from lpdt import record, tracking
from tests.conftest import TINY
from tests.fake_records import fake_record

EPOCHS = 3


def fake_run_dir(root, i: int, status: str = "ok", **kw) -> Path:
    """A finished run directory as `lpdt train` writes it (docs/architecture.md): a valid record
    (final node accuracy 50 + i, skew i / 20, seed i) whose epoch 0 has no average-model
    accuracy (not evaluated), and its config.yaml. ``kw`` goes to ``fake_record``."""
    d = root / f"run{i:02d}"
    config = {"model": {"name": "tiny_cnn"}, "partition": {"skew": i / 20}, "seed": i}
    rec = fake_record(f"rid{i:02d}", 50.0 + i, status=status, epochs=EPOCHS, config=config, **kw)
    rows = list(rec.history)
    rows[0] = dataclasses.replace(rows[0], acc_avg_model=None)
    rec = dataclasses.replace(rec, history=tuple(rows))
    rec.write(d)
    (d / "config.yaml").write_text(yaml.safe_dump(rec.config))
    return d


# template_db and store: tests/tracking/conftest.py


def fresh_store(template_db: Path, directory: Path) -> str:
    # absolute URIs: MLflow caches one store per URI string, so a relative URI would keep
    # pointing at the first test's directory
    (directory / "results").mkdir(parents=True, exist_ok=True)
    shutil.copy(template_db, directory / "results" / "mlflow.db")
    return f"sqlite:///{directory}/results/mlflow.db"


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
    # the curve: every epoch's evaluation, then the final one at the step after the last epoch
    steps = [m.step for m in c.get_metric_history(mid, "epoch/acc_node_mean")]
    assert sorted(steps) == [*range(EPOCHS), EPOCHS]
    # the empty (not evaluated) cell of epoch 0 is skipped, not logged as NaN
    assert [m.step for m in c.get_metric_history(mid, "epoch/acc_avg_model")] == [1, 2, EPOCHS]
    assert "tracking.mlflow" not in r.data.params  # how lpdt train was to log it, not the run
    arts = tracking.local_artifact_dir(store, r.info.artifact_uri)
    for f in ("metrics.json", "history.csv", "config.yaml"):
        assert (arts / f).read_bytes() == (d / f).read_bytes()  # copies in the store
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


def test_retry_when_another_writer_logged_the_same_dataset_first():
    """Two jobs logging one dataset at once: the later INSERT breaks the datasets table's unique
    key (16 concurrent writers hit it once, 2026-11-29); the retry finds the row. Any other
    unique key broken is an error."""
    race = (
        "(sqlite3.IntegrityError) UNIQUE constraint failed: datasets.experiment_id, "
        "datasets.name, datasets.digest"
    )
    calls = []

    def once(message):
        def fn():
            calls.append(1)
            if len(calls) == 1:
                raise RuntimeError(message)
            return "ok"

        return fn

    assert tracking.with_retry(once(race), base_s=0.001) == "ok" and len(calls) == 2
    calls.clear()
    with pytest.raises(RuntimeError, match="runs.run_uuid"):
        tracking.with_retry(once("UNIQUE constraint failed: runs.run_uuid"), base_s=0.001)
    assert len(calls) == 1


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
        assert len(c.get_metric_history(r.info.run_id, "epoch/train_loss")) == EPOCHS
        assert len(r.data.params) == len(tracking.run_params(record.read(dirs[i])))


def test_sync_manifest_logs_missing_runs_and_tags_studies(store, tmp_path):
    d1, d2 = fake_run_dir(tmp_path / "runs", 1), fake_run_dir(tmp_path / "runs", 2)
    tracking.log_run(d1, store, "lpdt", {"studies": "table3"})
    manifest = {
        "scale": "quick",
        "studies": {
            "table3": {"kind": "grid", "runs": [{"run_id": "rid01", "dir": str(d1), "coords": {}}]},
            "fig4": {
                "kind": "grid",
                "runs": [
                    {"run_id": "rid01", "dir": str(d1), "coords": {}},
                    {"run_id": "rid02", "dir": str(d2), "coords": {}},
                    {"run_id": "rid09", "dir": "absent", "coords": {}},
                ],
            },
        },
    }
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    out = tracking.sync_manifest(tmp_path / "manifest.json", store, "lpdt")
    assert sorted(out) == ["rid01", "rid02"]
    _, runs = _logged(store)
    tags = {r.data.tags["lpdt_run_id"]: r.data.tags for r in runs}
    assert tags["rid01"]["studies"] == "fig4,table3" and tags["rid02"]["studies"] == "fig4"
    assert tags["rid01"]["scale"] == "quick"


def test_the_schemes_lpdt_accepts_are_mlflows_tracking_stores():
    """``TRACKING_SCHEMES`` is the installed MLflow's registry of tracking stores (without its
    empty scheme, a path, which ``check_uri`` takes as a file store)."""
    from mlflow.tracking._tracking_service.utils import _tracking_store_registry

    assert set(tracking.TRACKING_SCHEMES) == set(_tracking_store_registry._registry) - {""}


def test_a_file_store_is_refused_as_mlflow_refuses_it(tmp_path, monkeypatch):
    """MLflow 3 refuses a file store unless ``MLFLOW_ALLOW_FILE_STORE=true``; ``check_uri``
    refuses it (before any training) exactly then. If a later MLflow takes file stores again,
    the first half fails here."""
    from mlflow.tracking import MlflowClient

    uri = f"file:{tmp_path / 'mlruns'}"
    monkeypatch.delenv(tracking.FILE_STORE_ENV, raising=False)
    with pytest.raises(Exception, match="maintenance mode"):
        MlflowClient(tracking_uri=uri).search_experiments()
    with pytest.raises(tracking.TrackingError, match="a file store"):
        tracking.check_uri(uri)
    monkeypatch.setenv(tracking.FILE_STORE_ENV, "true")
    tracking.check_uri(uri)  # MLflow's switch is the user's to turn on
    tracking.check_uri(str(tmp_path / "mlruns"))
    for ok in ("sqlite:///r/mlflow.db", "http://127.0.0.1:5000", "postgresql+psycopg2://h/db"):
        tracking.check_uri(ok)


def test_sqlite_uris_that_name_no_database_file_and_missing_drivers_are_refused(tmp_path):
    """Each trained, then failed to log (a folder after about 100 s of MLflow's retries; a
    database driver that is not installed with ModuleNotFoundError's traceback)."""
    from lpdt.tracking import store

    (tmp_path / "dir.db").mkdir()
    for uri, says in [
        ("sqlite://x.db", "three slashes, then the path): did you mean sqlite:///x.db?"),
        ("sqlite:///", "no database file named"),
        (f"sqlite:///{tmp_path / 'dir.db'}", "is a folder, not a database file"),
    ]:
        with pytest.raises(tracking.TrackingError, match=re.escape(says)):
            tracking.check_uri(uri, "tracking.uri=")
    with pytest.raises(tracking.TrackingError, match=r"needs the Python package psycopg2-binary"):
        tracking.check_uri("postgresql://u@localhost:1/db")  # no psycopg2 in the lock
    # the store's lock names its file, not the URI's query
    assert store.sqlite_path("sqlite:////r/mlflow.db?mode=ro") == Path("/r/mlflow.db")


def test_another_programs_database_with_an_experiments_table_is_left_alone(tmp_path):
    """One generic table name was enough: MLflow's 60 tables were added beside it, and the log
    failed with a traceback."""
    import sqlite3

    from lpdt.tracking import store

    db = tmp_path / "other.db"
    with contextlib.closing(sqlite3.connect(db)) as c:
        c.execute("create table experiments(id int)")
        c.commit()
    with pytest.raises(tracking.TrackingError, match="without MLflow's tables"):
        store.check_is_mlflow_store(db)


def test_mlflows_bare_uris_and_a_plugins_scheme_pass(monkeypatch):
    """``databricks``, ``databricks-uc`` and ``uc`` are URIs without a scheme MLflow takes; a
    plugin's store (entry point group ``mlflow.tracking_store``, e.g. SageMaker's ``arn``)
    has a scheme of its own (a reviewer found both refused by the first form of the check)."""
    from importlib import metadata

    from lpdt.tracking import store

    for uri in tracking.BARE_URIS:
        tracking.check_uri(uri)
    uri = "arn:aws:sagemaker:us-east-1:1:mlflow-tracking-server/x"
    with pytest.raises(tracking.TrackingError, match="no store for the scheme 'arn'"):
        tracking.check_uri(uri)
    plugin = metadata.EntryPoint("arn", "sagemaker_mlflow.store:Store", "mlflow.tracking_store")
    real = metadata.entry_points
    monkeypatch.setattr(
        metadata,
        "entry_points",
        lambda **kw: [plugin] if kw.get("group") == "mlflow.tracking_store" else real(**kw),
    )
    assert store.plugin_schemes() == {"arn"}
    tracking.check_uri(uri)


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

    d = fake_run_dir(
        tmp_path / "runs",
        5,
        provenance={"git_commit": "a" * 40, "git_dirty": False, "host": "trainer"},
    )
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


def test_record_without_a_commit_is_tagged_unknown(store, tmp_path):
    d = fake_run_dir(tmp_path / "runs", 6, provenance={"git_commit": None, "git_dirty": None})
    tracking.log_run(d, store, "lpdt")
    _, runs = _logged(store)
    assert runs[0].data.tags["git_commit"] == "unknown"
    assert "mlflow.source.git.commit" not in runs[0].data.tags


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


TRAIN = [
    *TINY,
    "data.train_subset=64",
    "data.test_subset=32",
    "topology.nodes=2",
    "train.batch_size=16",
    "train.epochs=1",
    "train.final_gossip_rounds=1",
    "train.eval_batch_size=32",
]


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
            argv = [
                a
                for o in [*TRAIN, f"seed={i}", "tracking.mlflow=true", f"tracking.uri={uri}"]
                for a in ("--set", o)
            ]
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "lpdt.cli",
                        "train",
                        *argv,
                        "--out",
                        str(tmp_path / f"r{i}"),
                    ],
                    env=env,
                    cwd=tmp_path,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
            )
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
    rids = {
        json.loads((tmp_path / f"r{i}" / "metrics.json").read_text())["run_id"] for i in range(n)
    }
    assert len(rids) == n
    assert sorted(r.data.tags["lpdt_run_id"] for r in runs) == sorted(rids)
    assert all(r.data.tags["lpdt_logged"] == "true" for r in runs)
    assert all(r.data.tags["git_commit"] != "" for r in runs)


# -- what the MLflow UI shows: names, training times, dataset, experiment kind, artifacts ---------


def _ms(t) -> int:
    return int(t.timestamp() * 1000)


def test_run_name_is_built_from_grid_coordinates():
    config = {
        "model": {"name": "resnet20", "norm": "rangeen"},
        "precision": {"mode": "int8"},
        "topology": {"name": "torus", "nodes": 16},
        "optim": {"qgm": True},
        "algorithm": {"name": "choco", "compression": {"name": "topk", "ratio": 0.99}},
        "partition": {"skew": 0.8},
        "seed": 1235,
    }
    rec = fake_record(config=config)
    name = "lp sk0.8 s1235 top99 choco+qgm rn20 rangeen torus16 fashion_mnist"
    assert tracking.run_name(rec) == name
    assert tracking.run_name(rec, with_seed=False) == name.replace(" s1235", "")
    # a normalisation other than the paper's for that precision is marked right after it;
    # dense fp32 messages are the default, not named
    other = fake_record(config={"model": {"norm": "batchnorm"}, "partition": {"skew": 0.0}})
    assert tracking.run_name(other) == "fp-bn sk0 s1234 choco rn20 batchnorm ring8 fashion_mnist"
    # a single node gossips nothing: no skew, compression, algorithm or topology
    single = fake_record(config={"topology": {"nodes": 1}})
    assert tracking.run_name(single) == "fp s1234 rn20 fashion_mnist evonorm 1node"


def test_run_shows_training_times_row_times_dataset_and_experiment_kind(store, tmp_path):
    from lpdt.record import parse_time
    from tests.fake_records import STARTED

    d = fake_run_dir(tmp_path / "runs", 7, epoch_s=600.0)  # three 10-minute epochs
    rec = record.read(d)
    mid = tracking.log_run(d, store, "lpdt")
    c, runs = _logged(store)
    r = runs[0]
    assert r.info.run_name == tracking.run_name(rec)
    # the MLflow run lasts as long as the training did, not as long as logging
    assert r.info.start_time == _ms(STARTED) == _ms(parse_time(rec.provenance.started))
    assert r.info.end_time == _ms(parse_time(rec.provenance.finished))
    assert r.info.end_time - r.info.start_time >= 3 * 600 * 1000
    # each epoch's metrics carry the time that epoch ended
    hist = sorted(c.get_metric_history(mid, "epoch/train_loss"), key=lambda m: m.step)
    assert [m.timestamp for m in hist] == [_ms(STARTED) + 600_000 * (e + 1) for e in range(EPOCHS)]
    # the dataset, with its stand-in status, is the run's dataset input
    (inp,) = c.get_run(mid).inputs.dataset_inputs
    assert inp.dataset.name == "fashion_mnist"
    source = json.loads(inp.dataset.source)
    assert source["stand_in"] is True and source["stand_in_for"] == "cifar10"
    assert {t.key: t.value for t in inp.tags} == {"mlflow.data.context": "train"}
    # the experiment opens on its training runs, not on MLflow 3's GenAI overview
    exp = c.get_experiment_by_name("lpdt")
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"


def test_experiment_of_an_earlier_version_gets_its_kind(store):
    from mlflow.tracking import MlflowClient

    c = MlflowClient(store)
    c.create_experiment("older")  # no kind, as lpdt created experiments before
    assert "mlflow.experimentKind" not in c.get_experiment_by_name("older").tags
    tracking.init_store(store, "older")
    assert (
        c.get_experiment_by_name("older").tags["mlflow.experimentKind"]
        == "custom_model_development"
    )


def test_artifacts_survive_moving_the_results_dir(store, tmp_path):
    from mlflow.tracking import MlflowClient

    d = fake_run_dir(tmp_path / "runs", 8)
    mid = tracking.log_run(d, store, "lpdt")
    shutil.move(tmp_path / "results", tmp_path / "moved")
    shutil.rmtree(tmp_path / "runs")  # the run directories are gone too
    uri = f"sqlite:///{tmp_path}/moved/mlflow.db"
    art_uri = MlflowClient(uri).get_run(mid).info.artifact_uri
    assert art_uri.startswith("mlflow-artifacts:/")  # relative, not file:///...
    arts = tracking.local_artifact_dir(uri, art_uri)
    assert arts.is_relative_to(tmp_path / "moved" / "mlflow-artifacts")
    assert record.read(arts).run_id == "rid08"


@pytest.mark.slow
def test_lpdt_ui_serves_the_artifacts_of_a_moved_store(store, tmp_path):
    """The MLflow server started as `lpdt ui` starts it, on a store whose results/ was moved,
    lists and serves the run's artifacts."""
    import subprocess
    import urllib.request

    from lpdt.engine.launch import free_port
    from tests.servers import wait_until_healthy

    d = fake_run_dir(tmp_path / "runs", 9)
    mid = tracking.log_run(d, store, "lpdt")
    shutil.move(tmp_path / "results", tmp_path / "moved")
    uri = f"sqlite:///{tmp_path}/moved/mlflow.db"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        tracking.ui_command(uri, port=port),
        cwd=tmp_path,
        env=tracking.ui_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_until_healthy(base, proc, lambda: proc.stderr.read().decode())
        listing = json.load(
            urllib.request.urlopen(
                f"{base}/ajax-api/2.0/mlflow/artifacts/list?run_uuid={mid}", timeout=30
            )
        )
        assert {"metrics.json", "history.csv", "config.yaml"} <= {
            f["path"] for f in listing["files"]
        }
        got = urllib.request.urlopen(
            f"{base}/get-artifact?path=metrics.json&run_uuid={mid}", timeout=30
        ).read()
        assert got == (d / "metrics.json").read_bytes()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
        proc.stderr.close()


def test_report_and_figures_go_to_one_run_per_scale(store, tmp_path):
    pdf = tmp_path / "reports" / "report.pdf"
    figs = [tmp_path / "figures" / "fig1.png", tmp_path / "figures" / "fig1.pdf"]
    for f in (pdf, *figs):
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(f"{f.name} v1".encode())
    mid = tracking.log_report(pdf, figs, "quick", store, "lpdt")
    pdf.write_bytes(b"report v2")
    assert (
        tracking.main(
            ["report", "--uri", store, "--scale", "quick", "--report", str(pdf), *map(str, figs)]
        )
        == 0
    )
    other = tracking.log_report(pdf, figs, "paper", store, "lpdt")
    c, runs = _logged(store)
    assert runs == []  # not among the training runs (tests/tracking/test_runs.py)
    c = tracking.open_client(store)
    exp = c.get_experiment_by_name(tracking.report_experiment("lpdt"))
    runs = c.search_runs([exp.experiment_id])
    assert sorted(r.info.run_name for r in runs) == ["report paper", "report quick"]
    run = next(r for r in runs if r.info.run_id == mid)
    assert other != mid and run.info.status == "FINISHED"
    arts = tracking.local_artifact_dir(store, run.info.artifact_uri)
    assert (arts / "report.pdf").read_bytes() == b"report v2"  # the newer report replaced it
    assert (arts / "figures" / "fig1.png").read_bytes() == b"fig1.png v1"
    with pytest.raises(tracking.TrackingError, match="report files not found"):
        tracking.log_report(tmp_path / "none.pdf", [], "quick", store, "lpdt")


def test_every_run_is_named_by_its_seed(store, tmp_path):
    d1, d2, d3 = (fake_run_dir(tmp_path / "runs", i) for i in (1, 2, 3))
    tracking.log_run(d1, store, "lpdt")  # as the training job logs it, before the sync
    cell = {"skew": 0.0}
    manifest = {
        "scale": "quick",
        "studies": {
            "t": {
                "kind": "grid",
                "runs": [
                    {"run_id": "rid01", "dir": str(d1), "block": "b", "coords": cell, "seed": 1},
                    {"run_id": "rid02", "dir": str(d2), "block": "b", "coords": cell, "seed": 2},
                ],
            },
            "u": {
                "kind": "grid",
                "runs": [
                    {"run_id": "rid03", "dir": str(d3), "block": "b", "coords": cell, "seed": 3}
                ],
            },
        },
    }
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    tracking.sync_manifest(tmp_path / "manifest.json", store, "lpdt")
    _, runs = _logged(store)
    names = {r.data.tags["lpdt_run_id"]: r.info.run_name for r in runs}
    # the seed is named where the runs of a cell differ, and for a cell of one seed too
    assert " s1 " in names["rid01"] and " s2 " in names["rid02"] and " s3 " in names["rid03"]


def test_unreadable_record_is_one_line_tracking_error(store, tmp_path):
    d = fake_run_dir(tmp_path / "runs", 4)
    m = json.loads((d / "metrics.json").read_text())
    del m["schema_version"]  # a record of lpdt before versioning
    (d / "metrics.json").write_text(json.dumps(m))
    with pytest.raises(tracking.TrackingError) as e:
        tracking.log_run(d, store, "lpdt")
    assert "\n" not in str(e.value) and "older format" in str(e.value)
    assert str(e.value).startswith(str(d / "metrics.json"))


def test_cell_tag_names_the_coordinates_without_the_seed():
    """The seeds of a cell share one ``cell`` tag (the UI's "Group by" aggregates them); a run
    differing in a setting the name leaves out (epochs) is another cell."""
    seeds = [fake_record(f"s{s}", config={"seed": s, "partition": {"seed": s}}) for s in (1, 2)]
    longer = fake_record("e", config={"seed": 1, "partition": {"seed": 1}, "train": {"epochs": 64}})
    cells = [tracking.cell_name(r) for r in (*seeds, longer)]
    assert cells[0] == cells[1] != cells[2]
    name = tracking.run_name(seeds[0], with_seed=False)
    assert cells[0].startswith(name + " #") and cells[2].startswith(name + " #")
    assert name == tracking.run_name(seeds[0]).replace(" s1 ", " ")  # the name less its seed
    assert tracking.run_tags(seeds[0])["cell"] == cells[0]


def _int8_record(seed: int, recipes: dict[str, int]) -> record.RunRecord:
    """An 8-bit record of seed ``seed`` whose run id is the one ``RunConfig.run_id`` gives under
    the recipe versions ``recipes`` (``{}``: recipe 1, before 8-bit had an entry)."""
    import lpdt.config as config

    over = {"seed": seed, "partition": {"seed": seed}, "precision": {"mode": "int8"}}
    cfg = config.config_from_dict(config.deep_merge(config.RunConfig().to_dict(), over))
    saved = dict(config.RECIPE_VERSIONS)
    config.RECIPE_VERSIONS.clear()
    config.RECIPE_VERSIONS.update(recipes)
    try:
        rid = cfg.run_id()
    finally:
        config.RECIPE_VERSIONS.clear()
        config.RECIPE_VERSIONS.update(saved)
    return fake_record(rid, config=cfg.to_dict())


def test_cell_tag_tells_8bit_recipe_versions_apart(monkeypatch):
    """Two 8-bit runs of one config and seed trained by two recipe versions (their run ids
    differ: the id hashes the recipe) are two cells; two seeds of one recipe share one. The
    version is read back from the run id as ``RunConfig.run_id`` hashed it."""
    import lpdt.config as config

    v1 = _int8_record(1, {})
    v2 = [_int8_record(s, {"int8": 2}) for s in (1, 2)]
    v3 = _int8_record(1, {"int8": 3})
    monkeypatch.setitem(config.RECIPE_VERSIONS, "int8", 3)  # this lpdt: version 3
    assert len({v1.run_id, v2[0].run_id, v3.run_id}) == 3
    assert [tracking.recipe_version(r) for r in (v1, *v2, v3)] == [1, 2, 2, 3]
    cells = [tracking.cell_name(r) for r in (v1, *v2, v3)]
    assert cells[1] == cells[2]  # two seeds of recipe 2: one cell
    assert len({cells[0], cells[1], cells[3]}) == 3  # three recipes: three cells
    assert len({c.split(" #")[0] for c in cells}) == 1  # the name alone cannot tell them apart
    tags = tracking.run_tags(v2[0])
    assert tags["cell"] == cells[1] and tags["recipe_version"] == "2"
    # a run id no version reproduces: "unknown", its own cell, still one for its seeds
    odd = [dataclasses.replace(r, run_id=f"odd{i}") for i, r in enumerate(v2)]
    assert tracking.recipe_version(odd[0]) is None
    assert tracking.run_tags(odd[0])["recipe_version"] == "unknown"
    assert tracking.cell_name(odd[0]) == tracking.cell_name(odd[1]) != cells[1]
    # fp32 has no recipe versions: tagged "none for fp32", its cell does not depend on them
    fp = fake_record("fp")
    before = tracking.cell_name(fp)
    monkeypatch.setitem(config.RECIPE_VERSIONS, "int8", 4)
    assert tracking.recipe_version(fp) is None
    assert tracking.run_tags(fp)["recipe_version"] == "none for fp32"
    assert tracking.cell_name(fp) == before


def test_run_note_says_what_the_run_is():
    rec = fake_record(
        "n1",
        71.5,
        config={
            "seed": 1235,
            "precision": {"mode": "int8"},
            "model": {"name": "resnet20"},
            "topology": {"name": "directed_ring", "nodes": 8},
            "algorithm": {"name": "choco", "compression": {"name": "topk", "ratio": 0.99}},
            "partition": {"skew": 0.8},
            "train": {"epochs": 32},
        },
    )
    note = tracking.run_note(rec, "results/runs/n1", "table3,fig4", "lp_loss_compressed")
    assert "\n" not in note
    for part in (
        "resnet20 (1,000 parameters, 8-bit) trained with CHOCO-SGD on 8 nodes in a "
        "directed ring, top-k messages, dropping 99 % of each, for 32 epochs "
        "(seed 1235)",
        "fashion_mnist (1,000 training and 200 test samples, 10 classes) standing in for cifar10",
        "skew 0.8",
        "studies table3 and fig4",
        "the claims lp_loss_compressed read it",
        "71.50 % (nodes 70.50 to 72.50 %, average model 72.00 %)",
        str(Path("results/runs/n1").resolve()),
    ):
        assert part in note, (part, note)
    div = tracking.run_note(fake_record("d", status="diverged", epochs=3), None, "table2", "none")
    assert "diverged after 3 of" in div and "no claim of the paper reads it" in div
    assert "Final accuracy" not in div and "files" not in div


def test_log_run_sets_description_cpu_tags_and_system_metrics(store, tmp_path):
    d = fake_run_dir(tmp_path / "runs", 5)
    mid = tracking.log_run(d, store, "lpdt", {"studies": "table3", "claims": "choco_beats_ds"})
    c, runs = _logged(store)
    tags, metrics = runs[0].data.tags, runs[0].data.metrics
    rec = record.read(d)
    assert tags["mlflow.note.content"] == tracking.run_note(rec, d, "table3", "choco_beats_ds")
    assert tags["cpu_model"] == "Test CPU 9000" and tags["cpu_count"] == "4"
    assert tags["cell"] == tracking.cell_name(rec)
    assert "system.cpu_share" not in metrics  # the run's own share: metrics.json (one CPU share)
    assert [m.value for m in c.get_metric_history(mid, "system/cpu_share")] == [40.0, 41.0, 42.0]
    assert [m.step for m in c.get_metric_history(mid, "system/images_per_s")] == [0, 1, 2]


def test_sync_tags_the_claims_that_read_each_run(store, tmp_path):
    """Table 3 runs fp32 / int8 x seeds 1, 2 without compression are read by the dense
    precision claim; a third seed without its int8 partner and a Table 2 run by no claim."""
    cell = {
        "dataset": "cifar10",
        "model": "resnet20",
        "topology": "directed_ring",
        "nodes": 8,
        "compression": "0",
        "skew": 0.5,
        "algorithm": "choco",
    }
    entries = []
    runs = [("fp32", 1), ("int8", 1), ("fp32", 2), ("int8", 2), ("fp32", 3)]
    for i, (precision, seed) in enumerate(runs, start=1):
        d = fake_run_dir(tmp_path / "runs", i)
        entries.append(
            {
                "run_id": f"rid{i:02d}",
                "dir": str(d),
                "seed": seed,
                "coords": {**cell, "precision": precision},
            }
        )
    d6 = fake_run_dir(tmp_path / "runs", 6)
    manifest = {
        "scale": "smoke",
        "studies": {
            "table3": {"kind": "grid", "runs": entries},
            "table2": {
                "kind": "baseline",
                "runs": [
                    {"run_id": "rid06", "dir": str(d6), "seed": 1, "coords": {**cell, "nodes": 1}}
                ],
            },
        },
    }
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    tracking.sync_manifest(tmp_path / "manifest.json", store, "lpdt")
    _, runs = _logged(store)
    claims = {r.data.tags["lpdt_run_id"]: r.data.tags["claims"] for r in runs}
    assert claims == {
        "rid01": "lp_close_to_fp_dense",
        "rid02": "lp_close_to_fp_dense",
        "rid03": "lp_close_to_fp_dense",
        "rid04": "lp_close_to_fp_dense",
        "rid05": "no claim reads it",
        "rid06": "no claim reads it",
    }
    note = next(r for r in runs if r.data.tags["lpdt_run_id"] == "rid01").data.tags[
        "mlflow.note.content"
    ]
    assert "the claims lp_close_to_fp_dense read it" in note


def test_lpdt_ui_prints_the_training_runs_address(store, monkeypatch, capsys):
    """`lpdt ui` prints the experiment's run table in the Model training view and the report
    runs' address; then execs one server process of lpdt's MLflow app (its pages in the
    training view: no click to ask for) without a job runner (replaced here by a stub that
    records the command and its environment). A free port: `lpdt ui` binds it first."""
    from lpdt.engine.launch import free_port

    port = free_port()
    exp_id = tracking.init_store(store, "lpdt")
    seen = []
    monkeypatch.setattr(tracking.os, "execve", lambda exe, cmd, env: seen.append((cmd, env)))
    tracking.ui(store, "127.0.0.1", port, "lpdt")
    out = capsys.readouterr().out.splitlines()
    url = f"http://127.0.0.1:{port}/#/experiments/{exp_id}/runs?workflowType=machine_learning"
    assert url in out[1] and out[2] == "(Ctrl-C to stop)"
    assert not any("click" in line or "report" in line for line in out)  # nor a report run yet
    cmd, env = seen[0]
    assert cmd[-8:] == [
        "--app-name",
        "lpdt",
        "--workers",
        "1",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    assert env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] == "false"
    tracking.init_store(store, tracking.report_experiment("lpdt"))
    tracking.ui(store, "127.0.0.1", port, "lpdt")
    reports = tracking.init_store(store, tracking.report_experiment("lpdt"))
    last = capsys.readouterr().out.splitlines()[-2]
    assert last.startswith("The report of each scale:") and f"/experiments/{reports}/" in last
    tracking.ui(store, "127.0.0.1", port, "other")  # no such experiment: the start page
    assert f"at http://127.0.0.1:{port} (no experiment 'other' yet" in capsys.readouterr().out


def test_the_ui_takes_its_workflow_view_from_the_url_parameter():
    """The parameter ``lpdt ui`` prints is the one the installed MLflow UI reads: its bundle
    takes the GenAI / Model training switch from ``workflowType`` in the URL (MLflow issue
    24498: otherwise from localStorage, default GenAI)."""
    import mlflow

    js = Path(mlflow.__file__).parent / "server" / "js" / "build" / "static" / "js"
    text = "".join(f.read_text(errors="ignore") for f in js.glob("main.*.js"))
    name, value = tracking.WORKFLOW_PARAM.split("=")
    assert f'.get("{name}")' in text and f'MACHINE_LEARNING="{value}"' in text
    assert '"mlflow.workflowType"' in text  # the localStorage key it falls back to


def test_sync_of_a_copied_results_folder_logs_its_own_runs(tmp_path, monkeypatch):
    """`python -m lpdt.tracking sync --manifest archive/results-old/manifest.json` from the
    project, where ./results holds the same run ids: every run is logged from the archive's
    runs/ folder, as the report reads them (it logged ./results' runs, whose relative path the
    manifest's entries name)."""
    from lpdt.tracking import runs
    from tests.report.conftest import make_tree

    make_tree(tmp_path)
    archive = tmp_path / "archive" / "results-old"
    shutil.copytree(tmp_path / "results", archive)
    logged: list[Path] = []
    monkeypatch.setattr(runs, "log_run", lambda d, *args, **kwargs: logged.append(Path(d)))
    # the claims' tags are not what this checks (they took 6-15 s of it: lpdt.report.readers)
    monkeypatch.setattr("lpdt.report.readers.claims_by_run", lambda frame: {})
    monkeypatch.chdir(tmp_path)
    runs.sync_manifest(Path("archive/results-old/manifest.json"), "sqlite:///unused.db")
    assert logged and all(d.parent == Path("archive/results-old/runs") for d in logged), logged
