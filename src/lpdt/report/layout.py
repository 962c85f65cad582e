"""How the report's PDF is laid out (reportlab): styles, tables and figures as flowables that keep
what belongs together on one page, and a document that logs where each flowable landed.

The rules (``tests/report/test_layout.py`` checks them on built PDFs):

- a heading never ends a page: a table with its heading and notes is one ``KeepTogether`` when
  it fits a page; a longer one starts only where its heading and first rows fit
  (``CondPageBreak``) and keeps its notes with its last rows (``table_flow``);
- a figure and its caption are one block, sized to half the page where it stays readable at
  that size (two figures a page), else to the page; a narrow figure has its caption beside it
  (``figure_flow``);
- a section starts a new page only where less than ``SECTION_ROOM`` of the page is left
  (``section_break``), so that no page is left near blank;
- an accuracy table leads with the rows we ran; the paper's rows that no run of ours fills
  follow under a row that says so (``lead_with_ours``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reportlab.lib import colors
from reportlab.lib.pagesizes import A4, landscape
from reportlab.lib.styles import ParagraphStyle, getSampleStyleSheet
from reportlab.lib.units import cm
from reportlab.platypus import (
    CondPageBreak,
    Flowable,
    Image,
    KeepTogether,
    Paragraph,
    SimpleDocTemplate,
    Spacer,
    Table,
    TableStyle,
)

from lpdt.report.table_text import Rendered
from lpdt.report.tables import NOT_RUN

PAGE = landscape(A4)
MARGINS = {"left": 1.5 * cm, "right": 1.5 * cm, "top": 1.0 * cm, "bottom": 1.2 * cm}
FIGURE_GAP = 10  # points between one figure block and the next
FIGURE_DPI = 150  # figures.py saves its PNGs at this resolution: their size in points
MIN_SCALE = 0.6  # a figure drawn smaller than this fraction of its size takes a whole page
BESIDE = 0.62  # a figure narrower than this fraction of the width has its caption beside it
SECTION_ROOM = 0.35  # a section starts a new page where less than this fraction is left
TAIL_ROWS = 2  # the last rows of a long table that keep its notes company
HEADINGS = ("h1", "h2", "sh2")  # the styles of headings (``styles``)
NOTES = ("c", "w")  # the styles of notes and captions


def styles() -> dict[str, ParagraphStyle]:
    ss = getSampleStyleSheet()
    return {
        "title": ParagraphStyle("t", parent=ss["Title"], fontSize=20),
        "h1": ParagraphStyle("h1", parent=ss["Heading1"], fontSize=14, keepWithNext=1),
        "h2": ParagraphStyle("h2", parent=ss["Heading2"], fontSize=11, keepWithNext=1),
        # a heading of the summary page, which must hold on one page: less space above
        "sh2": ParagraphStyle(
            "sh2", parent=ss["Heading2"], fontSize=11, spaceBefore=4, keepWithNext=1
        ),
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
        # the key column of a two-column table of facts (the appendix)
        "key": ParagraphStyle(
            "key", parent=ss["BodyText"], fontSize=9, leading=11, fontName="Helvetica-Bold"
        ),
    }


def esc(s: object) -> str:
    """Text for a Paragraph: reportlab's markup characters escaped."""
    return str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def markup(s: object) -> str:
    """``esc``, and a `name` in backticks (Markdown's code; reStructuredText's double ones too)
    set in Courier, the backticks gone."""
    return re.sub(r"``([^`]+)``|`([^`]+)`", lambda m: _code(m[1] or m[2]), esc(s))


def _code(text: str) -> str:
    return f'<font face="Courier">{text}</font>'


def frame_height(page: tuple[float, float] = PAGE) -> float:
    """The height of the document's frame (``MARGINS``, less the frame's padding)."""
    return page[1] - MARGINS["top"] - MARGINS["bottom"] - 12


def frame_width(page: tuple[float, float] = PAGE) -> float:
    return page[0] - MARGINS["left"] - MARGINS["right"]


def section_break(page: tuple[float, float] = PAGE) -> CondPageBreak:
    """Start the next section on a new page only where less than ``SECTION_ROOM`` is left."""
    return CondPageBreak(SECTION_ROOM * frame_height(page))


def _height(flowables: Sequence[Flowable], width: float, page: tuple[float, float]) -> float:
    """The height of ``flowables`` laid out one under the other in ``width``."""
    total = 0.0
    for f in flowables:
        total += f.wrap(width, page[1] * 10)[1] + f.getSpaceBefore() + f.getSpaceAfter()
    return total


# --- tables ------------------------------------------------------------------------------------


def _not_run(row: Sequence[str]) -> bool:
    """A row of the paper's that none of our runs fills: a value cell reads "not run ..." and
    no cell has a number of ours."""
    return any(c.startswith("not run") for c in row) and not any(
        c and c[0].isdigit() and " / " in c for c in row
    )


def lead_with_ours(t: Rendered) -> tuple[list[list[str]], int | None]:
    """The rows of ``t`` with ours first, in the paper's order, then the paper's rows we did not
    run, under a row that says so (its index; None where there is no such row)."""
    ours = [r for r in t.rows if not _not_run(r)]
    rest = [r for r in t.rows if _not_run(r)]
    if not ours or not rest:
        return t.rows, None
    note = (
        f"Below, the paper's rows that no run of ours fills: {NOT_RUN} (the paper's numbers only)"
    )
    return [*ours, [note] + [""] * (len(t.header) - 1), *rest], len(ours) + 1


def _table(
    header: list[str] | None,
    rows: list[list[str]],
    st: dict[str, ParagraphStyle],
    widths: list[float],
    fold: int | None = None,
) -> Table:
    data = [[Paragraph(esc(h), st["head"]) for h in header]] if header else []
    first = len(data)
    data += [[Paragraph(markup(c), st["cell"]) for c in r] for r in rows]
    tbl = Table(data, colWidths=widths, repeatRows=1 if header else 0)
    style: list[tuple[Any, ...]] = [
        ("GRID", (0, 0), (-1, -1), 0.25, colors.grey),
        ("VALIGN", (0, 0), (-1, -1), "TOP"),
        ("TOPPADDING", (0, 0), (-1, -1), 1.5),
        ("BOTTOMPADDING", (0, 0), (-1, -1), 1.5),
    ]
    if header:
        style.append(("BACKGROUND", (0, 0), (-1, 0), colors.HexColor("#e8e8e8")))
    for i, r in enumerate(rows, start=first):
        if any(c.startswith(("not run", "missing", "diverged")) for c in r):
            style.append(("TEXTCOLOR", (0, i), (-1, i), colors.HexColor("#555555")))
    if fold is not None:
        i = fold - 1 + first
        style += [("SPAN", (0, i), (-1, i)), ("BACKGROUND", (0, i), (-1, i), colors.whitesmoke)]
    tbl.setStyle(TableStyle(style))
    return tbl


def table_flow(
    t: Rendered,
    st: dict[str, ParagraphStyle],
    width: float,
    weights: list[float] | None = None,
    page: tuple[float, float] = PAGE,
    lead: Sequence[Flowable] = (),
) -> list[Flowable]:
    """A table with its heading (its title, after ``lead``: a section's heading) and its notes
    (caption lines; a stand-in line in red): one block where it fits a page; else the heading
    and first rows start a page together and the notes stay with the last ``TAIL_ROWS`` rows.
    Rows we ran lead (``lead_with_ours``)."""
    w = weights or [1.0] * len(t.header)
    widths = [width * x / sum(w) for x in w]
    rows, fold = lead_with_ours(t)
    heading = [*lead, Paragraph(esc(t.title), st["h2"])]
    notes: list[Flowable] = [Spacer(1, 3)] + [
        Paragraph(markup(c), st["warn"] if c.startswith("STAND-IN") else st["cap"])
        for c in t.caption
    ]
    whole = _table(t.header, rows, st, widths, fold)
    block = [*heading, whole, *notes]
    if _height(block, width, page) <= frame_height(page) or len(rows) <= TAIL_ROWS:
        return [KeepTogether(block), Spacer(1, 8)]
    cut = len(rows) - TAIL_ROWS  # the fold row (1-based) goes to the part that holds it
    in_head = fold is not None and fold <= cut
    head = _table(t.header, rows[:cut], st, widths, fold if in_head else None)
    tail_fold = None if fold is None or in_head else fold - cut
    tail = _table(None, rows[cut:], st, widths, tail_fold)
    start = _height([*heading, _table(t.header, rows[:3], st, widths)], width, page)
    return [CondPageBreak(start), *heading, head, KeepTogether([tail, *notes]), Spacer(1, 8)]


def facts_table(
    rows: Sequence[tuple[str, str]], st: dict[str, ParagraphStyle], width: float, key_w: float
) -> Table:
    """A two-column table of facts (the appendix): a readable bold key, its value."""
    t = Table(
        [[Paragraph(esc(a), st["key"]), Paragraph(esc(b), st["body"])] for a, b in rows],
        colWidths=[key_w, width - key_w],
    )
    t.setStyle(
        TableStyle(
            [("GRID", (0, 0), (-1, -1), 0.25, colors.grey), ("VALIGN", (0, 0), (-1, -1), "TOP")]
        )
    )
    return t


# --- figures -----------------------------------------------------------------------------------


class FigureBlock(Table):
    """A figure with its caption beside it: one row, never split over pages."""

    figure = True


def figure_flow(
    png: Path,
    caption: str,
    st: dict[str, ParagraphStyle],
    width: float,
    page: tuple[float, float] = PAGE,
) -> list[Flowable]:
    """A figure and its caption as one block, sized to half the frame (two figures a page)
    where that keeps it at ``MIN_SCALE`` of its size or more, else to the whole frame; never
    larger than its size (``FIGURE_DPI``). The caption is beside a figure narrower than
    ``BESIDE`` of the width, else under it."""
    from reportlab.lib.utils import ImageReader

    iw, ih = ImageReader(str(png)).getSize()
    natural = iw * 72 / FIGURE_DPI
    aspect = ih / iw
    frame = frame_height(page)
    full = frame - FIGURE_GAP
    # half a frame, less the spacer after each block and the block's own padding
    for room in ((frame - 2 * FIGURE_GAP) / 2 - 8, full):
        narrow = min(natural, room / aspect)
        if narrow <= BESIDE * width:  # the caption beside the figure
            cap_w = width - narrow - 12
            caption_h = Paragraph(markup(caption), st["cap"]).wrap(cap_w, page[1])[1]
            if caption_h <= room and (narrow >= MIN_SCALE * natural or room == full):
                img = Image(str(png), width=narrow, height=narrow * aspect)
                block = FigureBlock(
                    [[img, Paragraph(markup(caption), st["cap"])]],
                    colWidths=[narrow + 12, cap_w],
                )
                block.setStyle(
                    TableStyle(
                        [
                            ("VALIGN", (0, 0), (-1, -1), "MIDDLE"),
                            ("LEFTPADDING", (0, 0), (-1, -1), 0),
                            ("RIGHTPADDING", (0, 0), (0, 0), 12),
                        ]
                    )
                )
                return [block, Spacer(1, FIGURE_GAP)]
            if room != full:
                continue
        below = Paragraph(markup(caption), st["cap"])
        caption_h = below.wrap(width, page[1])[1]
        w = min(width, natural, (room - caption_h) / aspect)
        if w >= MIN_SCALE * natural or room == full:
            img = Image(str(png), width=w, height=w * aspect)
            return [KeepTogether([img, below]), Spacer(1, FIGURE_GAP)]
    raise AssertionError("unreachable: the whole frame always takes the figure")


# --- where things landed -----------------------------------------------------------------------


@dataclass(frozen=True)
class Placement:
    """One flowable as laid out: its page, its kind (heading, note, table, figure, text), the
    start of its text, and how much of the page's frame is used down to its bottom (0-1)."""

    page: int
    kind: str
    text: str
    used: float


def kind_of(f: Flowable) -> str | None:
    """What a flowable is, for the layout's rules; None for space and breaks."""
    if isinstance(f, Paragraph):
        name = f.style.name
        return "heading" if name in HEADINGS else "note" if name in NOTES else "text"
    if isinstance(f, Image) or getattr(f, "figure", False):
        return "figure"
    if isinstance(f, Table):
        return "table"
    return None


def _text(f: Flowable) -> str:
    if isinstance(f, Paragraph):
        return f.getPlainText()[:80]
    if isinstance(f, Table):
        cells = getattr(f, "_cellvalues", [[]])
        first = cells[0][0] if cells and cells[0] else ""
        return first.getPlainText()[:80] if isinstance(first, Paragraph) else str(first)[:80]
    return type(f).__name__


class ReportDoc(SimpleDocTemplate):
    """The report's document: landscape A4, ``MARGINS``; ``placed`` logs each flowable laid out
    (``Placement``)."""

    def __init__(self, path: Path, **kw: Any) -> None:
        super().__init__(
            str(path),
            pagesize=PAGE,
            leftMargin=MARGINS["left"],
            rightMargin=MARGINS["right"],
            topMargin=MARGINS["top"],
            bottomMargin=MARGINS["bottom"],
            **kw,
        )
        self.placed: list[Placement] = []

    def afterFlowable(self, flowable: Flowable) -> None:  # noqa: N802 (reportlab's hook)
        kind = kind_of(flowable)
        if kind is None:
            return
        f = self.frame
        cursor = float(vars(f)["_y"])  # where the frame's next flowable goes (reportlab's own)
        used = (f.y1 + f.height - cursor) / f.height
        self.placed.append(Placement(self.page, kind, _text(flowable), used))


def pages(placed: Sequence[Placement]) -> dict[int, list[Placement]]:
    """``ReportDoc.placed`` by page, in the order laid out."""
    out: dict[int, list[Placement]] = {}
    for p in placed:
        out.setdefault(p.page, []).append(p)
    return out


def fill(placed: Sequence[Placement]) -> dict[int, float]:
    """The share of each page's frame that its flowables use (0-1)."""
    return {page: max(p.used for p in ps) for page, ps in pages(placed).items()}
