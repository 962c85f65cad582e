"""The plateau check: is each claim cell trained to a plateau? Read into the report's summary.

``benchmarks/calibration_curves.py`` trains one seed of each accuracy claim's cells for twice the
scale's epochs (milestones doubled) and writes ``curves_summary.csv``: per case, the run id of the
scale's own run config (``quick run``), its final accuracy at 1x and the 2x run's. A copy is kept
as ``config/plateau_check.csv``. The report matches that file to the runs by **run id** (the hash
of the resolved run config), so a check measured on other configurations never describes these
runs: after a change to the grid the summary says that no check matches, until the check is run
again.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

# "Within about a point" of where twice the training takes a cell (the quick scale's target).
NEAR_POINTS = 1.0
COLUMNS = ["case", "quick run", "quick epochs", "acc at 1x (%)", "acc at 2x (%)",
           "gain of 2x (points)"]  # fmt: skip


def load_check(path: Path | str | None) -> pd.DataFrame | None:
    """The check's rows, or None for ``path`` None or ``"none"`` (reporting without a check).

    Raises ``ValueError`` when the file is absent or is not a check summary."""
    if path is None or str(path) == "none":
        return None
    if not Path(path).is_file():
        raise ValueError(f"plateau check {path} not found (pass --plateau none to report without one)")
    df = pd.read_csv(path, comment="#")
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"{path} is not a plateau check summary: no column(s) {missing} "
                         "(benchmarks/calibration_curves.py writes curves_summary.csv)")  # fmt: skip
    return df


def matching(check: pd.DataFrame | None, runs: pd.DataFrame) -> pd.DataFrame:
    """The check's rows whose configuration is one of ``runs``' (same run id)."""
    if check is None or not len(runs) or "run_id" not in runs:
        return pd.DataFrame(columns=COLUMNS)
    return check[check["quick run"].astype(str).isin(set(runs["run_id"].astype(str)))]


def _range(values: pd.Series) -> str:
    lo, hi = float(values.min()), float(values.max())
    return f"{lo:+.1f}" if round(lo, 1) == round(hi, 1) else f"{lo:+.1f} to {hi:+.1f}"


def plateau_sentence(check: pd.DataFrame | None, runs: pd.DataFrame) -> str:
    """One summary sentence: how many checked cells are within ``NEAR_POINTS`` of their 2x
    accuracy, and how much the others gained; or that no check covers these runs."""
    m = matching(check, runs)
    if not len(m):
        why = ("no plateau check was given" if check is None
               else "the plateau check was measured on other configurations (no run id matches)")  # fmt: skip
        return (f"Whether these runs are trained to a plateau is not measured here: {why} "
                "(benchmarks/calibration_curves.py trains each claim cell twice as long).")
    gain = m["gain of 2x (points)"].astype(float)
    near, far = m[gain.abs() <= NEAR_POINTS], m[gain.abs() > NEAR_POINTS]
    epochs = sorted({int(e) for e in m["quick epochs"]})
    ep = "/".join(map(str, epochs))
    s = (f"A plateau check (one seed of each checked cell trained for twice its {ep} epochs) "
         f"covers {len(m)} of these runs' configurations: "
         f"{len(near)} end within {NEAR_POINTS:g} point of the longer run")  # fmt: skip
    if len(near):
        s += f" ({_range(near['gain of 2x (points)'])} points)"
    if len(far):
        s += (f", {len(far)} move further ({_range(far['gain of 2x (points)'])} points: "
              f"{', '.join(map(str, far['case']))}), so verdicts resting on those cells may change "
              "with longer training")  # fmt: skip
    return s + "."


def plateau_row(check: pd.DataFrame | None, runs: pd.DataFrame) -> str:
    """The "What ran" table's entry: the matched cases with their gain at 2x."""
    m = matching(check, runs)
    if not len(m):
        return "not measured for these configurations"
    return "; ".join(f"{r['case']} {float(r['gain of 2x (points)']):+.1f}"
                     for _, r in m.iterrows()) + " points at 2x epochs (one seed)"  # fmt: skip
