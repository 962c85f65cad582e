"""The paper's published numbers (``config/paper_results.csv``), long format."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from lpdt.io import read_csv
from lpdt.report.aggregate import KEYS, coordinate
from lpdt.report.artifacts import TABLE_NUMBERS

COLUMNS = [
    "table",
    *KEYS,
    "phase",
    "metric",
    "value",
    "note",
]


# What the rows of config/paper_results.csv may say (docs/report.md): the metrics and phases the
# report reads; a row of another table, metric or phase was dropped without a word.
METRICS = ("acc", "energy_efficiency", "energy_mj", "memory_efficiency", "memory_mib", "params_m")
PHASES = ("", "inference", "training")


def load_paper(path: str | Path) -> pd.DataFrame:
    """Read the CSV (``#`` lines are comments); coordinates canonicalised like the manifest's.
    A row the report would misread is a ``ValueError`` naming its line: a table the report has
    not, a metric or phase it does not know, a value or coordinate that is no number where one
    goes, the same cell twice (two rows of one table, coordinates, phase and metric)."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(
            f"paper results {p} not found (pass --paper config/paper_results.csv)"
        )
    df = read_csv(p, comment="#", dtype=str, keep_default_na=False)
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"{p}: missing columns {missing}; expected {COLUMNS}")
    # the file's line of each row: read_csv skips comment and blank lines, and the header
    text = p.read_text().splitlines()
    lines = [i + 1 for i, s in enumerate(text) if s.strip() and not s.lstrip().startswith("#")]
    where = [f"{p} line {n}" for n in lines[1:]]
    tables = [str(n) for n in TABLE_NUMBERS]
    for i, row in enumerate(df.itertuples(index=False)):
        for column, allowed in (("table", tables), ("metric", METRICS), ("phase", PHASES)):
            got = getattr(row, column)
            if got not in allowed:
                raise ValueError(
                    f"{where[i]}: {column} {got!r} is none of {', '.join(map(repr, allowed))}"
                )
        try:
            finite = math.isfinite(float(row.value))
        except ValueError:
            finite = False
        if not finite:
            raise ValueError(f"{where[i]}: value {row.value!r} is not a finite number")
    df["table"] = df["table"].astype(int)
    df["value"] = pd.to_numeric(df["value"])
    for k in KEYS:
        df[k] = pd.Series(
            [coordinate(k, v, f"{where[i]}: {k}") for i, v in enumerate(df[k])], index=df.index
        )
    df["qgm"] = [bool(v) if v is not None else False for v in df["qgm"]]
    cell = ["table", *KEYS, "phase", "metric"]
    twice = df[df.duplicated(cell, keep=False)]
    if len(twice):
        first, second = (where[i] for i in twice.index[:2])
        raise ValueError(
            f"{second}: the same cell as {first} (table, coordinates, phase and metric): one "
            "value per cell"
        )
    return df


def paper_accuracy(paper: pd.DataFrame, table: int) -> pd.DataFrame:
    """The accuracy cells of one table (metric ``acc``)."""
    return paper[(paper["table"] == table) & (paper["metric"] == "acc")].copy()
