"""The paper's published Table 10 and Table 3 "Data" numbers, kept exactly as printed.

They live in two small CSV files beside this module (``paper_table10.csv``,
``paper_table3_data.csv``); values stay strings so that "agrees to the printed digits" can be
checked against the number of decimals the paper prints. The project-wide record of the paper's
numbers is ``config/paper_results.csv``: when it exists and holds all of Table 10, ``table10()``
reads it from there (a test checks that both files agree), so there is one source of truth in a
checkout and a working fallback in an installed package. Table 3's "Data" column is only here.
"""

from __future__ import annotations

import csv
from pathlib import Path

HERE = Path(__file__).parent
TABLE10_CSV = HERE / "paper_table10.csv"
TABLE3_CSV = HERE / "paper_table3_data.csv"


def read_rows(path: Path) -> list[dict[str, str]]:
    """The rows of a CSV file of the paper's numbers (``#`` lines and blank lines skipped),
    values as strings: a packaged table (``TABLE10_CSV``, ``TABLE3_CSV``) or
    ``config/paper_results.csv``."""
    with path.open(newline="") as f:
        lines = [line for line in f if line.strip() and not line.startswith("#")]
    return list(csv.DictReader(lines))


TABLE10_COLUMNS = (
    "memory_fp32",
    "memory_int8",
    "memory_efficiency",
    "energy_fp32",
    "energy_int8",
    "energy_efficiency",
)


def config_results_path() -> Path | None:
    """``config/paper_results.csv`` of the working directory or of this checkout, if any."""
    for root in (Path.cwd(), HERE.parents[2]):
        path = root / "config" / "paper_results.csv"
        if path.is_file():
            return path
    return None


def table10_from_config(path: Path) -> list[dict[str, str]] | None:
    """Table 10 rows from ``config/paper_results.csv`` (long format: one metric per row), or
    ``None`` if that file does not hold all 12 rows x 6 values."""
    rows: dict[tuple[str, str, str], dict[str, str]] = {}
    for r in read_rows(path):
        if r.get("table") != "10":
            continue
        metric, prec = r.get("metric", ""), r.get("precision", "")
        col = {"memory_mib": "memory", "energy_mj": "energy"}.get(metric)
        col = f"{col}_{prec}" if col else metric
        if col not in TABLE10_COLUMNS:
            continue
        key = (r["model"], r["norm"], r["phase"])
        rows.setdefault(key, {"model": key[0], "norm": key[1], "phase": key[2]})[col] = r["value"]
    complete = [r for r in rows.values() if all(c in r for c in TABLE10_COLUMNS)]
    return complete if len(complete) == len(rows) == 12 else None


def table10_source() -> Path:
    """The file ``table10()`` reads."""
    path = config_results_path()
    if path is not None and table10_from_config(path) is not None:
        return path
    return TABLE10_CSV


def table10() -> list[dict[str, str]]:
    """Rows ``model, norm, phase, memory_fp32, memory_int8, memory_efficiency, energy_fp32,
    energy_int8, energy_efficiency`` (strings), from ``table10_source()``."""
    path = table10_source()
    if path != TABLE10_CSV:
        rows = table10_from_config(path)
        if rows is not None:
            return rows
    return read_rows(TABLE10_CSV)


def table10_lookup() -> dict[tuple[str, str, str], dict[str, str]]:
    """Table 10 keyed by ``(model, norm, phase)``."""
    return {(r["model"], r["norm"], r["phase"]): r for r in table10()}


def table3_data() -> list[dict[str, str]]:
    """Rows ``model, norm, topology, nodes, compression, epochs, train_size, batch,
    data_gb_fp32, data_gb_int8`` (strings as printed)."""
    return read_rows(TABLE3_CSV)


def decimals(printed: str) -> int:
    """Number of decimals the paper printed (``"42.85"`` -> 2, ``"4"`` -> 0)."""
    return len(printed.split(".", 1)[1]) if "." in printed else 0


def as_printed(value: float, printed: str) -> str:
    """``value`` formatted with as many decimals as ``printed``."""
    return f"{value:.{decimals(printed)}f}"


def agrees_to_printed(value: float, printed: str) -> bool:
    """Whether ``value`` rounds to exactly the paper's printed digits."""
    return as_printed(value, printed) == f"{float(printed):.{decimals(printed)}f}"
