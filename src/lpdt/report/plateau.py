"""The plateau check: is each claim cell trained to a plateau? Read into the report's summary.

``snakemake plateau_check`` (workflow/rules/plateau.smk; not part of the default target) trains,
for every cell that an accuracy claim reads (``checked_cells``: the cells of a study block with
several seeds), its first seed once more for **twice** its epochs (``doubled``: milestones
doubled; nothing else changes, so the 2x run has the 1x run's execution keys), and
``write_summary`` writes ``results/plateau_check.csv``: per case, the run id of the scale's own
run (``quick run``), its final accuracy at 1x and the 2x run's, the git commit of each run (from
its ``metrics.json`` provenance) and a ``status``: ``ok``, ``missing`` (a run absent),
``diverged`` (a run diverged; both drop the pair) or ``different commits`` (the 1x and 2x runs
were trained by different commits: the gain is shown but the pair is not used to re-score the
claims). A copy can be shipped as ``config/plateau_check.csv``, the report's fallback
(``load_check``); older shipped files have no commit or status columns (every row counts as ok,
the commit as not recorded).

The report matches the file to the runs by **run id** (the hash of the resolved run config), so a
check measured on other configurations never describes these runs: after a change to the grid
the summary says that no check matches, until the check is run again.

``claims_at_2x`` goes one step further: it recomputes each accuracy claim's effect with
``lpdt.report.claims`` (the same code) on the checked runs alone, once with their own accuracies
and once with the 2x accuracies, so the report can say how far longer training moves each claim's
effect (one seed, no interval). Only pairs of one commit enter.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
# What ``write_summary`` adds: the 2x run's id, each run's git commit, and the pair's status.
SUMMARY_COLUMNS = [*COLUMNS, "2x run", "1x commit", "2x commit", "status"]
OK, MISSING, DIVERGED, DIFFERENT = "ok", "missing", "diverged", "different commits"
STATUSES = (OK, MISSING, DIVERGED, DIFFERENT)
UNKNOWN_COMMIT = "unknown"  # a run without a recorded git commit (not run from a checkout)


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
    """A run config (``lpdt.grid.Run.config``) with twice its epochs; with step decay its
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
    commits = [(r.provenance.git_commit or UNKNOWN_COMMIT) if r is not None else "" for r in recs]
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
    same = commits[0] == commits[1] != UNKNOWN_COMMIT
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
        return None
    role = "the check"
    if not Path(path).is_file() and fallback is not None and str(fallback) != "none":
        path, role = fallback, "the shipped check"
    elif fallback is not None and str(fallback) != "none":
        role = "this workflow's check"
    if not Path(path).is_file():
        raise ValueError(
            f"plateau check {path} not found (pass --plateau none to report without one)"
        )
    df = pd.read_csv(path, comment="#", dtype={"1x commit": str, "2x commit": str})
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
    done = check[_statuses(check).isin([OK, DIFFERENT])]
    col = done["2x commit"] if "2x commit" in done else pd.Series(dtype=str)
    commits = sorted({c[:7] for c in col.astype(str) if c and c != UNKNOWN_COMMIT})
    if not commits:
        return ", commit not recorded"
    return f" of commit{'s' if len(commits) > 1 else ''} {', '.join(commits)}"


def source_label(check: pd.DataFrame | None) -> str:
    """Which file the check is and which commit measured it (for the report)."""
    if check is None:
        return "no plateau check"
    return str(check.attrs.get("source") or f"the check{_commits_text(check)}")


def _statuses(check: pd.DataFrame) -> pd.Series:
    """Each row's status (a check without the column: every row ok)."""
    if "status" not in check:
        return pd.Series(OK, index=check.index)
    return check["status"].astype(str)


def _of_runs(check: pd.DataFrame | None, runs: pd.DataFrame) -> pd.DataFrame:
    """The check's rows of ``runs``' configurations (same run id), whatever their status."""
    if check is None or not len(runs) or "run_id" not in runs:
        return pd.DataFrame(columns=SUMMARY_COLUMNS)
    return check[check["quick run"].astype(str).isin(set(runs["run_id"].astype(str)))]


def matching(check: pd.DataFrame | None, runs: pd.DataFrame) -> pd.DataFrame:
    """The check's rows whose configuration is one of ``runs``' (same run id) and that have both
    accuracies (status ok or different commits; missing / diverged pairs are dropped)."""
    m = _of_runs(check, runs)
    return m[_statuses(m).isin([OK, DIFFERENT])]


@dataclass(frozen=True)
class ClaimAt2x:
    """One accuracy claim re-scored on the plateau check's runs (``claims_at_2x``)."""

    id: str  # the claim's id (``lpdt.report.claims``)
    statement: str  # the claim's words
    effect: str  # what its number is (units)
    rule: str  # the effect and its threshold (``Claim.rule``)
    cells: int  # the cells it pairs among the checked runs
    at_1x: float  # its effect on the runs' own accuracies (the scale's epochs)
    at_2x: float  # its effect with the check's 2x accuracies
    same_side: bool  # whether the effect keeps its side of the claim's threshold


def claims_at_2x(check: pd.DataFrame | None, runs: pd.DataFrame) -> list[ClaimAt2x]:
    """Per accuracy claim with a pair among the checked runs (a ``ClaimAt2x``): its effect on
    those runs at the scale's epochs (``at_1x``, the runs' own accuracies) and with the check's
    2x accuracies (``at_2x``), the number of cells it pairs, and whether the effect keeps its
    side of the claim's threshold (``same_side``). ``runs``: the report's run table (columns study, KEYS,
    acc, seed, run_id); only the checked run ids whose 1x and 2x runs are of one commit enter
    (status ok), so each claim pairs the same cells at 1x and 2x."""
    from lpdt.report.aggregate import KEYS
    from lpdt.report.claims import BY_ID, accuracy_claims
    from lpdt.report.stats import holds

    m = matching(check, runs)
    m = m[_statuses(m) == OK]
    if not len(m):
        return []
    at_2x = dict(zip(m["quick run"].astype(str), m["acc at 2x (%)"].astype(float), strict=True))
    cols = ["study", *KEYS, "acc"] + (["seed"] if "seed" in runs else [])
    one = runs[runs["run_id"].astype(str).isin(at_2x)]
    two = one.assign(acc=one["run_id"].astype(str).map(at_2x))
    a1, a2 = accuracy_claims(one[cols]), accuracy_claims(two[cols])
    out: list[ClaimAt2x] = []
    for cid, r1 in a1.items():
        r2, claim = a2[cid], BY_ID[cid]
        if r1.get("mean") is None or r2.get("mean") is None:
            continue
        thr = claim.threshold
        same = holds(r1["mean"], thr, claim.direction) == holds(r2["mean"], thr, claim.direction)
        out.append(
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
    return out


def _different(check: pd.DataFrame | None, runs: pd.DataFrame) -> int:
    m = matching(check, runs)
    return int((_statuses(m) == DIFFERENT).sum())


def claims_2x_sentence(check: pd.DataFrame | None, runs: pd.DataFrame) -> str | None:
    """How far twice the epochs moves the claims' effects (one seed); None without a check."""
    moved = claims_at_2x(check, runs)
    other = _different(check, runs)
    left_out = (
        f"{other} checked cell{'s' if other != 1 else ''} whose 1x and 2x runs come from "
        "different commits left out of this re-scoring"
    )
    if not moved:
        return f"The claims are not re-scored at 2x: {left_out}." if other else None
    delta = pd.Series([c.at_2x - c.at_1x for c in moved])
    flips = [c for c in moved if not c.same_side]
    n = f"{len(moved)} accuracy claim" + ("s" if len(moved) != 1 else "")
    s = (
        f"On the checked runs (one seed), twice the epochs moves the effects of {n} by "
        f"{_range(delta)} points"
    )
    if flips:
        s += f"; {len(flips)} cross{'es' if len(flips) == 1 else ''} its threshold: " + "; ".join(
            f'"{c.statement}" {c.at_1x:.2f} to {c.at_2x:.2f} ({c.rule})' for c in flips
        )
    else:
        big = max(moved, key=lambda c: abs(c.at_2x - c.at_1x))
        s += (
            f' (most: "{big.statement}", {big.at_1x:.2f} to {big.at_2x:.2f}); '
            "none crosses its threshold"
        )
    return s + (f" ({left_out})." if other else ".")


def _range(values: pd.Series) -> str:
    lo, hi = float(values.min()), float(values.max())
    return f"{lo:+.1f}" if round(lo, 1) == round(hi, 1) else f"{lo:+.1f} to {hi:+.1f}"


def plateau_sentence(check: pd.DataFrame | None, runs: pd.DataFrame) -> str:
    """One summary sentence: which check (file, commit), how many checked cells are within
    ``NEAR_POINTS`` of their 2x accuracy, how much the others gained, and which pairs it
    dropped (missing, diverged) or compares across commits; or that no check covers these runs."""
    m = matching(check, runs)
    st = _statuses(_of_runs(check, runs))
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
    other = _different(check, runs)
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
            for (_, r), s in zip(m.iterrows(), _statuses(m), strict=True)
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
