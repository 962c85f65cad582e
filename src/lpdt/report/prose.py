"""The report's generated prose: every sentence of the PDF that states a result or a setup,
computed from the run table, the claims and the tables (``lpdt.report.pdf`` lays them out).

- page 1: ``summary_sentences``, ``what_ran`` (its rows), ``seeds_text``;
- the figures' captions (``figure_captions``);
- the claims' details in words (``claim_details``, ``cell_text``: a cell named by its
  coordinates as the tables name them, a seed's value as "seed: value"), never a Python
  literal;
- where our numbers differ from the paper's (``differences_text``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from lpdt.grid import Manifest
from lpdt.report import artifacts
from lpdt.report.aggregate import (
    BY_NAME,
    KEYS,
    engine_counts,
    run_counts,
    stand_in_names,
    training_seconds,
)
from lpdt.report.claim_text import (
    declared_claims,
    effect_text,
    paper_claims,
    precision_text,
    set_aside_text,
    verdict_counts,
)
from lpdt.report.claims import ClaimResult, sent_text
from lpdt.report.cost_tables import ratio_ranges
from lpdt.report.describe import illustrative_text, setup_text, spread_text
from lpdt.report.figures import fig1_spread_text, figure_runs
from lpdt.report.plateau_text import claims_2x_sentence, plateau_row, plateau_sentence
from lpdt.report.stats import HELD, INCONCLUSIVE, LEVEL, NO_DATA, NOT_HELD, POWER
from lpdt.report.tables import NOT_RUN

DIFF_POINTS = 1.0  # "cells differ by more than this many points" in the differences section


def level() -> str:
    return f"{LEVEL * 100:g} %"


PRECISION_HEAD = "± / detectable"
PRECISION_CAPTION = (
    "± / detectable: the interval's half-width; the smallest distance from the threshold "
    f"detected with {POWER * 100:g} % power (paired t)."
)


def figure_captions(
    df: pd.DataFrame, analysis: Path, cost: Path, scale: str = "paper"
) -> dict[str, str]:
    """Each figure's caption: what it plots, then its setup read from the runs it plots (or the
    analysis / cost files it draws), then what its error bars are, and (below the paper scale)
    which of its cells are one-seed illustrations (``illustrative_text``)."""
    out = {}
    inputs = {"runs": df, "analysis": analysis, "cost": cost}
    for figure in artifacts.FIGURE_LIST:
        setup = figure.setup_text(inputs)  # a figure of files: its entry's setup sentence
        if setup is None:
            runs = figure_runs(df, figure.stem)
            spread = fig1_spread_text(runs) if figure.number == 1 else spread_text(runs)
            setup = f"Runs: {setup_text(runs)}. {spread} {illustrative_text(runs, scale)}".rstrip()
        out[figure.stem] = f"{figure.what} {setup}"
    return out


def duration(seconds: float) -> str:
    """'2 h 05 min', '12 min 30 s', '45 s'."""
    s = int(round(seconds))
    if s >= 3600:
        return f"{s // 3600} h {s % 3600 // 60:02d} min"
    if s >= 60:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s} s"


def seed_set_text(seeds: tuple[int, ...]) -> str:
    """'3 seeds (1234-1236)', '2 seeds (1, 5)', '1 seed (1234)', 'seed not recorded'."""
    if not seeds:
        return "seed not recorded"
    contiguous = list(seeds) == list(range(seeds[0], seeds[0] + len(seeds)))
    names = (
        f"{seeds[0]}-{seeds[-1]}" if contiguous and len(seeds) > 2 else ", ".join(map(str, seeds))
    )
    return f"{len(seeds)} seed{'s' if len(seeds) > 1 else ''} ({names})"


def study_seeds_text(runs: pd.DataFrame) -> str:
    """One study's seeds per cell (``KEYS``), from its listed runs: '3 seeds (1-3) per cell'
    where every cell has the same seeds, else each seed set with its number of cells, most seeds
    first: '6 seeds (1234-1239) in 3 cells, 5 seeds (1234-1238) in 1 cell, 1 seed (1234) in 1
    cell' (a study's seeds together would hide that some of its cells ran fewer)."""
    keys = [k for k in KEYS if k in runs]
    cells: Counter[tuple[int, ...]] = Counter(
        tuple(sorted({int(x) for x in g["seed"].dropna()}))
        for _, g in runs.drop_duplicates("run_id").groupby(keys, dropna=False)
    )
    if len(cells) == 1:
        return f"{seed_set_text(next(iter(cells)))} per cell"
    order = sorted(cells, key=lambda seeds: (-len(seeds), seeds))
    return ", ".join(
        f"{seed_set_text(seeds)} in {cells[seeds]} cell{'s' if cells[seeds] > 1 else ''}"
        for seeds in order
    )


def seeds_text(df: pd.DataFrame) -> str:
    """Per group of studies alike, their seeds per cell (``study_seeds_text``): '3 seeds
    (1234-1236) per cell: table3, table4; 5 seeds (1234-1238) in 1 cell, 1 seed (1234) in 1 cell:
    fig1' (from the manifest's seeds; a study's missing and diverged runs count too)."""
    if not len(df) or df["seed"].isna().all():
        return "not recorded (one run per cell)"
    groups: dict[str, list[str]] = {}
    most: dict[str, int] = {}  # the most seeds of a study of the group: the groups' order
    for study, g in df.groupby("study", sort=False):
        text = study_seeds_text(g)
        groups.setdefault(text, []).append(str(study))
        most[text] = max(most.get(text, 0), int(g["seed"].nunique()))
    order = sorted(groups, key=lambda t: (-most[t], t))
    return "; ".join(f"{t}: {', '.join(groups[t])}" for t in order)


def stand_ins(df: pd.DataFrame) -> list[str]:
    used = df.drop_duplicates("run_id")
    return stand_in_names(used["stand_in"])


def _n_phrase(counts: dict[str, int]) -> str:
    words = [
        f"{counts[HELD]} held",
        f"{counts[NOT_HELD]} not held",
        f"{counts[INCONCLUSIVE]} inconclusive",
    ]
    if counts[NO_DATA]:
        words.append(f"{counts[NO_DATA]} had not enough data")
    return ", ".join(words[:-1]) + " and " + words[-1]


def summary_sentences(
    claims: list[ClaimResult], df: pd.DataFrame, plateau: pd.DataFrame | None = None
) -> list[str]:
    """The summary page's sentences, each computed from the claims, the run table and the
    plateau check (``lpdt.report.plateau``; None: no check). The claims declared in the studies
    get a sentence of their own, after the paper's."""
    out = []
    declared = declared_claims(claims)
    claims = paper_claims(claims)
    acc = [c for c in claims if c.kind == "accuracy"]
    cost = [c for c in claims if c.kind == "cost"]
    ns = sorted({c.n for c in acc if c.ci is not None})
    over = (
        f" ({level()} t-intervals over {ns[0]} seeds)"
        if len(ns) == 1
        else f" ({level()} t-intervals over {ns[0]}-{ns[-1]} seeds)"
        if ns
        else " (no claim had two seeds, so no interval could be formed)"
    )
    s1 = f"Of {len(acc)} accuracy claims, {_n_phrase(verdict_counts(acc))}{over}"
    if cost:
        cc = verdict_counts(cost)
        s1 += (
            f"; of {len(cost)} measured cost claim{'s' if len(cost) > 1 else ''} (the bytes "
            f"of one message in the 8-bit wire format, not these runs' traffic), {cc[HELD]} held"
            + (f", {cc[NOT_HELD]} not held" if cc[NOT_HELD] else "")
            + (f", {cc[NO_DATA]} without data" if cc[NO_DATA] else "")
        )
    arith = [c for c in claims if c.kind == "arithmetic"]
    if arith:
        s1 += (
            f"; {len(arith)} ({', '.join(c.effect.split(' (')[0] for c in arith)}) "
            "are arithmetic from the paper's constants, shown without a verdict"
        )
    out.append(s1 + ".")
    if declared:
        out.append(
            f"Of {len(declared)} claim{'s' if len(declared) != 1 else ''} declared in the "
            f"studies ({', '.join(c.id for c in declared)}), "
            f"{_n_phrase(verdict_counts(declared))}."
        )
    # (claim, our mean, the paper's effect): the accuracy claims where both numbers are known.
    both = [
        (c, c.mean, c.paper_effect)
        for c in acc
        if c.mean is not None and c.paper_effect is not None
    ]
    if both:
        far = max(both, key=lambda t: abs(t[1] - t[2]))[0]
        out.append(
            f'The largest gap to the paper is on "{far.statement}": '
            f"{far.effect} is {effect_text(far)} here against "
            f"{far.paper_effect:.2f} in the paper."
        )
        same = [c for c, mean, paper in both if (mean > 0) == (paper > 0)]
        out.append(
            f"Our mean effect has the paper's sign in {len(same)} of {len(both)} accuracy claims."
        )
    counts = run_counts(df) if len(df) else {"total": 0, "ok": 0, "diverged": 0, "missing": 0}
    s4 = f"{counts['ok']} of {counts['total']} runs finished"
    bad = [f"{counts[k]} {k}" for k in ("diverged", "missing") if counts[k]]
    s4 += f" ({', '.join(bad)})" if bad else ""
    stand = stand_ins(df)
    if stand:
        s4 += (
            "; the accuracies come from stand-in datasets or models (named under What ran), "
            "so compare the direction and size of effects, not the values"
        )
    else:
        s4 += "; all runs used the paper's datasets and models"
    out.append(s4 + ".")
    out.append(plateau_sentence(plateau, df))
    moved = claims_2x_sentence(plateau, df)
    if moved:
        out.append(moved)
    return out


def what_ran(
    df: pd.DataFrame, manifest: Manifest, plateau: pd.DataFrame | None = None
) -> list[list[str]]:
    counts = run_counts(df) if len(df) else {"total": 0, "ok": 0, "diverged": 0, "missing": 0}
    used = df.drop_duplicates("run_id")
    with_time = int(used["time_s"].notna().sum()) if "time_s" in used else 0
    datasets = sorted({str(x) for x in used["dataset_used"].dropna()})
    engines = ", ".join(
        f"{k}: {v} run{'s' if v != 1 else ''}" for k, v in engine_counts(df).items()
    )
    # Paired rows share a line, so that the summary page holds the whole table.
    return [
        ["Scale; engine", f"{manifest.scale}; engine {engines or 'none'}"],
        ["Stand-ins", "; ".join(stand_ins(df)) or "none: the paper's datasets and models"],
        ["Seeds per cell", seeds_text(df)],
        [
            "Runs; training time",
            f"{counts['total']} unique runs: {counts['ok']} finished, {counts['diverged']} "
            f"diverged, {counts['missing']} missing (no record); training wall time "
            f"{duration(training_seconds(df))} summed over the {with_time} run records "
            "(time.total_s; parallel jobs overlap)",
        ],
        ["Datasets trained on", ", ".join(datasets) or "none"],
        ["Plateau check", plateau_row(plateau, used)],
    ]


def differences_text(tables: dict) -> list[str]:
    """Plain statements of where our numbers differ from the paper's (all computed), one
    paragraph each (the PDF's section "Where our numbers differ from the paper")."""
    out: list[str] = []
    for n in artifacts.TABLE_STUDY:  # the accuracy tables: those filled by a study's runs
        if n not in tables:
            continue
        m = tables[n][0]
        ok = m[(m["status"] == "ok") & m["paper"].notna()]
        not_run = int((m["status"] == NOT_RUN).sum())
        bad = int(m["status"].isin(["missing", "diverged"]).sum())
        stand = stand_in_names(m["stand_in"])
        if len(ok):
            d = ok["diff"]
            txt = (
                f"Table {n}: {len(ok)} cells compared; ours (mean over seeds) - paper: mean {d.mean():+.2f}, "
                f"largest |difference| {d.abs().max():.2f} points; {int((d.abs() > DIFF_POINTS).sum())} "
                f"cells differ by more than {DIFF_POINTS:g} point."
            )
        else:
            txt = f"Table {n}: no cell of ours can be compared with the paper at this scale."
        txt += f" {not_run} paper cells not run at this scale" + (
            f", {bad} missing or diverged." if bad else "."
        )
        if stand:
            txt += (
                " Our runs use STAND-INS (" + "; ".join(stand) + "), so the accuracies are not "
                "expected to match the paper's; compare trends, not values."
            )
        out.append(txt)
    if 10 in tables:
        ratios = ratio_ranges(tables[10][0])
        if ratios:
            out.append(
                "Table 10, ours / paper: "
                + "; ".join(f"{k} {lo:.2f}-{hi:.2f}x" for k, (lo, hi) in ratios.items())
                + "."
            )
    for part in tables.get(3, (None, []))[1]:
        if part.header and part.header[-1] == "Agrees":
            agree = sum(r[-1] == "yes" for r in part.rows)
            # a row by all it is named by (model, reading, graph, n, epochs, compression): rows
            # of one model and graph differ in their compression or reading
            disagree = list(
                dict.fromkeys(
                    _data_row_name(dict(zip(part.header, r))) for r in part.rows if r[-1] != "yes"
                )
            )
            txt = (
                f"Table 3 'Data': {agree} of {len(part.rows)} rows of the cost model agree with "
                "the printed digits" + (f"; not: {', '.join(disagree)}." if disagree else ".")
            )
            out.append(txt)
    return out


def _data_row_name(row: dict[str, str]) -> str:
    """A row of Table 3's 'Data' part (``cost_tables.data_table``; header -> cell) by its model,
    graph, nodes and compression, and its reading where it is not the paper's configuration:
    'vgg11 torus 16 0 %', 'vgg11 directed_ring 16 0 % (reference code: 1 out-peer, 100 epochs)'."""
    name = f"{row['Model']} {row['Topology']} {row['n']} {row['Comp.']}"
    reading = row.get("Reading", "paper configuration")
    return name if reading == "paper configuration" else f"{name} ({reading})"


def ours_text(c: ClaimResult) -> str:
    """Page 1's "Ours" cell: our effect (``claim_text.effect_text``) and what the claim left out
    (``claim_text.set_aside_text``, as claims.md gives it); '-' where there is neither."""
    parts = [t for t in (effect_text(c), set_aside_text(c)) if t and t != "-"]
    return "; ".join(parts) or "-"


# --- the claims' details in words --------------------------------------------------------------

MAX_ASIDE = 6  # set-aside pairs and left-out cells listed per claim in the PDF (all: claims.json)


def _value_text(key: str, value: object) -> str:
    """One coordinate of a cell as the tables print it, with the word prose needs: '4 nodes',
    '99 % compression', 'skew 0.9', 'QGM' / 'no QGM'; a name as it is."""
    text = str(value)
    if key == "nodes":
        return f"{text} nodes"
    if key == "compression":
        label = BY_NAME[key].label(text)
        return f"{label} compression" if label.endswith("%") else f"{label} messages"
    if key == "skew":
        try:
            return f"skew {float(text):g}"
        except ValueError:
            return f"skew {text}"
    if key == "qgm":
        return "QGM" if text.strip().lower() in ("true", "1", "yes") else "no QGM"
    if key in KEYS:
        return text
    return f"{key} {text}"  # a config key pairing named beyond the coordinates


def cell_text(keys: Sequence[str], values: Sequence[object]) -> str:
    """A claim's cell by its coordinates, as the tables name them: 'agnews, distilbert,
    directed_ring, 4 nodes, 0 % compression, skew 0.9, choco, no QGM' (``keys``: the claim's
    cell keys, ``lpdt.report.claims.claim_keys``; a value beyond them is named by position)."""
    named = [_value_text(k, v) for k, v in zip(keys, values, strict=False)]
    named += [str(v) for v in list(values)[len(keys) :]]
    return ", ".join(named)


def _points(x: object) -> str:
    return f"{float(x):.2f}" if isinstance(x, int | float) else str(x)


def claim_details(c: ClaimResult, keys: Sequence[str] | None = None) -> str:
    """A claim's numbers (``ClaimResult.numbers``) as a reader reads them: 'sd 0.41; ± /
    detectable ±0.52 / 0.84; 4 cells, 4 pairs; per seed (points): 1234: 0.39, 1235: 0.20; min
    0.00, max 0.78; one seed: no interval ...; left out: agnews, distilbert, ... (no pair)'.
    ``keys`` name the coordinates of the claim's cells (None: the cells by their values)."""
    nums: Mapping[str, Any] = c.numbers
    parts: list[str] = []
    if c.sd is not None:
        parts += [f"sd {c.sd:.2f}", f"± / detectable {precision_text(c)}"]
    counts = [f"{nums[k]} {k if nums[k] != 1 else k[:-1]}" for k in ("cells", "pairs") if k in nums]
    if counts:
        parts.append(", ".join(counts))
    per_seed = nums.get("per_seed") or {}
    if per_seed:
        seeds = ", ".join(f"{s}: {_points(v)}" for s, v in per_seed.items())
        parts.append(f"per seed (points): {seeds}")
    if "min" in nums and "max" in nums:
        parts.append(f"min {_points(nums['min'])}, max {_points(nums['max'])}")
    if nums.get("cells_excluded"):
        parts.append(f"{nums['cells_excluded']} cells excluded")
    if nums.get("why"):
        parts.append(str(nums["why"]))
    names = list(keys or [])

    def cell(values: Sequence[object]) -> str:
        return cell_text(names, values) if names else ", ".join(map(str, values))

    aside = [
        f"counted as a loss: seed {d['seed']} of {cell(d['cell'])} ({d['detail']})"
        for d in nums.get("counted_as_loss", [])
    ]
    aside += [
        f"set aside: seed {d['seed']} of {cell(d['cell'])}: {d['why']} ({d['detail']})"
        for d in nums.get("set_aside", [])
    ]
    aside += [f"left out: {cell(d['cell'])}: {d['why']}" for d in nums.get("cells_left_out", [])]
    if len(aside) > MAX_ASIDE:
        aside = aside[:MAX_ASIDE] + [f"{len(aside) - MAX_ASIDE} more in claims.json"]
    sent = [sent_text(nums["sent_8bit"])] if nums.get("sent_8bit") else []
    return "; ".join(x for x in [*parts, *aside, *sent] if x)
