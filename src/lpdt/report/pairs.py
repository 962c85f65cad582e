"""Paired comparisons of two conditions over runs: the one implementation behind the paper's
claims (``lpdt.report.claims``), the claims a study declares, and ``lpdt compare``.

A **pair** is two finished runs with the same identity except the varied key and the **same
seed** (the seed sets the partition shuffle, the initialisation and the data order). The
identity is the cell's coordinates (``pair_keys``), the norm (``norm_identities``: two runs of
one norm pair on it; varying precision, where a cell has no norm at both precisions, FP-EvoNorm
meets 8-bit Range-EvoNorm, each precision's paper norm, and the pair says so) and the
result-affecting config values beyond the coordinates in which the runs differ
(``config_extras``). Its difference is ``acc(a) - acc(b)``. ``pairing`` filters first and then
sets aside, with the reason, every (cell, seed) that does not pair: diverged, missing, unpaired,
or a duplicate (two finished runs of one side, identity and seed, both named; never resolved by
order); except that a diverged run on a side whose loss contradicts the claim (``loss_sides``)
counts as a loss (``DIVERGED_ACC``), not as missing data. ``lpdt.report.summary`` turns the
pairs into the claims' number (per seed, the mean over the cells; over the seeds, the mean and
its 95 % t-interval; the cells chosen at the claim's minimum of seeds; what was left out named).

Selections are data, so that a claim written in YAML and one written here are the same thing:
``where`` maps a coordinate to a condition (``0``, ``[90, 99]``, ``">0"``, ``">=0.8"``,
``"!=fp32"``, ``"90,99"``); values are compared in the canonical form of
``lpdt.report.aggregate.norm_key`` (compression 0.99 and 99 are one value).
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from lpdt.config import PAPER_NORMS
from lpdt.io import load_yaml
from lpdt.report.aggregate import BY_NAME, CONFIG_PATHS, KEYS, norm_key

NO_SEED = -1  # the seed of a run whose record names none (e.g. the paper's numbers)
# Coordinates left out of a cell's name: the norm is compared by ``pairing`` itself
# (``norm_identities``).
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


def is_number(v: Any) -> bool:
    """Whether ``v`` reads as a finite number (what the order conditions compare)."""
    return _number(v) is not None


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
            text = load_yaml(text)  # as a config file reads it: `010` is not the octal 8
    try:
        return _canon(key, text)
    except (TypeError, ValueError, OverflowError):  # OverflowError: inf or 1e400 as an integer
        raise ValueError(
            f"{key}: {text!r} is not a value of {key} ({BY_NAME[key].values})"
        ) from None


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
        values = [v.strip() for v in rest.split(",")]
        if "" in values:  # `skew=0.0,` read as "no run has skew=None"
            raise ValueError(f"where {key}{spec}: an empty value between commas")
        return Condition(key, op, tuple(parse_value(key, v) for v in values))
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
    ``pairing`` compares itself, ``norm_identities``)."""
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


def effective_norm(norm: object, precision: object) -> str | None:
    """The norm a run trains with: the one it names, else its precision's paper norm
    (``lpdt.config.PAPER_NORMS``: EvoNorm-S0 at fp32, Range-EvoNorm at 8 bits); None where
    neither is known."""
    prec = _canon("precision", precision)
    n = _canon("norm", norm) or (PAPER_NORMS.get(str(prec)) if prec is not None else None)
    return None if n is None else str(n)


def paper_norm_label(a: object, b: object) -> str:
    """``"evonorm|rangeen"``: the norm of a pair joined by its precisions' paper norms."""
    return "|".join(PAPER_NORMS.get(str(v), str(v)) for v in (a, b))


def norm_identities(
    cells: Sequence[tuple[str, ...]],
    sides: Sequence[str],
    norms: Sequence[str | None],
    vary: str,
    a: object,
    b: object,
) -> list[str]:
    """The norm as pairing compares it, per run (``cells``, ``sides`` "a" / "b" and
    ``effective_norm`` given row by row). Two runs pair on the norm they share: identical
    except the varied key. Only where ``precision`` is varied and a cell has no norm at both
    precisions that is a precision's paper norm on one side and not on the other, its runs with
    their own precision's paper norm pair with each other (``paper_norm_label``,
    ``evonorm|rangeen``: the paper's FP-EvoNorm against 8-bit Range-EvoNorm); so an FP and an
    8-bit run that both name Range-EvoNorm pair on it (the norm held fixed), and an FP BatchNorm
    run pairs only with an 8-bit BatchNorm run."""
    out = [str(n) for n in norms]
    if vary != "precision":
        return out
    pa, pb = PAPER_NORMS.get(str(a)), PAPER_NORMS.get(str(b))
    if pa is None or pb is None:
        return out
    have: dict[tuple[str, ...], dict[str, set[str]]] = {}
    for cell, side, n in zip(cells, sides, out, strict=True):
        have.setdefault(cell, {"a": set(), "b": set()})[side].add(n)
    joined = paper_norm_label(a, b)
    for i, (cell, side, n) in enumerate(zip(cells, sides, out, strict=True)):
        h = have[cell]
        by_paper = pa in h["a"] - h["b"] and pb in h["b"] - h["a"]
        if by_paper and n == (pa if side == "a" else pb):
            out[i] = joined
    return out


# --- pairing ---------------------------------------------------------------------------------

DIVERGED, MISSING, UNPAIRED, DUPLICATE = "diverged", "missing", "unpaired", "duplicate"
# ``both``: the (cell, seed) has a listed run on each side (whatever their status): a seed the
# design planned for that cell, which ``summarize`` counts for the claim's minimum of seeds.
SET_ASIDE_COLUMNS = ["_cell", "seed", "why", "detail", "run_a", "run_b", "both"]
# The accuracy a diverged run counts as where it counts as a loss (``loss_sides``): the lowest a
# run can score, so that divergence can only count against the claim.
DIVERGED_ACC = 0.0
SIDES = ("a", "b")


def loss_sides(direction: str | None) -> tuple[str, ...]:
    """The sides of a pair whose divergence contradicts a claim "effect (a - b) <direction>
    threshold": a's for ``>`` (a loss of a lowers the effect), b's for ``<=`` (a loss of b raises
    it), both for ``within`` (either loss takes the effect out of a range of a few points); none
    without a direction (``lpdt compare`` without a threshold sets every diverged run aside)."""
    return {">": ("a",), "<=": ("b",), "within": SIDES}.get(direction or "", ())


@dataclass(frozen=True)
class Pairing:
    """``pairs``: one row per pair (``pairs``' columns; ``_norm``, the norm the two runs were
    paired on, ``evonorm|rangeen`` where it is each precision's paper norm; ``_lost``, the side
    whose diverged run counts as a loss, else ""); ``set_aside``: one row per (cell, seed) with
    a run on either side that did not pair (``SET_ASIDE_COLUMNS``; ``why`` one of diverged,
    missing, unpaired, duplicate; ``detail`` a sentence naming the runs); ``cell_keys``: the
    names of ``_cell``'s values (the pair keys, then ``norm`` and config keys where runs of one
    cell differ in them)."""

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
    lost: Sequence[str] = (),
) -> Pairing:
    """The pairs of ``vary == a`` against ``vary == b`` among the selected runs, and what was
    set aside. Two runs pair when they are ``ok``, have the same seed and the same identity
    except ``vary``: the pair keys, the norm (``norm_identities``) and the result-affecting
    config values beyond the coordinates (``config_extras``, from a ``config`` column of run
    configs). A (cell, seed) whose run on a side of ``lost`` (``loss_sides``) diverged while
    the other side finished is a pair all the same, the diverged run counted as
    ``DIVERGED_ACC``: a loss, not missing data. Any other (cell, seed) with a run on one side
    and no usable run on the other is set aside as diverged, missing (listed without a record)
    or unpaired (no run); two usable runs of one side, cell and seed are set aside as a
    duplicate naming both (``lpdt compare`` refuses them). A frame without ``run_id`` (the
    paper's numbers) keeps the first row of a duplicate."""
    va, vb = parse_value(vary, a), parse_value(vary, b)
    c = select(cells, studies, where)
    c = c[c[vary].map(lambda v: _canon(vary, v)).isin([va, vb])]
    need = {*keys, vary, "seed", "acc", "status", "run_id", "config", "norm", "precision"}
    c = c[[k for k in c.columns if k in need]].copy()  # not the histories: copies cost
    c["_side"] = ["a" if _canon(vary, v) == va else "b" for v in c[vary]]
    c["_status"] = _status(c)
    pk = pair_keys(vary, keys)
    c["_cell"] = [cell_key(pk, r) for r in c[pk].itertuples(index=False)]
    has_norm = "norm" in c and vary != "norm" and "precision" in c
    c["_norm"] = (
        norm_identities(
            list(c["_cell"]),
            list(c["_side"]),
            [effective_norm(n, p) for n, p in zip(c["norm"], c["precision"], strict=True)],
            vary,
            va,
            vb,
        )
        if has_norm
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
    cols = [*pk, "seed", "acc", "_side", "_status", "_cell", "_key", "_run", "_norm"]
    for r in c[cols].to_dict("records"):
        groups.setdefault((r["_cell"], r["_key"], r["seed"]), []).append(r)
    pair_rows, aside = [], []
    names = {"a": _show(va), "b": _show(vb)}
    for (cell, _, seed), g in sorted(groups.items(), key=lambda kv: kv[0]):
        side = {s: [r for r in g if r["_side"] == s] for s in SIDES}
        ok = {s: [r for r in side[s] if r["_status"] == "ok"] for s in SIDES}
        if not has_ids:  # the paper's numbers: one value per cell
            ok = {s: v[:1] for s, v in ok.items()}
        dup = [s for s in SIDES if len(ok[s]) > 1]
        loss = [
            s
            for s in lost
            if not dup
            and not ok[s]
            and ok["b" if s == "a" else "a"]
            and any(r["_status"] == DIVERGED for r in side[s])
        ]
        if not dup and ((ok["a"] and ok["b"]) or loss):
            run = {s: ok[s][0] if ok[s] else {**side[s][0], "acc": DIVERGED_ACC} for s in SIDES}
            ra, rb = run["a"], run["b"]
            row = {k: ra[k] for k in pk} | {"seed": seed, "_a": ra["acc"], "_b": rb["acc"]}
            if has_ids:
                row |= {
                    s_: ", ".join(sorted(r["_run"] for r in (ok[s] or side[s])))
                    for s, s_ in (("a", "run_a"), ("b", "run_b"))
                }
            lost_side = f"{loss[0]} ({vary}={names[loss[0]]})" if loss else ""
            pair_rows.append(row | {"_norm": ra["_norm"], "_lost": lost_side, "_cell": cell})
            continue
        parts, whys = [], []
        for s in SIDES:
            runs = ", ".join(sorted(r["_run"] for r in side[s]))
            who = f"{s} ({vary}={names[s]})"
            if s in dup:
                whys.append(DUPLICATE)
                several = ", ".join(sorted(r["_run"] for r in ok[s]))
                parts.append(f"{who} has several runs ({several})")
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
        side_run = {s: ", ".join(sorted(r["_run"] for r in side[s])) for s in SIDES}
        why = next(w for w in (DUPLICATE, DIVERGED, MISSING, UNPAIRED) if w in whys)
        both = bool(side["a"]) and bool(side["b"])
        aside.append([cell, seed, why, "; ".join(parts), side_run["a"], side_run["b"], both])
    cols = [*pk, "seed", "_a", "_b"] + (["run_a", "run_b"] if has_ids else [])
    cols += ["_norm", "_lost", "_cell"]
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
    """Rows (pair keys, seed, ``_a``, ``_b``, ``_norm``, ``_lost``, ``diff`` = a - b, ``_cell``;
    ``run_a``, ``run_b`` when the frame has run ids): ``pairing``'s pairs."""
    return pairing(cells, vary, a, b, studies, where, keys).pairs
