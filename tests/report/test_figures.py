"""lpdt.report.figures, read back from the matplotlib Figure objects: Figures 4 and 5 draw FP
and 8-bit apart (marker, colour, offset) on axes that show their data; Figure 6's legend names
only what it draws. The run tables are constructed here, in the quick scale's shape (one seed,
skews 0 and 0.9, one point per precision)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from matplotlib.container import ErrorbarContainer

from lpdt.report.figures import fig4, fig5, fig6
from lpdt.report.paper import load_paper
from tests.report.conftest import PAPER_CSV

CELL = {
    "dataset": "cifar10",
    "model": "resnet20",
    "norm": None,
    "topology": "directed_ring",
    "nodes": 4,
    "compression": 0,
    "qgm": False,
}


def runs(study: str, points: list[tuple[str, str, float, float]], **coords: object) -> pd.DataFrame:
    """One finished run per (algorithm, precision, skew, accuracy)."""
    return pd.DataFrame(
        [
            CELL
            | coords
            | {
                "study": study,
                "status": "ok",
                "run_id": f"{study}-{i}",
                "seed": 1234 + i,  # one run per seed: a point over runs averages seeds
                "algorithm": algo,
                "precision": prec,
                "skew": skew,
                "acc": acc,
                "stand_in": "",
            }
            for i, (algo, prec, skew, acc) in enumerate(points)
        ]
    )


def no_paper() -> pd.DataFrame:
    return load_paper(PAPER_CSV).iloc[0:0]


def series(ax: plt.Axes) -> dict[str, dict]:
    """Each drawn data series of a panel by its legend label (our points: an error-bar
    container's data line; the paper's: a plain line): marker, colour, style, points."""
    lines = [(c.get_label(), c.lines[0]) for c in ax.containers if isinstance(c, ErrorbarContainer)]
    lines += [(x.get_label(), x) for x in ax.get_lines() if not x.get_label().startswith("_")]
    return {
        label: {
            "marker": line.get_marker(),
            "color": line.get_color(),
            "ls": line.get_linestyle(),
            "x": np.asarray(line.get_xdata(), dtype=float),
            "y": np.asarray(line.get_ydata(), dtype=float),
        }
        for label, line in lines
    }


def legend_labels(ax: plt.Axes) -> list[str]:
    legend = ax.get_legend()
    return [t.get_text() for t in legend.get_texts()] if legend else []


def assert_apart(a: dict, b: dict) -> None:
    """Two series that a reader can tell apart even where each is one point at the same skew."""
    assert a["marker"] != b["marker"]
    assert a["color"] != b["color"]
    assert a["ls"] != b["ls"]
    assert not np.intersect1d(a["x"], b["x"]).size  # offset: never on top of each other


def texts(ax: plt.Axes) -> list[str]:
    return [t.get_text() for t in ax.texts]


def assert_shows(ax: plt.Axes, xs: list[float], ys: list[float]) -> None:
    """The axis limits hold every point with a margin and no empty side (issue 53 item 8): the
    skew axis spans the skews drawn and 0.05 more each side (0.15 each side of a single skew,
    which the panel's note names); the accuracy axis at least 1 point more each side, and not
    so wide that the points are squashed (their range, or 2 points, fills at least 1/3 of it)."""
    x0, x1 = ax.get_xlim()
    y0, y1 = ax.get_ylim()
    lo, hi = min(xs), max(xs)
    pad = 0.15 if hi - lo < 1e-9 else 0.05
    # the offsets (+-0.012) sit inside the margin
    assert abs(x0 - (lo - pad)) < 1e-9 and abs(x1 - (hi + pad)) < 1e-9, (x0, x1, xs)
    one_skew = [t for t in texts(ax) if t.startswith("only skew")]
    assert bool(one_skew) == (hi - lo < 1e-9), texts(ax)
    assert y0 <= min(ys) - 1.0 + 1e-9 and y1 >= max(ys) + 1.0 - 1e-9
    assert (y1 - y0) <= 3 * max(max(ys) - min(ys), 2.0)


def assert_covers(fig: plt.Figure) -> None:
    """Every drawn point of every panel lies inside its axes, and the points fill the skew axis
    but for its margins (or the panel says why it has one skew): no half-empty panel."""
    for ax in fig.axes:
        s = series(ax)
        if not s:
            continue
        x0, x1 = ax.get_xlim()
        y0, y1 = ax.get_ylim()
        xs = np.concatenate([v["x"] for v in s.values()])
        ys = np.concatenate([v["y"] for v in s.values()])
        assert (xs >= x0).all() and (xs <= x1).all() and (ys >= y0).all() and (ys <= y1).all()
        spread = (xs.max() - xs.min()) / (x1 - x0)
        assert spread >= 0.8 or any(t.startswith("only skew") for t in texts(ax)), (
            spread,
            texts(ax),
        )


def test_fig4_fp_and_8bit_are_distinct_on_axes_that_show_them() -> None:
    """The quick scale's Figure 4 panel: each algorithm at skew 0 only, FP and 8-bit one point
    each (the issue: one orange marker at one x, axis -0.04..0.04)."""
    pts = [
        ("choco", "fp32", 0.0, 85.2),
        ("choco", "int8", 0.0, 84.9),
        ("deepsqueeze", "fp32", 0.0, 83.0),
        ("deepsqueeze", "int8", 0.0, 82.1),
    ]
    fig = fig4(runs("table3", pts), no_paper())
    (ax,) = fig.axes
    s = series(ax)
    assert set(s) == {"Choco", "LP-Choco", "Deep-Squeeze", "LP-Deep-Squeeze"}
    assert_apart(s["Choco"], s["LP-Choco"])
    assert_apart(s["Deep-Squeeze"], s["LP-Deep-Squeeze"])
    # the algorithms differ in colour too; every series has its own colour
    assert len({v["color"] for v in s.values()}) == 4
    # drawn at their own accuracy, a small offset from their skew
    assert s["LP-Choco"]["y"].tolist() == [84.9]
    assert abs(s["LP-Choco"]["x"][0]) < 0.05 and abs(s["Choco"]["x"][0]) < 0.05
    assert_shows(ax, [0.0], [p[3] for p in pts])
    assert_covers(fig)
    assert sorted(legend_labels(ax)) == sorted(s)  # the legend lists what is drawn, once each
    plt.close(fig)


def test_fig5_fp_and_8bit_are_distinct_at_skew_0_9() -> None:
    """The quick scale's Figure 5: Choco with QGM at skew 0.9 only (the issue's axis
    0.86..0.94), FP and 8-bit one point each."""
    pts = [("choco", "fp32", 0.9, 71.0), ("choco", "int8", 0.9, 70.4)]
    fig = fig5(runs("table4", pts, qgm=True), no_paper())
    (ax,) = fig.axes
    s = series(ax)
    assert set(s) == {"Choco+QGM", "LP-Choco+QGM"}
    assert_apart(s["Choco+QGM"], s["LP-Choco+QGM"])
    assert_shows(ax, [0.9], [71.0, 70.4])
    assert list(ax.get_xticks()) == [0.9]  # the skews drawn; the note names the paper's range
    assert "only skew 0.9 ran at this scale\n(the paper: 0-0.9)" in texts(ax)
    assert_covers(fig)
    # the title holds on two lines: what is drawn, then the setup
    assert fig._suptitle.get_text().count("\n") == 1
    plt.close(fig)


def test_fig4_limits_hold_error_bars_and_two_skews() -> None:
    """Several seeds: the y axis holds the mean +- sd (the error bars), skews 0 and 0.9 both."""
    pts = [
        ("choco", prec, skew, acc + d)
        for prec, acc in (("fp32", 80.0), ("int8", 78.0))
        for skew in (0.0, 0.9)
        for d in (-3.0, 0.0, 3.0)
    ]
    fig = fig4(runs("table3", pts), no_paper())
    (ax,) = fig.axes
    sd = 3.0  # sample sd of (-3, 0, 3)
    assert_shows(ax, [0.0, 0.9], [78.0 - sd, 80.0 + sd])
    assert_covers(fig)
    assert set(series(ax)) == {"Choco (n=3)", "LP-Choco (n=3)"}
    plt.close(fig)


def test_fig4_paper_overlay_keeps_the_precisions_apart() -> None:
    """On the paper's data the paper's values are drawn (faint, open) with the same marker and
    colour as our series of that precision, and the axis holds them too."""
    paper = load_paper(PAPER_CSV)
    cell = {"model": "resnet20", "topology": "directed_ring", "nodes": 8, "compression": 0}
    pts = [("choco", "fp32", 0.0, 91.0), ("choco", "int8", 0.0, 90.5)]
    fig = fig4(runs("table3", pts, **cell), paper)
    (ax,) = fig.axes
    s = series(ax)
    ours, theirs = s["LP-Choco"], s["LP-Choco (paper)"]
    assert (ours["marker"], ours["color"]) == (theirs["marker"], theirs["color"])
    assert s["Choco (paper)"]["marker"] != theirs["marker"]
    p = paper[
        (paper["table"] == 3)
        & (paper["metric"] == "acc")
        & (paper["model"] == "resnet20")
        & (paper["nodes"] == 8)
        & (paper["compression"] == 0)
        & (paper["algorithm"] == "choco")
    ]
    assert len(p) >= 4  # FP and 8-bit over the paper's skews
    assert_shows(ax, [*p["skew"].astype(float), 0.0], [*p["value"], 91.0, 90.5])
    assert_covers(fig)
    plt.close(fig)


FIG6_CELL = {"model": "resnet18", "topology": "torus", "nodes": 8, "compression": 0}


@pytest.mark.parametrize("precisions", [("fp32", "int8"), ("fp32",)])
def test_fig6_legend_lists_only_drawn_series(precisions: tuple[str, ...]) -> None:
    """On a stand-in the paper's ticks are not drawn, so the legend has no "paper"; a precision
    without runs has no bars and no legend entry."""
    pts = [("choco", p, s, 80.0) for p in precisions for s in (0.0, 0.9)]
    df = runs("table5", pts, **FIG6_CELL)
    df["stand_in"] = "fashion_mnist standing in for cifar10"
    fig = fig6(df, load_paper(PAPER_CSV))
    (ax,) = [a for a in fig.axes if a.get_legend()]
    names = {"fp32": "FP", "int8": "LP"}
    assert legend_labels(ax) == [names[p] for p in precisions]
    assert not [x for x in ax.get_lines() if x.get_label() == "paper"]
    plt.close(fig)


def test_fig6_names_the_paper_where_its_ticks_are_drawn() -> None:
    """On the paper's data, cells the paper has: its ticks are drawn and named once."""
    paper = load_paper(PAPER_CSV)
    p5 = paper[(paper["table"] == 5) & (paper["model"] == "resnet18")]
    cell = p5.iloc[0]
    coords = {
        "model": "resnet18",
        "topology": cell["topology"],
        "nodes": cell["nodes"],
        "compression": cell["compression"],
        "dataset": cell["dataset"],
    }
    pts = [(cell["algorithm"], p, float(cell["skew"]), 80.0) for p in ("fp32", "int8")]
    fig = fig6(runs("table5", pts, **coords), paper)
    (ax,) = [a for a in fig.axes if a.get_legend()]
    assert sorted(legend_labels(ax)) == ["FP", "LP", "paper"]
    plt.close(fig)


def test_a_half_empty_panel_fails_the_coverage_check() -> None:
    """assert_covers can fail: the skew axis of before (always 0-0.9) around points at 0."""
    fig = fig4(
        runs("table3", [("choco", "fp32", 0.0, 85.0), ("choco", "fp32", 0.2, 84.0)]), no_paper()
    )
    (ax,) = fig.axes
    ax.set_xlim(-0.05, 0.95)
    with pytest.raises(AssertionError):
        assert_covers(fig)
    plt.close(fig)


@pytest.mark.parametrize("acc, noted", [(11.0, True), (80.0, False)])
def test_fig6_says_on_its_face_when_bars_sit_at_chance(acc: float, noted: bool) -> None:
    """Issue 53 item 9: 10 classes, 2-epoch runs; bars within 5 points of chance (10 %) get a
    note in the panel and chance is drawn; bars well above it get neither note nor clutter."""
    pts = [("choco", p, s, acc) for p in ("fp32", "int8") for s in (0.0, 0.9)]
    df = runs("table5", pts, **FIG6_CELL)
    df["stand_in"] = "fashion_mnist standing in for imagenette"
    df["num_classes"], df["epochs_completed"] = 10, 2
    fig = fig6(df, load_paper(PAPER_CSV))
    (ax,) = fig.axes
    notes = [t for t in texts(ax) if "chance" in t]
    if noted:
        (note,) = notes
        assert note.replace("\n", " ") == (
            "4 of 4 bars within 5 points of chance (10 %, dotted): these 2-epoch runs have not "
            "learnt at this scale"
        )
        fig.canvas.draw()  # the note and the legend side by side, neither over the other
        (text,) = [t for t in ax.texts if "chance" in t.get_text()]
        box, legend = text.get_window_extent(), ax.get_legend().get_window_extent()
        assert box.x1 < legend.x0 or box.y0 > legend.y1 or box.y1 < legend.y0
    else:
        assert notes == []
    assert "chance (10 %)" in legend_labels(ax)
    plt.close(fig)


def _fig7_inputs(cost) -> None:
    """The cost model's Figure 7 CSVs in the shape of ResNet-20 at b = 32: convolutions hold
    about 98 % of the energy, a linear layer and the pooling hundredths of a percent."""
    bars = [("rangebn", "fp32"), ("rangebn", "int8"), ("rangeen", "fp32"), ("rangeen", "int8")]
    energy = {"Conv": 18.0, "Norm": 0.25, "Quantization": 0.1, "Linear": 3e-4, "Average pool": 2e-4}
    pd.DataFrame(
        [
            {
                "mode": "training",
                "model": "resnet20",
                "batch": 32,
                "norm": n,
                "precision": p,
                "label": label,
                "energy_mj": e / (20 if p == "int8" else 1),
            }
            for n, p in bars
            for label, e in energy.items()
            if not (label == "Quantization" and p == "fp32")
        ]
    ).to_csv(cost / "fig7_compute.csv", index=False)
    memory = {"activations": 80.0, "activation_gradients": 80.0, "weights": 1.0, "momentum": 1.0}
    pd.DataFrame(
        [
            {
                "model": "resnet20",
                "batch": 32,
                "norm": n,
                "precision": p,
                "kind": k,
                "mib": v / (4 if p == "int8" and k.startswith("activation") else 1),
            }
            for n, p in bars
            for k, v in memory.items()
        ]
    ).to_csv(cost / "fig7_memory.csv", index=False)


def test_fig7_legends_name_what_a_reader_sees_beside_the_bars(tmp_path) -> None:
    """Issue 53 item 7: every legend entry is drawn at a visible height (1 % of its panel's
    tallest bar or more), the segments too small are named under their panel, and no legend
    lies over its axes (it sits beside them)."""
    from lpdt.report.file_figures import VISIBLE, fig7

    _fig7_inputs(tmp_path)
    fig = fig7(tmp_path)
    fig.canvas.draw()
    panels = [ax for ax in fig.axes if ax.get_legend()]
    assert len(panels) == 3
    for ax in panels:
        top = max(
            sum(
                r.get_height()
                for c in ax.containers
                for r in c.patches
                if r.get_x() <= x < r.get_x() + r.get_width()
            )
            for x in range(4)
        )
        for c in ax.containers:
            assert max(r.get_height() for r in c.patches) >= VISIBLE * top, c.get_label()
        assert {c.get_label() for c in ax.containers} == set(legend_labels(ax))
        legend = ax.get_legend().get_window_extent()
        assert legend.x0 >= ax.get_window_extent().x1  # beside the axes, over no bar
    memory, energy, besides = panels
    assert "weights" not in legend_labels(memory) and "activations" in legend_labels(memory)
    assert any(t.startswith("too small to draw: weights, momentum") for t in texts(memory))
    assert legend_labels(energy) == ["Conv", "all other types (right)"]
    assert {"Norm", "Quantization"} <= set(legend_labels(besides))
    assert any("Linear, Average pool" in t for t in texts(besides))
    plt.close(fig)


def test_two_runs_of_one_seed_at_a_point_are_refused() -> None:
    """Figure 4 drew the mean of two runs of one seed as a point with an error bar over
    "seeds" (the tables refuse such a cell; before 2026-12-01 a manifest whose fig4 study
    listed a run twice under two ids was drawn)."""
    df = runs("fig4", [("choco", "fp32", 0.0, 80.0), ("choco", "fp32", 0.0, 82.0)])
    fig4(df, no_paper())  # seeds 1234 and 1235: a mean over two seeds
    df.loc[1, "seed"] = 1234
    with pytest.raises(ValueError) as e:
        fig4(df, no_paper())
    assert str(e.value).startswith("runs fig4-0, fig4-1 share seed 1234 at dataset=cifar10, "), e
    assert str(e.value).endswith(
        "fig4 would average them as seeds (keep one run per seed in the manifest)"
    )
