"""Collect the run records into one tidy table (one row per study x run).

The manifest says which runs each study expects; a run's ``metrics.json`` is its result. A run
listed but without a record is ``missing``; a record with ``status: diverged`` is ``diverged``.
Neither stops the report: every consumer reads the ``status`` column.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

# Coordinates that identify a cell of the paper's tables (manifest `coords`, paper_results.csv).
KEYS = ["dataset", "model", "norm", "topology", "nodes", "compression", "skew", "algorithm",
        "precision", "qgm"]  # fmt: skip
# Stand-in models used by the smaller scales for the paper's models (coords keep the paper's name
# except where a scale overrides the coordinate itself, e.g. quick's `model: minilm`).
MODEL_STAND_INS = {"minilm": "distilbert", "distilbert_tiny": "distilbert"}
FINAL = ["acc_node_mean", "acc_node_min", "acc_node_max", "acc_avg_model", "consensus_distance",
         "train_loss"]  # fmt: skip
METRIC = "acc_node_mean"  # the paper's number (reference §9: node-mean accuracy after final gossip)


def norm_key(col: str, v: object) -> object:
    """Canonical form of a coordinate value so that manifest and paper cells compare equal."""
    if v is None or (isinstance(v, float) and math.isnan(v)) or v == "":
        return None
    if col == "nodes" or col == "compression":
        c = float(v)
        return int(round(c * 100)) if col == "compression" and 0 < c < 1 else int(round(c))
    if col == "skew":
        return round(float(v), 2)
    if col == "qgm":
        return str(v).strip().lower() in ("true", "1", "yes")
    if col == "model" and str(v) in MODEL_STAND_INS:
        return MODEL_STAND_INS[str(v)]
    return str(v)


def _run_dir(entry: dict, manifest_path: Path) -> Path:
    """The run's directory: as written (relative to the working directory), else relative to the
    manifest's project root, else ``<manifest dir>/runs/<run_id>``."""
    d = Path(entry.get("dir") or "")
    root = manifest_path.resolve().parent.parent
    for cand in (d, root / d, manifest_path.parent / "runs" / str(entry.get("run_id", ""))):
        if str(cand) and (cand / "metrics.json").exists():
            return cand
    return d


def stand_in_label(metrics: dict, coords: dict) -> str:
    """'fashion_mnist standing in for cifar10' etc.; '' when the run used the paper's data/model."""
    parts = []
    ds = metrics.get("dataset") or {}
    name, paper_ds = ds.get("name"), coords.get("dataset")
    if ds.get("stand_in") or (name and paper_ds and name != paper_ds):
        target = ds.get("stand_in_for") or paper_ds or "the paper's dataset"
        parts.append(f"{name} standing in for {target}")
    model = (metrics.get("model") or {}).get("name")
    paper_model = norm_key("model", coords.get("model"))
    if model and paper_model and model != paper_model:
        parts.append(f"{model} standing in for {paper_model}")
    return "; ".join(parts)


def load_manifest(path: str | Path) -> dict:
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"manifest {p} not found (run the workflow, or pass --manifest)")
    try:
        return json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"manifest {p} is not valid JSON: {e}") from e


def aggregate(manifest_path: str | Path) -> tuple[pd.DataFrame, dict]:
    """(frame, manifest): one row per (study, run) with coordinates, final metrics and status.

    Columns: study, kind, block, run_id, dir, seed, status ("ok" | "diverged" | "missing"), the
    KEYS, `acc` (= final acc_node_mean, NaN unless ok), the FINAL metrics, gb_per_node,
    epochs_completed, time_s (the record's time.total_s), dataset_used, model_used, stand_in
    (label or ''), history (list of rows). `seed` is the manifest entry's seed, else the record's
    config seed, else None (one unnamed seed): runs are paired across conditions by it.
    """
    mpath = Path(manifest_path)
    manifest = load_manifest(mpath)
    rows = []
    cache: dict[str, dict | None] = {}
    for study, spec in (manifest.get("studies") or {}).items():
        for entry in spec.get("runs") or []:
            coords = entry.get("coords") or {}
            rid = str(entry.get("run_id", ""))
            if rid not in cache:
                f = _run_dir(entry, mpath) / "metrics.json"
                try:
                    cache[rid] = json.loads(f.read_text()) if f.exists() else None
                except (OSError, json.JSONDecodeError):
                    cache[rid] = None  # a half-written or corrupt record counts as missing
            m = cache[rid]
            row: dict = {"study": study, "kind": spec.get("kind", ""),
                         "block": entry.get("block", ""), "run_id": rid,
                         "dir": entry.get("dir", ""),
                         "seed": _seed(entry.get("seed", ((m or {}).get("config") or {}).get("seed")))}  # fmt: skip
            for k in KEYS:
                row[k] = norm_key(k, coords.get(k))
            row["qgm"] = bool(row["qgm"])  # absent = plain local momentum
            row["model_coord"] = coords.get("model")
            if m is None:
                row.update(status="missing", stand_in="", dataset_used=None, model_used=None,
                           epochs_completed=0, history=[], gb_per_node=float("nan"),
                           time_s=float("nan"))  # fmt: skip
                row.update({k: float("nan") for k in FINAL})
            else:
                final = m.get("final") or {}
                status = m.get("status", "ok")
                row.update({k: _num(final.get(k)) for k in FINAL})
                row.update(
                    status=status if status in ("ok", "diverged") else "diverged",
                    stand_in=stand_in_label(m, coords),
                    dataset_used=(m.get("dataset") or {}).get("name"),
                    model_used=(m.get("model") or {}).get("name"),
                    epochs_completed=m.get("epochs_completed", 0),
                    history=m.get("history") or [],
                    gb_per_node=_num((m.get("communication") or {}).get("gb_per_node")),
                    time_s=_num((m.get("time") or {}).get("total_s")),
                    versions=m.get("versions") or {},
                )
            row["acc"] = row[METRIC] if row["status"] == "ok" else float("nan")
            rows.append(row)
    cols = ["study", "kind", "block", "run_id", "dir", "seed", "status", *KEYS, "acc", *FINAL,
            "gb_per_node", "epochs_completed", "time_s", "dataset_used", "model_used", "model_coord",
            "stand_in", "history", "versions"]  # fmt: skip
    df = pd.DataFrame(rows, columns=cols)
    return df, manifest


def _seed(v: object) -> int | None:
    try:
        return int(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def _num(v: object) -> float:
    try:
        f = float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return float("nan")
    return f if math.isfinite(f) else float("nan")


def run_counts(df: pd.DataFrame) -> dict[str, int]:
    """Unique runs by status (a run shared by several studies counts once)."""
    u = df.drop_duplicates("run_id")
    return {s: int((u["status"] == s).sum()) for s in ("ok", "diverged", "missing")} | {
        "total": len(u)
    }


def seeds_used(df: pd.DataFrame) -> dict[str, list[int]]:
    """Per study, the seeds of its listed runs (sorted; a run without a seed is left out)."""
    out: dict[str, list[int]] = {}
    for study, g in df.groupby("study", sort=False):
        out[str(study)] = sorted({int(s) for s in g["seed"].dropna()})
    return out


def training_seconds(df: pd.DataFrame) -> float:
    """Total training wall time of the unique runs with a record (sum of `time.total_s`)."""
    u = df.drop_duplicates("run_id")
    return float(u["time_s"].fillna(0.0).sum()) if "time_s" in u else 0.0
