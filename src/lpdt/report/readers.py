"""Which of the paper's accuracy claims read which runs (the MLflow ``claims`` tag).

The claims select and pair their runs in code (``lpdt.report.claim_accuracy``); to name the claims that
read a run without writing those rules a second time, this asks the claims themselves: a claim
reads a run when its result (per-seed effects, number of pairs and cells) changes with the run's
accuracy. Each finished run's accuracy is moved by one point in turn and the claims that may
read it (those of its studies) are checked again: one ``accuracy_claims`` call per run, about
0.3 s on the 2-core VM. The report tests' tree of 66 runs of 3 seeds: 17.7 s, against 30.4 s
when every run was checked against every claim (2026-12-01, one after the other, the same
mapping).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from lpdt.report.claim_accuracy import accuracy_claims
from lpdt.report.definitions import CLAIMS

PROBE = 1.0  # points added to one run's accuracy


def _result(claim: dict[str, Any]) -> tuple:
    return claim.get("per_seed"), claim.get("pairs"), claim.get("cells")


def claims_by_run(cells: pd.DataFrame) -> dict[str, list[str]]:
    """{run id: ids of the accuracy claims that read it, sorted} for every run with an accuracy
    in ``cells`` (the frame of ``lpdt.report.aggregate.aggregate``: columns study, run_id, seed,
    the coordinates, acc); a run no claim reads maps to []. A claim that names its studies
    selects its runs from them alone (``Claim.studies``), so a run is probed only against the
    claims that may read it."""
    claims = [c for c in CLAIMS if c.family == "accuracy"]
    base = {cid: _result(c) for cid, c in accuracy_claims(cells, claims=claims).items()}
    studies = cells.groupby("run_id")["study"].agg(set)
    out: dict[str, list[str]] = {}
    for rid in cells.loc[cells["acc"].notna(), "run_id"].unique():
        may = [c for c in claims if not c.studies or studies[rid] & set(c.studies)]
        if not may:
            out[str(rid)] = []
            continue
        probe = cells.copy()
        rows = probe["run_id"] == rid
        probe.loc[rows, "acc"] = probe.loc[rows, "acc"] + PROBE
        got = accuracy_claims(probe, claims=may)
        out[str(rid)] = sorted(cid for cid, r in got.items() if _result(r) != base[cid])
    return out
