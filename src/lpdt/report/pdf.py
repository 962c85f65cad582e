"""``reports/report.pdf``: a one-page summary, then figures, claims, tables, and an appendix.

Page 1 is generated from the results only: per claim the paper's effect beside ours with its
95 % interval and the verdict, what ran (scale, stand-ins, seeds, runs, training time) and a few
sentences (``summary_sentences``). Then the figures, the claims' definitions, where our numbers
differ from the paper's, every table, and the versions in an appendix.

reportlab, landscape A4 so that the paper's widest tables fit at a readable size.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import platform
import subprocess
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
from reportlab.lib import colors
from reportlab.lib.pagesizes import A4, landscape
from reportlab.lib.styles import ParagraphStyle, getSampleStyleSheet
from reportlab.lib.units import cm
from reportlab.platypus import (
    Image,
    KeepTogether,
    PageBreak,
    Paragraph,
    SimpleDocTemplate,
    Spacer,
    Table,
    TableStyle,
)

from lpdt.grid import Manifest
from lpdt.report import artifacts
from lpdt.report.aggregate import (
    KEYS,
    engine_counts,
    run_counts,
    stand_in_names,
    training_seconds,
)
from lpdt.report.claims import (
    ClaimResult,
    declared_claims,
    effect_text,
    paper_claims,
    paper_effect_text,
    precision_text,
    sent_text,
    verdict_counts,
)
from lpdt.report.describe import (
    illustrative_text,
    setup_text,
    spread_text,
)
from lpdt.report.figures import fig1_spread_text, figure_runs
from lpdt.report.plateau import (
    claims_2x_sentence,
    matching,
    plateau_gains,
    plateau_row,
    plateau_sentence,
    rescore,
    rescoring_text,
)
from lpdt.report.stats import HELD, INCONCLUSIVE, LEVEL, NO_DATA, NOT_HELD, POWER
from lpdt.report.tables import NOT_RUN, Rendered, ratio_ranges

MARGINS = {"left": 1.5 * cm, "right": 1.5 * cm, "top": 1.0 * cm, "bottom": 1.2 * cm}
DIFF_POINTS = 1.0  # "cells differ by more than this many points" in the differences section
VERDICT_COLOR = {HELD: "#1a7f37", NOT_HELD: "#b00020", INCONCLUSIVE: "#9a6700", NO_DATA: "#555555"}


def _level() -> str:
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


def styles() -> dict[str, ParagraphStyle]:
    ss = getSampleStyleSheet()
    return {
        "title": ParagraphStyle("t", parent=ss["Title"], fontSize=20),
        "h1": ParagraphStyle("h1", parent=ss["Heading1"], fontSize=14),
        "h2": ParagraphStyle("h2", parent=ss["Heading2"], fontSize=11),
        # a heading of the summary page, which must hold on one page: less space above
        "sh2": ParagraphStyle("sh2", parent=ss["Heading2"], fontSize=11, spaceBefore=4),
        "body": ParagraphStyle("b", parent=ss["BodyText"], fontSize=9.5, leading=12),
        # the summary page's sentences: tighter, so that the page holds them and both tables
        "sbody": ParagraphStyle(
            "sb", parent=ss["BodyText"], fontSize=9.5, leading=12, spaceBefore=1, spaceAfter=1
        ),
        "warn": ParagraphStyle(
            "w",
            parent=ss["BodyText"],
            fontSize=10.5,
            leading=13,
            textColor=colors.HexColor("#a00000"),
        ),
        "cap": ParagraphStyle(
            "c", parent=ss["BodyText"], fontSize=8, leading=10, textColor=colors.HexColor("#333333")
        ),
        "cell": ParagraphStyle("cell", parent=ss["BodyText"], fontSize=7, leading=8.5),
        "scell": ParagraphStyle("scell", parent=ss["BodyText"], fontSize=8, leading=9),
        "shead": ParagraphStyle(
            "shd", parent=ss["BodyText"], fontSize=8, leading=9, fontName="Helvetica-Bold"
        ),
        "head": ParagraphStyle(
            "hd", parent=ss["BodyText"], fontSize=7, leading=8.5, fontName="Helvetica-Bold"
        ),
    }


def _esc(s: object) -> str:
    return str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def git_commit() -> str:
    try:
        r = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            cwd=Path(__file__).resolve().parent,
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain"],
            capture_output=True,
            text=True,
            timeout=10,
            cwd=Path(__file__).resolve().parent,
        ).stdout.strip()
        return (
            (r.stdout.strip() + (" (uncommitted changes)" if dirty else ""))
            if r.returncode == 0
            else "unknown"
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def versions(df: pd.DataFrame) -> dict[str, str]:
    v = {"python": platform.python_version()}
    for pkg in ("lpdt", "torch", "pandas", "matplotlib", "reportlab", "snakemake", "mlflow"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            v[pkg] = importlib.metadata.version(pkg)
    ran = {
        f"{k} {x}"
        for d in df.get("versions", pd.Series(dtype=object)).dropna()
        if isinstance(d, dict)
        for k, x in d.items()
    }
    if ran:
        v["runs trained with"] = ", ".join(sorted(ran))
    return v


def _table_flow(t: Rendered, st: dict, width: float, weights: list[float] | None = None) -> list:
    data = [[Paragraph(_esc(h), st["head"]) for h in t.header]]
    data += [[Paragraph(_esc(c), st["cell"]) for c in r] for r in t.rows]
    ncol = len(t.header)
    w = weights or [1.0] * ncol
    tbl = Table(data, colWidths=[width * x / sum(w) for x in w], repeatRows=1)
    style: list[tuple[Any, ...]] = [
        ("GRID", (0, 0), (-1, -1), 0.25, colors.grey),
        ("BACKGROUND", (0, 0), (-1, 0), colors.HexColor("#e8e8e8")),
        ("VALIGN", (0, 0), (-1, -1), "TOP"),
        ("TOPPADDING", (0, 0), (-1, -1), 1.5),
        ("BOTTOMPADDING", (0, 0), (-1, -1), 1.5),
    ]
    for i, r in enumerate(t.rows, start=1):
        if any(c.startswith(("not run", "missing", "diverged")) for c in r):
            style.append(("TEXTCOLOR", (0, i), (-1, i), colors.HexColor("#555555")))
    tbl.setStyle(TableStyle(style))
    out = [Paragraph(_esc(t.title), st["h2"]), tbl, Spacer(1, 3)]
    out += [
        Paragraph(_esc(c), st["warn"] if c.startswith("STAND-IN") else st["cap"]) for c in t.caption
    ]
    return out + [Spacer(1, 8)]


# --- generated text ----------------------------------------------------------------------------


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
        f" ({_level()} t-intervals over {ns[0]} seeds)"
        if len(ns) == 1
        else f" ({_level()} t-intervals over {ns[0]}-{ns[-1]} seeds)"
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


def differences_story(tables: dict, st: dict) -> list:
    """Plain statements of where our numbers differ from the paper's (all computed)."""
    out = [Paragraph("Where our numbers differ from the paper", st["h1"])]
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
        out.append(Paragraph(_esc(txt), st["body"]))
    if 10 in tables:
        ratios = ratio_ranges(tables[10][0])
        if ratios:
            out.append(
                Paragraph(
                    _esc(
                        "Table 10, ours / paper: "
                        + "; ".join(f"{k} {lo:.2f}-{hi:.2f}x" for k, (lo, hi) in ratios.items())
                        + "."
                    ),
                    st["body"],
                )
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
            out.append(Paragraph(_esc(txt), st["body"]))
    return out


def _data_row_name(row: dict[str, str]) -> str:
    """A row of Table 3's 'Data' part (``tables.data_table``; header -> cell) by its model,
    graph, nodes and compression, and its reading where it is not the paper's configuration:
    'vgg11 torus 16 0 %', 'vgg11 directed_ring 16 0 % (reference code: 1 out-peer, 100 epochs)'."""
    name = f"{row['Model']} {row['Topology']} {row['n']} {row['Comp.']}"
    reading = row.get("Reading", "paper configuration")
    return name if reading == "paper configuration" else f"{name} ({reading})"


# --- the document ------------------------------------------------------------------------------


def _verdict_cell(text: str, color: str | None, st: dict) -> Paragraph:
    """A verdict in bold, in its colour (black for one without a colour)."""
    return Paragraph(f'<font color="{color or "#000000"}"><b>{_esc(text)}</b></font>', st["scell"])


def _verdict_table(data: list[list], weights: list[float], width: float) -> Table:
    """A claims table of the summary page: header row shaded, thin grid, tight rows, columns
    ``width`` shared in proportion to ``weights``."""
    tbl = Table(data, colWidths=[width * x / sum(weights) for x in weights], repeatRows=1)
    tbl.setStyle(
        TableStyle(
            [
                ("GRID", (0, 0), (-1, -1), 0.25, colors.grey),
                ("BACKGROUND", (0, 0), (-1, 0), colors.HexColor("#e8e8e8")),
                ("VALIGN", (0, 0), (-1, -1), "TOP"),
                ("TOPPADDING", (0, 0), (-1, -1), 0.8),
                ("BOTTOMPADDING", (0, 0), (-1, -1), 0.8),
            ]
        )
    )
    return tbl


def _summary_page(
    df: pd.DataFrame,
    manifest: Manifest,
    claims: list[ClaimResult],
    st: dict,
    width: float,
    plateau: pd.DataFrame | None,
) -> list:
    story: list = [
        Paragraph("Low Precision Decentralized Training: reproduction summary", st["h1"]),
        Paragraph(
            _esc(
                "Aketi, Kodge, Roy (Neural Networks 2022), reproduced with lpdt; "
                f"scale {manifest.scale}. Every number and sentence "
                "on this page is computed from the run records."
            ),
            st["cap"],
        ),
        Spacer(1, 4),
    ]
    story += [Paragraph(_esc(s), st["sbody"]) for s in summary_sentences(claims, df, plateau)]
    story.append(Spacer(1, 5))
    rows = []
    for c in paper_claims(claims):
        # (on stand-in data: sentence 4 says so once; the claims detail marks every claim)
        rows.append(
            [
                c.statement,
                c.rule,
                paper_effect_text(c),
                effect_text(c),
                precision_text(c),
                c.verdict,
            ]
        )
    data = [
        [
            Paragraph(_esc(h), st["shead"])
            for h in (
                "Claim (paper)",
                "Effect and threshold",
                "Paper's effect",
                f"Ours: mean [{_level()} CI] (n seeds)",
                PRECISION_HEAD,
                "Verdict",
            )
        ]
    ]
    for r in rows:
        verdict = _verdict_cell(r[-1], VERDICT_COLOR.get(r[-1].split(" (")[0]), st)
        data.append([Paragraph(_esc(x), st["scell"]) for x in r[:-1]] + [verdict])
    # Widths in points of each column's longest one-line text: the claims fit one line each
    # (the cost claims two), so that the summary page holds on one A4 page.
    tbl = _verdict_table(data, [240, 212, 55, 103, 60, 80], width)
    story += [
        tbl,
        Spacer(1, 2),
        Paragraph(
            f"Verdict: held when the {_level()} interval (Student t over the seeds) lies "
            "entirely on the claim's side of its threshold, not held when entirely on the other, "
            "else inconclusive; not enough data: fewer than two seeds. "
            + PRECISION_CAPTION
            + " Communication: the bytes of one message in the wire format (lpdt.cost.wire) for"
            " each model, dense and top-k with indices, every row in the range (the grid's 8-bit"
            " runs send fp32 messages; the runs that send 8-bit ones are in the claim's details);"
            " energy, memory: "
            "arithmetic. The paper's effect: its numbers through the same code, on its cells "
            "that match ours.",
            st["cap"],
        ),
        Spacer(1, 5),
    ]
    story += _declared_table(declared_claims(claims), st, width)
    info = what_ran(df, manifest, plateau)
    t = Table(
        [[Paragraph(_esc(a), st["shead"]), Paragraph(_esc(b), st["scell"])] for a, b in info],
        colWidths=[4 * cm, width - 4 * cm],
    )
    t.setStyle(
        TableStyle(
            [
                ("GRID", (0, 0), (-1, -1), 0.25, colors.grey),
                ("VALIGN", (0, 0), (-1, -1), "TOP"),
                ("TOPPADDING", (0, 0), (-1, -1), 0.8),
                ("BOTTOMPADDING", (0, 0), (-1, -1), 0.8),
            ]
        )
    )
    story += [Paragraph("What ran", st["sh2"]), t]
    return story


def _declared_table(declared: list[ClaimResult], st: dict, width: float) -> list:
    """The claims declared in the studies, on the summary page after the paper's."""
    if not declared:
        return []
    data = [
        [
            Paragraph(_esc(h), st["shead"])
            for h in (
                "Claim (declared in)",
                "Effect and threshold",
                f"Ours: mean [{_level()} CI] (n seeds)",
                PRECISION_HEAD,
                "Verdict",
            )
        ]
    ]
    for c in declared:
        data.append(
            [
                Paragraph(_esc(f"{c.statement} ({c.id}, {c.source})"), st["scell"]),
                Paragraph(_esc(c.rule), st["scell"]),
                Paragraph(_esc(effect_text(c)), st["scell"]),
                Paragraph(_esc(precision_text(c)), st["scell"]),
                _verdict_cell(c.verdict, VERDICT_COLOR.get(c.verdict), st),
            ]
        )
    tbl = _verdict_table(data, [3.6, 2.4, 2.1, 1.0, 1.1], width)
    return [
        Paragraph("Claims declared in the studies", st["h2"]),
        tbl,
        Paragraph(
            "Declared in config/studies.yaml (or the studies file given to the workflow), "
            "checked with the same pairing, interval and verdict rule as the paper's.",
            st["cap"],
        ),
        Spacer(1, 5),
    ]


FIGURE_GAP = 10  # points between one figure's caption and the next figure


def frame_height(page: tuple[float, float]) -> float:
    """The height of the document's frame (``build_pdf``'s margins, less the frame's padding)."""
    return page[1] - MARGINS["top"] - MARGINS["bottom"] - 12


def figure_story(
    figures_dir: Path, captions: dict[str, str], st: dict, width: float, page: tuple[float, float]
) -> list:
    """Each figure with its caption as one ``KeepTogether``: a caption never starts the next page
    apart from its figure. The image is scaled so that it and its caption fit one frame (else
    KeepTogether would have to split them)."""
    from reportlab.lib.utils import ImageReader

    story: list = [Paragraph("Figures", st["h1"])]
    for name, cap in captions.items():
        png = figures_dir / f"{name}.png"
        if not png.exists():
            story.append(Paragraph(f"{name}: not produced ({png} missing).", st["warn"]))
            continue
        caption = Paragraph(_esc(f"Figure {name[3:]}. {cap}"), st["cap"])
        iw, ih = ImageReader(str(png)).getSize()
        w = min(width, iw * 0.5)
        h = w * ih / iw
        maxh = frame_height(page) - caption.wrap(width, page[1])[1] - FIGURE_GAP
        if h > maxh:
            w, h = w * maxh / h, maxh
        story += [
            KeepTogether([Image(str(png), width=w, height=h), caption]),
            Spacer(1, FIGURE_GAP),
        ]
    return story


MAX_ASIDE = 6  # set-aside pairs and left-out cells listed per claim in the PDF (all: claims.json)


def _claims_detail(claims: list[ClaimResult], st: dict, width: float) -> list:
    def numbers(c: ClaimResult) -> str:
        nums = c.numbers
        keep = ["cells", "pairs", "per_seed", "min", "max", "cells_excluded", "why"]
        parts = [f"{k} {nums[k]}" for k in keep if k in nums]
        if c.sd is not None:
            parts[:0] = [f"sd {c.sd:.2f}", f"± / detectable {precision_text(c)}"]
        aside = [
            f"counted as a loss, seed {d['seed']}: {d['detail']}"
            for d in nums.get("counted_as_loss", [])
        ]
        aside += [
            f"set aside: {d['why']}, seed {d['seed']}: {d['detail']}"
            for d in nums.get("set_aside", [])
        ]
        aside += [
            f"cell {' '.join(d['cell'])} left out: {d['why']}"
            for d in nums.get("cells_left_out", [])
        ]
        if len(aside) > MAX_ASIDE:
            aside = aside[:MAX_ASIDE] + [f"... {len(aside) - MAX_ASIDE} more in claims.json"]
        sent = [sent_text(nums["sent_8bit"])] if nums.get("sent_8bit") else []
        return "; ".join(x for x in [", ".join(parts), *aside, *sent] if x)

    ch = Rendered(
        "Claims: definitions and numbers (lpdt.report.claims; docs/report.md)",
        [
            "Claim",
            "Definition",
            "Effect and threshold",
            "Ours",
            "Details",
            "Verdict",
            "Paper's effect (verdict)",
        ],
        [
            [
                c.statement,
                c.definition,
                c.rule,
                effect_text(c),
                numbers(c),
                c.verdict + (" (stand-in data)" if c.stand_in_data else ""),
                paper_effect_text(c)
                + ("" if c.paper_effect is None and c.paper_note else f" ({c.paper_verdict})"),
            ]
            for c in claims
        ],
        [f"Interval: {claims[0].interval_method}. {PRECISION_CAPTION}" if claims else ""],
    )
    return [Paragraph("Claims check", st["h1"])] + _table_flow(
        ch, st, width, [2.2, 3.2, 1.8, 1.6, 2.6, 1.0, 1.3]
    )


def _claims_2x(plateau: pd.DataFrame | None, df: pd.DataFrame, st: dict, width: float) -> list:
    """Each checked cell's gain at 2x epochs, then the claims' effects on the plateau check's
    runs, at the scale's epochs and at 2x."""
    gains = []
    used = df.drop_duplicates("run_id")
    if len(matching(plateau, used)):
        gains = [
            Paragraph("Plateau check", st["h1"]),
            Paragraph(
                f"{plateau_sentence(plateau, used)} Per cell: {plateau_gains(plateau, used)}.",
                st["body"],
            ),
        ]
    rescored = rescore(plateau, df)
    if rescored is None or not rescored.claims:
        return gains
    moved = rescored.claims
    t = Rendered(
        "Claims at twice the epochs (plateau check; lpdt.report.plateau)",
        [
            "Claim",
            "Effect and threshold",
            "Cells",
            "Effect at the scale's epochs (check's 1x)",
            "Effect at 2x epochs (check's 2x)",
            "Same side of the threshold",
        ],
        [
            [
                c.statement,
                c.rule,
                str(c.cells),
                f"{c.at_1x:.2f}",
                f"{c.at_2x:.2f}",
                "yes" if c.same_side else "no",
            ]
            for c in moved
        ],
        [
            f"{rescoring_text(rescored)} One seed (the check's): the claim's effect recomputed "
            "with the same code on the checked configurations alone, with the check's 1x "
            "accuracies and with its 2x accuracies (the same configurations trained twice as "
            "long, milestones doubled, by the same commit). No interval: one seed shows the "
            "direction of the change, not its size beyond seed noise."
        ],
    )
    return gains + _table_flow(t, st, width, [3.2, 3.0, 0.8, 1.6, 1.6, 1.4])


def build_pdf(
    path: Path,
    *,
    df: pd.DataFrame,
    manifest: Manifest,
    tables: dict,
    claims: list[ClaimResult],
    figures_dir: Path,
    analysis_dir: Path,
    cost_dir: Path,
    plateau: pd.DataFrame | None = None,
) -> Path:
    st = styles()
    path.parent.mkdir(parents=True, exist_ok=True)
    page = landscape(A4)
    width = page[0] - 3 * cm
    story: list = _summary_page(df, manifest, claims, st, width, plateau)
    story.append(PageBreak())
    story += figure_story(
        figures_dir, figure_captions(df, analysis_dir, cost_dir, manifest.scale), st, width, page
    )
    story.append(PageBreak())
    story += _claims_detail(claims, st, width)
    story += _claims_2x(plateau, df, st, width)
    story += differences_story(tables, st)
    story.append(PageBreak())
    story.append(Paragraph("Tables", st["h1"]))
    for n in sorted(tables):
        for part in tables[n][1]:
            story += _table_flow(part, st, width)
    story.append(PageBreak())
    story.append(Paragraph("Appendix: provenance and versions", st["h1"]))
    info = [
        ["Git commit", git_commit()],
        ["Generated", datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")],
    ]
    info += [[f"Version: {k}", v] for k, v in versions(df).items()]
    t = Table(
        [[Paragraph(_esc(a), st["head"]), Paragraph(_esc(b), st["body"])] for a, b in info],
        colWidths=[5 * cm, width - 5 * cm],
    )
    t.setStyle(
        TableStyle(
            [("GRID", (0, 0), (-1, -1), 0.25, colors.grey), ("VALIGN", (0, 0), (-1, -1), "TOP")]
        )
    )
    story.append(t)
    doc = SimpleDocTemplate(
        str(path),
        pagesize=page,
        leftMargin=MARGINS["left"],
        rightMargin=MARGINS["right"],
        topMargin=MARGINS["top"],
        bottomMargin=MARGINS["bottom"],
        title="lpdt reproduction report",
    )

    def footer(canvas: Any, doc_: Any) -> None:  # noqa: ANN001
        canvas.setFont("Helvetica", 7)
        canvas.drawString(
            1.5 * cm,
            0.6 * cm,
            f"lpdt report - scale {manifest.scale} - page {doc_.page}",
        )

    doc.build(story, onFirstPage=footer, onLaterPages=footer)
    return path
