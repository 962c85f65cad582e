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

``claims_at_2x`` goes one step further: it recomputes each accuracy claim's effect with
``lpdt.report.claims`` (the same code) on the checked configurations alone, once with the check's
1x accuracies and once with its 2x accuracies, so the report can say how far longer training
moves each claim's effect (one seed, no interval). Only pairs of one commit enter, and both sides
of a pair come from the check: the report's runs may be of another commit (a fresh report with
the shipped check), and mixing this report's 1x with the check's 2x would compare two commits.
``rescore`` says which commit the pairs are of and compares the check's 1x accuracies with this
report's runs of the same run ids: another commit, or a 1x accuracy that differs, is flagged.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

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
    commits = sorted({short_commit(c) for c in col.astype(str) if c and c != UNKNOWN_COMMIT})
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
    from lpdt.report.stats import Threshold, holds

    m = matching(check, runs)
    m = m[_statuses(m) == OK]
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
        # Not None: only arithmetic claims have no threshold (claims.yaml), and these are accuracy.
        thr = cast(Threshold, claim.threshold)
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
        left_out=_different(check, runs),
        claims=tuple(claims),
    )


def claims_at_2x(check: pd.DataFrame | None, runs: pd.DataFrame) -> list[ClaimAt2x]:
    """Per accuracy claim with a pair among the check's same-commit pairs (a ``ClaimAt2x``):
    its effect on the check's 1x and 2x accuracies (``rescore``)."""
    r = rescore(check, runs)
    return list(r.claims) if r is not None else []


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


def _different(check: pd.DataFrame | None, runs: pd.DataFrame) -> int:
    m = matching(check, runs)
    return int((_statuses(m) == DIFFERENT).sum())


def claims_2x_sentence(check: pd.DataFrame | None, runs: pd.DataFrame) -> str | None:
    """How far twice the epochs moves the claims' effects (one seed), on which commit's pairs,
    and whether the check's 1x accuracies are these runs'; None without a check."""
    r = rescore(check, runs)
    other = _different(check, runs)
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
