"""The run record: what one ``lpdt train`` run leaves behind, as typed objects.

A run directory holds the record in two files (docs/architecture.md, "Run outputs"):

- ``metrics.json``: the whole record, ``RunRecord.to_dict()``. Written atomically and last
  (``RunRecord.write``): its presence means "the run is complete".
- ``history.csv``: the record's history rows, one per epoch (``HISTORY_FIELDS`` columns), plus a
  row ``epoch = final``. Rewritten atomically after every epoch while the run trains
  (``write_history``), so a long run can be followed.

This module is the only place that knows the format. The trainer (``lpdt.engine.loop``) builds a
``RunRecord`` and writes it; MLflow logging (``lpdt.tracking``), aggregation
(``lpdt.report.aggregate``) and the workflow read it with ``read``. The readers walk the fields of
``FinalMetrics``, ``Communication`` and ``Timing``, so adding such a metric is a field here (plus
computing it in the trainer).

``read`` validates. It checks the schema version first: a record without ``schema_version``
(written before versioning, "version 0") or with any version other than ``SCHEMA_VERSION`` and
those in ``UPGRADABLE`` is a ``RecordError`` naming both versions; then the presence and the type
of every field (``lpdt.typed.Reader``'s JSON rules). A record of an upgradable version is read as
one of ``SCHEMA_VERSION``: the fields it lacks all have defaults (version 1: no system metrics).
Every ``RecordError`` message is one line that starts with the file's path.

JSON conventions (the files users see): ``final`` is ``{}`` for a run that diverged (``None``
here); a history row leaves out the metrics it does not have (an epoch without evaluation has no
accuracies), and ``history.csv`` leaves those cells empty; NaN is written as ``NaN`` (a diverged
epoch's loss).
"""

from __future__ import annotations

import csv
import dataclasses
import datetime as dt
import io
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import lpdt
from lpdt.errors import LpdtError
from lpdt.io import write_json_atomic, write_text_atomic
from lpdt.typed import Reader, to_json

# Version 1: the first versioned record (before it: no schema_version field). Version 2 adds the
# system metrics (``SystemMetrics``, four ``HistoryRow`` columns). Version 1 is still read: it is a
# version 2 record without them (``None``), see ``UPGRADABLE``.
SCHEMA_VERSION = 2
UPGRADABLE = (1,)  # older schema versions ``read`` upgrades (their records lack only defaults)
METRICS_FILE = "metrics.json"
HISTORY_FILE = "history.csv"
CONFIG_FILE = "config.yaml"  # the run's config as it trained (lpdt.config.dump_config)

Status = Literal["ok", "diverged"]
Engine = Literal["simulated", "distributed"]  # the config's ``engine`` that ran a run


class RecordError(LpdtError, ValueError):
    """A run record that cannot be read: missing, not JSON, of another schema version, or with a
    field missing or of the wrong type. The message is one line and starts with the path."""


# ----------------------------------------------------------------------------------------------
# The record
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DatasetRecord:
    """The data a run trained on (``lpdt.data.base.DatasetInfo`` plus the sizes it used)."""

    name: str  # registry name of the dataset actually used, e.g. "fashion_mnist"
    source: str  # where the data came from (path, package, "generated ...")
    stand_in: bool  # the dataset stands in for one of the paper's
    stand_in_for: str | None  # e.g. "cifar10"
    num_classes: int
    train_samples: int  # over all nodes' partitions
    test_samples: int


@dataclass(frozen=True)
class ModelRecord:
    name: str
    params: int  # trainable parameters
    gossiped: int  # gossiped entries per node: parameters plus gossip buffers (8-bit ranges)


@dataclass(frozen=True)
class FinalMetrics:
    """The run's result, after the final gossip rounds. Accuracies in %."""

    acc_node_mean: float  # the paper's number: mean over nodes of each node's test accuracy
    acc_node_min: float
    acc_node_max: float
    acc_avg_model: float  # the exact average model
    consensus_distance: float
    train_loss: float  # mean training loss of the last epoch


# The accuracies of ``FinalMetrics`` (%); a finished run's are numbers from 0 to 100
ACCURACIES = ("acc_node_mean", "acc_node_min", "acc_node_max", "acc_avg_model")


@dataclass(frozen=True)
class Communication:
    """Gossip volume per node, counted as the reference code counts it (``lpdt.cost.comm``)."""

    bytes_per_message: int
    messages_per_node: float  # training iterations and final rounds x mean out-peers
    bytes_per_node: float  # training and final gossip rounds
    bytes_per_node_train: float  # training iterations only
    gb_per_node: float  # 10^9 bytes
    gb_per_node_train: float
    gb_per_node_8bit_analytic: float  # a quarter of the fp32 figure (the paper's 8-bit column)
    # Measured (engine: distributed): payload bytes each node handed to the transport, mean over
    # nodes, training and final rounds / training only; None in the simulator (no wire).
    wire_bytes_per_node: float | None = None
    wire_bytes_per_node_train: float | None = None


@dataclass(frozen=True)
class Timing:
    train_s: float  # time inside training epochs (all sessions of a resumed run)
    total_s: float  # wall time of the run, across --resume
    images_per_s: float | None  # None when no iteration ran
    s_per_iter: float | None
    iterations: int  # training iterations (not counting the final gossip rounds)


@dataclass(frozen=True)
class Session:
    """A later session of a resumed run (the first session is ``Provenance`` itself)."""

    epoch: int  # epochs completed when this session started
    started: str  # ISO 8601, UTC
    git_commit: str | None
    git_dirty: bool | None
    host: str
    command: str


@dataclass(frozen=True)
class Provenance:
    """Where a run came from, captured by the training process (``lpdt.provenance.capture``)
    and never recomputed: MLflow tags are derived from it."""

    lpdt_version: str
    git_commit: str | None  # None: not run from a git checkout (or git unavailable)
    git_dirty: bool | None  # tracked files differed from the commit
    command: str
    host: str
    device: str | None
    gpu: str | None
    python: str
    torch: str
    cuda: str | None
    started: str  # ISO 8601, UTC: when the first session started
    finished: str | None  # ISO 8601, UTC; None only while the run trains (checkpoints)
    resumed: tuple[Session, ...] = ()  # the sessions that continued the run (--resume)

    def to_dict(self) -> dict[str, Any]:
        return to_json(self)

    @classmethod
    def from_dict(cls, data: Any, source: str = "provenance") -> Provenance:
        return _reader(source).build(cls, data, "provenance.")


@dataclass(frozen=True)
class SystemMetrics:
    """What the training used of its host (``lpdt.engine.sysmetrics``), measured in the process that
    writes the record (distributed engine: process 0), over the session that finished the run
    (a resumed run: its last session)."""

    cpu_model: str | None  # e.g. "AMD EPYC 7R13 Processor"; None where the OS does not say
    cpu_count: int | None  # logical cores of the host (os.cpu_count())
    cpu_s: float  # CPU time of the process (user + system, all threads)
    cpu_share: float | None  # cpu_s / (wall time x cpu_count), in %; None without wall time
    peak_rss_mb: float  # peak resident memory of the process, MiB
    threads_max: int  # most OS threads of the process seen at an epoch's end


@dataclass(frozen=True)
class Versions:
    lpdt: str
    torch: str
    python: str


def _column(evaluation: bool = False, measured: bool = False, system: bool = False) -> Any:
    """A history column (default None) and what it is (``HistoryRow``'s docstring)."""
    kinds = {"evaluation": evaluation, "measured": measured, "system": system}
    return dataclasses.field(default=None, metadata={k: True for k, on in kinds.items() if on})


@dataclass(frozen=True)
class HistoryRow:
    """One epoch (``epoch`` counts from 0), or the row ``epoch = "final"`` after the final gossip
    rounds. Metrics an epoch does not have (no evaluation that epoch) are None: left out of the
    JSON row, empty in ``history.csv``.

    A column says what it is in its field's metadata (``_column``), and the rest reads it from
    there: ``evaluation`` (the final row evaluates it after the final gossip rounds: the last
    point of its MLflow curve), ``measured`` (it measures the process, not the result: two runs
    of one config differ in it) and ``system`` (a host measurement: MLflow's system metrics)."""

    epoch: int | Literal["final"]
    lr: float | None = None
    train_loss: float | None = None
    acc_node_mean: float | None = _column(evaluation=True)
    acc_node_min: float | None = _column(evaluation=True)
    acc_node_max: float | None = _column(evaluation=True)
    acc_avg_model: float | None = _column(evaluation=True)
    consensus_distance: float | None = _column(evaluation=True)
    # The accuracy curve (train.curve_images): mean node accuracy on a fixed subset of the test
    # split, every epoch; the run's result is the full split's (acc_node_mean, final row)
    acc_subset_node_mean: float | None = None
    bytes_per_node: float | None = None  # cumulative, training and final rounds so far
    # wall time of the run when the row was written (across resumes)
    wall_s: float | None = _column(measured=True)
    # System metrics of the epoch (``lpdt.engine.sysmetrics``; the writing process; None in version 1):
    # % of the host's CPU capacity (all cores) used in the epoch
    cpu_share: float | None = _column(measured=True, system=True)
    # peak resident memory of the process so far, MiB
    peak_rss_mb: float | None = _column(measured=True, system=True)
    # OS threads of the process at the end of the epoch
    threads: int | None = _column(measured=True, system=True)
    # training images (all nodes) per second of training
    images_per_s: float | None = _column(measured=True, system=True)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in to_json(self).items() if v is not None}

    @classmethod
    def from_dict(cls, data: Any, source: str = "history row") -> HistoryRow:
        return _reader(source).build(cls, data)


HISTORY_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(HistoryRow))


def _columns(kind: str) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(HistoryRow) if f.metadata.get(kind))


# The columns that measure the process rather than the result: two runs of one config that
# compute the same numbers still differ in these.
MEASURED_FIELDS = _columns("measured")
SYSTEM_FIELDS = _columns("system")  # host measurements (MLflow: system/)
EVALUATION_FIELDS = _columns("evaluation")  # evaluated again in the final row
FINAL_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(FinalMetrics))


@dataclass(frozen=True)
class RunRecord:
    """The record of one complete run (``metrics.json``)."""

    run_id: str  # ``RunConfig.run_id()``: hash of the result-affecting config
    name: str | None  # the config's ``name`` label
    status: Status  # "diverged": training stopped on a non-finite loss or weights
    config: dict[str, Any]  # the resolved run config (``RunConfig.to_dict()``)
    dataset: DatasetRecord
    model: ModelRecord
    final: FinalMetrics | None  # None when the run diverged ({} in the JSON)
    communication: Communication
    time: Timing
    epochs_completed: int
    iters_per_epoch: int
    history: tuple[HistoryRow, ...]
    device: str  # the torch device the run used
    provenance: Provenance
    versions: Versions
    engine: Engine = "simulated"  # config ``engine`` that ran it
    system: SystemMetrics | None = None  # None: a version 1 record
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        if (self.status == "ok") != (self.final is not None):
            raise ValueError(
                f"run {self.run_id}: status {self.status!r} "
                + ("needs final metrics" if self.status == "ok" else "has final metrics")
            )
        # the config's seed pairs runs across conditions (lpdt.report.pairs, lpdt compare)
        seed = self.config.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ValueError(f"run {self.run_id}: config seed {seed!r} is not an integer")

    # -- JSON ----------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The ``metrics.json`` object (``schema_version`` first)."""
        out = to_json(self)
        out["final"] = out["final"] or {}
        out["history"] = [row.to_dict() for row in self.history]
        return {"schema_version": out.pop("schema_version"), **out}

    @classmethod
    def from_dict(cls, data: Any, source: str = METRICS_FILE) -> RunRecord:
        """Validate and build (``RecordError`` on another schema version, a missing or unknown
        field, or a value of the wrong type); ``source`` names the file in error messages."""
        if not isinstance(data, dict):
            raise RecordError(f"{source}: not a run record (a JSON object expected)")
        _check_version(data.get("schema_version", _UNVERSIONED), source)
        data = {**data, "schema_version": SCHEMA_VERSION}  # an upgradable version is read as this
        if data.get("final") == {}:
            data = {**data, "final": None}
        try:
            rec = _reader(source).build(cls, data)
        except RecordError:
            raise
        except ValueError as e:  # __post_init__'s checks name the run, not the file
            raise RecordError(f"{source}: {e}") from None
        # An accuracy the tables and claims would average. Checked where a record is read, not
        # where one is made: a distributed run's other ranks hold no average model's accuracy
        # (NaN), and only process 0 writes the record.
        for name in ACCURACIES if rec.final is not None else ():
            v = getattr(rec.final, name)
            if not (isinstance(v, int | float) and 0.0 <= v <= 100.0):
                raise RecordError(
                    f"{source}: run {rec.run_id}: final.{name} {v!r} is no accuracy (a number "
                    "from 0 to 100 %, as a finished run writes)"
                )
        return rec

    # -- files ---------------------------------------------------------------------------------
    def write(self, run_dir: str | Path) -> Path:
        """Write ``history.csv``, then ``metrics.json`` (both atomically; ``metrics.json`` last,
        since its presence marks the run complete). Returns the path of ``metrics.json``."""
        d = Path(run_dir)
        write_history(d, self.history)
        write_json_atomic(d / METRICS_FILE, self.to_dict())
        return d / METRICS_FILE

    # -- derived -------------------------------------------------------------------------------
    def row_times(self) -> list[dt.datetime]:
        """The wall-clock time (UTC) at which each history row was written.

        ``wall_s`` is the run's wall time across resumes, so a row's time is the start of the
        session that wrote it plus the row's ``wall_s`` minus the ``wall_s`` the session started
        from (that of the last row before it). Sessions start when their process does, a little
        before training, so these times are at most that much early; they never pass
        ``provenance.finished``. A row without ``wall_s`` (the epoch that diverged) gets the
        finish time.
        """
        p = self.provenance
        finished = parse_time(p.finished or p.started)
        sessions = [(0, parse_time(p.started))] + [
            (s.epoch, parse_time(s.started)) for s in p.resumed
        ]
        walls = {r.epoch: r.wall_s for r in self.history if isinstance(r.epoch, int)}
        times = []
        for i, row in enumerate(self.history):
            if row.wall_s is None:
                times.append(finished)
                continue
            pos = row.epoch if isinstance(row.epoch, int) else i  # "final" follows all epochs
            first_epoch, start = next((s for s in reversed(sessions) if s[0] <= pos), sessions[0])
            offset = walls.get(first_epoch - 1) or 0.0
            times.append(min(start + dt.timedelta(seconds=row.wall_s - offset), finished))
        return times


# ----------------------------------------------------------------------------------------------
# Files
# ----------------------------------------------------------------------------------------------


def history_csv(rows: Iterable[HistoryRow]) -> str:
    """The ``history.csv`` text of some rows."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=HISTORY_FIELDS)
    w.writeheader()
    w.writerows(row.to_dict() for row in rows)
    return buf.getvalue()


def write_history(run_dir: str | Path, rows: Iterable[HistoryRow | dict[str, Any]]) -> None:
    """(Re)write ``run_dir/history.csv`` atomically; rows may be given as their JSON dicts."""
    typed = [r if isinstance(r, HistoryRow) else HistoryRow.from_dict(r) for r in rows]
    write_text_atomic(Path(run_dir) / HISTORY_FILE, history_csv(typed))


def read(path: str | Path) -> RunRecord:
    """The record in ``path``: a run directory or its ``metrics.json``. Raises ``RecordError``
    (one line, naming the file) when it is missing, not JSON, or not a valid record of this
    schema version."""
    p = Path(path)
    if p.suffix != ".json":  # a run directory (existing or not)
        p = p / METRICS_FILE
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise RecordError(f"{p} does not exist; the run is not complete") from None
    except OSError as e:
        raise RecordError(f"{p}: cannot be read ({e.strerror or e})") from None
    except UnicodeDecodeError:
        raise RecordError(f"{p}: not text (UTF-8); a damaged record") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise RecordError(f"{p}: not valid JSON ({e})") from None
    return RunRecord.from_dict(data, str(p))


# ----------------------------------------------------------------------------------------------
# Validation: JSON values -> the dataclasses above
# ----------------------------------------------------------------------------------------------

_UNVERSIONED = object()  # a record without schema_version (lpdt before record versioning)


def _check_version(version: Any, source: str) -> None:
    readable = (*UPGRADABLE, SCHEMA_VERSION)
    if isinstance(version, int) and not isinstance(version, bool) and version in readable:
        return
    reads = f"this lpdt ({lpdt.__version__}) reads schema version {SCHEMA_VERSION}" + (
        f" (and {', '.join(map(str, UPGRADABLE))})" if UPGRADABLE else ""
    )
    if version is _UNVERSIONED:
        what = "a run record of an older format (no schema_version)"
    elif isinstance(version, int) and not isinstance(version, bool) and version < SCHEMA_VERSION:
        what = f"a run record of the older schema version {version}"
    elif isinstance(version, int) and not isinstance(version, bool):
        what = f"a run record of schema version {version}, newer than this lpdt knows"
    else:
        what = f"a run record of an unknown schema version {version!r}"
    raise RecordError(
        f"{source}: {what}; {reads}. Train the run again (lpdt train --force), "
        "or read it with the lpdt version that wrote it"
    )


def _reader(source: str) -> Reader:
    """How a record (or a part of one) is read: ``RecordError``s that start with ``source``."""
    return Reader(
        error=RecordError,
        source=source,
        root="the record",
        unknown=f"unknown field {{key!r}} (this lpdt's schema version {SCHEMA_VERSION} has no "
        "such field)",
    )


def parse_time(iso: str) -> dt.datetime:
    """An ISO 8601 time of the record as an aware datetime (UTC when it has no offset)."""
    t = dt.datetime.fromisoformat(iso)
    return t if t.tzinfo is not None else t.replace(tzinfo=dt.UTC)
