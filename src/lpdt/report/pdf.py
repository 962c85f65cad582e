"""``reports/report.pdf``: title page, every table and figure with a caption, the claims check.

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

from lpdt.report.aggregate import run_counts
from lpdt.report.tables import NOT_RUN, Rendered

FIGURE_CAPTIONS = {
    "fig1": "Validation error per epoch for the normalisation layers (ResNet-20, 8-node directed ring, skew 0.8, Choco without compression); the last epoch is evaluated after the final gossip rounds.",
    "fig2": "Class histograms per node (stacked bars) of the skew partitioner for each degree of skew (paper class counts).",
    "fig3": "The graph topologies drawn from `lpdt topology`: 8-node directed ring and 16-node 4x4 torus.",
    "fig4": "Accuracy against skew for each model / graph / compression; FP solid, 8-bit dashed, one colour per algorithm.",
    "fig5": "Accuracy against skew with quasi-global momentum (Choco); FP solid, 8-bit dashed.",
    "fig6": "ResNet-18 accuracy per skew on the Imagenette task: FP red, LP green (black bars: paper, real data only).",
    "fig7": "Memory and compute (energy by layer type) per node per iteration for ResNet-20 at b=32, FP vs LP (cost model).",
}  # fmt: skip


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


def _table_flow(t: Rendered, st: dict, width: float) -> list:
    data = [[Paragraph(_esc(h), st["head"]) for h in t.header]]
    data += [[Paragraph(_esc(c), st["cell"]) for c in r] for r in t.rows]
    ncol = len(t.header)
    tbl = Table(data, colWidths=[width / ncol] * ncol, repeatRows=1)
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


def _differences(tables: dict, st: dict) -> list:
    """Plain statements of where our accuracies differ from the paper's."""
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
            txt = (f"Table {n}: {len(ok)} cells compared; ours - paper: mean {d.mean():+.2f}, "
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
    out.append(Paragraph(
        "Table 10: memory reproduces within about 1 %; our absolute energies are 0.13-0.39x the paper's "
        "(the paper's cannot follow from its own Table 7/9 formulas, docs/cost.md), while the ~20x ratio "
        "reproduces. Table 3 'Data': the ResNet rows agree to the printed digits; the VGG-11 torus rows do not.",
        st["body"]))  # fmt: skip
    return out


def build_pdf(path: Path, *, df: pd.DataFrame, manifest: dict, tables: dict, claims: list[dict],
              figures_dir: Path) -> Path:  # fmt: skip
    st = _styles()
    path.parent.mkdir(parents=True, exist_ok=True)
    page = landscape(A4)
    width = page[0] - 3 * cm
    story: list = [Spacer(1, 1.5 * cm),
                   Paragraph("Low Precision Decentralized Training: reproduction report", st["title"]),
                   Paragraph(_esc("Aketi, Kodge, Roy (Neural Networks 2022), reproduced with lpdt"), st["body"]),
                   Spacer(1, 0.6 * cm)]  # fmt: skip
    counts = run_counts(df) if len(df) else {"total": 0, "ok": 0, "diverged": 0, "missing": 0}
    used = df.drop_duplicates("run_id")
    stand = sorted({p for s in used["stand_in"] for p in str(s).split("; ") if p})
    datasets = sorted({str(x) for x in used["dataset_used"].dropna()})
    info = [["Scale", str(manifest.get("scale", "?"))],
            ["Runs", f"{counts['total']} unique runs: {counts['ok']} finished, {counts['diverged']} diverged, "
                     f"{counts['missing']} missing (no record)"],
            ["Datasets trained on", ", ".join(datasets) or "none"],
            ["Git commit", git_commit()],
            ["Generated", datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")]]  # fmt: skip
    info += [[f"Version: {k}", v] for k, v in versions(df).items()]
    t = Table([[Paragraph(_esc(a), st["head"]), Paragraph(_esc(b), st["body"])] for a, b in info],
              colWidths=[5 * cm, width - 5 * cm])  # fmt: skip
    t.setStyle(
        TableStyle(
            [("GRID", (0, 0), (-1, -1), 0.25, colors.grey), ("VALIGN", (0, 0), (-1, -1), "TOP")]
        )
    )
    story += [t, Spacer(1, 0.5 * cm)]
    if stand:
        story.append(Paragraph("STAND-IN DATA / MODELS: " + _esc("; ".join(stand)) + ". Accuracies from "
                               "these runs are not comparable with the paper's numbers.", st["warn"]))  # fmt: skip
    else:
        story.append(Paragraph("All runs used the paper's datasets and models.", st["body"]))
    held = {
        v: sum(c["verdict"] == v for c in claims) for v in ("held", "not held", "not enough data")
    }
    story.append(Paragraph(f"Claims check: {held['held']} held, {held['not held']} not held, "
                           f"{held['not enough data']} not enough data.", st["body"]))  # fmt: skip
    story.append(PageBreak())
    story += _differences(tables, st)
    story.append(Spacer(1, 8))
    story.append(Paragraph("Claims check", st["h1"]))
    ch = Rendered("Paper findings checked on our results (definitions fixed in lpdt.report.claims)",
                  ["Claim", "Definition (tolerance)", "Verdict (ours)", "Numbers", "On the paper's numbers"],
                  [[c["statement"], c["definition"],
                    c["verdict"] + (" (stand-in data)" if c["stand_in_data"] else ""),
                    ", ".join(f"{k} {v}" for k, v in c["numbers"].items()), c["paper_verdict"]] for c in claims])  # fmt: skip
    story += _table_flow(ch, st, width)
    story.append(PageBreak())
    story.append(Paragraph("Tables", st["h1"]))
    for n in sorted(tables):
        for part in tables[n][1]:
            story += _table_flow(part, st, width)
    story.append(PageBreak())
    story.append(Paragraph("Figures", st["h1"]))
    for name, cap in FIGURE_CAPTIONS.items():
        png = figures_dir / f"{name}.png"
        if not png.exists():
            story.append(Paragraph(f"{name}: not produced ({png} missing).", st["warn"]))
            continue
        from reportlab.lib.utils import ImageReader

        iw, ih = ImageReader(str(png)).getSize()
        w = min(width, iw * 0.5)
        h = w * ih / iw
        maxh = page[1] - 5 * cm
        if h > maxh:
            w, h = w * maxh / h, maxh
        story += [Image(str(png), width=w, height=h), Paragraph(_esc(f"Figure {name[3:]}. {cap}"), st["cap"]),
                  Spacer(1, 10)]  # fmt: skip
    doc = SimpleDocTemplate(str(path), pagesize=page, leftMargin=1.5 * cm, rightMargin=1.5 * cm,
                            topMargin=1.2 * cm, bottomMargin=1.2 * cm, title="lpdt reproduction report")  # fmt: skip

    def footer(canvas, doc_) -> None:  # noqa: ANN001
        canvas.setFont("Helvetica", 7)
        canvas.drawString(
            1.5 * cm,
            0.6 * cm,
            f"lpdt report - scale {manifest.get('scale', '?')} - page {doc_.page}",
        )

    tmp = path.with_name(path.stem + ".tmp.pdf")
    doc.build(story, onFirstPage=footer, onLaterPages=footer)
    if tmp.exists():
        tmp.unlink()
    return path
