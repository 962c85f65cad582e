"""The cost and arithmetic claims evaluated, one evaluator per kind: a ``cost`` claim is measured
(``wire_bytes.csv`` of ``lpdt cost all``: the fp32 / 8-bit message ratio, deterministic, so a
range every row must satisfy), an ``arithmetic`` claim is a column of the cost model's Table 10
shown with no verdict (``ARITHMETIC``). ``cost_claims`` gives ours, ``paper_cost`` the same rules
on the paper's printed numbers; ``lpdt.report.claims`` puts them side by side.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from lpdt.io import read_csv
from lpdt.report.definitions import CLAIMS, Claim
from lpdt.report.formatting import rounded
from lpdt.report.stats import HELD, NO_DATA, NOT_HELD

ARITHMETIC = "arithmetic, no verdict"  # energy / memory: the paper's constants, not tested
COST_METHOD = (
    "none: measured message bytes (lpdt.cost.wire, deterministic); every row must lie in the range"
)
ARITHMETIC_METHOD = "none: arithmetic from the paper's constants (cost model); no verdict"


def _range_rule(values: list[float], lo: float, hi: float) -> dict:
    v = [x for x in values if isinstance(x, float) and math.isfinite(x)]
    if not v:
        return {"verdict": NO_DATA, "mean": None, "sd": None, "ci": None, "n": 0}
    ok = all(lo <= x <= hi for x in v)
    return {
        "verdict": HELD if ok else NOT_HELD,
        "mean": rounded(sum(v) / len(v)),
        "sd": None,
        "ci": None,
        "n": len(v),
        "min": rounded(min(v)),
        "max": rounded(max(v)),
    }


def _arithmetic(values: list[float]) -> dict:
    """The numbers, shown with no verdict."""
    r = _range_rule(values, -math.inf, math.inf)
    return r | ({"verdict": ARITHMETIC} if r["n"] else {})


def _missing(path: Path) -> dict:
    return {
        "verdict": NO_DATA,
        "mean": None,
        "n": 0,
        "why": f"{path} not found (run `lpdt cost all --out {path.parent}`)",
    }


def _comm(d: pd.DataFrame, ratio: pd.Series, claim: Claim) -> dict:
    """A cost claim (comm_4x) on wire rows ``d`` with fp32 / 8-bit ratios ``ratio`` (ours or the
    paper's): every ratio over the one its format implies in the claim's range."""
    rel = [float(x) for x in ratio / d["implied_ratio"]]
    lo, hi = claim.bounds  # a cost claim's range [lo, hi] (the schema)
    out = _range_rule(rel, lo, hi)
    for fmt in ("dense", "top-k"):
        sel = [float(x) for x in ratio[d["format"] == fmt]]
        if sel:
            implied = sorted({round(float(x), 4) for x in d[d["format"] == fmt]["implied_ratio"]})
            out[f"{fmt}_ratio"] = [rounded(min(sel)), rounded(max(sel))]
            out[f"{fmt}_implied"] = implied
    return out


def _rows(d: pd.DataFrame, claim: Claim) -> pd.DataFrame:
    """The rows of a table meeting an arithmetic claim's ``rows`` ("resnet*": a prefix)."""
    keep = pd.Series(True, index=d.index)
    for col, want in claim.rows.items():
        values = d[col].astype(str)
        keep &= values.str.startswith(want[:-1]) if want.endswith("*") else values == want
    return d[keep]


# The columns of lpdt cost's wire_bytes.csv the cost claims read
WIRE_COLUMNS = ("format", "bytes_fp32", "bytes_int8", "implied_ratio")


def cost_claims(cost_dir: Path, claims: Sequence[Claim] = CLAIMS) -> dict[str, dict]:
    """The cost claims measured (``wire_bytes.csv``: the wire ratio) and the arithmetic ones
    (their column of ``table10.csv``), each by the evaluator of its kind."""
    out = {}
    wire, t10 = cost_dir / "wire_bytes.csv", cost_dir / "table10.csv"
    wire_rows = read_csv(wire, WIRE_COLUMNS) if wire.exists() else None  # each file read once
    t10_rows = read_csv(t10) if t10.exists() else None
    for c in claims:
        if c.kind == "cost":
            d = wire_rows
            out[c.id] = (
                _missing(wire) if d is None else _comm(d, d["bytes_fp32"] / d["bytes_int8"], c)
            )
        elif c.kind == "arithmetic":
            if t10_rows is None:
                out[c.id] = _missing(t10)
                continue
            rows = _rows(t10_rows, c)
            out[c.id] = _arithmetic([float(x) for x in rows[str(c.column)]])
    return out


def paper_cost(
    paper: pd.DataFrame, cost_dir: Path, claims: Sequence[Claim] = CLAIMS
) -> dict[str, dict]:
    """The cost claims on the paper's own printed numbers: its Table 3 fp32 / 8-bit GB against
    the ratio its claim implies for each row's message format (same rule); its Table 10 (the
    claim's column, as the paper's metric) as arithmetic."""
    out: dict[str, dict] = {}
    wire = cost_dir / "wire_bytes.csv"
    d = read_csv(wire, WIRE_COLUMNS) if wire.exists() else None  # read once
    t10 = paper[paper["table"] == 10]
    for c in claims:
        if c.kind == "cost" and d is not None:
            if "paper_ratio" in d.columns:
                out[c.id] = _comm(d, pd.to_numeric(d["paper_ratio"], errors="coerce"), c)
        elif c.kind == "arithmetic" and len(t10):
            rows = _rows(t10[t10["metric"] == c.column], c)
            out[c.id] = _arithmetic([float(x) for x in rows["value"]])
    return out
