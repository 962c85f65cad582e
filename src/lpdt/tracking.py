"""Run records in MLflow, for browsing and comparing runs (``lpdt ui``).

The run record (``lpdt.record``: ``metrics.json`` and ``history.csv``) stays the source of
truth; MLflow is a view of it, and everything logged is derived from the record:

- the run's name from its grid coordinates (``run_name``: ``resnet20 ring8 choco top99 skew0.8
  int8 cifar10``, plus ``seed1235`` for runs of a multi-seed cell), its start and end times from
  the training times in its provenance, its status from the record's status;
- the config as params, each history row as step metrics stamped with the wall-clock time the
  row was written (``RunRecord.row_times``), the final metrics, communication and timing as
  metrics at the last step;
- the dataset (name, source, stand-in) as an MLflow dataset input;
- tags: the lpdt run id, dataset, model, status, the provenance captured at training time (git
  commit and dirty flag, host, lpdt version, device) and the host's CPU model and cores from the
  record's system metrics, never the state of the machine that logs, so logging a run again
  (``mlflow_sync``) does not change them; ``cell`` (``cell_name``: the coordinates without the
  seed, so that the UI's "Group by" aggregates a cell's seeds); from the workflow the studies
  and the claims that read the run (``sync_manifest``);
- the run's description (``mlflow.note.content``, ``run_note``): one paragraph saying what was
  trained on which data standing in for which, who reads it, its final accuracy, its files;
- ``metrics.json``, ``history.csv`` and ``config.yaml`` as artifacts.

``log_run`` is idempotent: a run already logged (found by its ``lpdt_run_id`` tag) is not logged
twice; only its tags and name are brought up to date (studies sharing a run may be added later).
``log_report`` attaches the report PDF and the figures of one scale to one run per scale.

Experiments are created with the tag ``mlflow.experimentKind = custom_model_development``, so that
MLflow 3 opens them on their training-runs view, not on its GenAI overview. The UI's sidebar
(GenAI / Model training) does not follow that tag: it follows the URL parameter
``workflowType=machine_learning``, else the browser's ``localStorage`` (``mlflow.workflowType``,
default GenAI; MLflow issue 24498, still so in 3.18.0), so ``lpdt ui`` prints the experiment's
URL with that parameter (``ui_url``).

Artifacts of a SQLite store live in ``mlflow-artifacts/`` next to the database, and runs refer to
them by ``mlflow-artifacts:/`` URIs, which are relative: ``lpdt ui`` serves them from the folder
next to the database it opens, so moving ``results/`` as a whole keeps them working.
(``mlflow ui`` without ``--artifacts-destination`` looks in ``./mlartifacts`` instead.) Stores
created by earlier versions keep their absolute ``file://`` locations and are written through
MLflow's client as before.

SQLite stores do not like concurrent writers. Opening a SQLite store (which creates or migrates
its schema when the file is new) is serialised across processes by an exclusive lock on
``<db>.lock`` next to the database (``store_lock``; bounded wait, ``TrackingError`` on timeout),
so any number of ``lpdt train`` processes, ``lpdt ui`` and the workflow may open one fresh store
at once; every write retries with backoff on "database is locked".

Command line (used by the workflow): ``python -m lpdt.tracking init|log|sync|report ...``;
``lpdt ui`` opens the MLflow UI on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import fcntl
import hashlib
import json
import math
import os
import random
import re
import shutil
import sys
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from lpdt import record
from lpdt.record import RecordError, RunRecord

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

DEFAULT_URI = "sqlite:///results/mlflow.db"
DEFAULT_EXPERIMENT = "lpdt"
RUN_ID_TAG = "lpdt_run_id"
REPORT_TAG = "lpdt_report_scale"  # on the one run per scale that holds the report and figures
COMPLETE_TAG = "lpdt_logged"  # set last: a run without it was interrupted while logging
LOCK_TIMEOUT_S = 120.0  # longest wait for another process to finish opening a SQLite store
# MLflow 3 opens an experiment without this tag on its GenAI overview (mlflow/server/js: the
# experiment page reads the tag; the UI's kind selector writes it). Verified with MLflow 3.17.
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"
# The UI's sidebar takes its GenAI / Model training switch from this URL parameter (else from the
# browser's localStorage, default GenAI); verified in MLflow 3.17.2's and 3.18.0's JavaScript.
WORKFLOW_PARAM = "workflowType=machine_learning"
CELL_TAG = "cell"
NOTE_TAG = "mlflow.note.content"  # the run's description in the UI
ARTIFACTS_DIR = "mlflow-artifacts"  # next to a SQLite database
RUN_FILES = (record.METRICS_FILE, record.HISTORY_FILE, "config.yaml")  # logged as artifacts

T = TypeVar("T")


class TrackingError(RuntimeError):
    """The MLflow store cannot be used (bad URI, missing store, files missing in a run dir)."""


# ----------------------------------------------------------------------------------------------
# Small helpers
# ----------------------------------------------------------------------------------------------


def _is_locked(e: BaseException) -> bool:
    text = f"{type(e).__name__}: {e}".lower()
    return "database is locked" in text or "database table is locked" in text


def with_retry(fn: Callable[[], T], attempts: int = 12, base_s: float = 0.05) -> T:
    """Call ``fn``, retrying with jittered exponential backoff while SQLite reports a lock."""
    for k in range(attempts):
        try:
            return fn()
        except Exception as e:
            if not _is_locked(e) or k == attempts - 1:
                raise
            time.sleep(min(5.0, base_s * 2**k) * (0.5 + random.random()))
    raise AssertionError("unreachable")


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI (relative to the working directory), else None."""
    prefix = "sqlite:///"
    return Path(uri[len(prefix) :]) if uri.startswith(prefix) else None


@contextlib.contextmanager
def store_lock(uri: str, timeout_s: float | None = None) -> Iterator[None]:
    """Hold an exclusive lock on ``<db>.lock`` next to a SQLite store (nothing for other URIs).

    Waits at most ``timeout_s`` (default ``LOCK_TIMEOUT_S``), then raises ``TrackingError``. The
    lock is an ``flock``: the kernel releases it when its holder dies, so a leftover lock file
    never blocks anyone.
    """
    path = sqlite_path(uri)
    if path is None:
        yield
        return
    timeout = LOCK_TIMEOUT_S if timeout_s is None else timeout_s
    lock = path.with_name(path.name + ".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise TrackingError(
                        f"timed out after {timeout:g} s waiting for the lock {lock} (another "
                        "process is creating or opening the MLflow store)"
                    ) from None
                time.sleep(0.02 + 0.08 * random.random())
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _client(uri: str):
    """An MLflow client whose store is open. For a SQLite store, opening it (creating the schema
    of a new file, checking it, creating the default experiment) happens under ``store_lock``:
    concurrent schema creation on one fresh file corrupts it."""
    from mlflow.tracking import MlflowClient  # imported (seconds) before taking the lock

    with store_lock(uri):
        return with_retry(lambda: MlflowClient(tracking_uri=uri))


def artifacts_root(uri: str) -> Path | None:
    """The artifact folder of a SQLite store (``mlflow-artifacts`` next to the database), else
    None (a tracking server decides where artifacts go)."""
    path = sqlite_path(uri)
    return None if path is None else path.parent / ARTIFACTS_DIR


def _artifact_location(uri: str, experiment: str) -> str | None:
    """Where a new experiment's runs keep their artifacts: for a SQLite store, the relative
    ``mlflow-artifacts:/<experiment>`` (resolved by ``lpdt ui`` against ``artifacts_root``)."""
    if sqlite_path(uri) is None:
        return None
    slug = re.sub(r"[^A-Za-z0-9._-]", "_", experiment)
    if slug != experiment:  # keep distinct names distinct
        slug += "-" + hashlib.sha1(experiment.encode()).hexdigest()[:8]
    return f"mlflow-artifacts:/{slug}"


def local_artifact_dir(uri: str, artifact_uri: str) -> Path | None:
    """The folder that holds a run's artifacts when the store is SQLite and the run's artifact
    URI is a relative ``mlflow-artifacts:/`` one; None otherwise (MLflow's client writes them)."""
    root = artifacts_root(uri)
    parsed = urllib.parse.urlparse(artifact_uri)
    if root is None or parsed.scheme != "mlflow-artifacts":
        return None
    return root / urllib.parse.unquote(parsed.path).lstrip("/")


def _log_files(client, uri: str, run, files: Iterable[Path], subdir: str | None = None) -> None:
    """Copy files into the run's artifacts (replacing earlier copies of the same name)."""
    local = local_artifact_dir(uri, run.info.artifact_uri)
    for f in files:
        if local is None:
            with_retry(lambda f=f: client.log_artifact(run.info.run_id, str(f), subdir))
            continue
        dest = local / subdir if subdir else local
        dest.mkdir(parents=True, exist_ok=True)
        tmp = dest / f".{f.name}.tmp"
        shutil.copyfile(f, tmp)
        os.replace(tmp, dest / f.name)


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}} -> {"a.b": 1}`` (lists are kept as values)."""
    out: dict[str, Any] = {}
    for k, v in tree.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _chunks(items: list[T], size: int) -> Iterable[list[T]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _finite(v: Any) -> float | None:
    """A finite number as float; None for None, booleans, strings, NaN and infinities."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v) if math.isfinite(v) else None


def _ms(t: dt.datetime) -> int:
    return int(t.timestamp() * 1000)


def _time_ms(iso: str) -> int:
    return _ms(record.parse_time(iso))


# ----------------------------------------------------------------------------------------------
# Public API
# ----------------------------------------------------------------------------------------------


def init_store(uri: str = DEFAULT_URI, experiment: str = DEFAULT_EXPERIMENT) -> str:
    """Create the store (and its schema) and the experiment if needed; return the experiment id.

    Safe to call from many processes at once (``store_lock``).
    """
    return _open(uri, experiment)[1]


def _open(uri: str, experiment: str) -> tuple[Any, str]:
    """(client, experiment id), creating the experiment if needed (under ``store_lock``)."""
    client = _client(uri)
    with store_lock(uri):
        return client, _experiment_id(client, uri, experiment)


def _experiment_id(client, uri: str, experiment: str) -> str:
    """The experiment's id, creating it (as a training experiment) if needed; an experiment
    without a kind (created by an earlier version) is marked as one."""
    exp = with_retry(lambda: client.get_experiment_by_name(experiment))
    if exp is None:
        try:
            return with_retry(
                lambda: client.create_experiment(
                    experiment,
                    artifact_location=_artifact_location(uri, experiment),
                    tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND},
                )
            )
        except Exception:
            # Another process may have created it in between.
            exp = with_retry(lambda: client.get_experiment_by_name(experiment))
            if exp is None:
                raise
    if EXPERIMENT_KIND_TAG not in exp.tags:
        with_retry(
            lambda: client.set_experiment_tag(
                exp.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND
            )
        )
    return exp.experiment_id


def find_run(uri: str, experiment: str, run_id: str) -> str | None:
    """The MLflow run id of a completely logged lpdt run, or None."""
    client = _client(uri)
    exp = with_retry(lambda: client.get_experiment_by_name(experiment))
    if exp is None:
        return None
    for r in _search(client, exp.experiment_id, RUN_ID_TAG, run_id):
        if r.data.tags.get(COMPLETE_TAG) == "true":
            return r.info.run_id
    return None


def _search(client, exp_id: str, tag: str, value: str) -> list:
    flt = f"tags.{tag} = '{value}'"
    return list(with_retry(lambda: client.search_runs([exp_id], filter_string=flt)))


def read_record(run_dir: str | Path) -> RunRecord:
    """The record of a finished run directory (``TrackingError`` if it has none or it is not
    valid; the message is ``lpdt.record.read``'s one line)."""
    try:
        return record.read(run_dir)
    except RecordError as e:
        raise TrackingError(str(e)) from None


# Short names in run names: the paper's ring is the directed one.
TOPOLOGY_NAMES = {"directed_ring": "ring", "ring": "uring"}
# The normalisation each precision uses in the paper (section 3); another one is named.
PAPER_NORM = {"fp32": "evonorm", "int8": "rangeen"}


def run_name(rec: RunRecord, with_seed: bool = False) -> str:
    """A run's name from its grid coordinates, e.g. ``resnet20 ring8 choco top99 skew0.8 int8
    cifar10``: model (and its normalisation where it is not the paper's for that precision),
    topology and nodes, algorithm (``+qgm``), compression (``dense``, ``top99``, ``random90``),
    data skew (or Dirichlet ``dir0.1``), precision, dataset used; ``seed1235`` when
    ``with_seed`` (a cell with several seeds)."""
    c = rec.config
    model, topo, part = c["model"], c["topology"], c["partition"]
    comp, precision = c["algorithm"]["compression"], c["precision"]["mode"]
    parts = [model["name"]]
    if model["norm"] != PAPER_NORM.get(precision):
        parts.append(model["norm"])
    parts.append(f"{TOPOLOGY_NAMES.get(topo['name'], topo['name'])}{topo['nodes']}")
    parts.append(c["algorithm"]["name"] + ("+qgm" if c["optim"]["qgm"] else ""))
    if comp["name"] == "none":
        parts.append("dense")
    else:  # topk -> top99, randomk -> random99
        parts.append(f"{comp['name'].removesuffix('k')}{round(100 * comp['ratio'], 4):g}")
    dirichlet = part["kind"] == "dirichlet"
    parts.append(f"dir{part['alpha']:g}" if dirichlet else f"skew{part['skew']:g}")
    parts += [precision, rec.dataset.name]
    if with_seed:
        parts.append(f"seed{c['seed']}")
    return " ".join(parts)


def cell_name(rec: RunRecord) -> str:
    """The run's cell: its name without the seed (``run_name``) and ``#`` six hex digits of its
    result-affecting config without ``seed`` and ``partition.seed``, so that runs differing in a
    setting the name leaves out (epochs, learning rate, ...) are not one cell. The runs of one
    cell differ in their seed only."""
    from lpdt.config import result_dict

    tree = result_dict(rec.config)
    tree.pop("seed", None)
    if isinstance(tree.get("partition"), dict):
        tree["partition"].pop("seed", None)
    digest = hashlib.sha1(json.dumps(tree, sort_keys=True).encode()).hexdigest()[:6]
    return f"{run_name(rec)} #{digest}"


# Readable names in run descriptions.
TOPOLOGY_WORDS = {"directed_ring": "directed ring", "ring": "undirected ring"}
ALGORITHM_WORDS = {"choco": "CHOCO-SGD", "deepsqueeze": "DeepSqueeze", "sgp": "SGP"}


def _list(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def run_note(
    rec: RunRecord, run_dir: str | Path | None = None, studies: str = "", claims: str = ""
) -> str:
    """The run's description (MLflow note): one paragraph saying what was trained (model,
    precision, nodes, topology, algorithm, compression, data split, epochs, seed), on which data
    standing in for which, which studies and claims read it (``studies``, ``claims``: the
    comma-separated tags), its final accuracy, and where its files are."""
    c = rec.config
    topo, part, comp = c["topology"], c["partition"], c["algorithm"]["compression"]
    precision = "8-bit" if c["precision"]["mode"] == "int8" else c["precision"]["mode"]
    algo = ALGORITHM_WORDS.get(c["algorithm"]["name"], c["algorithm"]["name"])
    if c["optim"]["qgm"]:
        algo += " with quasi-global momentum"
    if comp["name"] == "none":
        sent = "uncompressed messages"
    else:
        sent = f"{comp['name']} compression dropping {100 * comp['ratio']:g} % of each message"
    split = (
        f"Dirichlet alpha {part['alpha']:g}"
        if part["kind"] == "dirichlet"
        else f"skew {part['skew']:g}"
    )
    d = rec.dataset
    data = f"{d.name} ({d.train_samples:,} training and {d.test_samples:,} test samples"
    data += f", {d.num_classes} classes)"
    if d.stand_in:
        data += f" standing in for {d.stand_in_for or 'the paper dataset'}"
    epochs = c["train"]["epochs"]
    text = (
        f"{rec.model.name} ({rec.model.params:,} parameters, {precision}) trained with {algo}"
        f" on {topo['nodes']} nodes in a {TOPOLOGY_WORDS.get(topo['name'], topo['name'])}, "
        f"{sent}, for {epochs} epochs (seed {c['seed']}), on {data}, split over the nodes "
        f"with {split}, by the {rec.engine} engine."
    )
    study_list = [x for x in studies.split(",") if x]
    claim_list = [x for x in claims.split(",") if x and x != "none"]
    if study_list:
        text += f" It is a run of the {'study' if len(study_list) == 1 else 'studies'} "
        text += _list(study_list)
        text += (
            f"; the claims {_list(claim_list)} read it."
            if claim_list
            else "; no claim of the paper reads it."
        )
    if rec.final is not None:
        f = rec.final
        text += (
            f" Final accuracy (mean over nodes after the final gossip rounds): "
            f"{f.acc_node_mean:.2f} % (nodes {f.acc_node_min:.2f} to {f.acc_node_max:.2f} %,"
            f" average model {f.acc_avg_model:.2f} %)."
        )
    else:
        text += f" It diverged after {rec.epochs_completed} of {epochs} epochs: no final accuracy."
    if run_dir is not None:
        text += (
            f" Its files are in {Path(run_dir).resolve()} (metrics.json, the run record; "
            "history.csv; config.yaml), copied to this run's artifacts."
        )
    return text


def _tag(v: Any) -> str:
    if v is None:
        return "unknown"
    return str(v).lower() if isinstance(v, bool) else str(v)


def run_tags(
    rec: RunRecord, tags: dict[str, Any] | None = None, run_dir: str | Path | None = None
) -> dict[str, str]:
    """The tags of an MLflow run: lpdt run id, cell (``cell_name``), dataset (and whether it is a
    stand-in), model, status, the provenance recorded at training time (git commit and dirty
    flag, host, lpdt version, device; "unknown" where the record has none), the host's CPU model
    and logical cores (system metrics; "unknown" in a record without them), plus the caller's
    tags (studies, claims, scale), and the description (``run_note``, which names ``run_dir``).
    A function of the record, the caller's tags and ``run_dir``: logging the same run again
    gives the same tags."""
    prov, system = rec.provenance, rec.system
    out = {
        RUN_ID_TAG: rec.run_id,
        CELL_TAG: cell_name(rec),
        "dataset": rec.dataset.name,
        "stand_in": _tag(rec.dataset.stand_in),
        "stand_in_for": rec.dataset.stand_in_for or "",
        "model": rec.model.name,
        "status": rec.status,
        "git_commit": _tag(prov.git_commit),
        "git_dirty": _tag(prov.git_dirty),
        "host": _tag(prov.host),
        "lpdt_version": _tag(prov.lpdt_version),
        "device": _tag(prov.device),
        "engine": rec.engine,  # simulated | distributed
        "cpu_model": _tag(system.cpu_model if system else None),
        "cpu_count": _tag(system.cpu_count if system else None),
    }
    if prov.git_commit:  # shown by the MLflow UI as the run's source version
        out["mlflow.source.git.commit"] = prov.git_commit
    out.update({str(k): str(v) for k, v in (tags or {}).items()})
    out[NOTE_TAG] = run_note(rec, run_dir, out.get("studies", ""), out.get("claims", ""))
    return out


def _run_metrics(rec: RunRecord):
    """Per-epoch metrics at step = epoch, stamped with the time each row was written; the
    summary (final metrics, communication, timing, sizes) at the step after the last epoch,
    stamped with the finish time."""
    from mlflow.entities import Metric

    out: list[Metric] = []
    last_step = 0
    for row, when in zip(rec.history, rec.row_times(), strict=True):
        if row.epoch == "final":
            continue
        last_step = max(last_step, row.epoch + 1)
        for k, v in row.to_dict().items():
            x = _finite(v)
            if k != "epoch" and x is not None:
                out.append(Metric(k, x, _ms(when), row.epoch))
    summary: dict[str, Any] = {
        "epochs_completed": rec.epochs_completed,
        "iters_per_epoch": rec.iters_per_epoch,
    }
    for section in ("final", "communication", "time", "model", "system"):
        obj = getattr(rec, section)
        if obj is not None:
            summary.update({f"{section}.{k}": v for k, v in dataclasses.asdict(obj).items()})
    finished = _time_ms(rec.provenance.finished or rec.provenance.started)
    for k, v in summary.items():
        x = _finite(v)
        if x is not None:
            out.append(Metric(k, x, finished, last_step))
    return out


def _dataset_input(rec: RunRecord):
    """The record's dataset as an MLflow dataset input (context "train"): name, and as its
    source the dataset's source and stand-in status; sizes as its profile."""
    from mlflow.entities import Dataset, DatasetInput, InputTag
    from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT

    d = rec.dataset
    source = json.dumps(
        {"source": d.source, "stand_in": d.stand_in, "stand_in_for": d.stand_in_for}, sort_keys=True
    )
    profile = json.dumps(
        {
            "num_classes": d.num_classes,
            "train_samples": d.train_samples,
            "test_samples": d.test_samples,
        },
        sort_keys=True,
    )
    digest = hashlib.sha256(f"{d.name}\n{source}\n{profile}".encode()).hexdigest()[:16]
    ds = Dataset(name=d.name, digest=digest, source_type="lpdt", source=source, profile=profile)
    return DatasetInput(ds, tags=[InputTag(MLFLOW_DATASET_CONTEXT, "train")])


def log_run(
    run_dir: str | Path,
    uri: str = DEFAULT_URI,
    experiment: str = DEFAULT_EXPERIMENT,
    tags: dict[str, Any] | None = None,
    seed_in_name: bool = False,
) -> str:
    """Log one finished run (see the module docstring); return its MLflow run id. Idempotent:
    if the run is already logged, only its tags and name are brought up to date."""
    from mlflow.entities import Param, RunTag

    rec = read_record(run_dir)
    client, exp_id = _open(uri, experiment)
    all_tags = run_tags(rec, tags, run_dir)
    name = run_name(rec, seed_in_name)

    for r in _search(client, exp_id, RUN_ID_TAG, rec.run_id):
        if r.data.tags.get(COMPLETE_TAG) == "true":
            stale = [RunTag(k, v) for k, v in all_tags.items() if r.data.tags.get(k) != v]
            if stale:
                with_retry(lambda r=r, stale=stale: client.log_batch(r.info.run_id, tags=stale))
            if r.info.run_name != name:
                with_retry(lambda r=r: client.update_run(r.info.run_id, name=name))
            return r.info.run_id
        # Interrupted while logging earlier: remove the partial record and log again.
        with_retry(lambda r=r: client.delete_run(r.info.run_id))
        local = local_artifact_dir(uri, r.info.artifact_uri)
        if local is not None:
            shutil.rmtree(local, ignore_errors=True)

    run = with_retry(
        lambda: client.create_run(
            exp_id,
            start_time=_time_ms(rec.provenance.started),
            run_name=name,
            tags={RUN_ID_TAG: rec.run_id},
        )
    )
    mid = run.info.run_id
    params = [Param(k, str(v)[:6000]) for k, v in sorted(flatten(rec.config).items())]
    for chunk in _chunks(params, 100):
        with_retry(lambda chunk=chunk: client.log_batch(mid, params=chunk))
    for chunk in _chunks(_run_metrics(rec), 1000):
        with_retry(lambda chunk=chunk: client.log_batch(mid, metrics=chunk))
    with_retry(lambda: client.log_inputs(mid, datasets=[_dataset_input(rec)]))
    d = Path(run_dir)
    _log_files(client, uri, run, [d / f for f in RUN_FILES if (d / f).is_file()])
    tag_list = [RunTag(k, v) for k, v in all_tags.items()]
    for chunk in _chunks(tag_list, 100):
        with_retry(lambda chunk=chunk: client.log_batch(mid, tags=chunk))
    status = "FINISHED" if rec.status == "ok" else "FAILED"
    end = _time_ms(rec.provenance.finished or rec.provenance.started)
    with_retry(lambda: client.set_terminated(mid, status=status, end_time=end))
    with_retry(lambda: client.set_tag(mid, COMPLETE_TAG, "true"))  # last
    return mid


def log_report(
    report: str | Path,
    figures: Iterable[str | Path],
    scale: str,
    uri: str = DEFAULT_URI,
    experiment: str = DEFAULT_EXPERIMENT,
) -> str:
    """Attach the report PDF and the figures of one scale to that scale's report run (named
    ``report <scale>``, tagged ``lpdt_report_scale``; created on first use, its files replaced
    afterwards); return its MLflow run id. Start and end times are the oldest and newest file
    modification times (when the report was built)."""
    files = [Path(report), *map(Path, figures)]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise TrackingError(f"report files not found: {', '.join(missing)}")
    mtimes = [int(f.stat().st_mtime * 1000) for f in files]
    client, exp_id = _open(uri, experiment)
    with store_lock(uri):  # one report run per scale, also with two loggers at once
        runs = _search(client, exp_id, REPORT_TAG, scale)
        if runs:
            run = runs[0]
        else:
            run = with_retry(
                lambda: client.create_run(
                    exp_id,
                    start_time=min(mtimes),
                    run_name=f"report {scale}",
                    tags={REPORT_TAG: scale, "scale": scale},
                )
            )
    _log_files(client, uri, run, files[:1])
    _log_files(client, uri, run, files[1:], "figures")
    mid = run.info.run_id
    with_retry(lambda: client.set_terminated(mid, status="FINISHED", end_time=max(mtimes)))
    return mid


def multi_seed_runs(manifest: dict[str, Any]) -> set[str]:
    """The run ids of a workflow manifest (``results/manifest.json``) whose study cell (study,
    block, coordinates) holds runs of several seeds: their names end in the seed."""
    cells: dict[tuple[str, str, str], list[dict]] = {}
    for study, entry in manifest["studies"].items():
        for r in entry["runs"]:
            key = (study, str(r.get("block")), json.dumps(r["coords"], sort_keys=True))
            cells.setdefault(key, []).append(r)
    return {
        r["run_id"] for rs in cells.values() if len({r.get("seed") for r in rs}) > 1 for r in rs
    }


def sync_manifest(
    manifest: str | Path,
    uri: str = DEFAULT_URI,
    experiment: str = DEFAULT_EXPERIMENT,
    tags: dict[str, Any] | None = None,
) -> dict[str, str]:
    """Log every run of a workflow manifest (``results/manifest.json``) that is not logged yet and
    refresh the ``studies`` and ``claims`` tags of the others (``claims``: the paper's accuracy
    claims that read the run, ``lpdt.report.readers``, "none" if no claim does); returns
    {lpdt run id: MLflow run id}."""
    from lpdt.report.aggregate import aggregate
    from lpdt.report.readers import claims_by_run

    m = json.loads(Path(manifest).read_text())
    claims = claims_by_run(aggregate(manifest)[0])
    studies: dict[str, list[str]] = {}
    dirs: dict[str, str] = {}
    for study, entry in sorted(m["studies"].items()):
        for r in entry["runs"]:
            studies.setdefault(r["run_id"], []).append(study)
            dirs[r["run_id"]] = r["dir"]
    seeded = multi_seed_runs(m)
    out = {}
    for rid, d in sorted(dirs.items()):
        if not (Path(d) / record.METRICS_FILE).is_file():
            continue
        t = {
            "studies": ",".join(sorted(set(studies[rid]))),
            "scale": m["scale"],
            "claims": ",".join(claims.get(rid, [])) or "none",
        }
        out[rid] = log_run(d, uri, experiment, {**t, **(tags or {})}, rid in seeded)
    return out


def ui_command(uri: str = DEFAULT_URI, host: str = "127.0.0.1", port: int = 5000) -> list[str]:
    """The ``mlflow ui`` command line for a store; for a SQLite store it serves the artifacts
    from the folder next to the database (``artifacts_root``)."""
    cmd = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri]
    root = artifacts_root(uri)
    if root is not None:
        cmd += ["--artifacts-destination", str(root.resolve())]
    return cmd + ["--host", host, "--port", str(port)]


def ui_url(host: str, port: int, experiment_id: str | None = None) -> str:
    """The UI's address: the experiment's training-run table in the Model training view (the
    ``workflowType`` parameter; see the module docstring), else the start page."""
    base = f"http://{host}:{port}"
    if experiment_id is None:
        return base
    return f"{base}/#/experiments/{experiment_id}/runs?{WORKFLOW_PARAM}"


def ui(
    uri: str = DEFAULT_URI,
    host: str = "127.0.0.1",
    port: int = 5000,
    experiment: str = DEFAULT_EXPERIMENT,
) -> int:
    """Serve the MLflow UI for ``uri`` (blocks until interrupted); prints the address of
    ``experiment``'s training runs (``ui_url``)."""
    path = sqlite_path(uri)
    if path is not None and not path.is_file():
        raise TrackingError(
            f"no MLflow store at {path}; run the workflow (snakemake) or `lpdt train` with "
            "tracking.mlflow=true first, or pass --uri"
        )
    try:  # open it under the store lock: the server then finds its schema complete
        client = _client(uri)
        exp = with_retry(lambda: client.get_experiment_by_name(experiment))
    except TrackingError:
        raise
    except Exception as e:
        raise TrackingError(f"cannot open the MLflow store {uri}: {e}".replace("\n", " ")) from e
    cmd = ui_command(uri, host, port)
    if exp is None:
        print(
            f"MLflow UI for {uri} at {ui_url(host, port)} (no experiment {experiment!r} yet; "
            "Ctrl-C to stop)",
            flush=True,
        )
    else:
        print(
            f"MLflow UI for {uri}; the training runs of {experiment!r}:\n"
            f"  {ui_url(host, port, exp.experiment_id)}\n(Ctrl-C to stop)",
            flush=True,
        )
    # exec: the server replaces this process, so Ctrl-C and kill reach it directly
    os.execv(sys.executable, cmd)
    return 0  # not reached


# ----------------------------------------------------------------------------------------------
# Command line: `lpdt ui` (add_arguments/run) and `python -m lpdt.tracking init|log|sync|report`
# ----------------------------------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--uri", default=DEFAULT_URI, help=f"tracking URI (default {DEFAULT_URI})")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=5000, help="port (default 5000)")
    p.add_argument(
        "--experiment",
        default=DEFAULT_EXPERIMENT,
        help=f"experiment whose runs the printed address opens (default {DEFAULT_EXPERIMENT})",
    )


def run(args: argparse.Namespace) -> int:
    try:
        return ui(args.uri, args.host, args.port, args.experiment)
    except TrackingError as e:
        print(f"lpdt ui: error: {e}", file=sys.stderr)
        return 2


def _write_json(path: str | None, obj: Any) -> None:
    if path:
        from lpdt.io import write_json_atomic

        write_json_atomic(Path(path), obj)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lpdt.tracking", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    for name, help_ in [
        ("init", "create the store and the experiment"),
        ("log", "log one run directory"),
        ("sync", "log every run of a manifest, refresh study tags"),
        ("report", "attach the report PDF and the figures to the scale's report run"),
    ]:
        s = sub.add_parser(name, help=help_)
        s.add_argument("--uri", default=DEFAULT_URI)
        s.add_argument("--experiment", default=DEFAULT_EXPERIMENT)
        s.add_argument("--out", default=None, help="write a JSON receipt here (atomically)")
        if name == "log":
            s.add_argument("run_dir")
            s.add_argument("--tag", action="append", default=[], metavar="KEY=VALUE")
            s.add_argument(
                "--seed-in-name",
                action="store_true",
                help="the run is one of several seeds of its cell: name it by its seed",
            )
        if name == "sync":
            s.add_argument("--manifest", default="results/manifest.json")
        if name == "report":
            s.add_argument("--scale", required=True)
            s.add_argument("--report", required=True, help="the report PDF")
            s.add_argument("figures", nargs="*", help="figure files (logged under figures/)")
    args = p.parse_args(argv)
    try:
        if args.cmd == "init":
            exp_id = init_store(args.uri, args.experiment)
            receipt: dict[str, Any] = {
                "uri": args.uri,
                "experiment": args.experiment,
                "experiment_id": exp_id,
            }
        elif args.cmd == "log":
            tags = dict(t.split("=", 1) for t in args.tag)
            mid = log_run(args.run_dir, args.uri, args.experiment, tags, args.seed_in_name)
            receipt = {"mlflow_run_id": mid}
        elif args.cmd == "report":
            mid = log_report(args.report, args.figures, args.scale, args.uri, args.experiment)
            receipt = {"mlflow_run_id": mid, "scale": args.scale}
        else:
            runs = sync_manifest(args.manifest, args.uri, args.experiment)
            receipt = {"uri": args.uri, "experiment": args.experiment, "runs": runs}
    except (TrackingError, FileNotFoundError, ValueError) as e:
        print(f"lpdt.tracking {args.cmd}: error: {e}", file=sys.stderr)
        return 2
    _write_json(args.out, receipt)
    print(json.dumps({k: v for k, v in receipt.items() if k != "runs"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
