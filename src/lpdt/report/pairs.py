"""Paired comparisons of two conditions over runs: the one implementation behind the paper's
claims (``lpdt.report.claims``), the claims a study declares, and ``lpdt compare``.

A **pair** is two runs with equal coordinates except the varied key (``norm`` is ignored: an
8-bit run brings its own normalisation, Range-EvoNorm, through the ``precision`` coordinate) and
the **same seed** (the seed sets the partition shuffle, the initialisation and the data order).
Its difference is ``acc(a) - acc(b)``. A run without an accuracy (missing, diverged) pairs with
nothing. ``summarize`` turns the pairs into the claims' number: per seed, the mean over the cells
of that seed's paired difference; over the seeds, the mean with its 95 % t-interval
(``lpdt.report.stats``), its half-width and the design's minimum detectable effect
(``stats.detectable``), and the verdict for a threshold. Every seed averages over the same cells:
the cells that have the most common full seed set; the others are counted, not used.

Selections are data, so that a claim written in YAML and one written here are the same thing:
``where`` maps a coordinate to a condition (``0``, ``[90, 99]``, ``">0"``, ``">=0.8"``,
``"!=fp32"``, ``"90,99"``); values are compared in the canonical form of
``lpdt.report.aggregate.norm_key`` (compression 0.99 and 99 are one value).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

from lpdt.report.aggregate import KEYS, norm_key
from lpdt.report.stats import NO_DATA, Threshold, t_interval, verdict

NO_SEED = -1  # the seed of a run whose record names none (e.g. the paper's numbers)
IGNORED = ("norm",)  # coordinates that never tell the two runs of a pair apart
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


def _number(v: object) -> float | None:
    try:
        f = float(v)  # type: ignore[arg-type]
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
    """The coordinates two runs of a pair share: all but the varied one and ``IGNORED``."""
    return [k for k in keys if k != vary and k not in IGNORED]


def cell_key(keys: Sequence[str], values: Iterable[object]) -> tuple[str, ...]:
    """A cell's coordinates as canonical strings (``aggregate.norm_key``: 8 and 8.0 nodes are one
    cell), so that our cells and the paper's compare equal."""
    return tuple(str(_canon(k, v)) for k, v in zip(keys, values, strict=True))


def select(
    cells: pd.DataFrame,
    studies: Sequence[str] | None = None,
    where: Mapping[str, object] | None = None,
    keys: Sequence[str] = KEYS,
) -> pd.DataFrame:
    """The rows of ``studies`` (None: all) that meet ``where``, with a seed, one per (coordinates,
    seed): a run listed by several studies counts once."""
    c = cells if studies is None else cells[cells["study"].isin(list(studies))]
    c = with_seed(c).drop_duplicates([*keys, "seed"])
    for cond in conditions(where):
        if len(c):
            c = c[cond.mask(c)]
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
    when the frame has run ids): the accuracies of ``vary == a`` and ``vary == b`` for runs with
    otherwise equal coordinates and the same seed, both with an accuracy."""
    c = select(cells, studies, where, keys)
    c = c[c["acc"].notna()]
    pk = pair_keys(vary, keys)
    cols = [*pk, "seed", "acc"] + (["run_id"] if "run_id" in c else [])
    va, vb = parse_value(vary, a), parse_value(vary, b)
    side = c[vary].map(lambda v: _canon(vary, v))
    ren = {"acc": "_a", "run_id": "run_a"}
    left = c[side == va][cols].rename(columns=ren)
    right = c[side == vb][cols].rename(columns={"acc": "_b", "run_id": "run_b"})
    p = left.merge(right, on=[*pk, "seed"], how="inner")
    p["diff"] = p["_a"] - p["_b"]
    p["_cell"] = [cell_key(pk, r) for r in p[pk].itertuples(index=False)]
    return p


def _r(v: float | None, digits: int = 4) -> float | None:
    return None if v is None or not math.isfinite(v) else round(float(v), digits)


def summarize(
    p: pd.DataFrame, threshold: Threshold | None, direction: str | None, of: str = "the claim's"
) -> dict:
    """The claim's record from paired differences (columns ``_cell``, ``seed``, ``diff``); no
    verdict (``None``) without a threshold. ``of`` names whose cells and studies the notes speak
    of ("the claim's")."""
    if not len(p):
        return {
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
    # Pair by seed over one set of cells: a cell run with fewer seeds (e.g. an expensive study
    # kept at one seed) would otherwise enter some seeds' means and not others'. Keep the cells
    # that have the most common full seed set; the others are counted, not used.
    seed_sets = p.groupby("_cell")["seed"].agg(lambda s: tuple(sorted(set(s))))
    most = max(len(v) for v in seed_sets)
    full = seed_sets[seed_sets.map(len) == most].value_counts().index[0]
    used = seed_sets.index[seed_sets == full]
    excluded = len(seed_sets) - len(used)
    p = p[p["_cell"].isin(set(used))]
    per_seed = p.groupby("seed")["diff"].mean().sort_index()
    iv = t_interval(per_seed.to_numpy())
    out = {
        "verdict": (
            None
            if threshold is None or direction is None
            else verdict(iv.low, iv.high, threshold, direction)
        ),
        "mean": _r(iv.mean),
        "sd": _r(iv.sd),
        "ci": None if iv.ci is None else [_r(iv.low), _r(iv.high)],
        "n": iv.n,
        "half_width": _r(iv.half_width),
        "detectable": _r(iv.detectable),
        "cells": int(p["_cell"].nunique()),
        "pairs": len(p),
        "per_seed": {("none" if s == NO_SEED else str(s)): _r(v) for s, v in per_seed.items()},
        "min": _r(float(p["diff"].min())),
        "max": _r(float(p["diff"].max())),
        "cells_used": [list(c) for c in sorted(used)],
    }
    if iv.n < 2:
        out["why"] = f"one seed: no interval can be formed (run {of} studies with seeds >= 2)"
    if excluded:
        out["cells_excluded"] = excluded
        out["cells_excluded_why"] = f"run with other seeds than {of} {most}-seed cells"
    return out


def per_cell(p: pd.DataFrame, threshold: Threshold | None, direction: str | None) -> list[dict]:
    """One record per cell: its pairs (one per seed), mean difference, t-interval over its seeds
    and the verdict (None without a threshold)."""
    out = []
    for cell, g in p.groupby("_cell", sort=True):
        iv = t_interval(g["diff"].to_numpy())
        out.append(
            {
                "cell": list(cell),
                "pairs": len(g),
                "seeds": sorted(int(s) for s in g["seed"]),
                "mean": _r(iv.mean),
                "sd": _r(iv.sd),
                "ci": None if iv.ci is None else [_r(iv.low), _r(iv.high)],
                "verdict": (
                    None
                    if threshold is None or direction is None
                    else verdict(iv.low, iv.high, threshold, direction)
                ),
            }
        )
    return out
