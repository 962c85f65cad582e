"""lpdt.report.pdf's figure pages, page-1 seeds text and differences section, on constructed
inputs: a figure is never parted from its caption, the seeds are stated per cell, a row that
disagrees is named once and apart from its neighbours."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import pytest
from reportlab.platypus import Spacer

from lpdt.report import layout, pdf, prose
from lpdt.report.aggregate import KEYS
from lpdt.report.cost_tables import data_table

PAGE = layout.PAGE
WIDTH = layout.frame_width(PAGE)


def png(path: Path, w: float, h: float) -> Path:
    fig, ax = plt.subplots(figsize=(w, h))
    ax.plot([0, 1], [0, 1])
    fig.savefig(path, dpi=layout.FIGURE_DPI)
    plt.close(fig)
    return path


def pages(tmp_path: Path, before: float, captions: dict[str, str]) -> list[tuple[str, int]]:
    """Lay out ``before`` points of space, then the figures of ``captions``: (kind, page) of
    each figure block part (an image under which its caption goes, a caption, or a block with
    the caption beside)."""
    doc = layout.ReportDoc(tmp_path / "f.pdf")
    story = [Spacer(1, before)] if before else []
    doc.build(story + pdf.figure_story(tmp_path, captions, layout.styles(), WIDTH, PAGE))
    return [(p.kind, p.page) for p in doc.placed if p.kind in ("figure", "note")]


@pytest.mark.parametrize("size", [(12, 3), (6, 4)])  # a wide figure, a narrow one
def test_a_caption_stays_with_its_figure_wherever_the_page_breaks(
    tmp_path: Path, size: tuple[float, float]
) -> None:
    """Whatever space is left on the page when a figure comes, its caption is on the figure's
    page: under a wide figure (one block), beside a narrow one (one row)."""
    png(tmp_path / "fig4.png", *size)
    caption = {"fig4": "Accuracy against skew. " * 30}  # three lines or so
    frame = layout.frame_height(PAGE)
    for before in range(0, int(frame) - 40, 15):
        log = pages(tmp_path, float(before), caption)
        kinds = [k for k, _ in log]
        assert kinds in (["figure", "note"], ["figure"]), f"{before} pt before: {log}"
        assert len({p for _, p in log}) == 1, f"{before} pt before: {log}"


def test_a_figure_taller_than_the_page_shrinks_to_hold_its_caption(tmp_path: Path) -> None:
    """A tall image with a long caption: scaled so that both fit one frame, on one page."""
    png(tmp_path / "fig5.png", 4, 12)
    log = pages(tmp_path, 0.0, {"fig5": "A long caption of many words. " * 80})
    assert len({p for _, p in log}) == 1 and log[0][0] == "figure"


def test_two_figures_share_a_page_where_half_a_page_keeps_them_readable(tmp_path: Path) -> None:
    """Issue 53 item 12: a figure no longer fills the top half of a page alone; two of the
    quick scale's shapes (a wide one, a 6 x 4 in one) share one page."""
    png(tmp_path / "fig4.png", 12.6, 3.3)
    png(tmp_path / "fig5.png", 6.5, 3.3)
    log = pages(tmp_path, 0.0, {"fig4": "Skew. " * 40, "fig5": "Skew with QGM. " * 40})
    assert {p for _, p in log} == {1}, log


def seeded(study: str, cells: list[tuple[dict, list[int]]]) -> pd.DataFrame:
    """One listed run per (cell coordinates, seed)."""
    base = {k: None for k in KEYS} | {"dataset": "cifar10", "model": "resnet20", "nodes": 4}
    return pd.DataFrame(
        [
            base | coords | {"study": study, "run_id": f"{study}-{i}-{s}", "seed": s}
            for i, (coords, seeds) in enumerate(cells)
            for s in seeds
        ]
    )


def quick_fig1() -> pd.DataFrame:
    """The quick scale's Figure 1: three norms at fp32 on 6 seeds, Range-EvoNorm at fp32 on 5,
    and at 8 bits on 1."""
    six = list(range(1234, 1240))
    return seeded(
        "fig1",
        [({"norm": n, "precision": "fp32"}, six) for n in ("batchnorm", "groupnorm", "evonorm")]
        + [
            ({"norm": "rangeen", "precision": "fp32"}, six[:5]),
            ({"norm": "rangeen", "precision": "int8"}, six[:1]),
        ],
    )


def test_seeds_are_stated_per_cell() -> None:
    """Page 1 says how many seeds each cell ran, not the study's seeds together (the issue:
    '6 seeds (1234-1239): fig1' although one cell had 5 and another 1)."""
    t3 = seeded("table3", [({"skew": s}, [1, 2, 3]) for s in (0.0, 0.9)])
    t4 = seeded("table4", [({"skew": 0.9, "qgm": True}, [1, 2, 3])])
    one = seeded("table2", [({"model": m}, [7]) for m in ("resnet20", "vgg11")])
    text = prose.seeds_text(pd.concat([quick_fig1(), t3, t4, one]))
    assert text == (
        "6 seeds (1234-1239) in 3 cells, 5 seeds (1234-1238) in 1 cell, 1 seed (1234) in 1 cell: "
        "fig1; 3 seeds (1-3) per cell: table3, table4; 1 seed (7) per cell: table2"
    )


def test_seeds_text_counts_a_run_listed_in_two_rows_once() -> None:
    """A run listed twice in a study's rows (e.g. a missing run's placeholder) is one seed."""
    df = quick_fig1()
    df = pd.concat([df, df.iloc[:1]])
    assert prose.study_seeds_text(df).startswith("6 seeds (1234-1239) in 3 cells")


@pytest.mark.parametrize(
    ("seeds", "text"),
    [((1, 5), "2 seeds (1, 5)"), ((3,), "1 seed (3)"), ((), "seed not recorded")],
)
def test_seed_set_names(seeds: tuple[int, ...], text: str) -> None:
    assert prose.seed_set_text(seeds) == text


def test_disagreeing_data_rows_are_named_once_each(tmp_path: Path) -> None:
    """Table 3's 'Data' rows of one model and graph that differ in compression are named by it,
    each once (the issue: 'vgg11 torus 16' twice)."""
    rows = [
        {
            "model": "vgg11",
            "reading": "paper configuration",
            "topology": "torus",
            "nodes": 16,
            "epochs": 200,
            "compression": c,
            "gb_fp32": 700.0,
            "gb_fp32_paper": 744.5,
            "gb_int8": 175.0,
            "gb_int8_paper": 186.1,
            "agrees_printed": False,
        }
        for c in (0.0, 0.99)
    ]
    rows.append(rows[0] | {"model": "resnet20", "topology": "directed_ring", "nodes": 8})
    rows[-1] |= {"agrees_printed": True}
    pd.DataFrame(rows).to_csv(tmp_path / "table3_data.csv", index=False)
    part = data_table(tmp_path)
    assert part is not None
    m = pd.DataFrame(columns=["status", "paper", "diff", "stand_in"])
    (line,) = [t for t in prose.differences_text({3: (m, [part])}) if "'Data'" in t]
    assert line.endswith(
        "1 of 3 rows of the cost model agree with the printed digits; not: "
        "vgg11 torus 16 0 %, vgg11 torus 16 99 %."
    )
