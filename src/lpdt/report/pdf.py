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
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
from reportlab.lib import colors
from reportlab.lib.pagesizes import A4, landscape
from reportlab.lib.styles import ParagraphStyle, getSampleStyleSheet
from reportlab.lib.units import cm
from reportlab.platypus import (
    Image,
    PageBreak,
    Paragraph,
    SimpleDocTemplate,
    Spacer,
    Table,
    TableStyle,  # fmt: skip
)

from lpdt.report.aggregate import run_counts, seeds_used, training_seconds
from lpdt.report.claims import effect_text, verdict_counts
from lpdt.report.stats import HELD, INCONCLUSIVE, NO_DATA, NOT_HELD
from lpdt.report.tables import NOT_RUN, Rendered, ratio_ranges

ERRBARS = " Error bars: ±1 standard deviation over seeds where a point averages several runs (n in the legend)."
FIGURE_CAPTIONS = {
    "fig1": "Validation error per epoch for the normalisation layers (ResNet-20, 8-node directed ring, skew 0.8, Choco without compression); the last epoch is evaluated after the final gossip rounds." + ERRBARS,
    "fig2": "Class histograms per node (stacked bars) of the skew partitioner for each degree of skew (paper class counts).",
    "fig3": "The graph topologies drawn from `lpdt topology`: 8-node directed ring and 16-node 4x4 torus.",
    "fig4": "Accuracy against skew for each model / graph / compression; FP solid, 8-bit dashed, one colour per algorithm." + ERRBARS,
    "fig5": "Accuracy against skew with quasi-global momentum (Choco); FP solid, 8-bit dashed." + ERRBARS,
    "fig6": "ResNet-18 accuracy per skew on the Imagenette task: FP red, LP green (black bars: paper, real data only)." + ERRBARS,
    "fig7": "Memory and compute (energy by layer type) per node per iteration for ResNet-20 at b=32, FP vs LP (cost model).",
}  # fmt: skip
VERDICT_COLOR = {HELD: "#1a7f37", NOT_HELD: "#b00020", INCONCLUSIVE: "#9a6700", NO_DATA: "#555555"}


def _styles() -> dict[str, ParagraphStyle]:
    ss = getSampleStyleSheet()
    return {
        "title": ParagraphStyle("t", parent=ss["Title"], fontSize=20),
        "h1": ParagraphStyle("h1", parent=ss["Heading1"], fontSize=14),
        "h2": ParagraphStyle("h2", parent=ss["Heading2"], fontSize=11),
        "body": ParagraphStyle("b", parent=ss["BodyText"], fontSize=9.5, leading=12),
        "warn": ParagraphStyle(
            "w",
            parent=ss["BodyText"],
            fontSize=10.5,
            leading=13,
            textColor=colors.HexColor("#a00000"),
        ),  # fmt: skip
        "cap": ParagraphStyle(
            "c", parent=ss["BodyText"], fontSize=8, leading=10, textColor=colors.HexColor("#333333")
        ),
        "cell": ParagraphStyle("cell", parent=ss["BodyText"], fontSize=7, leading=8.5),
        "scell": ParagraphStyle("scell", parent=ss["BodyText"], fontSize=8, leading=9.5),
        "shead": ParagraphStyle(
            "shd", parent=ss["BodyText"], fontSize=8, leading=9.5, fontName="Helvetica-Bold"
        ),
        "head": ParagraphStyle(
            "hd", parent=ss["BodyText"], fontSize=7, leading=8.5, fontName="Helvetica-Bold"
        ),
    }


def _esc(s: object) -> str:
    return str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def git_commit() -> str:
    try:
        r = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10,
                           cwd=Path(__file__).resolve().parent)  # fmt: skip
        dirty = subprocess.run(["git", "status", "--porcelain"], capture_output=True, text=True, timeout=10,
                               cwd=Path(__file__).resolve().parent).stdout.strip()  # fmt: skip
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
    ran = {f"{k} {x}" for d in df.get("versions", pd.Series(dtype=object)).dropna() if isinstance(d, dict)
           for k, x in d.items()}  # fmt: skip
    if ran:
        v["runs trained with"] = ", ".join(sorted(ran))
    return v


def _table_flow(t: Rendered, st: dict, width: float, weights: list[float] | None = None) -> list:
    data = [[Paragraph(_esc(h), st["head"]) for h in t.header]]
    data += [[Paragraph(_esc(c), st["cell"]) for c in r] for r in t.rows]
    ncol = len(t.header)
    w = weights or [1.0] * ncol
    tbl = Table(data, colWidths=[width * x / sum(w) for x in w], repeatRows=1)
    style = [("GRID", (0, 0), (-1, -1), 0.25, colors.grey),
             ("BACKGROUND", (0, 0), (-1, 0), colors.HexColor("#e8e8e8")),
             ("VALIGN", (0, 0), (-1, -1), "TOP"), ("TOPPADDING", (0, 0), (-1, -1), 1.5),
             ("BOTTOMPADDING", (0, 0), (-1, -1), 1.5)]  # fmt: skip
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


def seeds_text(df: pd.DataFrame) -> str:
    """'3 seeds (1234-1236): table3, table4; 1 seed (1234): table2' from the manifest's seeds."""
    groups: dict[tuple[int, ...], list[str]] = {}
    for study, seeds in seeds_used(df).items():
        groups.setdefault(tuple(seeds), []).append(study)
    if not groups or all(not k for k in groups):
        return "not recorded (one run per cell)"
    parts = []
    for seeds, studies in sorted(groups.items(), key=lambda kv: (-len(kv[0]), kv[0])):
        if not seeds:
            parts.append(f"seed not recorded: {', '.join(studies)}")
            continue
        contiguous = list(seeds) == list(range(seeds[0], seeds[0] + len(seeds)))
        names = (f"{seeds[0]}-{seeds[-1]}" if contiguous and len(seeds) > 2
                 else ", ".join(map(str, seeds)))  # fmt: skip
        parts.append(f"{len(seeds)} seed{'s' if len(seeds) > 1 else ''} ({names}): "
                     f"{', '.join(studies)}")  # fmt: skip
    return "; ".join(parts)


def stand_ins(df: pd.DataFrame) -> list[str]:
    used = df.drop_duplicates("run_id")
    return sorted({p for s in used["stand_in"].dropna() for p in str(s).split("; ") if p})


def _n_phrase(counts: dict[str, int]) -> str:
    words = [f"{counts[HELD]} held", f"{counts[NOT_HELD]} not held",
             f"{counts[INCONCLUSIVE]} inconclusive"]  # fmt: skip
    if counts[NO_DATA]:
        words.append(f"{counts[NO_DATA]} had not enough data")
    return ", ".join(words[:-1]) + " and " + words[-1]


def summary_sentences(claims: list[dict], df: pd.DataFrame) -> list[str]:
    """The summary page's sentences, each computed from the claims and the run table."""
    out = []
    acc = [c for c in claims if c.get("kind", "accuracy") == "accuracy"]
    cost = [c for c in claims if c.get("kind") == "cost"]
    ns = sorted({c["n"] for c in acc if c.get("ci")})
    over = (f" (95 % t-intervals over {ns[0]} seeds)" if len(ns) == 1
            else f" (95 % t-intervals over {ns[0]}-{ns[-1]} seeds)" if ns else
            " (no claim had two seeds, so no interval could be formed)")  # fmt: skip
    s1 = f"Of {len(acc)} accuracy claims, {_n_phrase(verdict_counts(acc))}{over}"
    if cost:
        cc = verdict_counts(cost)
        s1 += (f"; of {len(cost)} cost claims (analytic cost model), {cc[HELD]} held"
               + (f", {cc[NOT_HELD]} not held" if cc[NOT_HELD] else "")
               + (f", {cc[NO_DATA]} without data" if cc[NO_DATA] else ""))  # fmt: skip
    out.append(s1 + ".")
    both = [c for c in acc if c.get("mean") is not None and c.get("paper_effect") is not None]
    if both:
        far = max(both, key=lambda c: abs(c["mean"] - c["paper_effect"]))
        out.append(f"The largest gap to the paper is on \"{far['statement']}\": "
                   f"{far['effect']} is {effect_text(far)} here against "
                   f"{far['paper_effect']:.2f} in the paper.")  # fmt: skip
        same = [c for c in both if (c["mean"] > 0) == (c["paper_effect"] > 0)]
        out.append(f"Our mean effect has the paper's sign in {len(same)} of {len(both)} "
                   f"accuracy claims.")  # fmt: skip
    counts = run_counts(df) if len(df) else {"total": 0, "ok": 0, "diverged": 0, "missing": 0}
    s4 = f"{counts['ok']} of {counts['total']} runs finished"
    bad = [f"{counts[k]} {k}" for k in ("diverged", "missing") if counts[k]]
    s4 += f" ({', '.join(bad)})" if bad else ""
    stand = stand_ins(df)
    if stand:
        s4 += (f"; the accuracies come from stand-ins ({'; '.join(stand)}), so compare the "
               "direction and size of effects, not the values")  # fmt: skip
    else:
        s4 += "; all runs used the paper's datasets and models"
    out.append(s4 + ".")
    return out


def what_ran(df: pd.DataFrame, manifest: dict) -> list[list[str]]:
    counts = run_counts(df) if len(df) else {"total": 0, "ok": 0, "diverged": 0, "missing": 0}
    used = df.drop_duplicates("run_id")
    with_time = int(used["time_s"].notna().sum()) if "time_s" in used else 0
    datasets = sorted({str(x) for x in used["dataset_used"].dropna()})
    return [["Scale", str(manifest.get("scale", "?"))],
            ["Stand-ins", "; ".join(stand_ins(df)) or "none: the paper's datasets and models"],
            ["Seeds per cell", seeds_text(df)],
            ["Runs", f"{counts['total']} unique runs: {counts['ok']} finished, {counts['diverged']} "
                     f"diverged, {counts['missing']} missing (no record)"],
            ["Training wall time", f"{duration(training_seconds(df))} summed over the {with_time} "
                                   "run records (time.total_s; parallel jobs overlap)"],
            ["Datasets trained on", ", ".join(datasets) or "none"]]  # fmt: skip


def _differences(tables: dict, st: dict) -> list:
    """Plain statements of where our numbers differ from the paper's (all computed)."""
    out = [Paragraph("Where our numbers differ from the paper", st["h1"])]
    for n in (2, 3, 4, 5, 6):
        if n not in tables:
            continue
        m = tables[n][0]
        ok = m[(m["status"] == "ok") & m["paper"].notna()]
        not_run = int((m["status"] == NOT_RUN).sum())
        bad = int(m["status"].isin(["missing", "diverged"]).sum())
        stand = sorted({p for s in m["stand_in"] for p in str(s).split("; ") if p})
        if len(ok):
            d = ok["diff"]
            txt = (f"Table {n}: {len(ok)} cells compared; ours (mean over seeds) - paper: mean {d.mean():+.2f}, "
                   f"largest |difference| {d.abs().max():.2f} points; {int((d.abs() > 1).sum())} cells differ by more than 1 point.")  # fmt: skip
        else:
            txt = f"Table {n}: no cell of ours can be compared with the paper at this scale."
        txt += f" {not_run} paper cells not run at this scale" + (
            f", {bad} missing or diverged." if bad else "."
        )
        if stand:
            txt += (" Our runs use STAND-INS (" + "; ".join(stand) + "), so the accuracies are not "
                    "expected to match the paper's; compare trends, not values.")  # fmt: skip
        out.append(Paragraph(_esc(txt), st["body"]))
    if 10 in tables:
        ratios = ratio_ranges(tables[10][0])
        if ratios:
            out.append(Paragraph(_esc("Table 10, ours / paper: " + "; ".join(
                f"{k} {lo:.2f}-{hi:.2f}x" for k, (lo, hi) in ratios.items()) + "."), st["body"]))  # fmt: skip
    for part in tables.get(3, (None, []))[1]:
        if part.header and part.header[-1] == "Agrees":
            agree = sum(r[-1] == "yes" for r in part.rows)
            disagree = [f"{r[0]} {r[2]} {r[3]}" for r in part.rows if r[-1] != "yes"]
            txt = (f"Table 3 'Data': {agree} of {len(part.rows)} rows of the cost model agree with "
                   "the printed digits" + (f"; not: {', '.join(disagree)}." if disagree else "."))  # fmt: skip
            out.append(Paragraph(_esc(txt), st["body"]))
    return out


# --- the document ------------------------------------------------------------------------------


def _summary_page(df: pd.DataFrame, manifest: dict, claims: list[dict], st: dict,
                  width: float) -> list:  # fmt: skip
    story: list = [Paragraph("Low Precision Decentralized Training: reproduction summary", st["h1"]),
                   Paragraph(_esc("Aketi, Kodge, Roy (Neural Networks 2022), reproduced with lpdt; "
                                  f"scale {manifest.get('scale', '?')}. Every number and sentence "
                                  "on this page is computed from the run records."), st["cap"]),
                   Spacer(1, 4)]  # fmt: skip
    story += [Paragraph(_esc(s), st["body"]) for s in summary_sentences(claims, df)]
    story.append(Spacer(1, 5))
    rows = []
    for c in claims:
        stand = " (stand-in data)" if c.get("stand_in_data") else ""
        pe = c.get("paper_effect")
        rows.append([c["statement"], c.get("rule", ""), "-" if pe is None else f"{pe:.2f}",
                     effect_text(c), c["verdict"] + stand])  # fmt: skip
    data = [[Paragraph(_esc(h), st["shead"]) for h in
             ("Claim (paper)", "Effect and threshold", "Paper's effect", "Ours: mean [95 % CI] (n seeds)", "Verdict")]]  # fmt: skip
    for r in rows:
        color = VERDICT_COLOR.get(r[4].split(" (")[0], "#000000")
        data.append(
            [Paragraph(_esc(x), st["scell"]) for x in r[:4]]
            + [Paragraph(f'<font color="{color}"><b>{_esc(r[4])}</b></font>', st["scell"])]
        )
    w = [3.2, 2.6, 1.0, 2.0, 1.2]
    tbl = Table(data, colWidths=[width * x / sum(w) for x in w], repeatRows=1)
    tbl.setStyle(TableStyle([("GRID", (0, 0), (-1, -1), 0.25, colors.grey),
                             ("BACKGROUND", (0, 0), (-1, 0), colors.HexColor("#e8e8e8")),
                             ("VALIGN", (0, 0), (-1, -1), "TOP"),
                             ("TOPPADDING", (0, 0), (-1, -1), 1.2),
                             ("BOTTOMPADDING", (0, 0), (-1, -1), 1.2)]))  # fmt: skip
    story += [tbl, Spacer(1, 2),
              Paragraph("Verdict: held when the 95 % interval of the effect lies entirely on the "
                        "claim's side of its threshold, not held when entirely on the other side, "
                        "inconclusive otherwise; not enough data with fewer than two seeds. The "
                        "interval is a Student t-interval over seeds of the per-seed paired "
                        "difference (averaged over the claim's cells). Cost claims are analytic: "
                        "every row must lie in the range. The paper's effect is computed from its "
                        "published numbers with the same code.", st["cap"]),
              Spacer(1, 5)]  # fmt: skip
    info = what_ran(df, manifest)
    t = Table([[Paragraph(_esc(a), st["shead"]), Paragraph(_esc(b), st["scell"])] for a, b in info],
              colWidths=[4 * cm, width - 4 * cm])  # fmt: skip
    t.setStyle(TableStyle([("GRID", (0, 0), (-1, -1), 0.25, colors.grey),
                           ("VALIGN", (0, 0), (-1, -1), "TOP"),
                           ("TOPPADDING", (0, 0), (-1, -1), 1.2),
                           ("BOTTOMPADDING", (0, 0), (-1, -1), 1.2)]))  # fmt: skip
    story += [Paragraph("What ran", st["h2"]), t]
    return story


def _figures(figures_dir: Path, st: dict, width: float, page: tuple[float, float]) -> list:
    from reportlab.lib.utils import ImageReader

    story: list = [Paragraph("Figures", st["h1"])]
    for name, cap in FIGURE_CAPTIONS.items():
        png = figures_dir / f"{name}.png"
        if not png.exists():
            story.append(Paragraph(f"{name}: not produced ({png} missing).", st["warn"]))
            continue
        iw, ih = ImageReader(str(png)).getSize()
        w = min(width, iw * 0.5)
        h = w * ih / iw
        maxh = page[1] - 5 * cm
        if h > maxh:
            w, h = w * maxh / h, maxh
        story += [Image(str(png), width=w, height=h), Paragraph(_esc(f"Figure {name[3:]}. {cap}"), st["cap"]),
                  Spacer(1, 10)]  # fmt: skip
    return story


def _claims_detail(claims: list[dict], st: dict, width: float) -> list:
    def numbers(c: dict) -> str:
        nums = c.get("numbers") or {}
        keep = ["cells", "pairs", "per_seed", "min", "max", "cells_excluded", "why"]
        parts = [f"{k} {nums[k]}" for k in keep if k in nums]
        if c.get("sd") is not None:
            parts.insert(0, f"sd {c['sd']:.2f}")
        return ", ".join(parts)

    ch = Rendered("Claims: definitions and numbers (lpdt.report.claims; docs/report.md)",
                  ["Claim", "Definition", "Effect and threshold", "Ours", "Details", "Verdict",
                   "Paper's effect (verdict)"],
                  [[c["statement"], c["definition"], c.get("rule", ""), effect_text(c), numbers(c),
                    c["verdict"] + (" (stand-in data)" if c["stand_in_data"] else ""),
                    ("-" if c.get("paper_effect") is None else f"{c['paper_effect']:.2f}")
                    + f" ({c['paper_verdict']})"] for c in claims],
                  [f"Interval: {claims[0]['interval_method']}." if claims else ""])  # fmt: skip
    return [Paragraph("Claims check", st["h1"])] + _table_flow(
        ch, st, width, [2.2, 3.2, 1.8, 1.6, 2.6, 1.0, 1.3]
    )


def build_pdf(path: Path, *, df: pd.DataFrame, manifest: dict, tables: dict, claims: list[dict],
              figures_dir: Path) -> Path:  # fmt: skip
    st = _styles()
    path.parent.mkdir(parents=True, exist_ok=True)
    page = landscape(A4)
    width = page[0] - 3 * cm
    story: list = _summary_page(df, manifest, claims, st, width)
    story.append(PageBreak())
    story += _figures(figures_dir, st, width, page)
    story.append(PageBreak())
    story += _claims_detail(claims, st, width)
    story += _differences(tables, st)
    story.append(PageBreak())
    story.append(Paragraph("Tables", st["h1"]))
    for n in sorted(tables):
        for part in tables[n][1]:
            story += _table_flow(part, st, width)
    story.append(PageBreak())
    story.append(Paragraph("Appendix: provenance and versions", st["h1"]))
    info = [["Git commit", git_commit()],
            ["Generated", datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")]]  # fmt: skip
    info += [[f"Version: {k}", v] for k, v in versions(df).items()]
    t = Table([[Paragraph(_esc(a), st["head"]), Paragraph(_esc(b), st["body"])] for a, b in info],
              colWidths=[5 * cm, width - 5 * cm])  # fmt: skip
    t.setStyle(TableStyle([("GRID", (0, 0), (-1, -1), 0.25, colors.grey),
                           ("VALIGN", (0, 0), (-1, -1), "TOP")]))  # fmt: skip
    story.append(t)
    doc = SimpleDocTemplate(str(path), pagesize=page, leftMargin=1.5 * cm, rightMargin=1.5 * cm,
                            topMargin=1.0 * cm, bottomMargin=1.2 * cm, title="lpdt reproduction report")  # fmt: skip

    def footer(canvas, doc_) -> None:  # noqa: ANN001
        canvas.setFont("Helvetica", 7)
        canvas.drawString(
            1.5 * cm,
            0.6 * cm,
            f"lpdt report - scale {manifest.get('scale', '?')} - page {doc_.page}",
        )

    doc.build(story, onFirstPage=footer, onLaterPages=footer)
    return path
