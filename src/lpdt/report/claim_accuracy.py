"""The accuracy claims evaluated, one evaluator per kind: a ``paired`` claim's pairs
(``lpdt.report.pairs.pairing``: runs identical but for ``vary``) and a ``series`` claim's (each
series' lowest value of ``vary`` against its highest), summarised over seeds by
``lpdt.report.summary`` (``accuracy_claims``). ``lpdt.report.claims`` puts ours beside the
paper's; the rule behind each number is its docstring.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from lpdt.report import pairs, summary
from lpdt.report.definitions import CLAIMS, Claim


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
