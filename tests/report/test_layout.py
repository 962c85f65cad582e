"""The PDF's layout (issue 53 items 5, 6, 10-12), read back from where reportlab put each
flowable (``lpdt.report.layout.ReportDoc.placed``): no heading ends a page, no note starts one
apart from its table, no page but the last is near blank, accuracy tables lead with the rows we
ran, and the details read as prose, never as Python."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from reportlab.platypus import Paragraph, Spacer

from lpdt.report import cli, layout, pdf, prose
from lpdt.report.table_text import Rendered
from lpdt.report.tables import NOT_RUN
from tests.report.conftest import report_args

ST = layout.styles()
WIDTH = layout.frame_width()


def table(rows: int, notes: int = 3, ran: int | None = None) -> Rendered:
    """A table of the accuracy tables' shape: ``ran`` rows with ours (all, by default), the
    rest 'not run', and ``notes`` caption lines."""
    ran = rows if ran is None else ran
    body = [
        [
            f"resnet{i}",
            "ring",
            f"{80 + i % 7}.12 / 91.00 (-10.88)" if i < ran else f"{NOT_RUN} / 90.1",
        ]
        for i in range(rows)
    ]
    caption = [f"Note {i}: what the cells mean, and how ours were run. " * 3 for i in range(notes)]
    return Rendered(
        f"Table {rows}: the paper's setting", ["Model", "Graph", "Ours / paper"], body, caption
    )


def lay_out(story: list[Any], tmp_path: Path) -> list[layout.Placement]:
    doc = layout.ReportDoc(tmp_path / "t.pdf")
    doc.build(story)
    return doc.placed


def broken_rules(placed: list[layout.Placement]) -> list[str]:
    """The layout rules a list of placements breaks: a heading last on its page, a note first on
    its page (apart from the table or figure it belongs to)."""
    out = []
    for page, ps in layout.pages(placed).items():
        if ps[-1].kind == "heading":
            out.append(f"page {page} ends with the heading {ps[-1].text!r}")
        if ps[0].kind == "note":
            out.append(f"page {page} starts with the note {ps[0].text!r}")
    return out


@pytest.mark.parametrize("rows", [3, 25, 90])  # a short table, a page-sized one, a long one
def test_a_heading_and_its_notes_stay_with_their_table_wherever_the_page_breaks(
    tmp_path: Path, rows: int
) -> None:
    frame = layout.frame_height()
    for before in range(0, int(frame) - 20, 37):
        story = [Spacer(1, before), *layout.table_flow(table(rows), ST, WIDTH)]
        story.append(Paragraph("The next section's text.", ST["body"]))
        placed = lay_out(story, tmp_path)
        assert not broken_rules(placed), (before, broken_rules(placed))


def test_the_rules_catch_a_heading_left_at_the_bottom(tmp_path: Path) -> None:
    """``broken_rules`` can fail: a heading laid out with no keep-together where one line is left."""
    frame = layout.frame_height()
    heading = Paragraph("A heading", ST["h2"].clone("plain", keepWithNext=0))
    heading.style.name = "h2"
    story = [Spacer(1, frame - 30), heading, Spacer(1, 40), Paragraph("text", ST["body"])]
    assert broken_rules(lay_out(story, tmp_path)) == ["page 1 ends with the heading 'A heading'"]


def test_accuracy_tables_lead_with_the_rows_we_ran() -> None:
    """Issue 53 item 11: our rows first, in the paper's order, then a row that says that the
    paper's rows below are not run, then those rows."""
    t = table(8, ran=0)
    for i in (2, 5):
        t.rows[i][2] = "84.60 / 91.00 (-6.40)"
    rows, fold = layout.lead_with_ours(t)
    assert [r[0] for r in rows[:2]] == ["resnet2", "resnet5"] and fold == 3
    assert rows[2][0].startswith("Below, the paper's rows that no run of ours fills: not run")
    assert [r[0] for r in rows[3:]] == [
        "resnet0",
        "resnet1",
        "resnet3",
        "resnet4",
        "resnet6",
        "resnet7",
    ]
    assert layout.lead_with_ours(table(4)) == (table(4).rows, None)  # nothing to fold


PYTHON = re.compile(r"[{}\[\]]|'\w+':|\b(True|False|None)\b")


def claim(**numbers: Any) -> Any:
    """A claim result as ``prose.claim_details`` reads it."""
    return SimpleNamespace(
        numbers=numbers, sd=None, kind="accuracy", half_width=None, detectable=None
    )


def test_the_details_read_as_prose_not_python() -> None:
    """Issue 53 item 10: the numbers of claims.json (here those the smoke tree gave) as a reader
    reads them: seed: value; a cell by its coordinates as the tables name them."""
    keys = ["dataset", "model", "topology", "nodes", "compression", "skew", "algorithm", "qgm"]
    c = claim(
        cells=4,
        pairs=4,
        per_seed={"1234": 0.3906, "1235": -0.2},
        min=0.0,
        max=0.7812,
        why="one seed: no interval can be formed",
        cells_left_out=[
            {
                "cell": [
                    "agnews",
                    "distilbert",
                    "directed_ring",
                    "4",
                    "0",
                    "0.0",
                    "choco",
                    "False",
                ],
                "seeds": [],
                "why": "no pair (unpaired)",
            }
        ],
        set_aside=[
            {
                "cell": ["cifar10", "resnet20", "torus", "8", "99", "0.9", "choco", "True"],
                "seed": 1234,
                "why": "unpaired",
                "detail": "b (precision=int8): no run",
            }
        ],
    )
    text = prose.claim_details(c, keys)
    assert not PYTHON.search(text), text
    assert "per seed (points): 1234: 0.39, 1235: -0.20" in text
    assert (
        "left out: agnews, distilbert, directed_ring, 4 nodes, 0 % compression, skew 0, choco, no QGM: no pair (unpaired)"
        in text
    )
    assert (
        "set aside: seed 1234 of cifar10, resnet20, torus, 8 nodes, 99 % compression, skew 0.9, choco, QGM: unpaired"
        in text
    )
    # the representation of before would fail the check
    assert PYTHON.search(f"per_seed {c.numbers['per_seed']}")


@pytest.fixture(scope="module")
def built(shared_tree: dict, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list]:
    """The report of the shared tree, and where each of its flowables landed."""
    out = tmp_path_factory.mktemp("layout")
    placed: list[layout.Placement] = []
    real = pdf.build_pdf
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pdf, "build_pdf", lambda *a, **k: real(*a, **k, placed=placed))
        assert cli.run(report_args(shared_tree, out)) == 0
    return out / "report.pdf", placed


def test_the_report_keeps_headings_and_notes_with_what_they_introduce(built) -> None:
    _, placed = built
    assert len(layout.pages(placed)) >= 6
    assert not broken_rules(placed), broken_rules(placed)


def test_no_page_of_the_report_is_near_blank(built) -> None:
    """Issue 53 items 5 and 12: every page but the last holds something over a third of it."""
    _, placed = built
    fill = layout.fill(placed)
    last = max(fill)
    thin = {p: round(f, 2) for p, f in fill.items() if p != last and f < 0.33}
    assert not thin, thin


def test_the_report_text_has_no_python_and_no_backticks(built) -> None:
    path, _ = built
    if not shutil.which("pdftotext"):
        pytest.skip("poppler-utils not installed")
    text = subprocess.run(
        ["pdftotext", str(path), "-"], capture_output=True, text=True, check=True
    ).stdout
    assert "`" not in text  # Figure 3's caption named `lpdt topology` in backticks
    details = text[text.index("Claims check") : text.index("Where our numbers differ")]
    assert not re.search(r"\{'|\['|'\]|per_seed|cells_left_out", details), details[:2000]


def test_a_long_table_whose_fold_row_falls_among_its_last_rows(tmp_path: Path) -> None:
    """A page-long table of ours with the paper's last row not run: the row that says so is in
    the part kept with the notes, and the layout rules hold."""
    t = table(90, ran=89)
    placed = lay_out([*layout.table_flow(t, ST, WIDTH), Paragraph("next", ST["body"])], tmp_path)
    assert not broken_rules(placed)
    assert sum(p.kind == "table" for p in placed) >= 2  # split over pages, its tail apart


def test_page_one_names_what_a_claim_left_out_without_a_stray_dash() -> None:
    """Issue 53 item 12: page 1's "Ours" cell gives the cells left out, as claims.md does."""
    left = {"cell": ["cifar10"], "seeds": [], "why": "no pair (unpaired)"}
    none_paired = SimpleNamespace(
        kind="accuracy", mean=None, ci=None, n=0, numbers={"cells_left_out": [left, left]}
    )
    assert prose.ours_text(none_paired) == "2 cells left out (no pair)"
    nothing = SimpleNamespace(kind="accuracy", mean=None, ci=None, n=0, numbers={})
    assert prose.ours_text(nothing) == "-"
