"""Run records in MLflow, for browsing and comparing runs (``lpdt ui``).

The JSON files of a run (``metrics.json``, ``history.csv``, ``config.yaml``) stay the source of
truth; MLflow is a view of them. ``log_run`` is therefore idempotent (a run already logged, found
by its ``lpdt_run_id`` tag, is not logged twice; only its tags are refreshed) and can be called
again at any time, e.g. by the workflow's final ``mlflow_sync`` step.

SQLite stores do not like concurrent writers. Opening a SQLite store (which creates or migrates
its schema when the file is new) is serialised across processes by an exclusive lock on
``<db>.lock`` next to the database (``store_lock``; bounded wait, ``TrackingError`` on timeout),
so any number of ``lpdt train`` processes, ``lpdt ui`` and the workflow may open one fresh store
at once; every write retries with backoff on "database is locked".

Tags are derived from the run's record only (``metrics.json``, including its ``provenance``
block written at training time), never from the state of the machine at logging time, so
logging a run again (``mlflow_sync``) does not change them.

Command line (used by the workflow): ``python -m lpdt.tracking init|log|sync ...``;
``lpdt ui`` opens the MLflow UI on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import fcntl
import json
import math
import os
import random
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import yaml

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

DEFAULT_URI = "sqlite:///results/mlflow.db"
DEFAULT_EXPERIMENT = "lpdt"
RUN_ID_TAG = "lpdt_run_id"
COMPLETE_TAG = "lpdt_logged"  # set last: a run without it was interrupted while logging
LOCK_TIMEOUT_S = 120.0  # longest wait for another process to finish opening a SQLite store

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


def _artifact_location(uri: str) -> str | None:
    """Artifacts of a SQLite store go next to the database (results/mlflow-artifacts)."""
    path = sqlite_path(uri)
    if path is None:
        return None  # a tracking server decides where artifacts go
    return (path.parent / "mlflow-artifacts").resolve().as_uri()


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


def _number(v: Any) -> float | None:
    """A finite float, or None for empty / NaN / non-numeric cells."""
    if isinstance(v, bool) or v is None or v == "":
        return None
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


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
    exp = with_retry(lambda: client.get_experiment_by_name(experiment))
    if exp is not None:
        return exp.experiment_id
    try:
        return with_retry(
            lambda: client.create_experiment(experiment, artifact_location=_artifact_location(uri))
        )
    except Exception:
        # Another process may have created it in between.
        exp = with_retry(lambda: client.get_experiment_by_name(experiment))
        if exp is None:
            raise
        return exp.experiment_id


def find_run(uri: str, experiment: str, run_id: str) -> str | None:
    """The MLflow run id of a completely logged lpdt run, or None."""
    client = _client(uri)
    exp = with_retry(lambda: client.get_experiment_by_name(experiment))
    if exp is None:
        return None
    for r in _search(client, exp.experiment_id, run_id):
        if r.data.tags.get(COMPLETE_TAG) == "true":
            return r.info.run_id
    return None


def _search(client, exp_id: str, run_id: str) -> list:
    flt = f"tags.{RUN_ID_TAG} = '{run_id}'"
    return list(with_retry(lambda: client.search_runs([exp_id], filter_string=flt)))


def read_run_dir(run_dir: str | Path) -> tuple[dict, list[dict], dict]:
    """(metrics.json, history.csv rows, config.yaml) of a finished run directory."""
    d = Path(run_dir)
    metrics_path = d / "metrics.json"
    if not metrics_path.is_file():
        raise TrackingError(f"{metrics_path} does not exist; the run is not complete")
    metrics = json.loads(metrics_path.read_text())
    history: list[dict] = []
    if (d / "history.csv").is_file():
        with (d / "history.csv").open(newline="") as f:
            history = list(csv.DictReader(f))
    config = metrics.get("config") or {}
    if (d / "config.yaml").is_file():
        config = yaml.safe_load((d / "config.yaml").read_text()) or config
    return metrics, history, config


def _tag(v: Any) -> str:
    if v is None:
        return "unknown"
    return str(v).lower() if isinstance(v, bool) else str(v)


def run_tags(metrics: dict, tags: dict[str, Any] | None = None) -> dict[str, str]:
    """The tags of an MLflow run: lpdt run id, dataset (and whether it is a stand-in), status,
    and the provenance recorded at training time (git commit and dirty flag, host, lpdt version;
    "unknown" where the record has none), plus the caller's tags (studies, scale). A function
    of the record only: logging the same run again gives the same tags."""
    ds = metrics.get("dataset") or {}
    prov = metrics.get("provenance") or {}
    out = {
        RUN_ID_TAG: str(metrics["run_id"]),
        "dataset": str(ds.get("name")),
        "stand_in": str(bool(ds.get("stand_in"))).lower(),
        "stand_in_for": str(ds.get("stand_in_for") or ""),
        "model": str((metrics.get("model") or {}).get("name")),
        "status": str(metrics.get("status")),
        "git_commit": _tag(prov.get("git_commit")),
        "git_dirty": _tag(prov.get("git_dirty")),
        "host": _tag(prov.get("host")),
        "lpdt_version": _tag(prov.get("lpdt_version")),
    }
    out.update({str(k): str(v) for k, v in (tags or {}).items()})
    return out


def _run_metrics(metrics: dict, history: list[dict]):
    from mlflow.entities import Metric

    ts = int(time.time() * 1000)
    out: list[Metric] = []
    last_step = 0
    for row in history:
        epoch = row.get("epoch")
        if epoch == "final":
            continue
        step = int(float(epoch))
        last_step = max(last_step, step + 1)
        for k, v in row.items():
            x = _number(v)
            if k != "epoch" and x is not None:
                out.append(Metric(k, x, ts, step))
    summary = {
        **{f"final.{k}": v for k, v in (metrics.get("final") or {}).items()},
        **{f"communication.{k}": v for k, v in (metrics.get("communication") or {}).items()},
        **{f"time.{k}": v for k, v in (metrics.get("time") or {}).items()},
        "epochs_completed": metrics.get("epochs_completed"),
        "model.params": (metrics.get("model") or {}).get("params"),
    }
    for k, v in summary.items():
        x = _number(v)
        if x is not None:
            out.append(Metric(k, x, ts, last_step))
    return out


def log_run(
    run_dir: str | Path,
    uri: str = DEFAULT_URI,
    experiment: str = DEFAULT_EXPERIMENT,
    tags: dict[str, Any] | None = None,
) -> str:
    """Log one finished run (config as params, per-epoch and final metrics, tags, the JSON/CSV
    files as artifacts); return its MLflow run id. Idempotent: if the run is already logged, only
    its tags are refreshed (studies sharing a run may be added later)."""
    from mlflow.entities import Param, RunTag

    metrics, history, config = read_run_dir(run_dir)
    client, exp_id = _open(uri, experiment)
    all_tags = run_tags(metrics, tags)
    run_id = all_tags[RUN_ID_TAG]

    for r in _search(client, exp_id, run_id):
        if r.data.tags.get(COMPLETE_TAG) == "true":
            stale = [RunTag(k, v) for k, v in all_tags.items() if r.data.tags.get(k) != v]
            if stale:
                with_retry(lambda r=r, stale=stale: client.log_batch(r.info.run_id, tags=stale))
            return r.info.run_id
        # Interrupted while logging earlier: remove the partial record and log again.
        with_retry(lambda r=r: client.delete_run(r.info.run_id))

    name = metrics.get("name") or run_id
    run = with_retry(
        lambda: client.create_run(exp_id, run_name=str(name), tags={RUN_ID_TAG: run_id})
    )
    mid = run.info.run_id
    params = [Param(k, str(v)[:6000]) for k, v in sorted(flatten(config).items())]
    for chunk in _chunks(params, 100):
        with_retry(lambda chunk=chunk: client.log_batch(mid, params=chunk))
    for chunk in _chunks(_run_metrics(metrics, history), 1000):
        with_retry(lambda chunk=chunk: client.log_batch(mid, metrics=chunk))
    d = Path(run_dir)
    for fname in ("metrics.json", "history.csv", "config.yaml"):
        if (d / fname).is_file():
            with_retry(lambda fname=fname: client.log_artifact(mid, str(d / fname)))
    tag_list = [RunTag(k, v) for k, v in all_tags.items()]
    for chunk in _chunks(tag_list, 100):
        with_retry(lambda chunk=chunk: client.log_batch(mid, tags=chunk))
    status = "FINISHED" if metrics.get("status") == "ok" else "FAILED"
    with_retry(lambda: client.set_terminated(mid, status=status))
    with_retry(lambda: client.set_tag(mid, COMPLETE_TAG, "true"))  # last
    return mid


def sync_manifest(
    manifest: str | Path,
    uri: str = DEFAULT_URI,
    experiment: str = DEFAULT_EXPERIMENT,
    tags: dict[str, Any] | None = None,
) -> dict[str, str]:
    """Log every run of a workflow manifest (``results/manifest.json``) that is not logged yet and
    refresh the ``studies`` tag of the others; returns {lpdt run id: MLflow run id}."""
    m = json.loads(Path(manifest).read_text())
    studies: dict[str, list[str]] = {}
    dirs: dict[str, str] = {}
    for study, entry in sorted(m.get("studies", {}).items()):
        for r in entry.get("runs", []):
            studies.setdefault(r["run_id"], []).append(study)
            dirs[r["run_id"]] = r["dir"]
    out = {}
    for rid, d in sorted(dirs.items()):
        if not (Path(d) / "metrics.json").is_file():
            continue
        t = {"studies": ",".join(sorted(set(studies[rid]))), "scale": m.get("scale", "")}
        out[rid] = log_run(d, uri, experiment, {**t, **(tags or {})})
    return out


def ui(uri: str = DEFAULT_URI, host: str = "127.0.0.1", port: int = 5000) -> int:
    """Serve the MLflow UI for ``uri`` (blocks until interrupted)."""
    path = sqlite_path(uri)
    if path is not None and not path.is_file():
        raise TrackingError(
            f"no MLflow store at {path}; run the workflow (snakemake) or `lpdt train` with "
            "tracking.mlflow=true first, or pass --uri"
        )
    try:  # open it under the store lock: the server then finds its schema complete
        _client(uri)
    except TrackingError:
        raise
    except Exception as e:
        raise TrackingError(f"cannot open the MLflow store {uri}: {e}".replace("\n", " ")) from e
    cmd = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri]
    cmd += ["--host", host, "--port", str(port)]
    print(f"MLflow UI for {uri} at http://{host}:{port} (Ctrl-C to stop)", flush=True)
    # exec: the server replaces this process, so Ctrl-C and kill reach it directly
    os.execv(sys.executable, cmd)
    return 0  # not reached


# ----------------------------------------------------------------------------------------------
# Command line: `lpdt ui` (add_arguments/run) and `python -m lpdt.tracking init|log|sync`
# ----------------------------------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--uri", default=DEFAULT_URI, help=f"tracking URI (default {DEFAULT_URI})")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=5000, help="port (default 5000)")


def run(args: argparse.Namespace) -> int:
    try:
        return ui(args.uri, args.host, args.port)
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
    ]:
        s = sub.add_parser(name, help=help_)
        s.add_argument("--uri", default=DEFAULT_URI)
        s.add_argument("--experiment", default=DEFAULT_EXPERIMENT)
        s.add_argument("--out", default=None, help="write a JSON receipt here (atomically)")
        if name == "log":
            s.add_argument("run_dir")
            s.add_argument("--tag", action="append", default=[], metavar="KEY=VALUE")
        if name == "sync":
            s.add_argument("--manifest", default="results/manifest.json")
    args = p.parse_args(argv)
    try:
        if args.cmd == "init":
            exp_id = init_store(args.uri, args.experiment)
            receipt: dict[str, Any] = {"uri": args.uri, "experiment": args.experiment,
                                       "experiment_id": exp_id}  # fmt: skip
        elif args.cmd == "log":
            tags = dict(t.split("=", 1) for t in args.tag)
            receipt = {"mlflow_run_id": log_run(args.run_dir, args.uri, args.experiment, tags)}
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
