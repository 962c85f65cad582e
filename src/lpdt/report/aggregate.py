"""Collect the run records into one tidy table (one row per study x run).

The manifest says which runs each study expects; a run's record (``lpdt.record``, read and
validated by ``lpdt.record.read``) is its result. A run listed but without a record is
``missing``; a record with ``status: diverged`` is ``diverged``. Neither stops the report: every
consumer reads the ``status`` column. A record that cannot be read (another schema version, a
corrupt file) stops it with ``RecordError``: its one line names the file.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from lpdt import record
from lpdt.decentral.catalog import COMPRESSORS
from lpdt.grid import Manifest, ManifestError, ManifestRun
from lpdt.models import MODELS
from lpdt.record import RunRecord

FINAL = list(record.FINAL_FIELDS)  # acc_node_mean, ..., train_loss (lpdt.record.FinalMetrics)
METRIC = "acc_node_mean"  # the paper's number (reference §9: node-mean accuracy after final gossip)


def _compression(v: Any) -> object:
    try:
        c = float(v)
    except (TypeError, ValueError):  # a message codec: "int8", "90+int8" (compression_key)
        return str(v)
    return int(round(c * 100)) if 0 < c < 1 else int(round(c))


def _compression_label(v: Any) -> str:
    """A ratio in % ("99 %"), or a message codec as it is ("int8", "90+int8")."""
    try:
        return f"{int(float(v))} %"
    except ValueError:
        return str(v)


def _model(v: object) -> str:
    """The model coordinate's canonical form: the paper's model a run's model stands in for
    (``ModelSpec.stands_in_for``), so that the smaller scales' MiniLM runs fill DistilBERT's
    cells, whether the manifest names the trained model (quick's ``model: minilm``) or the
    paper's; else the name itself (a model not registered in this process too)."""
    spec = MODELS.find(str(v))
    return (spec.stands_in_for or str(v)) if spec else str(v)


@dataclass(frozen=True)
class Coordinate:
    """A coordinate of the runs: a column of the run table, a key of a cell of the paper's tables
    (manifest ``coords``, config/paper_results.csv), a key a claim or ``lpdt compare`` varies."""

    name: str
    # The run-config key that holds it (a run read without a manifest: lpdt compare); None:
    # derived (compression, from algorithm.compression: compression_key)
    path: str | None
    # Its canonical form, in which the manifest's, a config's and the paper's values compare equal
    canonical: Callable[[Any], object]
    # A canonical value as the report's tables print it ("99 %", "8"); prose adds its words
    # (lpdt.report.describe: "int8 messages", "QGM on")
    label: Callable[[Any], str] = str
    # What its values are, as an error about a value ``canonical`` refuses says it
    values: str = "a finite number"


def _whole(v: object) -> int:
    """A node count: 8, 8.0 or "8" is 8; 2.7 or inf is a ValueError (not silently 3)."""
    f = float(v)  # type: ignore[arg-type]
    if not f.is_integer():
        raise ValueError(f"{v!r} is not a whole number")
    return int(f)


# The one list of coordinates: the claims' schema (src/lpdt/report/claims.schema.yaml, which the
# studies' schema refers to) and the coordinates of config/studies.yaml agree with it
# (tests/report/test_coordinates.py).
COORDINATES: tuple[Coordinate, ...] = (
    Coordinate("dataset", "data.dataset", str),
    Coordinate("model", "model.name", _model),
    Coordinate("norm", "model.norm", str),
    Coordinate("topology", "topology.name", str),
    Coordinate("nodes", "topology.nodes", _whole, lambda v: f"{int(float(v))}", "a whole number"),
    Coordinate("compression", None, _compression, _compression_label),
    Coordinate("skew", "partition.skew", lambda v: round(float(v), 2)),
    Coordinate("algorithm", "algorithm.name", str),
    Coordinate("precision", "precision.mode", str),
    Coordinate("qgm", "optim.qgm", lambda v: str(v).strip().lower() in ("true", "1", "yes")),
)
BY_NAME = {c.name: c for c in COORDINATES}
KEYS = [c.name for c in COORDINATES]
CONFIG_PATHS = {c.name: c.path for c in COORDINATES if c.path is not None}


def norm_key(col: str, v: object) -> object:
    """Canonical form of a coordinate value so that manifest and paper cells compare equal (a
    column that is no coordinate: its string)."""
    if v is None or (isinstance(v, float) and math.isnan(v)) or v == "":
        return None
    return BY_NAME[col].canonical(v) if col in BY_NAME else str(v)


def coordinate(col: str, v: object, where: str) -> object:
    """``norm_key`` of a value read from a file: a value its coordinate cannot take (a list, a
    word for a number) is a ``ManifestError`` starting with ``where`` (the file and the value's
    place in it), not pandas' or ``float``'s text later."""
    if isinstance(v, list | dict):  # str() would make a cell of it
        raise ManifestError(f"{where}: {v!r} is a {type(v).__name__}, not one value")
    try:
        return norm_key(col, v)
    except (TypeError, ValueError) as e:
        values = BY_NAME[col].values if col in BY_NAME else "a value"
        raise ManifestError(f"{where}: {v!r} is not {values} ({e})") from None


def compression_key(name: str, ratio: float) -> object:
    """The compression coordinate of a run config's ``algorithm.compression``: the registered
    compressor's (``lpdt.decentral.catalog``): 0 without one, the top-k / random-k ratio in % (90,
    99), and for 8-bit messages the codec: ``"int8"`` (dense 8-bit codes) or ``"90+int8"`` (top-k
    90 % with 8-bit values); ``qsgd`` is ``"qsgd"``."""
    spec = COMPRESSORS.find(name)  # None: a plugin registered only where the run trained
    return name if spec is None else spec.coordinate_of(ratio)


def _run_dir(entry: ManifestRun, manifest_path: Path) -> Path:
    """The run's directory. ``<manifest dir>/runs/<run_id>`` where it exists, as the workflow
    writes them (``<results>/manifest.json``, ``<results>/runs/<run_id>``): a copied or renamed
    results folder is read itself, not ``./results``, which the entry's relative ``dir`` names.
    A manifest beside a ``runs/`` folder reads a run missing there as missing, not from another
    folder (unless its ``dir`` is absolute). Otherwise ``dir`` as written: absolute, or relative
    to the manifest's project root, else to the working directory."""
    own = manifest_path.parent / "runs" / entry.run_id
    d = Path(entry.dir)
    if own.is_dir() or (own.parent.is_dir() and not d.is_absolute()):
        return own
    root = manifest_path.resolve().parent.parent
    for cand in (root / d, d):
        if (cand / record.METRICS_FILE).exists():
            return cand
    return d


def stand_in_label(rec: RunRecord, coords: dict) -> str:
    """'fashion_mnist standing in for cifar10' etc.; '' when the run used the paper's data/model.
    ``coords`` are the run's manifest coordinates (the paper's dataset and model, where set)."""
    parts = []
    ds, paper_ds = rec.dataset, coords.get("dataset")
    if ds.stand_in or (paper_ds and ds.name != paper_ds):
        target = ds.stand_in_for or paper_ds or "the paper's dataset"
        parts.append(f"{ds.name} standing in for {target}")
    paper_model = norm_key("model", coords.get("model"))
    if paper_model and rec.model.name != paper_model:
        parts.append(f"{rec.model.name} standing in for {paper_model}")
    return "; ".join(parts)


def stand_in_names(labels: Iterable[object]) -> list[str]:
    """The distinct stand-ins named by ``stand_in`` labels (``stand_in_label``'s '; '-joined
    parts), sorted; blank and missing labels name none."""
    return sorted({p for s in labels if isinstance(s, str) for p in s.split("; ") if p})


def aggregate(manifest_path: str | Path) -> tuple[pd.DataFrame, Manifest]:
    """(frame, manifest): one row per (study, run) with coordinates, final metrics and status.

    Columns: study, kind, block, run_id, dir (the run directory read: ``_run_dir``), seed,
    status ("ok" | "diverged" | "missing"), the KEYS, `acc` (= final acc_node_mean, NaN unless
    ok), the FINAL metrics, gb_per_node,
    epochs_completed, time_s (the record's time.total_s), dataset_used, model_used, stand_in
    (label or ''), history (list of rows), versions, engine, git_commit and git_dirty (the
    record's provenance: which commit trained the run; None when missing), config (the record's
    run config; {} without a record: ``lpdt.report.pairs`` pairs on it). `seed` is the manifest
    entry's seed, else the record's config seed, else None (one unnamed seed): runs are paired
    across conditions by it.
    """
    mpath = Path(manifest_path)
    manifest = Manifest.read(mpath)
    rows = []
    cache: dict[str, RunRecord | None] = {}
    dirs: dict[str, Path] = {}
    for study, spec in manifest.studies.items():
        for i, entry in enumerate(spec.runs):
            coords = entry.coords
            rid = entry.run_id
            if rid not in cache:
                dirs[rid] = _run_dir(entry, mpath)
                f = dirs[rid] / record.METRICS_FILE
                cache[rid] = record.read(f) if f.exists() else None
                found = cache[rid]
                if found is not None and found.run_id != rid:  # another run's file, copied there
                    raise ManifestError(
                        f"{f}: the record of run {found.run_id}, where the manifest expects run "
                        f"{rid}; its numbers would stand in another run's cell"
                    )
            m = cache[rid]
            seed = entry.seed
            if seed is None and m is not None:  # no seed in the manifest: the record's
                seed = m.config["seed"]
            row: dict = {
                "study": study,
                "kind": spec.kind,
                "block": entry.block,
                "run_id": rid,
                "dir": str(dirs[rid]),
                "seed": _seed(seed),
            }
            for k in KEYS:
                at = f"manifest {mpath}: studies.{study}.runs[{i}].coords.{k}"
                row[k] = coordinate(k, coords.get(k), at)
            row["qgm"] = bool(row["qgm"])  # absent = plain local momentum
            row["model_coord"] = coords.get("model")
            if m is None:
                row.update(
                    status="missing",
                    stand_in="",
                    dataset_used=None,
                    num_classes=None,
                    model_used=None,
                    epochs_completed=0,
                    history=[],
                    gb_per_node=float("nan"),
                    time_s=float("nan"),
                    versions={},
                    engine="",
                    git_commit=None,
                    git_dirty=None,
                    config={},
                )
                row.update({k: float("nan") for k in FINAL})
            else:
                final = m.final  # None: diverged
                row.update({k: _num(getattr(final, k)) if final else math.nan for k in FINAL})
                row.update(
                    status=m.status,
                    stand_in=stand_in_label(m, coords),
                    dataset_used=m.dataset.name,
                    num_classes=m.dataset.num_classes,  # chance: 100 / num_classes %
                    model_used=m.model.name,
                    epochs_completed=m.epochs_completed,
                    history=[r.to_dict() for r in m.history],
                    gb_per_node=_num(m.communication.gb_per_node),
                    time_s=_num(m.time.total_s),
                    versions=dataclasses.asdict(m.versions),
                    engine=m.engine,
                    git_commit=m.provenance.git_commit,
                    git_dirty=m.provenance.git_dirty,
                    config=m.config,
                )
            row["acc"] = row[METRIC] if row["status"] == "ok" else float("nan")
            rows.append(row)
    cols = [
        "study",
        "kind",
        "block",
        "run_id",
        "dir",
        "seed",
        "status",
        *KEYS,
        "acc",
        *FINAL,
        "gb_per_node",
        "epochs_completed",
        "time_s",
        "dataset_used",
        "num_classes",
        "model_used",
        "model_coord",
        "stand_in",
        "history",
        "versions",
        "engine",
        "git_commit",
        "git_dirty",
        "config",
    ]
    df = pd.DataFrame(rows, columns=cols)
    return df, manifest


def _seed(v: Any) -> int | None:
    """``v`` as an int; None where ``int`` refuses it (any value may come, hence ``Any``)."""
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def _num(v: Any) -> float:
    """``v`` as a finite float; NaN where ``float`` refuses it or it is not finite."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return float("nan")
    return f if math.isfinite(f) else float("nan")


def shared_seed(runs: pd.DataFrame, keys: Sequence[str]) -> str | None:
    """The first group of two or more runs (by ``run_id``) with one seed and the same ``keys``,
    as "runs A, B share seed S at k=v, ...": a table or figure would average them as seeds
    (the claims leave such a cell out; ``lpdt compare`` refuses it). None: one run per seed."""
    keys = [k for k in keys if k in runs]
    seeded = runs[runs["seed"].notna()].drop_duplicates("run_id") if "seed" in runs else runs[:0]
    for key, g in seeded.groupby([*keys, "seed"], dropna=False, sort=False):
        if len(g) > 1:
            values = key if isinstance(key, tuple) else (key,)
            at = ", ".join(f"{k}={v}" for k, v in zip(keys, values[:-1], strict=True))
            return (
                f"runs {', '.join(map(str, g['run_id']))} share seed {int(g['seed'].iloc[0])}"
                f"{' at ' + at if at else ''}"
            )
    return None


def engine_counts(df: pd.DataFrame) -> dict[str, int]:
    """Unique runs with a record, by the engine that produced them (``simulated``,
    ``distributed``)."""
    if "engine" not in df:
        return {}
    u = df.drop_duplicates("run_id")
    u = u[u["engine"].astype(str) != ""]  # "": no record (a missing run)
    return {str(k): int(v) for k, v in u["engine"].value_counts().sort_index().items()}


def run_counts(df: pd.DataFrame) -> dict[str, int]:
    """Unique runs by status (a run shared by several studies counts once)."""
    u = df.drop_duplicates("run_id")
    return {s: int((u["status"] == s).sum()) for s in ("ok", "diverged", "missing")} | {
        "total": len(u)
    }


def training_seconds(df: pd.DataFrame) -> float:
    """Total training wall time of the unique runs with a record (sum of `time.total_s`)."""
    u = df.drop_duplicates("run_id")
    return float(u["time_s"].fillna(0.0).sum()) if "time_s" in u else 0.0
