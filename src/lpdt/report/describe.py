"""Setup descriptions generated from what ran: the words of figure titles, figure captions and
table captions that name a setup (model, graph, skew, batch, ...).

Nothing here is a literal about a result or a setup: every value is read from the run table
(``lpdt.report.aggregate``), the analysis JSONs (``lpdt partition`` / ``lpdt topology``) or the
cost model's CSVs and ``summary.json`` (``lpdt cost all``). A part that has no data says so.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from lpdt.io import read_csv
from lpdt.report.aggregate import BY_NAME, KEYS

# The order in which coordinates are named; `dataset` is handled by `dataset_text`.
SETUP_KEYS = [k for k in KEYS if k != "dataset"]


def _fmt(key: str, v: Any) -> str:
    """A coordinate value in prose: its table label (``Coordinate.label``), with words where
    prose needs them ("int8 messages", QGM "on"), and skews as written (0, 0.4)."""
    if key == "compression" and not isinstance(v, (int, float)):  # a message codec
        return f"{v} messages"
    if key == "skew":
        return f"{float(v):g}"
    if key == "qgm":
        return "on" if v else "off"
    return BY_NAME[key].label(v)


def _present(v: object) -> bool:
    return v is not None and not (isinstance(v, float) and math.isnan(v)) and v != ""


def values(runs: pd.DataFrame, key: str) -> list:
    """The distinct values of a coordinate among ``runs``, sorted (missing ones left out)."""
    if key not in runs:
        return []
    vals = {v for v in runs[key].tolist() if _present(v)}
    return sorted(vals, key=lambda v: (str(type(v)), v))


def _with_used(runs: pd.DataFrame, key: str, used_col: str, verb: str) -> str:
    """The paper's values of ``key`` and, where a record says another was used, that one:
    'cifar10 (trained on fashion_mnist)', 'resnet20 (trained as tiny_cnn)'."""
    if key not in runs or not len(runs):
        return ""
    parts = []
    for v in values(runs, key):
        used = values(runs[runs[key] == v], used_col)
        other = [u for u in used if u != v]
        parts.append(f"{v} ({verb} {', '.join(other)})" if other else str(v))
    return ", ".join(parts)


def dataset_text(runs: pd.DataFrame) -> str:
    """'cifar10 (trained on fashion_mnist)': the paper's dataset and, where it differs, the one the
    records say was used."""
    return _with_used(runs, "dataset", "dataset_used", "trained on")


def model_text(runs: pd.DataFrame) -> str:
    """'resnet20 (trained as tiny_cnn)': the paper's model and, where it differs, the one the
    records say was trained."""
    return _with_used(runs, "model", "model_used", "trained as")


def setup_text(runs: pd.DataFrame) -> str:
    """Every coordinate of ``runs`` with its values, e.g. 'dataset cifar10 (trained on
    fashion_mnist); model resnet20; topology directed_ring; nodes 8; compression 0 %, 99 %; ...'
    followed by the number of runs and of epochs trained."""
    if not len(runs):
        return "no finished runs at this scale"
    parts = []
    ds = dataset_text(runs)
    if ds:
        parts.append(f"dataset {ds}")
    for k in SETUP_KEYS:
        vs = values(runs, k)
        if k == "qgm" and vs == [False]:
            continue  # plain local momentum: nothing to name
        if k == "model" and vs:
            parts.append(f"model {model_text(runs)}")
        elif vs:
            parts.append(f"{k} {', '.join(_fmt(k, v) for v in vs)}")
    engines = values(runs, "engine")
    if engines and engines != ["simulated"]:  # the default engine goes unsaid
        parts.append(f"engine {', '.join(str(e) for e in engines)}")
    n = runs["run_id"].nunique() if "run_id" in runs else len(runs)
    tail = f"{n} run{'s' if n != 1 else ''}"
    epochs = values(runs, "epochs_completed")
    if epochs:
        lo, hi = int(min(epochs)), int(max(epochs))
        tail += f", {lo} epoch{'s' if hi != 1 else ''}" if lo == hi else f", {lo}-{hi} epochs"
    return "; ".join(parts) + f" ({tail})"


def fixed_text(runs: pd.DataFrame, keys: list[str]) -> str:
    """The coordinates among ``keys`` that have one value in ``runs``, compactly: 'resnet20,
    directed_ring, nodes 8, skew 0.8' (for figure titles)."""
    out = []
    for k in keys:
        if k == "dataset":
            ds = dataset_text(runs)
            if ds and len(values(runs, "dataset")) == 1:
                out.append(ds)
            continue
        vs = values(runs, k)
        if len(vs) == 1 and k == "model":
            out.append(model_text(runs))
        elif len(vs) == 1:
            out.append(
                _fmt(k, vs[0]) if k in ("topology", "algorithm") else f"{k} {_fmt(k, vs[0])}"
            )
    return ", ".join(out)


def runs_per_cell(runs: pd.DataFrame) -> pd.Series:
    """The number of distinct runs (seeds) of each cell (``KEYS``) of ``runs``."""
    keys = [k for k in KEYS if k in runs]
    return runs.drop_duplicates("run_id").groupby(keys, dropna=False)["run_id"].nunique()


def spread_text(runs: pd.DataFrame) -> str:
    """What an error bar means here, from the number of finished runs per cell (seeds)."""
    if not len(runs):
        return ""
    per_cell = runs_per_cell(runs)
    lo, hi = int(per_cell.min()), int(per_cell.max())
    if hi < 2:
        return "One run per point, so no error bars."
    n = f"{lo}-{hi}" if lo != hi else f"{hi}"
    return (
        f"Error bars: ±1 sample standard deviation over the {n} runs (seeds) of a point "
        "(n in the legend)."
    )


def illustrative_text(runs: pd.DataFrame, scale: str) -> str:
    """Below the paper scale, the cells of ``runs`` that ran one seed: they are drawn, on a short
    budget, and no claim reads them (the claims read cells with several seeds), so their captions
    say they are illustrative. "" at the paper scale (one seed per cell is its protocol) or when
    every cell has several seeds."""
    if scale == "paper" or not len(runs):
        return ""
    per_cell = runs_per_cell(runs)
    one = int((per_cell == 1).sum())
    if not one:
        return ""
    which = "Every cell" if one == len(per_cell) else f"{one} of its {len(per_cell)} cells"
    return (
        f"{which}: one seed on a short budget; illustrative, not at a plateau (no claim reads it)."
    )


# --- analyses and cost model ---------------------------------------------------------------------


def _read_json(path: Path) -> dict | None:
    """The JSON object in ``path``; None when it cannot be read or is not an object."""
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def partition_text(analysis: Path) -> str:
    files = sorted(Path(analysis).glob("partition*.json"))
    d = _read_json(files[0]) if files else None
    if not d or not d.get("skews") or not isinstance(d["skews"], dict):
        return f"no partition JSON in {analysis}"
    skews = sorted(d["skews"], key=float)
    first = d["skews"][skews[0]]
    samples = sum(sum(node) for node in first)
    classes = len(first[0]) if first else 0
    return (
        f"{d.get('dataset')} labels ({samples:,} training samples assigned, {classes} "
        f"classes), {d.get('nodes')} nodes, skew {', '.join(f'{float(s):g}' for s in skews)}, "
        f"partition seed {d.get('seed')}"
    )


def topology_text(analysis: Path) -> str:
    files = sorted(Path(analysis).glob("topology*.json"))
    graphs = [g for g in (_read_json(f) for f in files) if g]
    if not graphs:
        return f"no topology JSON in {analysis}"
    out = []
    for g in graphs:
        gap = g.get("spectral_gap")
        txt = f"{g.get('nodes')}-node {str(g.get('name', '')).replace('_', ' ')}"
        out.append(txt + (f" (spectral gap {gap:.3f})" if gap is not None else ""))
    return "; ".join(out)


def cost_setup(cost: Path, csv_name: str) -> dict[str, list]:
    """The model, norm, precision and batch values of one cost-model CSV ({} when missing)."""
    path = Path(cost) / csv_name
    if not path.exists():
        return {}
    c = read_csv(path)
    return {
        k: sorted({str(v) for v in c[k].dropna()})
        for k in ("model", "norm", "precision", "batch")
        if k in c
    }


def cost_setup_text(cost: Path, csv_name: str) -> str:
    s = cost_setup(cost, csv_name)
    if not s:
        return f"{csv_name} missing in {cost}"
    return "; ".join(f"{k} {', '.join(v)}" for k, v in s.items() if v)


# The setup sentences of the figures drawn from files (their entries' ``setup`` in
# lpdt.report.artifacts; a figure of runs gets its setup from the runs it plots).


def partition_setup(analysis: Path) -> str:
    return f"Partition of {partition_text(analysis)}."


def graphs_setup(analysis: Path) -> str:
    return f"Graphs: {topology_text(analysis)}."


def memory_setup(cost: Path) -> str:
    return f"Cost model: {cost_setup_text(cost, 'fig7_memory.csv')}."


def energy_text(cost: Path) -> str:
    """The energy per operation the cost model used (its summary.json)."""
    path = Path(cost) / "summary.json"
    d = _read_json(path)
    if d is None:  # a file that exists but cannot be read is not "missing"
        why = "cannot be read: damaged, or not a JSON object" if path.exists() else "missing"
        return f"energy per operation not recorded ({path} {why})"
    e = d.get("energy_table_pj")
    if not e:
        return f"energy per operation not recorded (none in {path})"
    src = f"{e['source']}: " if e.get("source") else ""
    return (
        f"Energy per operation ({src}fp32 add {e['fp32_add']:g}, mult {e['fp32_mult']:g}; "
        f"int8 add {e['int8_add']:g}, mult {e['int8_mult']:g} pJ)."
    )
