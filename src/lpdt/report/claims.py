"""The paper's findings, each defined precisely and checked on our results with its uncertainty.

Every accuracy claim is a paired difference ("effect") between two conditions that are otherwise
identical, a direction and a threshold (or a range). A pair is (cell coordinates except the
varied key, seed): the two runs of a pair share their seed (partition shuffle, initialisation,
data order). For each seed, the claim's effect is the mean over the claim's cells of the per-cell
paired difference; over the seeds we take the mean, the sample sd and a 95 % Student t-interval
(n = number of seeds), and the verdict is ``held`` / ``not held`` / ``inconclusive`` from where
the interval lies relative to the threshold (lpdt.report.stats), ``not enough data`` with fewer
than two seeds. Beside the verdict, each accuracy claim carries the precision of its design:
``n``, the interval's ``half_width`` and the minimum detectable effect at 80 % power
(``detectable``, a distance from the threshold; ``lpdt.report.stats.detectable``).

The definitions are data, ``src/lpdt/report/claims.yaml`` (``lpdt.report.definitions``:
``Claim``, ``load_claims``, ``study_claims``, ``definitions_hash``; re-exported here), and versioned
(``CLAIMS_VERSION``, the file's ``version``; docs/claims.md, "Claims: versions", keeps the
dated change log, and beside it the choices of the quick scale's cells made after a result). Not
every change was made before looking at a result: version 3 restricted ``choco_beats_ds`` to
compressed pairs after the first quick-scale results had been seen; version 4 (``lp_loss_compressed``
as a range, the paper's effect on our cells, the measured communication claim) was written after
the results of docs/quick-scale.md. Version 5 added the normalisation claims of Figure 1 (study
``fig1``; the paper gives curves, no number: its column says "figure only") before their
quick-scale results had been seen. Version 6 records the paper-cell matching by the nearest node
count (in use since 2026-11-25 without a version bump, counted as made after a result) and the
pairing audit (a run's whole identity, set-aside pairs named, the seeds shared by all cells),
which moves no number of a run tree without diverged, duplicated or partly seeded cells. Version 7
(issue 52) pairs the series claim like the others, counts a diverged run on the side whose loss
contradicts a claim as a loss (``pairs.loss_sides``), leaves out a cell that would take a claim
below its minimum of seeds (``lpdt.report.summary``), and records the fingerprint of the
definitions (``definitions_hash``; docs/claims.md gives each version's).

The paper's own effect is computed with the same code from ``config/paper_results.csv`` (one
number per cell, i.e. one "seed": a point, compared with the threshold as a point), over the
paper's cells that match the cells our effect used (``paper_effect``; ``paper_match``: the same
coordinates, the nearest node count); its effect over all of
its cells is kept beside it as context (``paper_effect_all_cells``).

The communication claim is measured (``lpdt.cost.wire``: the bytes of fp32 and 8-bit messages
on the distributed engine's wire; deterministic, so a range every row must satisfy). Energy and
memory are arithmetic from the paper's constants (the cost model): shown, with no verdict
(``ARITHMETIC``), and not counted among the claims that held.

This module puts our results beside the paper's (``check_claims``: one ``ClaimResult`` per
claim). The evaluation is by kind, in ``lpdt.report.claim_accuracy`` (paired and series claims)
and ``lpdt.report.claim_cost`` (cost and arithmetic claims); the text (``claims.md``, the
results' cells) and the writing of ``claims.json`` are ``lpdt.report.claim_text``'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from lpdt.report import artifacts, pairs
from lpdt.report.aggregate import KEYS, stand_in_names
from lpdt.report.claim_accuracy import accuracy_claims
from lpdt.report.claim_cost import (
    ARITHMETIC,
    ARITHMETIC_METHOD,
    COST_METHOD,
    cost_claims,
    paper_cost,
)
from lpdt.report.definitions import (
    BY_ID,
    CLAIMS,
    CLAIMS_FILE,
    CLAIMS_VERSION,
    EQUIV_MARGIN,
    FAMILY,
    KINDS,
    SCHEMA_FILE,
    Claim,
    Range,
    check_schema,
    definitions_hash,
    load_claims,
    study_claims,
    study_entries,
)
from lpdt.report.messages import sent_8bit, sent_text
from lpdt.report.stats import (
    HELD,
    INCONCLUSIVE,
    METHOD,
    NO_DATA,
    NOT_HELD,
    point_verdict,
)
from lpdt.typed import to_json

# The definitions (lpdt.report.definitions) and the verdicts (lpdt.report.stats), re-exported
# where the report's callers and docs name them.
__all__ = [
    "HELD",
    "NOT_HELD",
    "INCONCLUSIVE",
    "NO_DATA",
    "ARITHMETIC",
    "CLAIMS",
    "ClaimResult",
    "CLAIMS_VERSION",
    "check_claims",
    "claim_keys",
    "paper_cells",
    "paper_match",
    "definitions_hash",
    "sent_8bit",
    "sent_text",
    "BY_ID",
    "CLAIMS_FILE",
    "EQUIV_MARGIN",
    "FAMILY",
    "KINDS",
    "SCHEMA_FILE",
    "Claim",
    "Range",
    "check_schema",
    "load_claims",
    "study_claims",
    "study_entries",
]


def paper_cells(paper: pd.DataFrame) -> pd.DataFrame:
    """The paper's accuracy cells in the shape of our cells (study, KEYS, seed, acc)."""
    p = paper[(paper["metric"] == "acc") & paper["table"].isin(list(artifacts.TABLE_STUDY))].copy()
    p["study"] = p["table"].map(artifacts.TABLE_STUDY)
    p["acc"] = p["value"]
    p["seed"] = pairs.NO_SEED
    return p[["study", *KEYS, "seed", "acc"]]


PRECISION = ("half_width", "detectable")  # the design's precision (stats.half_width, detectable)
TOP_LEVEL = ("verdict", "mean", "sd", "ci", "n", *PRECISION)  # a record's own fields
# The fields of an accuracy claim's result only: a cost or arithmetic claim's JSON leaves them out.
ACCURACY_ONLY = ("paper_cells", "paper_effect_all_cells", "paper_cells_all")


@dataclass(frozen=True)
class ClaimResult:
    """One claim checked (``check_claims``): the claim, our effect and verdict, the paper's.
    ``to_dict()`` is its entry in ``claims.json`` (docs/claims.md: the fields in this
    order; ``ACCURACY_ONLY`` fields are None for, and absent from the JSON of, a cost or
    arithmetic claim)."""

    id: str
    version: int | None  # CLAIMS_VERSION for the paper's claims; None for declared ones
    statement: str
    definition: str
    kind: str  # accuracy | cost | arithmetic
    source: str  # "paper", or "study <name>"
    effect: str
    direction: str
    threshold: float | tuple[float, float] | None  # (lo, hi) for "within"; None: arithmetic
    rule: str
    verdict: str
    mean: float | None
    sd: float | None
    ci: tuple[float, float] | None  # None when n < 2 (and for cost / arithmetic claims)
    n: int
    half_width: float | None  # accuracy claims with n >= 2 only
    detectable: float | None
    interval_method: str
    paper_effect: float | None  # over the paper's cells that match ours
    paper_note: str | None  # shown where the paper prints no number (a figure), else None
    paper_verdict: str
    paper_cells: int | None  # (accuracy) the paper's cells that matched ours
    paper_effect_all_cells: float | None  # (accuracy) the paper's effect over all its cells
    paper_cells_all: int | None  # (accuracy) their number
    stand_in_data: bool
    numbers: Mapping[str, Any]  # details (summary.summarize's, or the cost rule's): cells, ...
    paper_numbers: Mapping[str, Any]  # the same details for the paper

    def __post_init__(self) -> None:
        accuracy = self.kind == "accuracy"
        if accuracy and (self.paper_cells is None or self.paper_cells_all is None):
            raise ValueError(f"claim {self.id}: an accuracy claim needs its paper cell counts")
        if not accuracy and any(getattr(self, k) is not None for k in ACCURACY_ONLY):
            raise ValueError(f"claim {self.id}: a {self.kind} claim has no paper cells")

    def to_dict(self) -> dict[str, Any]:
        """The ``claims.json`` entry: fields in order, pairs as lists, ``ACCURACY_ONLY`` fields
        only for an accuracy claim."""
        out = to_json(self)
        if self.kind != "accuracy":
            for k in ACCURACY_ONLY:
                del out[k]
        return out


def _cells(r: dict) -> set[tuple[str, ...]]:
    return {tuple(c) for c in r.get("cells_used", [])}


def claim_keys(claim: Claim) -> list[str]:
    """The coordinates that name a claim's cells (``_cell``), in order."""
    return pairs.pair_keys(str(claim.vary))


def paper_match(
    ours: set[tuple[str, ...]], theirs: set[tuple[str, ...]], keys: Sequence[str]
) -> set[tuple[str, ...]]:
    """The paper's cells that match ours: equal in every coordinate but the node count, and of
    the paper's node counts for those coordinates the nearest to ours (the quick scale runs the
    claims on a ring of 4 where the paper's Tables 3 and 4 use 8 and 16: its 8-node cells match;
    a 4-node cell of Tables 5 and 6 matches its own)."""
    if "nodes" not in keys:
        return ours & theirs
    i = list(keys).index("nodes")
    by_rest: dict[tuple[str, ...], list[tuple[str, ...]]] = {}
    for t in theirs:
        by_rest.setdefault(t[:i] + t[i + 1 :], []).append(t)
    out: set[tuple[str, ...]] = set()
    for o in ours:
        candidates = by_rest.get(o[:i] + o[i + 1 :], [])
        if not candidates:
            continue
        distance = {t: abs(float(t[i]) - float(o[i])) for t in candidates}
        nearest = min(distance.values())
        out |= {t for t, d in distance.items() if d == nearest}
    return out


def check_claims(
    df: pd.DataFrame, paper: pd.DataFrame, cost_dir: Path, declared: Sequence[Claim] = ()
) -> list[ClaimResult]:
    """One result per claim, the paper's then the ``declared`` ones (``study_claims``)
    (docs/claims.md; the fields: ``ClaimResult``)."""
    every = [*CLAIMS, *declared]
    # What pairing reads: the coordinates, the seed, and to tell runs apart and say why one did
    # not pair, their ids, statuses and configs (lpdt.report.pairs.pairing).
    cols = ["study", *KEYS, "acc"] + [k for k in ("seed", "run_id", "status", "config") if k in df]
    ours_acc = accuracy_claims(df[cols], claims=every)
    ours = ours_acc | cost_claims(cost_dir, every)
    sent = sent_8bit(df)
    if sent and "comm_4x" in ours:
        ours["comm_4x"]["sent_8bit"] = sent
    pc = paper_cells(paper)
    theirs_all = accuracy_claims(pc, claims=every)
    keys = {c.id: claim_keys(c) for c in every if c.family == "accuracy"}
    matched = {
        k: paper_match(_cells(r), _cells(theirs_all[k]), keys[k]) for k, r in ours_acc.items()
    }
    theirs = accuracy_claims(pc, restrict=matched, claims=every) | paper_cost(
        paper, cost_dir, every
    )
    stand_in = stand_in_names(df["stand_in"])
    out = []
    for c in every:
        r = ours.get(c.id, {"verdict": NO_DATA, "n": 0})
        t = theirs.get(c.id, {})
        pe = t.get("mean")
        accuracy = c.family == "accuracy"
        if accuracy:
            # an accuracy claim has a threshold (None only for arithmetic claims)
            pv = point_verdict(pe, c.limit, c.direction)
            method = METHOD
        else:
            pv = t.get("verdict", NO_DATA)
            method = COST_METHOD if c.kind == "cost" else ARITHMETIC_METHOD
        ci = r.get("ci")
        out.append(
            ClaimResult(
                id=c.id,
                version=CLAIMS_VERSION if c.source == "paper" else None,
                statement=c.statement,
                definition=c.definition,
                kind=c.family,
                source=c.source,
                effect=c.effect,
                direction=c.direction,
                threshold=c.threshold,
                rule=c.rule,
                verdict=r["verdict"],
                mean=r.get("mean"),
                sd=r.get("sd"),
                ci=None if ci is None else (ci[0], ci[1]),
                n=r.get("n", 0),
                half_width=r.get("half_width") if accuracy else None,
                detectable=r.get("detectable") if accuracy else None,
                interval_method=method,
                paper_effect=pe,
                paper_note=c.paper_note or None,
                paper_verdict=pv,
                paper_cells=t.get("cells", 0) if accuracy else None,
                paper_effect_all_cells=theirs_all[c.id].get("mean") if accuracy else None,
                paper_cells_all=theirs_all[c.id].get("cells", 0) if accuracy else None,
                stand_in_data=bool(stand_in) and accuracy,
                numbers={k: v for k, v in r.items() if k not in TOP_LEVEL},
                paper_numbers={
                    k: v for k, v in t.items() if k not in ("verdict", "sd", "ci", *PRECISION)
                },
            )
        )
    return out
