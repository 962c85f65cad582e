"""The claims re-scored on the plateau check's pairs (``lpdt.report.plateau``).

``claims_at_2x`` recomputes each accuracy claim's effect with ``lpdt.report.claim_accuracy`` (the
same code) on the checked configurations alone, once with the check's 1x accuracies and once with
its 2x accuracies, so the report can say how far longer training moves each claim's effect (one
seed, no interval). Only pairs of one commit enter, and both sides of a pair come from the check:
the report's runs may be of another commit (a fresh report with the shipped check), and mixing
this report's 1x with the check's 2x would compare two commits. ``rescore`` says which commit the
pairs are of and compares the check's 1x accuracies with this report's runs of the same run ids:
another commit, or a 1x accuracy that differs, is flagged (``lpdt.report.plateau_text`` says it).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pandas as pd

from lpdt.report.plateau import (
    AGREE_POINTS,
    OK,
    UNKNOWN_COMMIT,
    commit_label,
    different_commits,
    matching,
    one_commit,
    source_label,
    statuses,
)


@dataclass(frozen=True)
class ClaimAt2x:
    """One accuracy claim re-scored on the plateau check's pairs (``claims_at_2x``)."""

    id: str  # the claim's id (``lpdt.report.claims``)
    statement: str  # the claim's words
    effect: str  # what its number is (units)
    rule: str  # the effect and its threshold (``Claim.rule``)
    cells: int  # the cells it pairs among the checked configurations
    at_1x: float  # its effect on the check's 1x accuracies (the scale's epochs)
    at_2x: float  # its effect on the check's 2x accuracies (the same commit's)
    same_side: bool  # whether the effect keeps its side of the claim's threshold


@dataclass(frozen=True)
class Rescoring:
    """What the claims are re-scored on (``rescore``): the check's pairs of one commit, and how
    their 1x runs compare with this report's runs of the same configurations (run ids)."""

    source: str  # which check (``source_label``)
    pairs_commits: tuple[str, ...]  # the commit(s) of the pairs used (each pair: one commit)
    runs_commits: tuple[str, ...]  # the commit(s) of this report's runs of those run ids
    # (those with a record; empty: none has one)
    same_commit: bool  # one clean commit, the same for the pairs and for this report's runs
    cells: int  # the checked configurations re-scored (pairs of status ok)
    compared: int  # of those, the ones with a final accuracy in this report
    max_abs_diff_1x: float | None  # largest |check's 1x - this report's 1x| (points)
    mean_diff_1x: float | None  # mean of check's 1x - this report's 1x (points)
    agree: bool  # some compared, and each within ``AGREE_POINTS`` of this report's 1x
    left_out: int  # checked configurations whose 1x and 2x runs are of different commits
    claims: tuple[ClaimAt2x, ...]  # the accuracy claims with a pair among them


def _labels(values: Iterable[Any]) -> tuple[str, ...]:
    """Sorted distinct commit labels ("" and NaN: not recorded)."""
    return tuple(sorted({"" if pd.isna(v) else str(v) for v in values}))


def _runs_commits(runs: pd.DataFrame) -> pd.Series:
    """This report's runs' commit labels (``commit_label``) by run id; a run table without the
    provenance columns (``lpdt.report.aggregate``'s git_commit, git_dirty): not recorded."""
    one = runs.drop_duplicates("run_id")
    if "git_commit" not in one:
        return pd.Series(UNKNOWN_COMMIT, index=one["run_id"].astype(str))
    dirty = one["git_dirty"] if "git_dirty" in one else pd.Series(None, index=one.index)
    labels = [
        commit_label(None if pd.isna(c) else str(c), bool(d) if d in (True, False) else None)
        for c, d in zip(one["git_commit"], dirty, strict=True)
    ]
    return pd.Series(labels, index=one["run_id"].astype(str))


def rescore(check: pd.DataFrame | None, runs: pd.DataFrame) -> Rescoring | None:
    """The claims re-scored on the check's pairs of one commit (status ok) among ``runs``'
    configurations, None without such a pair. ``runs``: the report's run table (columns study,
    KEYS, acc, seed, run_id; git_commit, git_dirty from ``lpdt.report.aggregate``). Each claim
    (``ClaimAt2x``) is computed by ``lpdt.report.claims`` with the runs' coordinates and seeds
    and, as accuracies, the check's 1x (``at_1x``) and then its 2x (``at_2x``): both sides of
    the comparison are of the check's commit, whatever commit trained this report's runs. The
    check's 1x accuracies are compared with this report's own (``agree``, the differences) and
    its commit with theirs (``same_commit``: a dirty tree is never the same commit)."""
    from lpdt.report.aggregate import KEYS
    from lpdt.report.claim_accuracy import accuracy_claims
    from lpdt.report.definitions import BY_ID
    from lpdt.report.stats import holds

    m = matching(check, runs)
    m = m[statuses(m) == OK]
    if check is None or not len(m):
        return None
    rid = m["quick run"].astype(str)
    at_1x = dict(zip(rid, m["acc at 1x (%)"].astype(float), strict=True))
    at_2x = dict(zip(rid, m["acc at 2x (%)"].astype(float), strict=True))
    cols = ["study", *KEYS, "acc"] + (["seed"] if "seed" in runs else [])
    checked = runs[runs["run_id"].astype(str).isin(at_2x)]
    one = checked.assign(acc=checked["run_id"].astype(str).map(at_1x))
    two = checked.assign(acc=checked["run_id"].astype(str).map(at_2x))
    a1, a2 = accuracy_claims(one[cols]), accuracy_claims(two[cols])
    claims: list[ClaimAt2x] = []
    for cid, r1 in a1.items():
        r2, claim = a2[cid], BY_ID[cid]
        if r1.get("mean") is None or r2.get("mean") is None:
            continue
        thr = claim.limit  # an accuracy claim: a threshold (only arithmetic claims have none)
        same = holds(r1["mean"], thr, claim.direction) == holds(r2["mean"], thr, claim.direction)
        claims.append(
            ClaimAt2x(
                id=cid,
                statement=claim.statement,
                effect=claim.effect,
                rule=claim.rule,
                cells=int(r1["cells"]),
                at_1x=float(r1["mean"]),
                at_2x=float(r2["mean"]),
                same_side=same,
            )
        )
    u = checked.drop_duplicates("run_id")
    this_1x = pd.Series(pd.to_numeric(u["acc"]).to_numpy(), index=u["run_id"].astype(str))
    check_1x = pd.Series(at_1x)
    diff = (check_1x - this_1x.reindex(check_1x.index)).dropna()  # NaN: not ok here
    pairs_commits = _labels(m.get("1x commit", [""]))
    recorded = u[u["status"] != "missing"] if "status" in u else u  # a missing run: no commit
    runs_commits = _labels(_runs_commits(recorded).reindex(recorded["run_id"].astype(str)))
    largest = float(diff.abs().max()) if len(diff) else None
    return Rescoring(
        source=source_label(check),
        pairs_commits=pairs_commits,
        runs_commits=runs_commits,
        same_commit=(
            len(pairs_commits) == 1
            and pairs_commits == runs_commits
            and one_commit(pairs_commits[0])
        ),
        cells=len(m),
        compared=len(diff),
        max_abs_diff_1x=None if largest is None else round(largest, 2),
        mean_diff_1x=round(float(diff.mean()), 2) if len(diff) else None,
        agree=largest is not None and largest <= AGREE_POINTS,
        left_out=different_commits(check, runs),
        claims=tuple(claims),
    )


def claims_at_2x(check: pd.DataFrame | None, runs: pd.DataFrame) -> list[ClaimAt2x]:
    """Per accuracy claim with a pair among the check's same-commit pairs (a ``ClaimAt2x``):
    its effect on the check's 1x and 2x accuracies (``rescore``)."""
    r = rescore(check, runs)
    return list(r.claims) if r is not None else []
