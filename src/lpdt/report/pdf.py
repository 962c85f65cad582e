"""``reports/report.pdf``: a one-page summary, then figures, claims, tables, and an appendix.

Page 1 is generated from the results only: per claim the paper's effect beside ours with its
95 % interval, the cells it left out and the verdict, what ran (scale, stand-ins, seeds, runs,
training time) and a few sentences (``lpdt.report.prose``). Then the figures, the claims'
definitions and numbers, where our numbers differ from the paper's, every table, and the
versions in an appendix. This module puts the document together; ``lpdt.report.prose`` writes
its sentences and ``lpdt.report.layout`` lays them out (landscape A4, so that the paper's widest
tables fit at a readable size; a heading or a note never ends a page apart from what it
introduces; figures sized to the page; sections flow without near-blank pages).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import platform
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
from reportlab.lib import colors
from reportlab.lib.units import cm
from reportlab.platypus import (
    Flowable,
    KeepTogether,
    Paragraph,
    Spacer,
    Table,
    TableStyle,
)

from lpdt.grid import Manifest
from lpdt.report.claim_text import (
    declared_claims,
    effect_text,
    paper_claims,
    paper_effect_text,
    precision_text,
)
from lpdt.report.claims import CLAIMS, ClaimResult, claim_keys
from lpdt.report.definitions import study_claims
from lpdt.report.layout import (
    PAGE,
    Placement,
    ReportDoc,
    esc,
    facts_table,
    figure_flow,
    frame_width,
    section_break,
    styles,
    table_flow,
)
from lpdt.report.plateau import matching
from lpdt.report.plateau_rescore import rescore
from lpdt.report.plateau_text import plateau_gains, plateau_sentence, rescoring_text
from lpdt.report.prose import (
    PRECISION_CAPTION,
    PRECISION_HEAD,
    claim_details,
    differences_text,
    figure_captions,
    level,
    ours_text,
    summary_sentences,
    what_ran,
)
from lpdt.report.stats import HELD, INCONCLUSIVE, NO_DATA, NOT_HELD
from lpdt.report.table_text import Rendered

VERDICT_COLOR = {HELD: "#1a7f37", NOT_HELD: "#b00020", INCONCLUSIVE: "#9a6700", NO_DATA: "#555555"}


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


# --- the document ------------------------------------------------------------------------------


def _verdict_cell(text: str, color: str | None, st: dict) -> Paragraph:
    """A verdict in bold, in its colour (black for one without a colour)."""
    return Paragraph(f'<font color="{color or "#000000"}"><b>{esc(text)}</b></font>', st["scell"])


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
            esc(
                "Aketi, Kodge, Roy (Neural Networks 2022), reproduced with lpdt; "
                f"scale {manifest.scale}. Every number and sentence "
                "on this page is computed from the run records."
            ),
            st["cap"],
        ),
        Spacer(1, 4),
    ]
    story += [Paragraph(esc(s), st["sbody"]) for s in summary_sentences(claims, df, plateau)]
    story.append(Spacer(1, 5))
    rows = []
    for c in paper_claims(claims):
        # (on stand-in data: sentence 4 says so once; the claims detail marks every claim)
        rows.append(
            [
                c.statement,
                c.rule,
                paper_effect_text(c),
                ours_text(c),
                precision_text(c),
                c.verdict,
            ]
        )
    data = [
        [
            Paragraph(esc(h), st["shead"])
            for h in (
                "Claim (paper)",
                "Effect and threshold",
                "Paper's effect",
                f"Ours: mean [{level()} CI] (n seeds); left out",
                PRECISION_HEAD,
                "Verdict",
            )
        ]
    ]
    for r in rows:
        verdict = _verdict_cell(r[-1], VERDICT_COLOR.get(r[-1].split(" (")[0]), st)
        data.append([Paragraph(esc(x), st["scell"]) for x in r[:-1]] + [verdict])
    # Widths in points of each column's longest one-line text: the claims fit one line each
    # (the cost claims two), so that the summary page holds on one A4 page.
    tbl = _verdict_table(data, [240, 212, 55, 103, 60, 80], width)
    story += [
        tbl,
        Spacer(1, 2),
        Paragraph(
            f"Verdict: held when the {level()} interval (Student t over the seeds) lies "
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
        [[Paragraph(esc(a), st["shead"]), Paragraph(esc(b), st["scell"])] for a, b in info],
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
    story.append(KeepTogether([Paragraph("What ran", st["sh2"]), t]))
    return story


def _declared_table(declared: list[ClaimResult], st: dict, width: float) -> list:
    """The claims declared in the studies, on the summary page after the paper's."""
    if not declared:
        return []
    data = [
        [
            Paragraph(esc(h), st["shead"])
            for h in (
                "Claim (declared in)",
                "Effect and threshold",
                f"Ours: mean [{level()} CI] (n seeds)",
                PRECISION_HEAD,
                "Verdict",
            )
        ]
    ]
    for c in declared:
        data.append(
            [
                Paragraph(esc(f"{c.statement} ({c.id}, {c.source})"), st["scell"]),
                Paragraph(esc(c.rule), st["scell"]),
                Paragraph(esc(ours_text(c)), st["scell"]),
                Paragraph(esc(precision_text(c)), st["scell"]),
                _verdict_cell(c.verdict, VERDICT_COLOR.get(c.verdict), st),
            ]
        )
    tbl = _verdict_table(data, [3.6, 2.4, 2.1, 1.0, 1.1], width)
    note = Paragraph(
        "Declared in config/studies.yaml (or the studies file given to the workflow), "
        "checked with the same pairing, interval and verdict rule as the paper's.",
        st["cap"],
    )
    return [KeepTogether([Paragraph("Claims declared in the studies", st["h2"]), tbl, note])]


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
    return gains + table_flow(t, st, width, [3.2, 3.0, 0.8, 1.6, 1.6, 1.4])


def figure_story(
    figures_dir: Path, captions: dict[str, str], st: dict, width: float, page: tuple = PAGE
) -> list[Flowable]:
    """The figures, each with its caption as one block (``layout.figure_flow``)."""
    story: list[Flowable] = [Paragraph("Figures", st["h1"])]
    for name, cap in captions.items():
        png = figures_dir / f"{name}.png"
        if not png.exists():
            story.append(Paragraph(esc(f"{name}: not produced ({png} missing)."), st["warn"]))
            continue
        story += figure_flow(png, f"Figure {name[3:]}. {cap}", st, width, page)
    return story


def _cell_keys(manifest: Manifest) -> dict[str, list[str]]:
    """Each accuracy claim's cell coordinates (``claims.claim_keys``), the paper's and those
    declared in the manifest's studies: the names of the cells its details list."""
    return {
        c.id: claim_keys(c)
        for c in [*CLAIMS, *study_claims(manifest)]
        if c.family == "accuracy" and c.vary
    }


def _claims_detail(
    claims: list[ClaimResult], keys: dict[str, list[str]], st: dict, width: float
) -> list[Flowable]:
    ch = Rendered(
        "Claims: definitions and numbers (lpdt.report.claims; docs/claims.md)",
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
                claim_details(c, keys.get(c.id)),
                c.verdict + (" (stand-in data)" if c.stand_in_data else ""),
                paper_effect_text(c)
                + ("" if c.paper_effect is None and c.paper_note else f" ({c.paper_verdict})"),
            ]
            for c in claims
        ],
        [f"Interval: {claims[0].interval_method}. {PRECISION_CAPTION}" if claims else ""],
    )
    heading = Paragraph("Claims check", st["h1"])
    return table_flow(ch, st, width, [2.0, 2.6, 1.6, 1.4, 3.6, 1.0, 1.2], lead=[heading])


def differences_story(tables: dict, st: dict) -> list[Flowable]:
    """The section "Where our numbers differ from the paper" (``prose.differences_text``)."""
    out: list[Flowable] = [Paragraph("Where our numbers differ from the paper", st["h1"])]
    return out + [Paragraph(esc(t), st["body"]) for t in differences_text(tables)]


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
    placed: list[Placement] | None = None,
) -> Path:
    """Write the report to ``path``; ``placed``, if given, receives where each flowable landed
    (``layout.Placement``: page, kind, text, the share of the page used)."""
    st = styles()
    path.parent.mkdir(parents=True, exist_ok=True)
    page = PAGE
    width = frame_width(page)
    story: list[Flowable] = _summary_page(df, manifest, claims, st, width, plateau)
    story.append(section_break(page))
    captions = figure_captions(df, analysis_dir, cost_dir, manifest.scale)
    story += figure_story(figures_dir, captions, st, width, page)
    story.append(section_break(page))
    story += _claims_detail(claims, _cell_keys(manifest), st, width)
    story += _claims_2x(plateau, df, st, width)
    story.append(section_break(page))
    story += differences_story(tables, st)
    story.append(section_break(page))
    lead = [Paragraph("Tables", st["h1"])]  # the section's heading, kept with the first table
    for n in sorted(tables):
        for part in tables[n][1]:
            story += table_flow(part, st, width, lead=lead)
            lead = []
    story += lead
    story.append(section_break(page))
    info = [
        ("Git commit", git_commit()),
        ("Generated", datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")),
    ]
    info += [(f"Version: {k}", v) for k, v in versions(df).items()]
    story.append(
        KeepTogether(
            [
                Paragraph("Appendix: provenance and versions", st["h1"]),
                facts_table(info, st, width, 5 * cm),
            ]
        )
    )
    doc = ReportDoc(path, title="lpdt reproduction report")

    def footer(canvas: Any, doc_: Any) -> None:  # noqa: ANN001
        canvas.setFont("Helvetica", 7)
        canvas.drawString(
            1.5 * cm,
            0.6 * cm,
            f"lpdt report - scale {manifest.scale} - page {doc_.page}",
        )

    doc.build(story, onFirstPage=footer, onLaterPages=footer)
    if placed is not None:
        placed.extend(doc.placed)
    return path
