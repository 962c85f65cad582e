"""The MLflow store: opening it safely from many processes, and where a run's artifacts go.

SQLite stores do not like concurrent writers. Opening a SQLite store (which creates or migrates
its schema when the file is new) is serialised across processes by an exclusive lock on
``<db>.lock`` next to the database (``store_lock``; bounded wait, ``TrackingError`` on timeout),
so any number of ``lpdt train`` processes, ``lpdt ui`` and the workflow may open one fresh store
at once; every write retries with backoff on "database is locked" (``with_retry``).

Experiments are created with the tag ``mlflow.experimentKind = custom_model_development``, so that
MLflow 3 opens them on their training-runs view, not on its GenAI overview.

Artifacts of a SQLite store live in ``mlflow-artifacts/`` next to the database, and runs refer to
them by ``mlflow-artifacts:/`` URIs, which are relative: ``lpdt ui`` serves them from the folder
next to the database it opens, so moving ``results/`` as a whole keeps them working. Stores
created by earlier versions keep their absolute ``file://`` locations and are written through
MLflow's client as before (``log_files``).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import os
import random
import re
import shutil
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from lpdt.errors import LpdtError

DEFAULT_URI = "sqlite:///results/mlflow.db"
DEFAULT_EXPERIMENT = "lpdt"
LOCK_TIMEOUT_S = 120.0  # longest wait for another process to finish opening a SQLite store
# MLflow 3 opens an experiment without this tag on its GenAI overview (mlflow/server/js: the
# experiment page reads the tag; the UI's kind selector writes it). Verified with MLflow 3.17.
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"
ARTIFACTS_DIR = "mlflow-artifacts"  # next to a SQLite database

T = TypeVar("T")


class TrackingError(LpdtError, RuntimeError):
    """The MLflow store cannot be used (bad URI, missing store, files missing in a run dir)."""


def _is_transient(e: BaseException) -> bool:
    """SQLite's lock, or two writers logging one dataset at once: MLflow looks a dataset up and
    inserts it when absent, so the later insert breaks the table's unique key (seen with 16
    concurrent jobs, tests/tracking/test_store.py); the retry finds the first writer's row."""
    text = f"{type(e).__name__}: {e}".lower()
    return (
        "database is locked" in text
        or "database table is locked" in text
        or "unique constraint failed: datasets." in text
    )


# How long a process waits for an MLflow server it cannot reach: MLflow's own defaults (7 retries
# of up to 120 s each) kept `lpdt train` silent for about 4 minutes after its run, and held a
# workflow job's GPU as long. A value set in the environment wins.
HTTP_WAITS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_TIMEOUT": "20"}


def bound_http_waits() -> None:
    """Set ``HTTP_WAITS`` in this process's environment where it sets none (before MLflow
    talks to a server: it reads them at each request)."""
    for key, value in HTTP_WAITS.items():
        os.environ.setdefault(key, value)


def store_error_line(e: BaseException, uri: str) -> str | None:
    """One line for an error raised by MLflow or SQLAlchemy (a file that is no database, an
    unsupported URI scheme, a server that cannot be reached: its first line), or an OS error
    about a file (a manifest that is a directory, no permission); None for any other (a bug,
    whose traceback is shown). An error of lpdt's own use of MLflow also reads as the store's."""
    if type(e).__module__.split(".")[0] in ("mlflow", "sqlalchemy"):
        first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
        return f"cannot use the MLflow store {uri}: {first}"
    if isinstance(e, OSError) and e.filename is not None:
        return f"{e.filename}: {e.strerror or e}"
    return None


def with_retry(fn: Callable[[], T], attempts: int = 12, base_s: float = 0.05) -> T:
    """Call ``fn``, retrying with jittered exponential backoff while SQLite reports a lock or a
    concurrent writer logged the same dataset first (``_is_transient``)."""
    for k in range(attempts):
        try:
            return fn()
        except Exception as e:
            if not _is_transient(e) or k == attempts - 1:
                raise
            time.sleep(min(5.0, base_s * 2**k) * (0.5 + random.random()))
    raise AssertionError("unreachable")


# The URI schemes MLflow 3 has a tracking store for (its ``_tracking_store_registry``; a
# database URL may add a dialect: postgresql+psycopg2://). tests/tracking/test_store.py compares
# this with the installed MLflow's registry, so a new MLflow that adds or drops one fails there.
TRACKING_SCHEMES = (
    "databricks",
    "databricks-uc",
    "file",
    "http",
    "https",
    "mssql",
    "mysql",
    "postgresql",
    "sqlite",
    "uc",
)
# URIs MLflow takes as they are, without a scheme (its registry's ``get_store_builder``)
BARE_URIS = ("databricks", "databricks-uc", "uc")


def plugin_schemes() -> set[str]:
    """The schemes of the tracking stores installed plugins add (MLflow's entry points, group
    ``mlflow.tracking_store``, e.g. ``arn`` for SageMaker), read without importing MLflow."""
    from importlib.metadata import entry_points

    return {ep.name.lower() for ep in entry_points(group="mlflow.tracking_store")}


# MLflow 3 refuses a file store (a folder, or a path without a scheme) unless this is "true".
FILE_STORE_ENV = "MLFLOW_ALLOW_FILE_STORE"
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9.-]*)(\+[^:/]*)?:")


def check_uri(uri: str, given: str = "--uri ") -> None:
    """Refuse a tracking URI that MLflow would fail on only when a run is logged (after the
    training, or at a workflow's first MLflow job), with ``TrackingError``, one line starting
    with how the user gave it (``given``: ``"--uri "``, ``"tracking.uri="``,
    ``"tracking_uri="``):

    - empty (MLflow opened ``./mlflow.db``, creating it);
    - a path to a database file without its scheme (MLflow read it as a file store);
    - a scheme MLflow has no store for (a typo: ``htp://``);
    - a file store, a folder or ``file:`` URI, which MLflow 3 refuses unless
      ``MLFLOW_ALLOW_FILE_STORE=true`` (its text: "in maintenance mode")."""
    if not uri.strip():
        label = given.strip(" =")
        raise TrackingError(
            f"{label + ': ' if label else ''}the tracking URI is empty (default {DEFAULT_URI})"
        )
    use = "use sqlite:///<file>, http(s)://<server> or a database URL"
    if uri in BARE_URIS:
        return
    m = _SCHEME.match(uri)
    written = m[1] if m and len(m[1]) > 1 else ""  # C:\ is a drive, not a scheme
    scheme = written.lower()
    if scheme and scheme not in TRACKING_SCHEMES and scheme not in plugin_schemes():
        raise TrackingError(f"{given}{uri}: MLflow has no store for the scheme {written!r} ({use})")
    if scheme == "sqlite":
        _check_sqlite_uri(uri, given)
    driver = _DB_DRIVERS.get(scheme) if m and not m[2] else None  # no +dialect: the default one
    if driver and importlib.util.find_spec(driver[0]) is None:  # a traceback after training
        raise TrackingError(
            f"{given}{uri}: this database needs the Python package {driver[1]}, which is not "
            f"installed (pip install {driver[1]}), or use sqlite:///<file>"
        )
    if scheme in ("", "file") and os.environ.get(FILE_STORE_ENV, "").lower() != "true":
        if not scheme and Path(uri).suffix in (".db", ".sqlite", ".sqlite3"):
            raise TrackingError(
                f"{given}{uri} is a path, not a tracking URI: did you mean sqlite:///{uri}?"
            )
        raise TrackingError(
            f"{given}{uri} is a file store (a folder), which MLflow 3 refuses unless "
            f"{FILE_STORE_ENV}=true ({use})"
        )


# The module each database URL's default SQLAlchemy dialect imports, and its package: without
# it a log failed with ModuleNotFoundError's traceback (after the training, under lpdt train).
_DB_DRIVERS = {
    "postgresql": ("psycopg2", "psycopg2-binary"),
    "mysql": ("MySQLdb", "mysqlclient"),
    "mssql": ("pyodbc", "pyodbc"),
}


def _check_sqlite_uri(uri: str, given: str) -> None:
    """``sqlite:///<file>`` with a file's path: ``sqlite://x.db`` (two slashes: x.db read as a
    host) and ``sqlite:///`` (no file) trained, then failed to log; a folder waited about 100 s
    on MLflow's retries."""
    if not uri.startswith("sqlite:///"):
        rest = uri.split("://", 1)[-1]
        raise TrackingError(
            f"{given}{uri}: a SQLite store is sqlite:///<file> (three slashes, then the path): "
            f"did you mean sqlite:///{rest}?"
        )
    path = sqlite_path(uri)
    if path is None or not path.name:
        raise TrackingError(f"{given}{uri}: no database file named (sqlite:///<file>)")
    if path.is_dir():
        raise TrackingError(f"{given}{uri}: {path} is a folder, not a database file")


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI (relative to the working directory), else None."""
    prefix = "sqlite:///"  # (its query, ?mode=ro, is no part of the file's name)
    return Path(uri[len(prefix) :].split("?", 1)[0]) if uri.startswith(prefix) else None


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


def check_is_mlflow_store(path: Path) -> None:
    """Refuse an existing file that is no SQLite database, or a database that holds tables but
    none of MLflow's (another program's): opening it as a store added MLflow's tables to it, or
    left a lock file beside it. An empty file or database is a new store."""
    import sqlite3

    try:
        ro = f"{path.resolve().as_uri()}?mode=ro"  # as_uri quotes a '?' or '#' in the path
        with contextlib.closing(sqlite3.connect(ro, uri=True)) as db:
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    except sqlite3.OperationalError:
        return  # busy or locked (a job writing to it): open_client waits for it under the lock
    except sqlite3.DatabaseError as e:
        raise TrackingError(f"{path} is not a SQLite database ({e}): pass the store's --uri") from e
    # MLflow's tables and its migrations' (alembic_version): one of them alone is another
    # program's (an "experiments" table of its own had MLflow's 60 tables added beside it)
    if tables and not {"experiments", "alembic_version"} <= tables:
        raise TrackingError(
            f"{path} is a SQLite database without MLflow's tables (another program's?): pass "
            "the MLflow store's --uri"
        )


def open_client(uri: str) -> Any:
    """An MLflow client whose store is open. For a SQLite store, opening it (creating the schema
    of a new file, checking it, creating the default experiment) happens under ``store_lock``:
    concurrent schema creation on one fresh file corrupts it."""
    from mlflow.tracking import MlflowClient  # imported (seconds) before taking the lock

    check_uri(uri, "")
    path = sqlite_path(uri)
    if path is not None and path.exists() and not os.access(path, os.R_OK | os.W_OK):
        # MLflow retries such a file for about 100 s, printing a warning at each try
        raise TrackingError(
            f"{path}: permission denied (the MLflow store must be readable and writable)"
        )
    if path is not None and path.is_file():  # before the lock file is made beside it
        check_is_mlflow_store(path)
    with store_lock(uri):
        return with_retry(lambda: MlflowClient(tracking_uri=uri))


def init_store(uri: str = DEFAULT_URI, experiment: str = DEFAULT_EXPERIMENT) -> str:
    """Create the store (and its schema) and the experiment if needed; return the experiment id.

    Safe to call from many processes at once (``store_lock``).
    """
    return open_experiment(uri, experiment)[1]


def open_experiment(uri: str, experiment: str) -> tuple[Any, str]:
    """(client, experiment id), creating the experiment if needed (under ``store_lock``)."""
    client = open_client(uri)
    with store_lock(uri):
        return client, _experiment_id(client, uri, experiment)


def _experiment_id(client: Any, uri: str, experiment: str) -> str:
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


def search_runs(client: Any, exp_id: str, tag: str, value: str) -> list:
    """The runs of experiment ``exp_id`` whose tag ``tag`` is ``value``."""
    flt = f"tags.{tag} = '{value}'"
    return list(with_retry(lambda: client.search_runs([exp_id], filter_string=flt)))


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


def log_files(
    client: Any, uri: str, run: Any, files: Iterable[Path], subdir: str | None = None
) -> None:
    """Copy files into the run's artifacts (replacing earlier copies of the same name)."""
    local = local_artifact_dir(uri, run.info.artifact_uri)
    for f in files:
        if local is None:
            with_retry(partial(client.log_artifact, run.info.run_id, str(f), subdir))
            continue
        dest = local / subdir if subdir else local
        dest.mkdir(parents=True, exist_ok=True)
        tmp = dest / f".{f.name}.tmp"
        shutil.copyfile(f, tmp)
        os.replace(tmp, dest / f.name)
