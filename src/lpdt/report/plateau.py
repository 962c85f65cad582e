"""The plateau check: is each claim cell trained to a plateau? Read into the report's summary.

``snakemake plateau_check`` (workflow/rules/plateau.smk; not part of the default target) trains,
for every cell that an accuracy claim reads (``checked_cells``: the cells of a study block with
several seeds), its first seed once more for **twice** its epochs (``doubled``: milestones
doubled; nothing else changes, so the 2x run has the 1x run's execution keys), and
``write_summary`` writes ``results/plateau_check.csv``: per case, the run id of the scale's own
run (``quick run``), its final accuracy at 1x and the 2x run's, the git commit of each run (from
its ``metrics.json`` provenance; ``<commit>-dirty`` for a run trained from a tree with
uncommitted changes) and a ``status``: ``ok``, ``missing`` (a run absent), ``diverged`` (a run
diverged; both drop the pair) or ``different commits`` (the 1x and 2x runs were trained by
different commits, or one from a dirty tree, which counts as a commit of its own even at the
same HEAD: the gain is shown but the pair is not used to re-score the claims). A copy can be
shipped as ``config/plateau_check.csv``, the report's fallback (``load_check``); older shipped
files have no commit or status columns (every row counts as ok, the commit as not recorded).

The report matches the file to the runs by **run id** (the hash of the resolved run config), so a
check measured on other configurations never describes these runs: after a change to the grid
the summary says that no check matches, until the check is run again.

This module is the check itself: its file (``write_summary``, ``load_check``), the commit of each
run and the rows that describe the report's runs (``matching``). The claims re-scored on its
pairs are ``lpdt.report.plateau_rescore``'s; the report's sentences about it
``lpdt.report.plateau_text``'s.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from lpdt.io import read_csv

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
# What ``write_summary`` adds: the 2x run's id, each run's git commit, and the pair's status.
SUMMARY_COLUMNS = [*COLUMNS, "2x run", "1x commit", "2x commit", "status"]
OK, MISSING, DIVERGED, DIFFERENT = "ok", "missing", "diverged", "different commits"
STATUSES = (OK, MISSING, DIVERGED, DIFFERENT)
UNKNOWN_COMMIT = "unknown"  # a run without a recorded git commit (not run from a checkout)
DIRTY = "-dirty"  # appended to the commit of a run trained from a tree with uncommitted changes
# The check stores accuracies rounded to 2 decimals: a 1x accuracy within this of the report's
# own is the same result.
AGREE_POINTS = 0.01


def commit_label(commit: str | None, dirty: bool | None) -> str:
    """A run's commit as the check stores it: the git commit, ``UNKNOWN_COMMIT`` without one,
    with ``DIRTY`` appended for a dirty tree (its code is not the commit's)."""
    if not commit:
        return UNKNOWN_COMMIT
    return f"{commit}{DIRTY}" if dirty else commit


def one_commit(label: str) -> bool:
    """Whether a stored commit names one exact tree: recorded and not dirty."""
    return bool(label) and label != UNKNOWN_COMMIT and not label.endswith(DIRTY)


def short_commit(label: str) -> str:
    """A commit label shortened for the report (``75ae5fb``, ``75ae5fb-dirty``)."""
    if label.endswith(DIRTY):
        return label[: -len(DIRTY)][:7] + DIRTY
    return label[:7]


# ----------------------------------------------------------------------------------------------
# The check's runs and its summary (the workflow's rules plateau_train and plateau_check)
# ----------------------------------------------------------------------------------------------


def checked_cells(runs: Mapping[str, Any]) -> dict[str, str]:
    """1x run id -> case name of every cell an accuracy claim can read: each cell (study, block,
    coordinates) that has several seeds (the claims' intervals pair seeds; single-seed cells are
    shown, not claimed), taken at its first (lowest) seed. ``runs``: ``lpdt.grid.expand``'s runs.
    A run shared by several studies is checked once (under its first study's name). The case is
    ``study/block`` and the coordinates that differ between the block's checked cells."""
    seeds: dict[tuple[str, str, str], list[tuple[int, str]]] = {}
    coords: dict[tuple[str, str, str], dict[str, Any]] = {}
    for run in runs.values():
        for study, members in run.studies.items():
            for m in members:
                key = (study, m.block, json.dumps(m.coords, sort_keys=True, default=str))
                seeds.setdefault(key, []).append((m.seed, run.run_id))
                coords[key] = m.coords
    several = [k for k, v in seeds.items() if len(v) > 1]
    out: dict[str, str] = {}
    for key in several:
        study, block, _ = key
        siblings = [coords[k] for k in several if k[:2] == (study, block)]
        varying = [n for n in coords[key] if len({json.dumps(c.get(n)) for c in siblings}) > 1]
        label = " ".join([f"{study}/{block}", *(f"{n}={coords[key][n]}" for n in sorted(varying))])
        out.setdefault(min(seeds[key])[1], label)
    return out


def doubled(config: Mapping[str, Any]) -> dict[str, Any]:
    """A run config (``lpdt.grid.GridRun.config``) with twice its epochs; with step decay its
    milestones doubled too (``schedule.decay: linear`` scales with the epochs by itself).
    Every other key, the execution keys included (train.compile, threads, ...), is the 1x run's."""
    c = copy.deepcopy(dict(config))
    c["train"]["epochs"] = 2 * int(c["train"]["epochs"])
    schedule = c.get("schedule") or {}
    if schedule.get("decay", "step") == "step":
        schedule["milestones"] = [2 * int(m) for m in schedule.get("milestones") or []]
    return c


def summary_row(case: str, run_1x: Path | str, run_2x: Path | str) -> dict[str, Any]:
    """One row of the summary from the two run directories (``SUMMARY_COLUMNS``)."""
    from lpdt import record

    recs: list[Any] = []
    for d in (run_1x, run_2x):
        try:
            recs.append(record.read(d))
        except record.RecordError:
            recs.append(None)
    one, two = recs
    commits = [
        commit_label(r.provenance.git_commit, r.provenance.git_dirty) if r is not None else ""
        for r in recs
    ]
    row: dict[str, Any] = dict.fromkeys(SUMMARY_COLUMNS, "")
    row.update(
        {
            "case": case,
            "quick run": one.run_id if one is not None else Path(run_1x).name,
            "quick epochs": one.config["train"]["epochs"] if one is not None else "",
            "2x run": two.run_id if two is not None else Path(run_2x).name,
            "1x commit": commits[0],
            "2x commit": commits[1],
        }
    )
    if one is None or two is None:
        return row | {"status": MISSING}
    if one.final is None or two.final is None:
        return row | {"status": DIVERGED}
    a1, a2 = one.final.acc_node_mean, two.final.acc_node_mean
    same = commits[0] == commits[1] and one_commit(commits[0])  # a dirty tree: another commit
    return row | {
        "acc at 1x (%)": round(a1, 2),
        "acc at 2x (%)": round(a2, 2),
        "gain of 2x (points)": round(a2 - a1, 2),
        "status": OK if same else DIFFERENT,
    }


def write_summary(
    pairs: Iterable[tuple[str, Path | str, Path | str]],
    out: Path | str,
    log: Path | str | None = None,
) -> Path:
    """``out`` (``results/plateau_check.csv``) from (case, 1x run dir, 2x run dir) triples, with
    a comment line counting the pairs that were dropped or are not of one commit (also written
    to ``log`` when given)."""
    from lpdt.io import write_text_atomic

    df = pd.DataFrame([summary_row(*p) for p in pairs], columns=SUMMARY_COLUMNS)
    counts = df["status"].value_counts()
    head = (
        f"# plateau check (snakemake plateau_check): {len(df)} cells, "
        + ", ".join(f"{counts.get(s, 0)} {s}" for s in STATUSES)
        + "; missing / diverged pairs have no accuracies; pairs of different commits are not "
        "used to re-score the claims (lpdt.report.plateau)\n"
    )
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(Path(out), head + df.to_csv(index=False))
    if log is not None:
        Path(log).write_text(f"wrote {out}\n{head}")
    return Path(out)


# ----------------------------------------------------------------------------------------------
# Reading the check into the report
# ----------------------------------------------------------------------------------------------


def load_check(path: Path | str | None, fallback: Path | str | None = None) -> pd.DataFrame | None:
    """The check's rows, or None for ``path`` None or ``"none"`` (reporting without a check).

    ``fallback``: the shipped check (``config/plateau_check.csv``), read when ``path`` (the
    workflow's ``results/plateau_check.csv``) does not exist. The frame's ``attrs["source"]``
    says which file it is and which commit measured it (``source_label``). A file without the
    ``status`` / commit columns (a check shipped before they existed) counts every row as ok,
    its commits as not recorded. Raises ``ValueError`` when no file exists or one is not a
    check summary."""
    if path is None or str(path) == "none":
        if fallback is not None and str(fallback) != "none":  # `--plateau none x.csv`
            raise ValueError(f"--plateau none takes no second file (got {fallback})")
        return None
    for given in (path, fallback):
        if given is not None and Path(given).is_dir():
            raise ValueError(f"plateau check {given} is a folder; give the summary CSV's path")
    role = "the check"
    first = path
    if not Path(path).is_file() and fallback is not None and str(fallback) != "none":
        path, role = fallback, "the shipped check"
    elif fallback is not None and str(fallback) != "none":
        role = "this workflow's check"
    if not Path(path).is_file():
        what = (
            f"plateau check {first} and its fallback {path} not found"
            if first != path
            else f"plateau check {path} not found"
        )
        raise ValueError(f"{what} (pass --plateau none to report without one)")
    df = read_csv(path, comment="#", dtype={"1x commit": str, "2x commit": str})
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(
            f"{path} is not a plateau check summary: no column(s) {missing} "
            "(snakemake plateau_check writes results/plateau_check.csv)"
        )
    if "status" not in df:
        df["status"] = OK
    bad = sorted(set(df["status"].astype(str)) - set(STATUSES))
    if bad:
        raise ValueError(f"{path}: unknown status {bad} (one of {', '.join(STATUSES)})")
    for c in ("1x commit", "2x commit"):
        df[c] = df[c].fillna("").astype(str) if c in df else ""
    df.attrs["source"] = f"{role}{_commits_text(df)}"  # short: it is on the summary page
    return df


def _commits_text(check: pd.DataFrame) -> str:
    """Which commit measured a check: its 2x runs' commit(s), shortened."""
    done = check[statuses(check).isin([OK, DIFFERENT])]
    col = done["2x commit"] if "2x commit" in done else pd.Series(dtype=str)
    commits = sorted({short_commit(c) for c in col.astype(str) if c and c != UNKNOWN_COMMIT})
    if not commits:
        return ", commit not recorded"
    return f" of commit{'s' if len(commits) > 1 else ''} {', '.join(commits)}"


def source_label(check: pd.DataFrame | None) -> str:
    """Which file the check is and which commit measured it (for the report)."""
    if check is None:
        return "no plateau check"
    return str(check.attrs.get("source") or f"the check{_commits_text(check)}")


def statuses(check: pd.DataFrame) -> pd.Series:
    """Each row's status (a check without the column: every row ok)."""
    if "status" not in check:
        return pd.Series(OK, index=check.index)
    return check["status"].astype(str)


def of_runs(check: pd.DataFrame | None, runs: pd.DataFrame) -> pd.DataFrame:
    """The check's rows of ``runs``' configurations (same run id), whatever their status."""
    if check is None or not len(runs) or "run_id" not in runs:
        return pd.DataFrame(columns=SUMMARY_COLUMNS)
    return check[check["quick run"].astype(str).isin(set(runs["run_id"].astype(str)))]


def matching(check: pd.DataFrame | None, runs: pd.DataFrame) -> pd.DataFrame:
    """The check's rows whose configuration is one of ``runs``' (same run id) and that have both
    accuracies (status ok or different commits; missing / diverged pairs are dropped)."""
    m = of_runs(check, runs)
    return m[statuses(m).isin([OK, DIFFERENT])]


def different_commits(check: pd.DataFrame | None, runs: pd.DataFrame) -> int:
    """How many of the check's rows for ``runs``' configurations compare a 1x and a 2x run of
    different commits (status ``DIFFERENT``: shown, not used to re-score the claims)."""
    m = matching(check, runs)
    return int((statuses(m) == DIFFERENT).sum())
