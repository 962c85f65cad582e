"""The claims' number from pairs (``lpdt.report.pairs.pairing``): the cells and seeds a claim
reads, its mean over seeds with the 95 % t-interval and verdict, and what it left out.

``summarize``: per seed, the mean over the cells of that seed's paired difference; over the
seeds, the mean with its 95 % t-interval (``lpdt.report.stats``), its half-width and the
design's minimum detectable effect (``stats.detectable``), and the verdict for a threshold.
Every seed averages over the same cells, chosen for coverage at the claim's minimum of seeds
(``minimum_seeds``: the fewest seeds any of its cells planned, among those planned with more than
one; ``choose_cells``: the most cells sharing that many seeds, over the seeds they all share). A
cell that would take the claim below its minimum is left out and named (``cells_left_out``,
"below the minimum"), as is a cell run with one seed among cells with more ("one seed"); a seed
that pairs in a cell used but not in every one is named as ``not shared``; a diverged run
counted as a loss is named in ``counted_as_loss``. ``per_cell``: the same per cell.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

import pandas as pd

from lpdt.report.formatting import rounded
from lpdt.report.pairs import DIVERGED_ACC, NO_SEED, SET_ASIDE_COLUMNS
from lpdt.report.stats import NO_DATA, Threshold, t_interval, verdict


def choose_cells(
    seed_sets: Mapping[tuple[str, ...], frozenset[int]], minimum: int = 2
) -> tuple[list, frozenset]:
    """(cells, seeds): the cells a summary uses and the seeds they all share. Coverage first:
    the most cells that share at least ``minimum`` seeds (the claim's minimum,
    ``minimum_seeds``; fewer only where no cell pairs that many: then as many as the best cell
    pairs), then the most seeds they share. So a cell with an extra seed does not make the
    summary read fewer cells, a cell that pairs fewer seeds than the minimum is left out rather
    than cut every other cell down to its seeds, and a cell run once (a study kept at one seed)
    is left out of a claim whose other cells have more. Ties: the lowest seeds."""
    if not seed_sets:
        return [], frozenset()
    every = sorted(set().union(*seed_sets.values()))
    m = max(1, min(minimum, max(len(v) for v in seed_sets.values())))
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


def planned_seeds(
    p: pd.DataFrame, set_aside: pd.DataFrame
) -> dict[tuple[str, ...], frozenset[int]]:
    """Per cell, the seeds its design planned: those that pair, and those set aside with a
    listed run on each side (``both``: diverged, missing, duplicate; not a seed with a run on one
    side only, which the design never meant to pair)."""
    out: dict[tuple[str, ...], set[int]] = {}
    for cell, seed in zip(p["_cell"], p["seed"], strict=True):
        out.setdefault(cast(tuple[str, ...], cell), set()).add(int(seed))
    if "both" in set_aside:
        for cell, seed, both in zip(
            set_aside["_cell"], set_aside["seed"], set_aside["both"], strict=True
        ):
            if both is True:
                out.setdefault(cast(tuple[str, ...], cell), set()).add(int(seed))
    return {k: frozenset(v) for k, v in out.items()}


def minimum_seeds(planned: Mapping[tuple[str, ...], frozenset[int]]) -> int:
    """A claim's minimum of seeds: the fewest any of its cells planned, among the cells planned
    with more than one (5 at the quick scale, whose claim cells run 5 or 6); 1 where none has
    more (the paper's numbers, a scale of one seed)."""
    multi = [len(v) for v in planned.values() if len(v) >= 2]
    return min(multi) if multi else 1


def _seed_text(seeds: Iterable[int]) -> str:
    return ", ".join("none" if s == NO_SEED else str(s) for s in sorted(seeds))


def _aside_records(set_aside: pd.DataFrame) -> list[dict]:
    return [
        {"cell": list(r["_cell"]), "seed": int(r["seed"]), "why": r["why"], "detail": r["detail"]}
        for r in set_aside.sort_values(["_cell", "seed"]).to_dict("records")
    ]


def _loss_records(p: pd.DataFrame) -> list[dict]:
    """The pairs in which a diverged run counts as a loss (``_lost``): cell, seed, detail."""
    if "_lost" not in p:
        return []
    out = []
    for r in p[p["_lost"] != ""].sort_values(["_cell", "seed"]).to_dict("records"):
        who = str(r["_lost"])
        run = r.get("run_b" if who.startswith("b") else "run_a", "")
        out.append(
            {
                "cell": list(r["_cell"]),
                "seed": int(r["seed"]),
                "detail": f"{who} run {run} diverged: counted as a loss "
                f"({DIVERGED_ACC:g} % accuracy)"
                if run
                else f"{who} diverged: counted as a loss ({DIVERGED_ACC:g} % accuracy)",
            }
        )
    return out


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

    Beside the numbers: ``min_seeds``, the claim's minimum of seeds (``minimum_seeds``);
    ``seeds_of``, the seeds with a run in the cells used (n of them pair in every one);
    ``counted_as_loss``, per cell used and seed, a diverged run counted as a loss
    (``pairing``'s ``lost``); ``set_aside``, per cell used and seed, the pairs left out and why
    (diverged, missing, unpaired, duplicate, or ``not shared``: a seed that pairs in that cell
    but not in every cell used); ``cells_left_out``, per cell not used, its paired seeds and
    why."""
    aside = set_aside if set_aside is not None else pd.DataFrame(columns=SET_ASIDE_COLUMNS)
    seed_sets = {  # a cell is its tuple of coordinate values (cell_key)
        cast(tuple[str, ...], cell): frozenset(int(x) for x in g)
        for cell, g in p.groupby("_cell", sort=True)["seed"]
    }
    planned = planned_seeds(p, aside)
    minimum = minimum_seeds(planned)
    used, shared = choose_cells(seed_sets, minimum)
    left_out = _left_out(seed_sets, planned, used, shared, aside, of, minimum)
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
        "min_seeds": minimum,
    }
    if iv.n < 2:
        out["why"] = f"one seed: no interval can be formed (run {of} studies with seeds >= 2)"
    elif iv.n < minimum:
        out["why"] = (
            f"n={iv.n}, below {of} minimum of {minimum} seeds: no cell pairs {minimum} seeds"
        )
    if excluded:
        out["cells_excluded"] = excluded
        out["cells_excluded_why"] = (
            f"run with one seed, or pairing fewer seeds than {of} {len(shared)} shared "
            "(cells_left_out)"
        )
    losses = _loss_records(p)
    if losses:
        out["counted_as_loss"] = losses
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
BELOW_MINIMUM = "below the minimum"


def _left_out(
    seed_sets: Mapping[tuple[str, ...], frozenset[int]],
    planned: Mapping[tuple[str, ...], frozenset[int]],
    used: Sequence[tuple[str, ...]],
    shared: frozenset[int],
    aside: pd.DataFrame,
    of: str,
    minimum: int,
) -> list[dict]:
    """Per cell not used (one with pairs on other seeds, or one with runs and no pair): its
    paired seeds and why (no pair; one seed, a cell planned with one; below the minimum, a cell
    whose pairs would take the claim below ``minimum`` seeds; or seeds that do not cover the
    shared ones), with the pairs set aside in it."""
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
        elif len(planned.get(cell, seeds)) == 1 and len(shared) > 1:
            why = f"one seed ({_seed_text(seeds)}): {of} other cells share {len(shared)}"
        elif len(seeds) < minimum <= len(shared):
            why = (
                f"{BELOW_MINIMUM} ({len(seeds)} seed{'s' if len(seeds) != 1 else ''} pair: "
                f"{_seed_text(seeds)}): keeping it would take {of} n to {len(seeds)}, below "
                f"its minimum of {minimum} seeds"
            )
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
    over its seeds, the verdict (None without a threshold), the diverged runs counted as a loss
    in it (``counted_as_loss``) and the pairs set aside in it (``set_aside``, as in
    ``summarize``); each absent when none."""
    aside = set_aside if set_aside is not None else pd.DataFrame(columns=SET_ASIDE_COLUMNS)
    out = []
    for cell, g in p.groupby("_cell", sort=True):
        iv = t_interval(g["diff"].to_numpy())
        rec: dict[str, Any] = {
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
        losses = _loss_records(g)
        if losses:
            rec["counted_as_loss"] = [{k: d[k] for k in ("seed", "detail")} for d in losses]
        mine = aside[aside["_cell"] == cell]
        if len(mine):
            rec["set_aside"] = [
                {k: d[k] for k in ("seed", "why", "detail")} for d in _aside_records(mine)
            ]
        out.append(rec)
    return out
