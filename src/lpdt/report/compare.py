"""``lpdt compare``: is condition A better than B over a set of finished runs, beyond seed noise?

lpdt compare SOURCE --vary KEY --a VALUE --b VALUE [--where KEY=VALUE ...] [--study NAME ...]
             [--threshold T --direction '<='|'>'|within] [--json]

SOURCE is a results directory with ``manifest.json`` (the workflow's; coordinates from it), a
manifest file, or a directory of run directories (``runs/*/metrics.json`` or ``*/metrics.json``)
without a manifest: the coordinates are then read from each run's config (``CONFIG_PATHS``),
plus, named by their dotted key, any other result-affecting config value that differs between
the runs (``train.epochs``, ``algorithm.compression.name``, ...), so that runs differing in it
never pair. An MLflow experiment is not a source: the records are the source of truth, and the
store is a view of them.

The pairing, the per-seed mean over cells, the interval and the verdict are the claims' own
(``lpdt.report.pairs``, ``lpdt.report.summary``): on a claim's studies, ``where``, pair of values
and threshold, ``lpdt compare`` prints the claim's mean and interval (with ``--threshold`` and
``--direction``, a diverged run on the side whose loss contradicts the claim counts as a loss, as
in the claims; without, every diverged run is set aside). Varying precision, runs that name one
norm at both precisions pair on it (the norm held fixed); a cell without such a norm pairs each
precision's paper norm (FP-EvoNorm against 8-bit Range-EvoNorm), and the ``norm:`` line says
which. It pairs what pairs and names what it set aside (diverged, missing, unpaired, not shared,
below the claim's minimum of seeds; per cell and overall). It refuses, as one line each (exit 2), only
where no answer can be given: an unknown key, value or study; a side without runs; nothing that
pairs (with the keys in which the a-runs and b-runs differ, or what was set aside); two finished
runs on one side of a pair (both named).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from lpdt import record
from lpdt.config import is_run_config_tree
from lpdt.errors import LpdtError
from lpdt.grid import ManifestError
from lpdt.report import pairs, summary
from lpdt.report.aggregate import (
    CONFIG_PATHS,
    FINAL,
    KEYS,
    METRIC,
    aggregate,
    compression_key,
    coordinate,
    norm_key,
    stand_in_label,
    stand_in_names,
)
from lpdt.report.formatting import fixed
from lpdt.report.stats import DIRECTIONS, METHOD, Threshold

# The config keys the coordinates (CONFIG_PATHS, for runs without a manifest) cover.
COVERED = pairs.COVERED
NOTE = "the comparison's"  # whose cells the summary's notes speak of


class CompareError(LpdtError, ValueError):
    """A comparison that cannot be made as asked (one line; ``lpdt compare`` exits 2)."""


# --- the runs ----------------------------------------------------------------------------------


def load_runs(
    source: str | Path, note: Callable[[str], None] | None = None
) -> tuple[pd.DataFrame, list[str]]:
    """(frame, coordinates): one row per (study, run) in the shape of
    ``lpdt.report.aggregate.aggregate`` (study, run_id, seed, status, coordinates, acc). Run
    folders that have not finished (a ``config.yaml`` and no record) are left out, with a
    ``note`` naming them."""
    src = Path(source)
    if not src.exists():
        raise FileNotFoundError(f"{src} does not exist (pass a results directory or a manifest)")
    if src.is_file() and src.name == record.METRICS_FILE:  # read as a manifest: "unknown field"
        raise CompareError(
            f"{src} is one run's record, not a manifest: pass the folder that holds the runs "
            f"({src.parent.parent})"
        )
    if src.is_file():
        return aggregate(src)[0], list(KEYS)
    if (src / "manifest.json").is_file():
        return aggregate(src / "manifest.json")[0], list(KEYS)
    # the run folders: runs/* as the workflow writes them, else the source's own folders
    runs = src / "runs" if any(src.glob(f"runs/*/{record.METRICS_FILE}")) else src
    files = sorted(runs.glob(f"*/{record.METRICS_FILE}"))
    if src.is_dir() and not files:
        if (src / record.METRICS_FILE).is_file():
            raise CompareError(
                f"{src} is one run's folder: pass the folder that holds the runs ({src.parent})"
            )
        if (src / record.CONFIG_FILE).is_file():  # a crash, or still running
            raise CompareError(
                f"{src} is one run, and it has not finished: it holds {record.CONFIG_FILE} and "
                f"no {record.METRICS_FILE} (pass the folder that holds finished runs)"
            )
        started = [*_unfinished(src), *_unfinished(src / "runs")]
        if started:  # it said "no manifest.json, no runs/*/metrics.json and no */metrics.json"
            raise CompareError(
                f"{src}: its {len(started)} run folder(s) hold {record.CONFIG_FILE} and no "
                f"{record.METRICS_FILE}: none has finished, so there is nothing to compare yet"
            )
    if not src.is_dir() or not files:
        raise FileNotFoundError(
            f"{src}: no manifest.json, no runs/*/metrics.json and no "
            "*/metrics.json (pass a results directory or a manifest)"
        )
    unfinished = _unfinished(runs)
    if unfinished and note is not None:
        names = ", ".join(str(d) for d in unfinished[:3])
        more = f" and {len(unfinished) - 3} more" if len(unfinished) > 3 else ""
        note(
            f"{len(unfinished)} run folder(s) hold {record.CONFIG_FILE} and no {record.METRICS_FILE} "
            f"(not finished), left out: {names}{more}"
        )
    read: dict[str, tuple[Path, record.RunRecord]] = {}
    for f in files:
        rec = record.read(f)
        if rec.run_id in read:  # a copy or a rerun is read once; other results are refused
            first, other = read[rec.run_id]
            if (other.status, other.final) != (rec.status, rec.final):
                raise CompareError(
                    f"{first} and {f} are both run {rec.run_id}, with other results "
                    f"(final accuracy {_acc(other)} and {_acc(rec)}): keep one of them"
                )
            continue
        read[rec.run_id] = (f, rec)
    return frame_from_records([r for _, r in read.values()], [str(f) for f, _ in read.values()])


def _unfinished(folder: Path) -> list[Path]:
    """The run folders in ``folder`` that have not finished: a run's ``config.yaml``
    (``lpdt.config.is_run_config_tree``) and no record. A checkout's own
    ``config/config.yaml`` is no run: at a checkout's root it was counted as one."""
    return [
        c.parent
        for c in sorted(folder.glob(f"*/{record.CONFIG_FILE}"))
        if not (c.parent / record.METRICS_FILE).is_file() and _a_run_config(c)
    ]


def _a_run_config(path: Path) -> bool:
    try:
        tree = yaml.safe_load(path.read_bytes())
    except (OSError, yaml.YAMLError):
        return False
    return is_run_config_tree(tree)


def _acc(r: record.RunRecord) -> str:
    return f"{getattr(r.final, METRIC):.2f} %" if r.final is not None else r.status


def frame_from_records(
    recs: Sequence[record.RunRecord], sources: Sequence[str] | None = None
) -> tuple[pd.DataFrame, list[str]]:
    """The runs' frame from their records alone (no manifest): coordinates from the configs. A
    config value its coordinate cannot take is a ``ManifestError`` naming the record (its file,
    from ``sources``, where given)."""
    extra, flat = pairs.config_extras([r.config for r in recs])
    rows = []
    for i, (r, f) in enumerate(zip(recs, flat, strict=True)):
        where = f"{sources[i] if sources else f'run {r.run_id}'}: config"  # names the file
        row: dict[str, Any] = {
            "study": "runs",
            "run_id": r.run_id,
            "seed": f.get("seed"),
            "status": r.status,
        }
        for k, path in CONFIG_PATHS.items():
            row[k] = coordinate(k, f.get(path), f"{where}.{path}")
        name = f.get("algorithm.compression.name") or "none"
        ratio = f.get("algorithm.compression.ratio") or 0.0
        try:
            row["compression"] = norm_key("compression", compression_key(name, ratio))
        except (TypeError, ValueError) as e:
            raise ManifestError(
                f"{where}.algorithm.compression: {name!r} with ratio {ratio!r}: {e}"
            ) from None
        row.update({k: f.get(k) for k in extra})
        # the data's stand-in, from the record (a model's needs a manifest's coordinates)
        row["stand_in"] = stand_in_label(r, {})
        row["acc"] = getattr(r.final, METRIC) if r.final is not None else math.nan
        row.update({k: getattr(r.final, k) if r.final else math.nan for k in FINAL})
        rows.append(row)
    return pd.DataFrame(rows), [*KEYS, *extra]


# --- the comparison ----------------------------------------------------------------------------


def _v(key: str, v: object) -> str:
    return pairs.Condition(key, "=", (v,)).text().split("=", 1)[1]


def _values(frame: pd.DataFrame, key: str) -> list[object]:
    return sorted(
        {pairs.parse_value(key, v) for v in frame[key]}, key=lambda v: (str(type(v)), str(v))
    )


def _check_keys(
    frame: pd.DataFrame,
    keys: list[str],
    vary: str,
    where: Mapping[str, object],
    studies: Sequence[str] | None,
) -> None:
    for k in [vary, *where]:
        if k not in keys:
            raise CompareError(f"unknown key {k!r}: the coordinates are {', '.join(keys)}")
    if studies:
        known = sorted(set(frame["study"]))
        bad = [s for s in studies if s not in known]
        if bad:
            raise CompareError(f"unknown study {bad[0]!r}: the studies are {', '.join(known)}")
    for cond in pairs.conditions(where):
        if cond.op in ("<", "<=", ">", ">="):
            # precision>=1 left no run, and the refusal spoke of --a's empty side
            values = _values(frame, cond.key)
            if not any(pairs.is_number(v) for v in values):
                raise CompareError(
                    f"--where {cond.text()}: {cond.key} is not a number (values: "
                    f"{', '.join(_v(cond.key, x) for x in values)})"
                )
        if cond.op != "=":
            continue
        have = _values(frame, cond.key)
        for v in cond.values:
            if v not in have:
                raise CompareError(
                    f"--where {cond.text()}: no run has {cond.key}={_v(cond.key, v)} "
                    f"(values: {', '.join(_v(cond.key, x) for x in have)})"
                )


def _seeds(s: Sequence[int]) -> str:
    return ", ".join("none" if x == pairs.NO_SEED else str(x) for x in s)


def _refuse(
    sel: pd.DataFrame, vary: str, a: object, b: object, pk: list[str], pr: pairs.Pairing
) -> None:
    """The one-line refusals (module docstring): a side without runs, two runs of one side,
    cell and seed, nothing that pairs."""
    side = sel[vary].map(lambda v: pairs.parse_value(vary, v))
    left, right = sel[side == a], sel[side == b]
    for name, s, val in (("--a", left, a), ("--b", right, b)):
        if not len(s):
            raise CompareError(
                f"{name} {_v(vary, val)}: no run has {vary}={_v(vary, val)} in the "
                f"selection ({vary} values: "
                f"{', '.join(_v(vary, x) for x in _values(sel, vary))})"
            )
    dup = pr.set_aside[pr.set_aside["why"] == pairs.DUPLICATE]
    if len(dup):
        r = dup.iloc[0]
        raise CompareError(
            f"several runs on one side of a pair ({_cell_label(pr.cell_keys, r['_cell'])}, seed "
            f"{_seeds([r['seed']])}): {r['detail']}, alike in every coordinate and config value "
            "but the run id; choose with --where or --study"
        )
    if len(pr.pairs):
        return
    if not (sel["status"] == "ok").any():  # e.g. a manifest's runs before they train
        raise CompareError(
            f"none of the selection's {len(sel)} runs has a result yet (statuses: "
            f"{', '.join(f'{n} {s}' for s, n in sel['status'].value_counts().items())})"
        )
    differ = []
    for k in [*pk, "seed"]:
        va, vb = {_v(k, x) for x in left[k]}, {_v(k, x) for x in right[k]}
        if va != vb:
            differ.append(f"{k} (a: {', '.join(sorted(va))}; b: {', '.join(sorted(vb))})")
    na, nb = _norms(left), _norms(right)
    pa, pb = pairs.paper_norm_label(a, b).split("|")
    by_paper = vary == "precision" and pa in na and pb in nb
    if vary != "norm" and na and nb and not na & nb and not by_paper:
        differ.append(
            f"norm (a: {', '.join(sorted(na))}; b: {', '.join(sorted(nb))}; two runs pair on "
            "a norm they share"
            + (", or on each precision's paper norm" if vary == "precision" else "")
            + ")"
        )
    whys = pr.set_aside["why"].value_counts()
    why = (
        "they differ in " + "; ".join(differ)
        if differ
        else "no combination of the other coordinates occurs on both sides"
        if whys.get(pairs.UNPAIRED, 0) == len(pr.set_aside)
        else "set aside: " + ", ".join(f"{n} {w}" for w, n in whys.sort_index().items())
    )
    raise CompareError(
        f"nothing pairs: no run with {vary}={_v(vary, a)} has a finished run with "
        f"{vary}={_v(vary, b)}, the same seed and the same other coordinates; {why}"
    )


def norm_pairing(p: pd.DataFrame, vary: str, a: object, b: object) -> str | None:
    """What the pairs' norm is, when ``precision`` is varied: "held fixed: rangeen" (both runs
    of each pair train with one norm), "each precision's paper norm (fp32 evonorm, int8
    rangeen)" (``pairs.norm_identities``: what the paper compares, where a cell has no norm at
    both precisions), or both; None otherwise."""
    if vary != "precision" or "_norm" not in p or not len(p):
        return None
    joined = pairs.paper_norm_label(a, b)
    norms = sorted({str(n) for n in p["_norm"]})
    parts = []
    fixed_norms = [n for n in norms if n != joined]
    if fixed_norms:
        parts.append(f"held fixed: {', '.join(fixed_norms)}")
    if joined in norms:
        pa, pb = joined.split("|")
        parts.append(f"each precision's paper norm ({_v(vary, a)} {pa}, {_v(vary, b)} {pb})")
    return "; ".join(parts)


def _norms(s: pd.DataFrame) -> set[str]:
    """The norms the runs train with (``pairs.effective_norm``)."""
    if "norm" not in s or "precision" not in s:
        return set()
    return {str(pairs.effective_norm(n, p)) for n, p in zip(s["norm"], s["precision"], strict=True)}


def _named(v: str) -> bool:
    """Whether a cell's coordinate (a canonical string, ``pairs.cell_key``) names a setting: not
    the text of None or NaN, no value recorded."""
    return v not in ("None", "nan")


def _cell_label(keys: Sequence[str], cell: Sequence[str]) -> str:
    return " ".join(f"{k}={v}" for k, v in zip(keys, cell, strict=True)) or "(one cell)"


def compare(
    frame: pd.DataFrame,
    keys: list[str],
    vary: str,
    a: object,
    b: object,
    where: Mapping[str, object] | None = None,
    studies: Sequence[str] | None = None,
    threshold: Threshold | None = None,
    direction: str | None = None,
) -> dict:
    """The comparison's record: per cell and overall (the claims' summary) the pairs, mean
    difference a - b and 95 % t-interval, the verdict for a threshold (None without), and what
    was set aside (``set_aside`` per cell; overall ``set_aside``, ``cells_left_out``)."""
    where = dict(where or {})
    _check_keys(frame, keys, vary, where, studies)
    va, vb = pairs.parse_value(vary, a), pairs.parse_value(vary, b)
    if va == vb:
        raise CompareError(f"--a and --b are the same value ({vary}={_v(vary, va)})")
    pk = pairs.pair_keys(vary, keys)
    sel = pairs.select(frame, studies, where)
    if not len(sel) and where:  # say which condition, not that --a's side is empty
        conds = pairs.conditions(where)
        values = "; ".join(
            f"{k} values: {', '.join(_v(k, x) for x in _values(frame, k))}"
            for k in dict.fromkeys(c.key for c in conds)
        )
        raise CompareError(
            f"no run meets --where {' '.join(c.text() for c in conds)}"
            + (f" in studies {', '.join(studies)}" if studies else "")
            + f" ({values})"
        )
    lost = pairs.loss_sides(direction) if threshold is not None else ()
    pr = pairs.pairing(frame, vary, va, vb, studies, where, keys, lost=lost)
    _refuse(sel, vary, va, vb, pk, pr)
    p = pr.pairs
    ck = pr.cell_keys
    cells = summary.per_cell(p, threshold, direction, pr.set_aside)
    shown = [k for i, k in enumerate(ck) if len({c["cell"][i] for c in cells}) > 1]
    # the coordinates all cells share; one that no run names (a manifest's study without it)
    # holds no setting fixed, and is left out
    fixed = (
        {k: v for i, k in enumerate(ck) if k not in shown and _named(v := cells[0]["cell"][i])}
        if cells
        else {}
    )
    for c in cells:
        c["cell"] = dict(zip(ck, c["cell"], strict=True))
    overall = summary.summarize(p, threshold, direction, of=NOTE, set_aside=pr.set_aside)
    for key in ("counted_as_loss", "set_aside", "cells_left_out"):
        for rec in overall.get(key, []):
            rec["cell"] = dict(zip(ck, rec["cell"], strict=True))
    thr = list(threshold) if isinstance(threshold, tuple) else threshold
    # Stand-in data or models of the compared runs, named as the report names them.
    stand_ins = stand_in_names(sel[sel[vary].isin([va, vb])].get("stand_in", []))
    return {
        "vary": vary,
        "a": _v(vary, va),
        "b": _v(vary, vb),
        "effect": f"{_v(vary, va)} - {_v(vary, vb)}",
        "where": [c.text() for c in pairs.conditions(where)],
        "studies": list(studies or []),
        "threshold": thr,
        "direction": direction,
        "fixed": fixed,
        "stand_ins": stand_ins,
        "shown": shown,
        "norm": norm_pairing(p, vary, va, vb),
        "cells": cells,
        "overall": overall,
        "interval_method": METHOD,
    }


# --- the command -------------------------------------------------------------------------------


def parse_threshold(text: str | None, direction: str | None) -> Threshold | None:
    if text is None:
        if direction is not None:
            raise CompareError("--direction needs --threshold")
        return None
    if direction is None:
        raise CompareError(f"--threshold {text} needs --direction ({', '.join(DIRECTIONS)})")
    try:
        nums = [float(x) for x in text.split(",")]
    except ValueError:
        raise CompareError(f"--threshold {text!r}: expected a number (within: LO,HI)") from None
    if not all(math.isfinite(x) for x in nums):  # (as --where refuses nan and inf)
        raise CompareError(f"--threshold {text!r}: expected finite numbers")
    if direction == "within":
        if len(nums) != 2 or nums[0] > nums[1]:
            raise CompareError(
                f"--threshold {text!r}: --direction within needs LO,HI with LO <= HI"
            )
        return (nums[0], nums[1])
    if len(nums) != 1:
        raise CompareError(f"--threshold {text!r}: --direction {direction} needs one number")
    return nums[0]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "source",
        help="results directory (manifest.json or runs/*/metrics.json), a "
        "manifest, or a directory of run directories",
    )
    p.add_argument("--vary", required=True, help="the coordinate that differs (e.g. precision)")
    p.add_argument("--a", required=True, help="its value on side a (effect = a - b)")
    p.add_argument("--b", required=True, help="its value on side b")
    p.add_argument(
        "--where",
        action="append",
        default=[],
        metavar="COND",
        help="keep runs with KEY=V[,V..], KEY!=V, KEY>=X, KEY>X, KEY<=X, KEY<X; repeatable",
    )
    p.add_argument(
        "--study", action="append", default=None, help="only runs of this study; repeatable"
    )
    p.add_argument("--threshold", default=None, help="the verdict's threshold (within: LO,HI)")
    p.add_argument(
        "--direction",
        choices=DIRECTIONS,
        default=None,
        help="claim: effect <= T, effect > T, or LO <= effect <= HI (within)",
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def _ci(r: Mapping[str, Any]) -> str:
    return f"[{fixed(r['ci'][0])}, {fixed(r['ci'][1])}]" if r.get("ci") else "(no interval)"


MAX_NOTES = 40  # lines of set-aside pairs and left-out cells printed (--json has them all)


def _aside_count(recs: Sequence[Mapping[str, Any]]) -> str:
    """'2 (diverged, unpaired)'; '-' when nothing was set aside."""
    if not recs:
        return "-"
    return f"{len(recs)} ({', '.join(sorted({r['why'] for r in recs}))})"


def _where(cell: Mapping[str, str], fixed: Mapping[str, str]) -> str:
    """The cell's coordinates that are not the comparison's fixed ones."""
    return " ".join(f"{k}={v}" for k, v in cell.items() if fixed.get(k) != v) or "(one cell)"


def text(res: dict, source: str) -> str:
    o = res["overall"]
    rule = ""
    if res["threshold"] is not None:
        t = res["threshold"]
        rule = (
            f"; claim {t[0]:g} <= effect <= {t[1]:g}"
            if res["direction"] == "within"
            else f"; claim effect {res['direction']} {t:g}"
        )
    head = [
        f"{source}: {res['vary']} {res['effect']} (accuracy points){rule}",
        f"selection: {' '.join(res['where']) or 'all runs'}"
        + (f"; studies {', '.join(res['studies'])}" if res["studies"] else ""),
        "fixed: " + (" ".join(f"{k}={v}" for k, v in res["fixed"].items()) or "-"),
    ]
    if res.get("norm"):
        head.append(f"norm: {res['norm']}")
    if res["stand_ins"]:
        head.append("stand-ins: " + "; ".join(res["stand_ins"]))
    aside = any("set_aside" in c for c in res["cells"])
    rows = [
        ["cell", "pairs"]
        + (["set aside"] if aside else [])
        + ["mean", "95 % CI"]
        + (["verdict"] if rule else [])
    ]
    for c in res["cells"]:
        label = " ".join(f"{k}={c['cell'][k]}" for k in res["shown"]) or "(one cell)"
        rows.append(
            [label, str(c["pairs"])]
            + ([_aside_count(c.get("set_aside", []))] if aside else [])
            + [fixed(c["mean"]), _ci(c)]
            + ([c["verdict"]] if rule else [])
        )
    of = f" of {o['seeds_of']}" if o.get("seeds_of", o["n"]) > o["n"] else ""
    rows.append(
        [
            f"overall ({o['cells']} cell{'s' if o['cells'] != 1 else ''}, n={o['n']}{of} seeds)",
            str(o["pairs"]),
        ]
        + ([_aside_count(o.get("set_aside", []))] if aside else [])
        + [fixed(o["mean"]), _ci(o)]
        + ([o["verdict"]] if rule else [])
    )
    w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(x.ljust(w[i]) for i, x in enumerate(r)).rstrip() for r in rows]
    notes = [f"note: {o[k]}" for k in ("why",) if k in o]
    for d in o.get("counted_as_loss", []):
        notes.append(
            f"counted as a loss: {_where(d['cell'], res['fixed'])} seed {_seeds([d['seed']])}: "
            f"{d['detail']}"
        )
    for d in o.get("set_aside", []):
        notes.append(
            f"set aside: {_where(d['cell'], res['fixed'])} seed {_seeds([d['seed']])}: {d['detail']}"
        )
    for d in o.get("cells_left_out", []):
        notes.append(f"left out of the overall: {_where(d['cell'], res['fixed'])}: {d['why']}")
        notes += [
            f"  set aside: seed {_seeds([x['seed']])}: {x['detail']}"
            for x in d.get("set_aside", [])
        ]
    notes = notes[:MAX_NOTES] + (
        [f"... and {len(notes) - MAX_NOTES} more lines (--json lists every one)"]
        if len(notes) > MAX_NOTES
        else []
    )
    notes.append(
        f"overall: per seed, the mean over the cells of the paired difference; {res['interval_method']}"
    )
    return "\n".join(head + lines + notes)


def run(args: argparse.Namespace) -> int:
    threshold = parse_threshold(args.threshold, args.direction)
    frame, keys = load_runs(
        args.source, note=lambda line: print(f"lpdt compare: note: {line}", file=sys.stderr)
    )
    res = compare(
        frame,
        keys,
        args.vary,
        args.a,
        args.b,
        pairs.parse_where(args.where),
        args.study,
        threshold,
        args.direction,
    )
    print(json.dumps(res, indent=2) if args.json else text(res, args.source))
    return 0
