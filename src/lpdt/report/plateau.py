"""The plateau check: is each claim cell trained to a plateau? Read into the report's summary.

``benchmarks/calibration_curves.py`` trains one seed of each accuracy claim's cells for twice the
scale's epochs (milestones doubled) and writes ``curves_summary.csv``: per case, the run id of the
scale's own run config (``quick run``), its final accuracy at 1x and the 2x run's. A copy is kept
as ``config/plateau_check.csv``. The report matches that file to the runs by **run id** (the hash
of the resolved run config), so a check measured on other configurations never describes these
runs: after a change to the grid the summary says that no check matches, until the check is run
again.

``claims_at_2x`` goes one step further: it recomputes each accuracy claim's effect with
``lpdt.report.claims`` (the same code) on the checked runs alone, once with their own accuracies
and once with the 2x accuracies, so the report can say how far longer training moves each claim's
effect (one seed, no interval).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

# "Within about a point" of where twice the training takes a cell (the quick scale's target).
NEAR_POINTS = 1.0
COLUMNS = [
    "case",
    "quick run",
    "quick epochs",
    "acc at 1x (%)",
    "acc at 2x (%)",
    "gain of 2x (points)",
]


def load_check(path: Path | str | None) -> pd.DataFrame | None:
    """The check's rows, or None for ``path`` None or ``"none"`` (reporting without a check).

    Raises ``ValueError`` when the file is absent or is not a check summary."""
    if path is None or str(path) == "none":
        return None
    if not Path(path).is_file():
        raise ValueError(
            f"plateau check {path} not found (pass --plateau none to report without one)"
        )
    df = pd.read_csv(path, comment="#")
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(
            f"{path} is not a plateau check summary: no column(s) {missing} "
            "(benchmarks/calibration_curves.py writes curves_summary.csv)"
        )
    return df


def matching(check: pd.DataFrame | None, runs: pd.DataFrame) -> pd.DataFrame:
    """The check's rows whose configuration is one of ``runs``' (same run id)."""
    if check is None or not len(runs) or "run_id" not in runs:
        return pd.DataFrame(columns=COLUMNS)
    return check[check["quick run"].astype(str).isin(set(runs["run_id"].astype(str)))]


def claims_at_2x(check: pd.DataFrame | None, runs: pd.DataFrame) -> list[dict]:
    """Per accuracy claim with a pair among the checked runs: its effect on those runs at the
    scale's epochs (``at_1x``, the runs' own accuracies) and with the check's 2x accuracies
    (``at_2x``), the number of cells it pairs, and whether the effect keeps its side of the
    claim's threshold (``same_side``). ``runs``: the report's run table (columns study, KEYS,
    acc, seed, run_id); only the checked run ids enter, so each claim pairs the same cells at 1x
    and 2x."""
    from lpdt.report.aggregate import KEYS
    from lpdt.report.claims import BY_ID, accuracy_claims
    from lpdt.report.stats import holds

    m = matching(check, runs)
    if not len(m):
        return []
    at_2x = dict(zip(m["quick run"].astype(str), m["acc at 2x (%)"].astype(float), strict=True))
    cols = ["study", *KEYS, "acc"] + (["seed"] if "seed" in runs else [])
    one = runs[runs["run_id"].astype(str).isin(at_2x)]
    two = one.assign(acc=one["run_id"].astype(str).map(at_2x))
    a1, a2 = accuracy_claims(one[cols]), accuracy_claims(two[cols])
    out = []
    for cid, r1 in a1.items():
        r2, claim = a2[cid], BY_ID[cid]
        if r1.get("mean") is None or r2.get("mean") is None:
            continue
        thr = claim.threshold
        same = holds(r1["mean"], thr, claim.direction) == holds(r2["mean"], thr, claim.direction)
        out.append(
            {
                "id": cid,
                "statement": claim.statement,
                "effect": claim.effect,
                "rule": claim.rule,
                "cells": r1["cells"],
                "at_1x": r1["mean"],
                "at_2x": r2["mean"],
                "same_side": same,
            }
        )
    return out


def claims_2x_sentence(check: pd.DataFrame | None, runs: pd.DataFrame) -> str | None:
    """How far twice the epochs moves the claims' effects (one seed); None without a check."""
    moved = claims_at_2x(check, runs)
    if not moved:
        return None
    delta = pd.Series([c["at_2x"] - c["at_1x"] for c in moved])
    flips = [c for c in moved if not c["same_side"]]
    n = f"{len(moved)} accuracy claim" + ("s" if len(moved) != 1 else "")
    s = (
        f"On the checked runs (one seed), twice the epochs moves the effects of {n} by "
        f"{_range(delta)} points"
    )
    if flips:
        return s + (
            f"; {len(flips)} cross{'es' if len(flips) == 1 else ''} its threshold: "
            + "; ".join(
                f'"{c["statement"]}" {c["at_1x"]:.2f} to {c["at_2x"]:.2f} ({c["rule"]})'
                for c in flips
            )
            + "."
        )
    big = max(moved, key=lambda c: abs(c["at_2x"] - c["at_1x"]))
    return s + (
        f' (most: "{big["statement"]}", {big["at_1x"]:.2f} to {big["at_2x"]:.2f}); '
        "none crosses its threshold."
    )


def _range(values: pd.Series) -> str:
    lo, hi = float(values.min()), float(values.max())
    return f"{lo:+.1f}" if round(lo, 1) == round(hi, 1) else f"{lo:+.1f} to {hi:+.1f}"


def plateau_sentence(check: pd.DataFrame | None, runs: pd.DataFrame) -> str:
    """One summary sentence: how many checked cells are within ``NEAR_POINTS`` of their 2x
    accuracy, and how much the others gained; or that no check covers these runs."""
    m = matching(check, runs)
    if not len(m):
        why = (
            "no plateau check was given"
            if check is None
            else "the plateau check was measured on other configurations (no run id matches)"
        )
        return (
            f"Whether these runs are trained to a plateau is not measured here: {why} "
            "(benchmarks/calibration_curves.py trains each claim cell twice as long)."
        )
    gain = m["gain of 2x (points)"].astype(float)
    near, far = m[gain.abs() <= NEAR_POINTS], m[gain.abs() > NEAR_POINTS]
    epochs = sorted({int(e) for e in m["quick epochs"]})
    ep = "/".join(map(str, epochs))
    s = (
        f"A plateau check (one seed of each checked cell trained for twice its {ep} epochs) "
        f"covers {len(m)} of these runs' configurations: "
        f"{len(near)} end within {NEAR_POINTS:g} point of the longer run"
    )
    if len(near):
        s += f" ({_range(near['gain of 2x (points)'])} points)"
    if len(far):
        s += (
            f", {len(far)} move further ({_range(far['gain of 2x (points)'])} points; each "
            "cell under What ran), so verdicts resting on those cells may change with longer "
            "training"
        )
    return s + "."


def plateau_row(check: pd.DataFrame | None, runs: pd.DataFrame) -> str:
    """The "What ran" table's entry: the matched cases with their gain at 2x."""
    m = matching(check, runs)
    if not len(m):
        return "not measured for these configurations"
    return (
        "; ".join(f"{r['case']} {float(r['gain of 2x (points)']):+.1f}" for _, r in m.iterrows())
        + " points at 2x epochs (one seed)"
    )
