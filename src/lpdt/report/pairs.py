"""Paired comparisons of two conditions over runs: the one implementation behind the paper's
claims (``lpdt.report.claims``), the claims a study declares, and ``lpdt compare``.

A **pair** is two finished runs with the same identity except the varied key and the **same
seed** (the seed sets the partition shuffle, the initialisation and the data order). The
identity is the cell's coordinates (``pair_keys``), the norm as the run's precision brings it
(``norm_identity``: an 8-bit run brings Range-EvoNorm through ``precision``, so varying precision
FP-EvoNorm meets 8-bit Range-EvoNorm, and any other norm only its like) and the result-affecting
config values beyond the coordinates in which the runs differ (``config_extras``). Its
difference is ``acc(a) - acc(b)``. ``pairing`` filters first and then sets aside, with the
reason, every (cell, seed) that does not pair: diverged, missing, unpaired, or a duplicate (two
finished runs of one side, identity and seed, both named; never resolved by order).
``summarize`` turns the pairs into the claims' number: per seed, the mean over the cells of that
seed's paired difference; over the seeds, the mean with its 95 % t-interval
(``lpdt.report.stats``), its half-width and the design's minimum detectable effect
(``stats.detectable``), and the verdict for a threshold. Every seed averages over the same cells,
chosen for coverage (``choose_cells``: the most cells sharing at least two seeds, over the seeds
they all share); the seeds and cells left out are named (``set_aside``, ``cells_left_out``).

Selections are data, so that a claim written in YAML and one written here are the same thing:
``where`` maps a coordinate to a condition (``0``, ``[90, 99]``, ``">0"``, ``">=0.8"``,
``"!=fp32"``, ``"90,99"``); values are compared in the canonical form of
``lpdt.report.aggregate.norm_key`` (compression 0.99 and 99 are one value).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import pandas as pd

from lpdt.config import PAPER_NORMS
from lpdt.report.aggregate import CONFIG_PATHS, KEYS, norm_key
from lpdt.report.formatting import rounded
from lpdt.report.stats import NO_DATA, Threshold, t_interval, verdict

NO_SEED = -1  # the seed of a run whose record names none (e.g. the paper's numbers)
# Coordinates left out of a cell's name: the norm is compared by ``pairing`` itself
# (``norm_identity``), as the run's precision brings it.
IGNORED = ("norm",)
OPS = (">=", "<=", "!=", ">", "<", "==", "=")  # longest first: ">=" before ">"


@dataclass(frozen=True)
class Condition:
    """``key op values``: ``=`` / ``!=`` test membership in ``values``; the order operators
    compare with the one number in ``values``."""

    key: str
    op: str
    values: tuple[object, ...]

    def mask(self, frame: pd.DataFrame) -> pd.Series:
        col = frame[self.key]
        if self.op in ("=", "!="):
            inside = col.map(lambda v: _canon(self.key, v) in self.values)
            return inside if self.op == "=" else ~inside
        (ref,) = self.values
        cmp = {
            ">=": lambda x: x >= ref,
            "<=": lambda x: x <= ref,
            ">": lambda x: x > ref,
            "<": lambda x: x < ref,
        }[self.op]
        return col.map(lambda v: _number(v) is not None and bool(cmp(_number(v))))

    def text(self) -> str:
        return f"{self.key}{self.op}{','.join(_show(v) for v in self.values)}"


def _canon(key: str, v: object) -> object:
    return norm_key(key, v) if key in KEYS else (None if _missing(v) else v)


def _missing(v: object) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _number(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _show(v: object) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def parse_value(key: str, text: object) -> object:
    """A value as written on the command line or in YAML, in canonical form (``"true"`` for a
    boolean coordinate is True, ``"0.99"`` compression is 99)."""
    if isinstance(text, str) and key not in KEYS:
        import yaml

        with contextlib.suppress(yaml.YAMLError):  # a number or a boolean, else the string
            text = yaml.safe_load(text)
    try:
        return _canon(key, text)
    except (TypeError, ValueError):
        raise ValueError(f"{key}: {text!r} is not a value of {key} (a number)") from None


def condition(key: str, spec: object) -> Condition:
    """One ``where`` entry: ``spec`` a value, a list of values, or a string ``"<op><value(s)>"``
    (``>=0.8``, ``!=int8``, ``=90,99``, ``90,99``). A malformed one is a one-line ValueError."""
    if isinstance(spec, (list, tuple)):
        if not spec:
            raise ValueError(f"where {key}: an empty list of values")
        return Condition(key, "=", tuple(parse_value(key, v) for v in spec))
    if not isinstance(spec, str):
        return Condition(key, "=", (parse_value(key, spec),))
    s = spec.strip()
    op = next((o for o in OPS if s.startswith(o)), "=")
    rest = s[len(op) :].strip() if s.startswith(op) else s
    op = "=" if op == "==" else op
    if not rest:
        raise ValueError(f"where {key}{spec}: no value after {op!r}")
    if op in ("=", "!="):
        return Condition(key, op, tuple(parse_value(key, v.strip()) for v in rest.split(",")))
    ref = _number(parse_value(key, rest))  # canonical: compression >0.9 is >90 (%)
    if ref is None:
        raise ValueError(f"where {key}{op}{rest}: {op!r} needs a number, got {rest!r}")
    return Condition(key, op, (ref,))


def conditions(where: Mapping[str, object] | None) -> list[Condition]:
    return [condition(k, v) for k, v in (where or {}).items()]


def parse_where(items: Iterable[str]) -> dict[str, str]:
    """``["skew>=0.8", "compression=0"]`` (command line) -> ``{"skew": ">=0.8", ...}``."""
    out: dict[str, str] = {}
    for item in items:
        i = min((item.find(o) for o in OPS if o in item), default=-1)
        if i <= 0:
            raise ValueError(f"--where {item!r}: expected KEY=VALUE, KEY>=NUMBER, KEY!=VALUE, ...")
        out[item[:i].strip()] = item[i:].strip()
    return out


def with_seed(cells: pd.DataFrame) -> pd.DataFrame:
    """A copy with an integer ``seed`` column (``NO_SEED`` where a run names none)."""
    c = cells.copy()
    if "seed" not in c:
        c["seed"] = NO_SEED
    c["seed"] = [NO_SEED if _missing(s) else int(s) for s in c["seed"]]
    return c


def pair_keys(vary: str, keys: Sequence[str] = KEYS) -> list[str]:
    """The coordinates that name a pair's cell: all but the varied one and ``norm`` (which
    ``pairing`` compares itself, ``norm_identity``)."""
    return [k for k in keys if k != vary and k not in IGNORED]


def cell_key(keys: Sequence[str], values: Iterable[object]) -> tuple[str, ...]:
    """A cell's coordinates as canonical strings (``aggregate.norm_key``: 8 and 8.0 nodes are one
    cell), so that our cells and the paper's compare equal."""
    return tuple(str(_canon(k, v)) for k, v in zip(keys, values, strict=True))


def select(
    cells: pd.DataFrame,
    studies: Sequence[str] | None = None,
    where: Mapping[str, object] | None = None,
) -> pd.DataFrame:
    """The rows of ``studies`` (None: all) that meet ``where``, with a seed; a run listed by
    several studies (one ``run_id``) counts once. Nothing else is dropped: ``pairing`` filters
    on the accuracy and then refuses ambiguity."""
    c = cells if studies is None else cells[cells["study"].isin(list(studies))]
    c = with_seed(c)
    if "run_id" in c:
        c = c.drop_duplicates("run_id")
    for cond in conditions(where):
        if len(c):
            c = c[cond.mask(c)]
    return c


# --- a run's identity beyond the coordinates --------------------------------------------------

# Config keys the coordinates and the seed already say: never a run's identity beyond them.
COVERED = {
    *CONFIG_PATHS.values(),
    "algorithm.compression.name",
    "algorithm.compression.ratio",
    "seed",
    "partition.seed",
}


def flat_config(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A config tree as dotted keys (a list or mapping value as its JSON text)."""
    out: dict[str, Any] = {}
    for k, v in tree.items():
        if isinstance(v, Mapping) and v:
            out.update(flat_config(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = json.dumps(v) if isinstance(v, (list, dict)) else v
    return out


def config_extras(configs: Sequence[Mapping[str, Any]]) -> tuple[list[str], list[dict[str, Any]]]:
    """(keys, flat configs): the result-affecting config keys (``lpdt.config.result_dict``) that
    the coordinates do not cover (``COVERED``) and whose values differ between the given
    configs (an empty config, a run without a record, takes no part), e.g. ``train.epochs`` of a
    study that trains longer; with each config flattened."""
    from lpdt.config import result_dict

    flat = [flat_config(result_dict(dict(c))) if c else {} for c in configs]
    known = [f for f in flat if f]
    leaves = sorted({k for f in known for k in f} - COVERED)
    keys = [k for k in leaves if len({json.dumps(f.get(k), sort_keys=True) for f in known}) > 1]
    return keys, flat


def norm_identity(norm: object, precision: object, vary: str, a: object, b: object) -> str:
    """The norm as pairing compares it: the run's norm (its precision's where it names none);
    when ``precision`` is varied, a run with its own precision's norm counts as
    ``"<a's>|<b's>"`` (``evonorm|rangeen``), so that FP-EvoNorm pairs with 8-bit
    Range-EvoNorm (the paper's FP vs LP) and any other norm (BatchNorm) only with itself."""
    prec = _canon("precision", precision)
    own = PAPER_NORMS.get(str(prec)) if prec is not None else None
    n = _canon("norm", norm) or own
    if vary == "precision" and n is not None and n == own:
        return "|".join(PAPER_NORMS.get(str(v), str(v)) for v in (a, b))
    return str(n)


# --- pairing ---------------------------------------------------------------------------------

DIVERGED, MISSING, UNPAIRED, DUPLICATE = "diverged", "missing", "unpaired", "duplicate"
SET_ASIDE_COLUMNS = ["_cell", "seed", "why", "detail", "run_a", "run_b"]


@dataclass(frozen=True)
class Pairing:
    """``pairs``: one row per pair (``pairs``' columns); ``set_aside``: one row per (cell, seed)
    with a run on either side that did not pair (``SET_ASIDE_COLUMNS``; ``why`` one of
    diverged, missing, unpaired, duplicate; ``detail`` a sentence naming the runs);
    ``cell_keys``: the names of ``_cell``'s values (the pair keys, then ``norm`` and config keys
    where runs of one cell differ in them)."""

    pairs: pd.DataFrame
    set_aside: pd.DataFrame
    cell_keys: list[str]


def _status(c: pd.DataFrame) -> pd.Series:
    """ok / diverged / missing per row: the ``status`` column where there is one (a frame of the
    paper's numbers has none), and never ok without an accuracy."""
    st = c["status"].astype(str) if "status" in c else pd.Series("ok", index=c.index)
    st = st.where(c["acc"].notna() | (st != "ok"), MISSING)
    return st.where(st.isin(["ok", DIVERGED]), MISSING)


def pairing(
    cells: pd.DataFrame,
    vary: str,
    a: object,
    b: object,
    studies: Sequence[str] | None = None,
    where: Mapping[str, object] | None = None,
    keys: Sequence[str] = KEYS,
) -> Pairing:
    """The pairs of ``vary == a`` against ``vary == b`` among the selected runs, and what was
    set aside. Two runs pair when they are ``ok``, have the same seed and the same identity
    except ``vary``: the pair keys, the norm (``norm_identity``) and the result-affecting config
    values beyond the coordinates (``config_extras``, from a ``config`` column of run configs).
    A (cell, seed) with a run on one side and no usable run on the other is set aside as
    diverged, missing (listed without a record) or unpaired (no run); two usable runs of one
    side, cell and seed are set aside as a duplicate naming both (``lpdt compare`` refuses them).
    A frame without ``run_id`` (the paper's numbers) keeps the first row of a duplicate."""
    va, vb = parse_value(vary, a), parse_value(vary, b)
    c = select(cells, studies, where)
    c = c[c[vary].map(lambda v: _canon(vary, v)).isin([va, vb])]
    need = {*keys, vary, "seed", "acc", "status", "run_id", "config", "norm", "precision"}
    c = c[[k for k in c.columns if k in need]].copy()  # not the histories: copies cost
    c["_side"] = ["a" if _canon(vary, v) == va else "b" for v in c[vary]]
    c["_status"] = _status(c)
    pk = pair_keys(vary, keys)
    c["_cell"] = [cell_key(pk, r) for r in c[pk].itertuples(index=False)]
    has_norm = "norm" in c and vary != "norm"
    c["_norm"] = (
        [norm_identity(n, p, vary, va, vb) for n, p in zip(c["norm"], c["precision"], strict=True)]
        if has_norm and "precision" in c
        else ""
    )
    configs = list(c["config"]) if "config" in c else [{}] * len(c)
    extra, flat = config_extras([x if isinstance(x, Mapping) else {} for x in configs])
    ids = []
    for f, n in zip(flat, c["_norm"], strict=True):
        ids.append((n, *(json.dumps(f.get(k), sort_keys=True) if f else None for k in extra)))
    c["_rest"] = ids
    c = _adopt_identity(c)
    c["_key"] = c["_rest"].map(repr)  # a hashable, sortable form of the identity

    # The norm and config keys in which runs of one cell differ join the cell's name.
    def distinct(i: int) -> Callable[[pd.Series], int]:  # values of the i-th key in a cell
        return lambda r: len({x[i] for x in r})

    split = [
        name
        for i, name in enumerate(["norm", *extra])
        if (c.groupby("_cell")["_rest"].agg(distinct(i)) > 1).any()
    ]
    idx = [["norm", *extra].index(k) for k in split]
    c["_cell"] = [cell + tuple(str(r[i]) for i in idx) for cell, r in zip(c["_cell"], c["_rest"])]
    has_ids = "run_id" in c
    c["_run"] = c["run_id"].astype(str) if has_ids else ""
    # Plain records grouped by (cell, identity, seed): a per-group frame costs too much for
    # lpdt.report.readers, which checks every claim once per run.
    groups: dict[tuple, list[dict]] = {}
    for r in c[[*pk, "seed", "acc", "_side", "_status", "_cell", "_key", "_run"]].to_dict(
        "records"
    ):
        groups.setdefault((r["_cell"], r["_key"], r["seed"]), []).append(r)
    pair_rows, aside = [], []
    names = {"a": _show(va), "b": _show(vb)}
    for (cell, _, seed), g in sorted(groups.items(), key=lambda kv: kv[0]):
        side = {s: [r for r in g if r["_side"] == s] for s in ("a", "b")}
        ok = {s: [r for r in side[s] if r["_status"] == "ok"] for s in ("a", "b")}
        if not has_ids:  # the paper's numbers: one value per cell
            ok = {s: v[:1] for s, v in ok.items()}
        dup = [s for s in ("a", "b") if len(ok[s]) > 1]
        if not dup and ok["a"] and ok["b"]:
            ra, rb = ok["a"][0], ok["b"][0]
            row = {k: ra[k] for k in pk} | {"seed": seed, "_a": ra["acc"], "_b": rb["acc"]}
            if has_ids:
                row |= {"run_a": ra["_run"], "run_b": rb["_run"]}
            pair_rows.append(row | {"_cell": cell})
            continue
        parts, whys = [], []
        for s in ("a", "b"):
            runs = ", ".join(r["_run"] for r in side[s])
            who = f"{s} ({vary}={names[s]})"
            if s in dup:
                whys.append(DUPLICATE)
                parts.append(f"{who} has several runs ({', '.join(r['_run'] for r in ok[s])})")
            elif ok[s]:
                continue
            elif any(r["_status"] == DIVERGED for r in side[s]):
                whys.append(DIVERGED)
                parts.append(f"{who} run {runs} diverged" if runs else f"{who} diverged")
            elif side[s]:
                whys.append(MISSING)
                parts.append(f"{who} run {runs} has no record" if runs else f"{who} no result")
            else:
                whys.append(UNPAIRED)
                parts.append(f"{who}: no run")
        side_run = {s: ", ".join(r["_run"] for r in side[s]) for s in ("a", "b")}
        why = next(w for w in (DUPLICATE, DIVERGED, MISSING, UNPAIRED) if w in whys)
        aside.append([cell, seed, why, "; ".join(parts), side_run["a"], side_run["b"]])
    cols = [*pk, "seed", "_a", "_b"] + (["run_a", "run_b"] if has_ids else []) + ["_cell"]
    p = pd.DataFrame(pair_rows, columns=cols)
    p["diff"] = p["_a"] - p["_b"]
    p = p[[*cols[:-1], "diff", "_cell"]]
    return Pairing(p, pd.DataFrame(aside, columns=SET_ASIDE_COLUMNS), [*pk, *split])


def _adopt_identity(c: pd.DataFrame) -> pd.DataFrame:
    """A run listed without a record has no config: it takes the identity, among the runs with a
    record of its cell and seed, of the one that lacks a run on its side (where exactly one
    does), so that it is named as the missing side of that pair rather than as a cell of its
    own."""
    rest = list(c["_rest"])
    sides: dict[tuple, dict[tuple, set[str]]] = {}
    for cell, seed, side, r in zip(c["_cell"], c["seed"], c["_side"], rest, strict=True):
        if None not in r[1:]:
            sides.setdefault((cell, seed, r[0]), {}).setdefault(r, set()).add(side)
    for i, (cell, seed, side, r) in enumerate(
        zip(c["_cell"], c["seed"], c["_side"], rest, strict=True)
    ):
        if len(r) > 1 and None in r[1:]:
            ids = sides.get((cell, seed, r[0]), {})
            free = [x for x, s in ids.items() if side not in s]
            if len(free) == 1:
                rest[i] = free[0]
    c["_rest"] = rest
    return c


def pairs(
    cells: pd.DataFrame,
    vary: str,
    a: object,
    b: object,
    studies: Sequence[str] | None = None,
    where: Mapping[str, object] | None = None,
    keys: Sequence[str] = KEYS,
) -> pd.DataFrame:
    """Rows (pair keys, seed, ``_a``, ``_b``, ``diff`` = a - b, ``_cell``; ``run_a``, ``run_b``
    when the frame has run ids): ``pairing``'s pairs."""
    return pairing(cells, vary, a, b, studies, where, keys).pairs


def choose_cells(seed_sets: Mapping[tuple[str, ...], frozenset[int]]) -> tuple[list, frozenset]:
    """(cells, seeds): the cells a summary uses and the seeds they all share. Coverage first:
    the most cells that share at least two seeds (one, where no cell has two), then the most
    seeds they share; so a cell with an extra seed, or one that lost a seed, does not make the
    summary read fewer cells, while a cell run once (a study kept at one seed) is left out rather
    than cut every other cell down to its one seed. Ties: the lowest seeds."""
    every = sorted(set().union(*seed_sets.values())) if seed_sets else []
    m = 2 if any(len(v) >= 2 for v in seed_sets.values()) else 1
    best: tuple[tuple[int, int], list, frozenset] | None = None
    for t in itertools.combinations(every, m):
        cover = [c for c, v in seed_sets.items() if set(t) <= v]
        if not cover:
            continue
        shared = frozenset.intersection(*(seed_sets[c] for c in cover))
        score = (len(cover), len(shared))
        if best is None or score > best[0]:
            best = (score, sorted(cover), shared)
    return ([], frozenset()) if best is None else (best[1], best[2])


def _seed_text(seeds: Iterable[int]) -> str:
    return ", ".join("none" if s == NO_SEED else str(s) for s in sorted(seeds))


def _aside_records(set_aside: pd.DataFrame) -> list[dict]:
    return [
        {"cell": list(r["_cell"]), "seed": int(r["seed"]), "why": r["why"], "detail": r["detail"]}
        for r in set_aside.sort_values(["_cell", "seed"]).to_dict("records")
    ]


def summarize(
    p: pd.DataFrame,
    threshold: Threshold | None,
    direction: str | None,
    of: str = "the claim's",
    set_aside: pd.DataFrame | None = None,
) -> dict:
    """The claim's record from paired differences (columns ``_cell``, ``seed``, ``diff``) and
    what pairing set aside (``Pairing.set_aside``); no verdict (``None``) without a threshold.
    ``of`` names whose cells and studies the notes speak of ("the claim's").

    Beside the numbers: ``seeds_of``, the seeds with a run in the cells used (n of them pair in
    every one); ``set_aside``, per cell used and seed, the pairs left out and why (diverged,
    missing, unpaired, duplicate, or ``not shared``: a seed that pairs in that cell but not in
    every cell used); ``cells_left_out``, per cell not used, its paired seeds and why."""
    aside = set_aside if set_aside is not None else pd.DataFrame(columns=SET_ASIDE_COLUMNS)
    seed_sets = {  # a cell is its tuple of coordinate values (cell_key)
        cast(tuple[str, ...], cell): frozenset(int(x) for x in g)
        for cell, g in p.groupby("_cell", sort=True)["seed"]
    }
    used, shared = choose_cells(seed_sets)
    left_out = _left_out(seed_sets, used, shared, aside, of)
    if not len(p):
        out: dict[str, Any] = {
            "verdict": NO_DATA,
            "mean": None,
            "sd": None,
            "ci": None,
            "n": 0,
            "half_width": None,
            "detectable": None,
            "cells": 0,
            "pairs": 0,
            "why": "no pair of finished runs",
        }
        if left_out:
            out["cells_left_out"] = left_out
        return out
    # Pair by seed over one set of cells (``choose_cells``): a cell run with fewer seeds (e.g. an
    # expensive study kept at one seed) would otherwise enter some seeds' means and not others'.
    excluded = len(seed_sets) - len(used)
    unshared = p[p["_cell"].isin(set(used)) & ~p["seed"].isin(shared)]
    p = p[p["_cell"].isin(set(used)) & p["seed"].isin(shared)]
    per_seed = p.groupby("seed")["diff"].mean().sort_index()
    iv = t_interval(per_seed.to_numpy())
    in_used = aside[aside["_cell"].isin(set(used))]
    seeds_of = set(p["seed"]) | set(unshared["seed"]) | {int(x) for x in in_used["seed"]}
    out = {
        "verdict": (
            None
            if threshold is None or direction is None
            else verdict(iv.low, iv.high, threshold, direction)
        ),
        "mean": rounded(iv.mean),
        "sd": rounded(iv.sd),
        "ci": None if iv.ci is None else [rounded(iv.low), rounded(iv.high)],
        "n": iv.n,
        "half_width": rounded(iv.half_width),
        "detectable": rounded(iv.detectable),
        "cells": int(p["_cell"].nunique()),
        "pairs": len(p),
        "per_seed": {("none" if s == NO_SEED else str(s)): rounded(v) for s, v in per_seed.items()},
        "min": rounded(float(p["diff"].min())),
        "max": rounded(float(p["diff"].max())),
        "cells_used": [list(c) for c in sorted(used)],
        "seeds_of": len(seeds_of),
    }
    if iv.n < 2:
        out["why"] = f"one seed: no interval can be formed (run {of} studies with seeds >= 2)"
    if excluded:
        out["cells_excluded"] = excluded
        out["cells_excluded_why"] = f"run with other seeds than {of} {len(shared)}-seed cells"
    notes = _aside_records(in_used) + [
        {
            "cell": list(r["_cell"]),
            "seed": int(r["seed"]),
            "why": NOT_SHARED,
            "detail": "it pairs in this cell but not in every cell used "
            f"(they share seeds {_seed_text(shared)})",
        }
        for r in unshared.to_dict("records")
    ]
    if notes:
        out["set_aside"] = sorted(notes, key=lambda d: (d["cell"], d["seed"]))
    if left_out:
        out["cells_left_out"] = left_out
    return out


NOT_SHARED = "not shared"


def _left_out(
    seed_sets: Mapping[tuple[str, ...], frozenset[int]],
    used: Sequence[tuple[str, ...]],
    shared: frozenset[int],
    aside: pd.DataFrame,
    of: str,
) -> list[dict]:
    """Per cell not used (one with pairs on other seeds, or one with runs and no pair): its
    paired seeds and why, with the pairs set aside in it."""
    out = []
    cells = sorted(set(seed_sets) | set(aside["_cell"]))
    for cell in cells:
        if cell in set(used):
            continue
        seeds = seed_sets.get(cell, frozenset())
        mine = aside[aside["_cell"] == cell]
        if not seeds:
            whys = sorted(set(mine["why"]))
            why = f"no pair ({', '.join(whys)})"
        elif len(seeds) == 1 and len(shared) > 1:
            why = f"one seed ({_seed_text(seeds)}): {of} other cells share {len(shared)}"
        else:
            why = f"seeds {_seed_text(seeds)} do not cover {of} shared seeds {_seed_text(shared)}"
        rec = {"cell": list(cell), "seeds": sorted(seeds), "why": why}
        if len(mine):
            rec["set_aside"] = [
                {k: d[k] for k in ("seed", "why", "detail")} for d in _aside_records(mine)
            ]
        out.append(rec)
    return out


def per_cell(
    p: pd.DataFrame,
    threshold: Threshold | None,
    direction: str | None,
    set_aside: pd.DataFrame | None = None,
) -> list[dict]:
    """One record per cell with a pair: its pairs (one per seed), mean difference, t-interval
    over its seeds, the verdict (None without a threshold), and the pairs set aside in it
    (``set_aside``, as in ``summarize``; absent when none)."""
    aside = set_aside if set_aside is not None else pd.DataFrame(columns=SET_ASIDE_COLUMNS)
    out = []
    for cell, g in p.groupby("_cell", sort=True):
        iv = t_interval(g["diff"].to_numpy())
        rec = {
            "cell": list(cast(tuple[str, ...], cell)),
            "pairs": len(g),
            "seeds": sorted(int(s) for s in g["seed"]),
            "mean": rounded(iv.mean),
            "sd": rounded(iv.sd),
            "ci": None if iv.ci is None else [rounded(iv.low), rounded(iv.high)],
            "verdict": (
                None
                if threshold is None or direction is None
                else verdict(iv.low, iv.high, threshold, direction)
            ),
        }
        mine = aside[aside["_cell"] == cell]
        if len(mine):
            rec["set_aside"] = [
                {k: d[k] for k in ("seed", "why", "detail")} for d in _aside_records(mine)
            ]
        out.append(rec)
    return out
