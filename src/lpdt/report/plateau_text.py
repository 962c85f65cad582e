"""The plateau check in the report's words: the summary's sentence (``plateau_sentence``), the
"What ran" row (``plateau_row``), each checked cell's gain (``plateau_gains``), how far twice the
epochs moves the claims (``claims_2x_sentence``), and the re-scoring's text and its entry in
``claims.json`` (``rescoring_text``, ``rescoring_json``), from ``lpdt.report.plateau`` (the check)
and ``lpdt.report.plateau_rescore`` (the claims re-scored).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from lpdt.report.plateau import (
    DIFFERENT,
    DIVERGED,
    MISSING,
    NEAR_POINTS,
    UNKNOWN_COMMIT,
    different_commits,
    matching,
    of_runs,
    short_commit,
    source_label,
    statuses,
)
from lpdt.report.plateau_rescore import Rescoring, rescore


def _commits_words(labels: Sequence[str]) -> str:
    """'commit 75ae5fb', 'commits 75ae5fb, 1a2b3c4', 'commit not recorded'."""
    known = [short_commit(c) for c in labels if c and c != UNKNOWN_COMMIT]
    if not known:
        return "commit not recorded"
    unknown = " and runs of no recorded commit" if len(known) < len(labels) else ""
    return f"commit{'s' if len(known) > 1 else ''} {', '.join(known)}{unknown}"


def agreement_sentence(r: Rescoring) -> str:
    """Whether the check's pairs are of this report's runs' commit, and how its 1x accuracies
    compare with theirs (a sentence)."""
    if not r.runs_commits:
        return "None of these configurations has a run record here to compare with the check's 1x."
    other = _commits_words(r.runs_commits)
    if r.same_commit:
        s = "The check's pairs are of these runs' commit"
    elif not any(c and c != UNKNOWN_COMMIT for c in r.pairs_commits):
        s = f"The check's pairs have no recorded commit (these runs: {other})"
    else:  # a dirty tree at the same HEAD included
        s = f"The check's pairs are of another commit than these runs ({other})"
    if not r.compared:
        return s + "; none of these runs has a final accuracy to compare with the check's 1x."
    partial = f" ({r.compared} of {r.cells} compared)" if r.compared < r.cells else ""
    if r.agree:
        return s + f", and its 1x accuracies equal theirs{partial}."
    return s + (
        f", and its 1x accuracies differ from theirs by up to {r.max_abs_diff_1x:.2f} points "
        f"(mean of the check's minus these runs': {r.mean_diff_1x:+.2f}){partial}."
    )


def rescoring_text(r: Rescoring) -> str:
    """Which commit's pairs the re-scoring used and whether the check's 1x accuracies are this
    report's (two sentences: claims.json's ``text``, the 2x table's caption)."""
    pairs = f"the check's own 1x and 2x runs ({_commits_words(r.pairs_commits)})"
    return f"Re-scored on {pairs}. {agreement_sentence(r)}"


def rescoring_json(check: pd.DataFrame | None, runs: pd.DataFrame) -> dict[str, Any] | None:
    """The re-scoring for ``claims.json`` (``plateau_rescoring``): ``Rescoring``'s fields (the
    claims as ``ClaimAt2x`` objects) and ``text`` (``rescoring_text``); None without one."""
    from lpdt.typed import to_json

    r = rescore(check, runs)
    if r is None:
        return None
    return {**to_json(r), "text": rescoring_text(r)}


def claims_2x_sentence(check: pd.DataFrame | None, runs: pd.DataFrame) -> str | None:
    """How far twice the epochs moves the claims' effects (one seed), on which commit's pairs,
    and whether the check's 1x accuracies are these runs'; None without a check."""
    r = rescore(check, runs)
    other = different_commits(check, runs)
    left_out = (
        f"{other} checked cell{'s' if other != 1 else ''} whose 1x and 2x runs come from "
        "different commits left out of this re-scoring"
    )
    if r is None or not r.claims:
        return f"The claims are not re-scored at 2x: {left_out}." if other else None
    moved = list(r.claims)
    delta = pd.Series([c.at_2x - c.at_1x for c in moved])
    flips = [c for c in moved if not c.same_side]
    n = f"{len(moved)} accuracy claim" + ("s" if len(moved) != 1 else "")
    s = (
        f"On the check's own 1x and 2x runs ({_commits_words(r.pairs_commits)}; one seed), "
        f"twice the epochs moves the effects of {n} by "
        f"{_range(delta)} points"
    )
    if flips:
        s += (
            f"; {len(flips)} cross{'es its' if len(flips) == 1 else ' their'} threshold: "
            + "; ".join(
                f'"{c.statement}" {_points(c.at_1x)} to {_points(c.at_2x)} ({c.rule})'
                for c in flips
            )
        )
    else:
        big = max(moved, key=lambda c: abs(c.at_2x - c.at_1x))
        s += (
            f' (most: "{big.statement}", {_points(big.at_1x)} to {_points(big.at_2x)}); '
            "none crosses its threshold"
        )
    return s + (f" ({left_out}). " if other else ". ") + agreement_sentence(r)


def _points(x: float) -> str:
    """An effect to 2 decimals, without a negative zero ("-0.00")."""
    return f"{round(x, 2) + 0.0:.2f}"


def _range(values: pd.Series) -> str:
    lo, hi = float(values.min()), float(values.max())
    return f"{lo:+.1f}" if round(lo, 1) == round(hi, 1) else f"{lo:+.1f} to {hi:+.1f}"


def plateau_sentence(check: pd.DataFrame | None, runs: pd.DataFrame) -> str:
    """One summary sentence: which check (file, commit), how many checked cells are within
    ``NEAR_POINTS`` of their 2x accuracy, how much the others gained, and which pairs it
    dropped (missing, diverged) or compares across commits; or that no check covers these runs."""
    m = matching(check, runs)
    st = statuses(of_runs(check, runs))
    dropped = {s: int((st == s).sum()) for s in (MISSING, DIVERGED) if (st == s).any()}
    drop = (
        "; "
        + " and ".join(f"{n} {s}" for s, n in dropped.items())
        + " pair(s) dropped (snakemake plateau_check)"
        if dropped
        else ""
    )
    if not len(m):
        why = (
            "no plateau check was given"
            if check is None
            else f"{source_label(check)} was measured on other configurations (no run id "
            f"matches){drop}"
        )
        return (
            f"Whether these runs are trained to a plateau is not measured here: {why} "
            "(snakemake plateau_check trains each claim cell twice as long)."
        )
    gain = m["gain of 2x (points)"].astype(float)
    near, far = m[gain.abs() <= NEAR_POINTS], m[gain.abs() > NEAR_POINTS]
    epochs = sorted({int(e) for e in m["quick epochs"]})
    ep = "/".join(map(str, epochs))
    s = (
        f"A plateau check ({source_label(check)}; one seed of each checked cell trained for "
        f"twice its {ep} epochs) covers {len(m)} of these runs' configurations: "
        f"{len(near)} end within {NEAR_POINTS:g} point of the longer run"
    )
    if len(near):
        s += f" ({_range(near['gain of 2x (points)'])} points)"
    if len(far):
        s += (
            f", {len(far)} move further ({_range(far['gain of 2x (points)'])} points; each "
            "cell: Plateau check), so verdicts resting on those cells may change with longer "
            "training"
        )
    other = different_commits(check, runs)
    if other:
        s += f"; {other} of them compare a 1x and a 2x run of different commits"
    return s + drop + "."


def plateau_gains(check: pd.DataFrame | None, runs: pd.DataFrame) -> str:
    """Each matched case with its gain at 2x (the claims check's section prints it)."""
    m = matching(check, runs)
    if not len(m):
        return "not measured for these configurations"
    return (
        "; ".join(
            f"{r['case']} {float(r['gain of 2x (points)']):+.1f}"
            + (" (different commits)" if s == DIFFERENT else "")
            for (_, r), s in zip(m.iterrows(), statuses(m), strict=True)
        )
        + " points at 2x epochs (one seed)"
    )


def plateau_row(check: pd.DataFrame | None, runs: pd.DataFrame) -> str:
    """The "What ran" table's entry on the summary page: how many cells were checked (each
    cell's gain is in the claims check's section, ``plateau_gains``: a page-long list does not
    fit the summary page)."""
    m = matching(check, runs)
    if not len(m):
        return "not measured for these configurations"
    return (
        f"{len(m)} cells, their first seed trained twice as long; each cell's gain: "
        "'Plateau check' after the claims check"
    )
