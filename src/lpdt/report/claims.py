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
(``CLAIMS_VERSION``, the file's ``version``; docs/report.md, "Claims: versions", keeps the
dated change log, and beside it the choices of the quick scale's cells made after a result). Not
every change was made before looking at a result: version 3 restricted ``choco_beats_ds`` to
compressed pairs after the first quick-scale results had been seen; version 4 (``lp_loss_compressed``
as a range, the paper's effect on our cells, the measured communication claim) was written after
the results of docs/workflow.md. Version 5 added the normalisation claims of Figure 1 (study
``fig1``; the paper gives curves, no number: its column says "figure only") before their
quick-scale results had been seen. Version 6 records the paper-cell matching by the nearest node
count (in use since 2026-11-25 without a version bump, counted as made after a result) and the
pairing audit (a run's whole identity, set-aside pairs named, the seeds shared by all cells),
which moves no number of a run tree without diverged, duplicated or partly seeded cells. Version 7
(issue 52) pairs the series claim like the others, counts a diverged run on the side whose loss
contradicts a claim as a loss (``pairs.loss_sides``), leaves out a cell that would take a claim
below its minimum of seeds (``lpdt.report.summary``), and records the fingerprint of the
definitions (``definitions_hash``; docs/report.md gives each version's).

The paper's own effect is computed with the same code from ``config/paper_results.csv`` (one
number per cell, i.e. one "seed": a point, compared with the threshold as a point), over the
paper's cells that match the cells our effect used (``paper_effect``; ``paper_match``: the same
coordinates, the nearest node count); its effect over all of
its cells is kept beside it as context (``paper_effect_all_cells``).

The communication claim is measured (``lpdt.cost.wire``: the bytes of fp32 and 8-bit messages
on the distributed engine's wire; deterministic, so a range every row must satisfy). Energy and
memory are arithmetic from the paper's constants (the cost model): shown, with no verdict
(``ARITHMETIC``), and not counted among the claims that held.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from lpdt.report import artifacts, pairs, summary
from lpdt.report.aggregate import KEYS, stand_in_names
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
    check_schema,
    definitions_hash,
    load_claims,
    study_claims,
    study_entries,
)
from lpdt.report.formatting import fixed, rounded, span
from lpdt.report.messages import sent_8bit, sent_text
from lpdt.report.stats import (
    HELD,
    INCONCLUSIVE,
    METHOD,
    NO_DATA,
    NOT_HELD,
    VERDICTS,
    point_verdict,
)
from lpdt.typed import to_json

__all__ = [
    "HELD",
    "NOT_HELD",
    "INCONCLUSIVE",
    "NO_DATA",
    "ARITHMETIC",
    "CLAIMS",
    "ClaimResult",
    "CLAIMS_VERSION",
    "accuracy_claims",
    "cost_claims",
    "check_claims",
    "write_claims",
    "effect_text",
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
    "check_schema",
    "load_claims",
    "study_claims",
    "study_entries",
]

ARITHMETIC = "arithmetic, no verdict"  # energy / memory: the paper's constants, not tested
COST_METHOD = (
    "none: measured message bytes (lpdt.cost.wire, deterministic); every row must lie in the range"
)
ARITHMETIC_METHOD = "none: arithmetic from the paper's constants (cost model); no verdict"


def summarize(p: pd.DataFrame, claim: Claim, set_aside: pd.DataFrame | None = None) -> dict:
    """The claim's record from paired differences (columns ``_cell``, ``seed``, ``diff``) and
    the pairs set aside (``lpdt.report.pairs.Pairing.set_aside``): ``lpdt.report.summary``."""
    return summary.summarize(p, claim.threshold, claim.direction, set_aside=set_aside)


def _paired(cells: pd.DataFrame, claim: Claim) -> pairs.Pairing:
    """A paired claim: ``lpdt.report.pairs.pairing``, a diverged run on a side whose loss
    contradicts the claim counted as a loss (``pairs.loss_sides``)."""
    # vary is set for a paired claim (the schema); the type says str | None for the other kinds
    return pairs.pairing(
        cells,
        claim.vary,  # type: ignore[arg-type]
        claim.a,
        claim.b,
        claim.studies or None,
        claim.where,
        lost=pairs.loss_sides(claim.direction),
    )


def _series(cells: pd.DataFrame, claim: Claim) -> pairs.Pairing:
    """A series claim: the runs of the claim's studies meeting ``where``, in series (runs of one
    cell: the same coordinates but ``vary``); per series whose highest ``vary`` among its listed
    runs, whatever their status, meets the condition ``b``, the pairs of ``vary`` = ``a``
    against that highest value, by ``pairs.pairing`` (the norm and config values compared, a
    duplicate named, a diverged run on the side whose loss contradicts the claim counted as a
    loss, every other run that does not pair set aside with its reason). So a diverged or
    missing run at the highest value is named, and never makes the next value the highest."""
    vary = str(claim.vary)
    (top_ok,) = pairs.conditions({vary: claim.b})
    c = pairs.select(cells, claim.studies or None, claim.where)
    keys = pairs.pair_keys(vary)
    start = pairs.parse_value(vary, claim.a)
    series = [pairs.cell_key(keys, r) for r in c[keys].itertuples(index=False)]
    values = [pairs.parse_value(vary, v) for v in c[vary]]
    seen: dict[tuple[str, ...], set[Any]] = {}
    for key, v in zip(series, values, strict=True):
        if v is not None:
            seen.setdefault(key, set()).add(v)
    top_of = {}
    for key, vs in seen.items():
        top = max(vs)
        if top != start and bool(top_ok.mask(pd.DataFrame({vary: [top]})).iloc[0]):
            top_of[key] = top
    found = [
        pairs.pairing(
            c[[top_of.get(key) == top for key in series]],
            vary,
            start,
            top,
            lost=pairs.loss_sides(claim.direction),
        )
        for top in sorted(set(top_of.values()))
    ]
    return pairs.Pairing(
        _concat([f.pairs for f in found], [*keys, "seed", "_a", "_b", "_norm", "_lost", "diff"]),
        _concat([f.set_aside for f in found], pairs.SET_ASIDE_COLUMNS),
        keys,
    )


def _concat(frames: Sequence[pd.DataFrame], columns: Sequence[str]) -> pd.DataFrame:
    """The non-empty ``frames`` one after another; an empty frame of ``columns`` (and
    ``_cell``) without one."""
    full = [f for f in frames if len(f)]
    if not full:
        return pd.DataFrame(columns=list(dict.fromkeys([*columns, "_cell"])))
    return pd.concat(full, ignore_index=True)


PAIRINGS = {"paired": _paired, "series": _series}  # an accuracy claim's evaluator, by kind


def claim_pairs(cells: pd.DataFrame, claim: Claim) -> pairs.Pairing:
    """The claim's paired differences and what was set aside, by the evaluator of its kind."""
    return PAIRINGS[claim.kind](cells, claim)


def accuracy_claims(
    cells: pd.DataFrame,
    restrict: Mapping[str, set[tuple[str, ...]]] | None = None,
    claims: Sequence[Claim] = CLAIMS,
) -> dict[str, dict]:
    """The accuracy ``claims`` (default: the paper's) on a frame with columns study, KEYS, acc
    (NaN = no usable result) and optionally seed (absent or None: one unnamed seed).
    ``restrict``: per claim id, the cells (``cells_used`` of another result, as tuples) to which
    its pairs are limited (a claim not named there keeps none): the paper's effect over the cells
    ours used."""
    out: dict[str, dict] = {}
    for c in claims:
        if c.family != "accuracy":
            continue
        pr = claim_pairs(cells, c)
        p, aside = pr.pairs, pr.set_aside
        if restrict is not None:
            keep = restrict.get(c.id, set())
            p, aside = p[p["_cell"].isin(keep)], aside[aside["_cell"].isin(keep)]
        out[c.id] = summarize(p, c, aside)
    return out


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
    lo, hi = claim.threshold  # type: ignore[misc]  # a cost claim's range [lo, hi] (the schema)
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


def cost_claims(cost_dir: Path, claims: Sequence[Claim] = CLAIMS) -> dict[str, dict]:
    """The cost claims measured (``wire_bytes.csv``: the wire ratio) and the arithmetic ones
    (their column of ``table10.csv``), each by the evaluator of its kind."""
    out = {}
    wire, t10 = cost_dir / "wire_bytes.csv", cost_dir / "table10.csv"
    wire_rows = pd.read_csv(wire) if wire.exists() else None  # each file read once
    t10_rows = pd.read_csv(t10) if t10.exists() else None
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
    d = pd.read_csv(wire) if wire.exists() else None  # read once
    t10 = paper[paper["table"] == 10]
    for c in claims:
        if c.kind == "cost" and d is not None:
            if "paper_ratio" in d.columns:
                out[c.id] = _comm(d, pd.to_numeric(d["paper_ratio"], errors="coerce"), c)
        elif c.kind == "arithmetic" and len(t10):
            rows = _rows(t10[t10["metric"] == c.column], c)
            out[c.id] = _arithmetic([float(x) for x in rows["value"]])
    return out


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
    ``to_dict()`` is its entry in ``claims.json`` (docs/report.md, "Claims": the fields in this
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
    (docs/report.md, "Claims"; the fields: ``ClaimResult``)."""
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
            pv = point_verdict(pe, c.threshold, c.direction)  # type: ignore[arg-type]
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


def effect_text(c: ClaimResult) -> str:
    """'0.50 [0.12, 0.88] (n=3)'; a cost or arithmetic claim: '3.99 (range 3.90-4.10, 6 rows)';
    '-' without data."""
    if c.mean is None:
        return "-"
    nums = c.numbers
    if "dense_ratio" in nums or "top-k_ratio" in nums:  # comm_4x: the measured ratios themselves
        return "; ".join(
            f"{fmt} {span(nums[f'{fmt}_ratio'])}x (implied "
            f"{'/'.join(f'{x:g}' for x in nums[f'{fmt}_implied'])})"
            for fmt in ("dense", "top-k")
            if f"{fmt}_ratio" in nums
        )
    if c.kind in ("cost", "arithmetic"):
        rows = f"{c.n} row{'s' if c.n != 1 else ''}"
        return f"{fixed(c.mean)} (range {fixed(nums.get('min'))}-{fixed(nums.get('max'))}, {rows})"
    seeds = nums.get("seeds_of", c.n)
    n = f"n={c.n}" + (f" of {seeds}" if seeds > c.n else "")
    if c.ci is not None:
        lo, hi = c.ci
        return f"{fixed(c.mean)} [{fixed(lo)}, {fixed(hi)}] ({n})"
    return f"{fixed(c.mean)} ({n}, no interval)"


def set_aside_text(c: ClaimResult) -> str:
    """What pairing counted as a loss and left out of an accuracy claim
    (``lpdt.report.summary.summarize``): '1 diverged run counted as a loss; 2 pairs set aside
    (missing, not shared); 1 cell left out (one seed)'; '' when nothing was."""
    nums = c.numbers
    parts = []
    lost = nums.get("counted_as_loss", [])
    if lost:
        parts.append(f"{len(lost)} diverged run{'s' if len(lost) != 1 else ''} counted as a loss")
    aside = nums.get("set_aside", [])
    if aside:
        whys = ", ".join(sorted({d["why"] for d in aside}))
        parts.append(f"{len(aside)} pair{'s' if len(aside) != 1 else ''} set aside ({whys})")
    left = nums.get("cells_left_out", [])
    if left:
        whys = ", ".join(sorted({d["why"].split(" (")[0].split(":")[0] for d in left}))
        parts.append(f"{len(left)} cell{'s' if len(left) != 1 else ''} left out ({whys})")
    return "; ".join(parts)


def precision_text(c: ClaimResult) -> str:
    """'±0.52 / 0.84': the interval's half-width and the minimum detectable effect (points from
    the threshold; the seeds, n, are in ``effect_text``); '-' where absent (n < 2, a cost or
    arithmetic claim)."""
    hw, det = c.half_width, c.detectable
    if c.kind != "accuracy" or hw is None or det is None:
        return "-"
    return f"±{hw:.2f} / {det:.2f}"


def paper_effect_text(c: ClaimResult) -> str:
    """The paper's effect ('0.13'), its note where it prints no number ('figure only ...'),
    else '-'."""
    if c.paper_effect is not None:
        return fixed(c.paper_effect)
    return c.paper_note or "-"


def paper_claims(claims: Sequence[ClaimResult]) -> list[ClaimResult]:
    """The results of the paper's claims."""
    return [c for c in claims if c.source == "paper"]


def declared_claims(claims: Sequence[ClaimResult]) -> list[ClaimResult]:
    """The results of the claims declared in the studies."""
    return [c for c in claims if c.source != "paper"]


def _md_table(claims: Sequence[ClaimResult]) -> list[str]:
    lines = [
        "| claim | rule | paper's effect | ours: mean [95 % CI] (n seeds) | ± half-width / "
        "detectable (80 % power) | verdict | definition |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in claims:
        stand = " (stand-in data)" if c.stand_in_data else ""
        lines.append(
            f"| {c.statement} | {c.rule} | {paper_effect_text(c)} | "
            f"{effect_text(c)}{_aside_note(c)} | {precision_text(c)} | **{c.verdict}**{stand} | "
            f"{c.definition} |"
        )
    return lines


def _aside_note(c: ClaimResult) -> str:
    t = set_aside_text(c)
    keys = ("counted_as_loss", "set_aside", "cells_left_out")
    named = ", ".join(f"`{k}`" for k in keys if c.numbers.get(k))
    return f"; {t} (claims.json: {named})" if t else ""


def claims_md(claims: Sequence[ClaimResult]) -> str:
    lines = _md_table(paper_claims(claims))
    sent = [sent_text(c.numbers["sent_8bit"]) for c in claims if c.numbers.get("sent_8bit")]
    lines += ["", *(f"Communication, {t}." for t in sent)] if sent else []
    declared = declared_claims(claims)
    if declared:
        lines += [
            "",
            "Claims declared in the studies (config/studies.yaml, `claims:`):",
            "",
            *_md_table(declared),
        ]
    return "\n".join(lines) + "\n"


def verdict_counts(claims: Sequence[ClaimResult], kind: str | None = None) -> dict[str, int]:
    sel = [c for c in claims if kind is None or c.kind == kind]
    return {v: sum(c.verdict == v for c in sel) for v in VERDICTS}


def write_claims(
    claims: Sequence[ClaimResult],
    path: Path,
    plateau_rescoring: Mapping[str, Any] | None = None,
    definitions: str | None = None,
) -> list[Path]:
    """``claims.json``: every claim; ``counts`` are the verdicts of the paper's accuracy claims
    (an interval against a threshold), ``cost_counts`` those of its cost claims (measured,
    deterministic: ``comm_4x`` fails only if per-tensor range overhead exceeds 12.5 %), and
    ``declared_counts`` (present when a study declares claims) those of the declared ones;
    ``definitions_hash``: the fingerprint of the definitions checked (``definitions_hash`` of
    the manifest's study claims, ``definitions``; default: claims.yaml's alone);
    ``plateau_rescoring``: the claims re-scored at 2x epochs on the plateau check's pairs
    (``lpdt.report.plateau.rescoring_json``: which commit's pairs, whether the check's 1x
    accuracies are these runs'), null without one."""
    from lpdt.io import write_json_atomic, write_text_atomic

    doc = {
        "version": CLAIMS_VERSION,
        "definitions_hash": definitions or definitions_hash(),
        "claims": [c.to_dict() for c in claims],
        "counts": verdict_counts(paper_claims(claims), "accuracy"),
        "cost_counts": verdict_counts(paper_claims(claims), "cost"),
        "interval_method": METHOD,
    }
    if declared_claims(claims):
        doc["declared_counts"] = verdict_counts(declared_claims(claims))
    doc["plateau_rescoring"] = dict(plateau_rescoring) if plateau_rescoring is not None else None
    write_json_atomic(path, doc)
    md = path.with_suffix(".md")
    write_text_atomic(md, claims_md(claims))
    return [path, md]
