"""Which of the paper's accuracy claims read which runs (the MLflow ``claims`` tag).

The claims select and pair their runs in code (``lpdt.report.claim_accuracy``); to name the claims that
read a run without writing those rules a second time, this asks the claims themselves: a claim
reads a run when its result (per-seed effects, number of pairs and cells) changes with the run's
accuracy. Each finished run's accuracy is moved by one point in turn and the claims are checked
again: one ``accuracy_claims`` call per run, about 0.3 s each on the 2-core VM (the report tests'
tree: 20 runs in 6.1 s, 60 runs of 3 seeds in 22 s, 2026-11-30; "about a second per hundred
runs" was written here before).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from lpdt.report.claim_accuracy import accuracy_claims

PROBE = 1.0  # points added to one run's accuracy


def _result(claim: dict[str, Any]) -> tuple:
    return claim.get("per_seed"), claim.get("pairs"), claim.get("cells")


def claims_by_run(cells: pd.DataFrame) -> dict[str, list[str]]:
    """{run id: ids of the accuracy claims that read it, sorted} for every run with an accuracy
    in ``cells`` (the frame of ``lpdt.report.aggregate.aggregate``: columns study, run_id, seed,
    the coordinates, acc); a run no claim reads maps to []."""
    base = {cid: _result(c) for cid, c in accuracy_claims(cells).items()}
    out: dict[str, list[str]] = {}
    for rid in cells.loc[cells["acc"].notna(), "run_id"].unique():
        probe = cells.copy()
        rows = probe["run_id"] == rid
        probe.loc[rows, "acc"] = probe.loc[rows, "acc"] + PROBE
        got = accuracy_claims(probe)
        out[str(rid)] = sorted(cid for cid, r in base.items() if _result(got[cid]) != r)
    return out
