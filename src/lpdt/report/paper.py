"""The paper's published numbers (``config/paper_results.csv``), long format."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from lpdt.io import read_csv
from lpdt.report.aggregate import KEYS, norm_key

COLUMNS = [
    "table",
    *KEYS,
    "phase",
    "metric",
    "value",
    "note",
]


def load_paper(path: str | Path) -> pd.DataFrame:
    """Read the CSV (``#`` lines are comments); coordinates canonicalised like the manifest's."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(
            f"paper results {p} not found (pass --paper config/paper_results.csv)"
        )
    df = read_csv(p, comment="#", dtype=str, keep_default_na=False)
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"{p}: missing columns {missing}; expected {COLUMNS}")
    df["table"] = df["table"].astype(int)
    df["value"] = pd.to_numeric(df["value"], errors="coerce")
    for k in KEYS:
        df[k] = pd.Series([norm_key(k, v) for v in df[k]], index=df.index)
    df["qgm"] = [bool(v) if v is not None else False for v in df["qgm"]]
    return df


def paper_accuracy(paper: pd.DataFrame, table: int) -> pd.DataFrame:
    """The accuracy cells of one table (metric ``acc``)."""
    return paper[(paper["table"] == table) & (paper["metric"] == "acc")].copy()
