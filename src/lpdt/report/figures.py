"""Figures 1-7 in the paper's form (matplotlib, Agg). Each is written as PDF and PNG.

A figure whose data is absent at this scale is still written, with a one-line message in place
of the plot, so that the workflow's declared outputs always exist. A point that is a mean over
seeds carries an error bar of +-1 sample standard deviation over those seeds (none for one run),
except in Figure 1, whose curves of several seeds carry a band: the 95 % Student t-interval of
the mean over the seeds at each epoch (lpdt.report.stats.t_interval).
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from lpdt.decentral.catalog import ALGORITHMS  # noqa: E402
from lpdt.report import artifacts  # noqa: E402
from lpdt.report.aggregate import KEYS, shared_seed, stand_in_names  # noqa: E402
from lpdt.report.describe import fixed_text  # noqa: E402
from lpdt.report.paper import paper_accuracy  # noqa: E402
from lpdt.report.stats import LEVEL, t_interval  # noqa: E402

FIG6_MODEL = dict(artifacts.FIGURE_BY_STEM["fig6"].where)["model"]  # its ResNet-18 runs


def _save(fig: plt.Figure, out_dir: Path, name: str) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{name}.pdf", out_dir / f"{name}.png"]
    for p in paths:
        tmp = p.with_name(p.stem + ".tmp" + p.suffix)
        fig.savefig(tmp, dpi=150, bbox_inches="tight")
        tmp.replace(p)
    plt.close(fig)
    return paths


def no_data_figure(title: str, msg: str) -> plt.Figure:
    fig, ax = plt.subplots(figsize=(6, 2.5))
    ax.axis("off")
    ax.set_title(title, fontsize=10)
    ax.text(0.5, 0.5, msg, ha="center", va="center", fontsize=9, wrap=True)
    return fig


def _stand_in_note(rows: pd.DataFrame) -> str:
    names = stand_in_names(rows["stand_in"])
    return ("Stand-in: " + "; ".join(names)) if names else ""


def _ok(df: pd.DataFrame, *studies: str) -> pd.DataFrame:
    """Rows of the first study present (e.g. fig4, else table3), status ok, one per run."""
    for s in studies:
        sel = df[df["study"] == s]
        if len(sel):
            return sel[sel["status"] == "ok"].drop_duplicates("run_id")
    return df.iloc[0:0]


def figure_runs(df: pd.DataFrame, name: str) -> pd.DataFrame:
    """The finished runs a figure plots: those of the first of its studies present that have
    its ``where`` values (``lpdt.report.artifacts``; Figure 6: ResNet-18); empty for a figure
    drawn from analysis or cost files."""
    figure = artifacts.FIGURE_BY_STEM[name]
    if not figure.studies:
        return df.iloc[0:0]
    runs = _ok(df, *figure.studies)
    for key, value in figure.where:
        runs = runs[runs[key] == value]
    shared = shared_seed(runs, KEYS)
    if shared:  # the error bars are over seeds: one run each, as in the tables
        raise ValueError(
            f"{shared}; {name} would average them as seeds (keep one run per seed in the manifest)"
        )
    return runs


def _title(base: str, runs: pd.DataFrame, keys: list[str]) -> str:
    """A figure title: what is plotted, then on a line of its own the coordinates that have one
    value in ``runs``."""
    setup = fixed_text(runs, keys)
    return f"{base}\n({setup})" if setup else base


def _sd(g: pd.DataFrame) -> np.ndarray | None:
    """Error bars: the sd column over seeds (0 where one run), None when no point has two runs."""
    if "std" not in g or not (g["count"] > 1).any():
        return None
    return g["std"].fillna(0.0).to_numpy(dtype=float)


def fig1_spread_text(runs: pd.DataFrame) -> str:
    """What Figure 1's bands are, from the number of finished runs (seeds) per curve."""
    if not len(runs):
        return ""
    keys = [k for k in KEYS if k in runs]
    per_curve = runs.drop_duplicates("run_id").groupby(keys, dropna=False)["run_id"].nunique()
    lo, hi = int(per_curve.min()), int(per_curve.max())
    if hi < 2:
        return "One run per curve, so no interval."
    n = f"{lo}-{hi}" if lo != hi else f"{hi}"
    return (
        f"Each curve is the mean over its {n} runs (seeds) per epoch; the band is the "
        f"{LEVEL * 100:g} % Student t-interval of that mean (n in the legend)."
    )


def _t_band(values: pd.Series) -> tuple[float, float]:
    """The t-interval of the mean of ``values`` (NaN, NaN for fewer than two)."""
    iv = t_interval(values.to_numpy(dtype=float))
    return (math.nan, math.nan) if iv.ci is None else (iv.ci[0], iv.ci[1])


def fig1(df: pd.DataFrame) -> plt.Figure:
    runs = figure_runs(df, "fig1")
    title = _title(
        "Fig. 1: validation error per epoch by normalisation",
        runs,
        ["dataset", "model", "topology", "nodes", "skew", "algorithm", "compression"],
    )
    curves = []
    for _, r in runs.iterrows():
        h = pd.DataFrame([x for x in r["history"] if x.get("epoch") != "final"])
        col = "acc_avg_model" if "acc_avg_model" in h else "acc_node_mean"
        if not len(h) or col not in h:
            continue
        # The last epoch is evaluated once, after the final gossip rounds ("final" row).
        final = [x for x in r["history"] if x.get("epoch") == "final"]
        if final and pd.isna(pd.to_numeric(h[col].iloc[-1], errors="coerce")):
            h.loc[h.index[-1], col] = final[0].get(col)
        h = h[pd.to_numeric(h[col], errors="coerce").notna()]
        if len(h):
            label = f"{r['norm'] or 'evonorm'} ({'8-bit' if r['precision'] == 'int8' else 'FP'})"
            curves.append(
                pd.DataFrame(
                    {
                        "label": label,
                        "epoch": h["epoch"].astype(int) + 1,
                        "err": 100 - h[col].astype(float),
                    }
                )
            )
    if not curves:
        return no_data_figure(title, "no per-epoch validation data at this scale")
    fig, ax = plt.subplots(figsize=(6, 4))
    # Several seeds of one normalisation: the mean per epoch with its 95 % t-interval as a band.
    for key, g in pd.concat(curves).groupby("label", sort=False):
        label = str(key)
        e = g.groupby("epoch")["err"].agg(["mean", "count"]).sort_index()
        style = precision_style("int8" if "8-bit" in label else "fp32")
        ls, marker = style["ls"], style["marker"]
        if (e["count"] > 1).any():
            band = g.groupby("epoch")["err"].apply(_t_band).reindex(e.index)
            lo, hi = (np.array([b[i] for b in band], dtype=float) for i in (0, 1))
            lo_n, hi_n = int(e["count"].min()), int(e["count"].max())
            n = f"{lo_n}-{hi_n}" if lo_n != hi_n else f"{hi_n}"
            (line,) = ax.plot(
                e.index,
                e["mean"],
                marker=marker,
                ms=3,
                ls=ls,
                label=f"{label}: mean, {LEVEL * 100:g} % CI (n={n})",
            )
            ax.fill_between(e.index, lo, hi, color=line.get_color(), alpha=0.2, lw=0)
        else:
            ax.plot(e.index, e["mean"], marker=marker, ms=3, label=label, ls=ls)
    ax.set_xlabel("epoch")
    ax.set_ylabel("validation error (%)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    note = _stand_in_note(runs)
    if note:
        fig.text(0.01, -0.02, note, fontsize=7, color="firebrick")
    return fig


# Figures 4 and 5: each precision has its own marker, line style and colour, and is drawn a little
# to one side of its skew, so that FP and 8-bit stay apart where they are single points at the
# same skew (the quick scale: one or two skews, one point per precision).
PRECISION = {
    "fp32": {"name": "FP", "marker": "o", "ls": "-", "dx": -0.012},
    "int8": {"name": "8-bit", "marker": "^", "ls": "--", "dx": 0.012},
}
OTHER_PRECISION = {"name": "?", "marker": "s", "ls": ":", "dx": 0.0}
SKEW_SPAN = (0.0, 0.9)  # the paper's degrees of skew (Figures 4, 5), named where a panel has one
SKEW_PAD = 0.05  # x margin on each side, in skew units
ONE_SKEW = 0.15  # x margin on each side of a panel whose points all sit at one skew
ACC_PAD = 1.0  # least y margin on each side, in accuracy points (else 10 % of the data's range)


def precision_style(prec: str) -> dict:
    """Marker, line style, name and x offset of one precision in Figures 4 and 5."""
    return PRECISION.get(prec, OTHER_PRECISION)


def series_color(algo: str, prec: str) -> str:
    """One colour per (algorithm, precision): its spec's ``colors`` (the algorithm's hue, darker
    at 8 bits); black for an algorithm without colours, not registered here, or another
    precision."""
    spec = ALGORITHMS.find(algo)
    if spec is None or spec.colors is None:
        return "k"
    fp, lp = spec.colors
    return {"fp32": fp, "int8": lp}.get(prec, "k")


def skew_limits(skews: list[float]) -> tuple[float, float]:
    """The x range of a Figure 4/5 panel: the skews drawn, with a margin (``ONE_SKEW`` each
    side where they are one), so that the axis holds the data and no empty half."""
    lo, hi = min(skews), max(skews)
    pad = ONE_SKEW if hi - lo < 1e-9 else SKEW_PAD
    return lo - pad, hi + pad


def one_skew_note(skews: list[float]) -> str | None:
    """The note of a panel whose points all sit at one skew: which, and the paper's range."""
    drawn = sorted({round(s, 2) for s in skews})
    if len(drawn) != 1:
        return None
    lo, hi = SKEW_SPAN
    return f"only skew {drawn[0]:g} ran at this scale\n(the paper: {lo:g}-{hi:g})"


def value_limits(lows: list[float], highs: list[float]) -> tuple[float, float]:
    """The y range of a Figure 4/5 panel: the lowest and highest drawn value (error bars
    included) with a margin of 10 % of their range, at least ``ACC_PAD`` points."""
    lo, hi = min(lows), max(highs)
    pad = max(ACC_PAD, 0.1 * (hi - lo))
    return lo - pad, hi + pad


def _skew_panels(
    runs: pd.DataFrame, paper: pd.DataFrame, panel_keys: list[str], title: str, algos: bool = True
) -> plt.Figure:
    """Accuracy vs skew: one panel per panel_keys value; one series per (algorithm, precision),
    each precision with its own marker, line style and colour shade (``PRECISION``,
    ``series_color``) and a small x offset; the paper's values as open markers of the same
    style, faint."""
    keys = sorted({tuple(r) for r in runs[panel_keys].itertuples(index=False)}, key=str)
    if not keys:
        return no_data_figure(title, "no finished runs for this figure at this scale")
    ncol = min(3, len(keys))
    nrow = math.ceil(len(keys) / ncol)
    # at least 6.5 in wide: a one-panel figure's title then holds on its two lines
    fig, axes = plt.subplots(nrow, ncol, figsize=(max(4.2 * ncol, 6.5), 3.3 * nrow), squeeze=False)
    for ax, k in zip(axes.flat, keys):
        sel = runs[(runs[panel_keys].apply(tuple, axis=1) == k)]
        # The paper's values only where we trained on the paper's data (a stand-in's accuracy is
        # not comparable, and the overlay would squash our curves).
        same_data = not (sel["stand_in"].astype(str) != "").any()
        psel = (
            paper[(paper[panel_keys].apply(tuple, axis=1) == k)]
            if len(paper) and same_data
            else paper.iloc[0:0]
        )
        skews: list[float] = []
        lows: list[float] = []
        highs: list[float] = []
        for (algo, prec), g in sel.groupby(["algorithm", "precision"]):
            g = g.groupby("skew")["acc"].agg(["mean", "std", "count"]).sort_index()
            style = precision_style(str(prec))
            color = series_color(str(algo), str(prec))
            spec = ALGORITHMS.find(str(algo))  # None: a plugin not registered here
            name = (spec.label if spec else str(algo)) if algos else "Choco+QGM"
            lab = ("LP-" if prec == "int8" else "") + name
            if g["count"].max() > 1:
                lab += f" (n={int(g['count'].min())}" + (
                    f"-{int(g['count'].max())})" if g["count"].min() != g["count"].max() else ")"
                )
            sd = _sd(g)
            x = g.index.to_numpy(dtype=float)
            ax.errorbar(
                x + style["dx"],
                g["mean"],
                yerr=sd,
                ls=style["ls"],
                marker=style["marker"],
                ms=5,
                capsize=2.5,
                color=color,
                label=lab,
            )
            spread = np.zeros(len(g)) if sd is None else sd
            skews += list(x)
            lows += list(g["mean"].to_numpy(dtype=float) - spread)
            highs += list(g["mean"].to_numpy(dtype=float) + spread)
            pg = (
                psel[(psel["algorithm"] == algo) & (psel["precision"] == prec)]
                if len(psel)
                else psel
            )
            if len(pg):
                pg = pg.sort_values("skew")
                ax.plot(
                    pg["skew"].to_numpy(dtype=float) + style["dx"],
                    pg["value"],
                    ls=style["ls"],
                    marker=style["marker"],
                    ms=5,
                    mfc="none",
                    color=color,
                    alpha=0.35,
                    label=f"{lab} (paper)",
                )
                skews += list(pg["skew"].astype(float))
                lows += list(pg["value"].astype(float))
                highs += list(pg["value"].astype(float))
        if skews:
            ax.set_xlim(*skew_limits(skews))
            ax.set_xticks(sorted({round(s, 2) for s in skews}))
            ax.set_ylim(*value_limits(lows, highs))
            note = one_skew_note(skews)
            if note:
                ax.text(0.03, 0.04, note, transform=ax.transAxes, fontsize=6.5, color="dimgrey")
        ax.set_title(", ".join(f"{c} {v}" for c, v in zip(panel_keys, k)), fontsize=8)
        ax.set_xlabel("degree of skew")
        ax.set_ylabel("test accuracy (%)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    for ax in list(axes.flat)[len(keys) :]:
        ax.axis("off")
    fig.suptitle(title, fontsize=10)
    note = _stand_in_note(runs)
    if note:
        fig.text(0.01, -0.01, note, fontsize=7, color="firebrick")
    fig.tight_layout()
    return fig


def fig4(df: pd.DataFrame, paper: pd.DataFrame) -> plt.Figure:
    runs = figure_runs(df, "fig4")
    title = _title(
        "Fig. 4: accuracy vs skew",
        runs,
        ["dataset"],
    )
    return _skew_panels(
        runs, paper_accuracy(paper, 3), ["model", "topology", "nodes", "compression"], title
    )


def fig5(df: pd.DataFrame, paper: pd.DataFrame) -> plt.Figure:
    runs = figure_runs(df, "fig5")
    title = _title(
        "Fig. 5: accuracy vs skew with QGM",
        runs,
        ["dataset", "model", "topology", "nodes"],
    )
    return _skew_panels(runs, paper_accuracy(paper, 4), ["compression"], title, algos=False)


def fig6(df: pd.DataFrame, paper: pd.DataFrame) -> plt.Figure:
    runs = figure_runs(df, "fig6")
    title = _title("Fig. 6: accuracy per skew, FP (red) vs LP (green)", runs, ["dataset", "model"])
    pap = paper_accuracy(paper, 5)
    pap = pap[pap["model"] == FIG6_MODEL]
    if (runs["stand_in"].astype(str) != "").any():
        pap = pap.iloc[0:0]  # a stand-in's accuracy is not comparable with the paper's
    if not len(runs):
        return no_data_figure(title, f"no finished {FIG6_MODEL} runs at this scale")
    graphs = sorted({(r.topology, r.nodes) for r in runs.itertuples()}, key=str)
    fig, axes = plt.subplots(1, len(graphs), figsize=(4 * len(graphs), 3.3), squeeze=False)
    for ax, (topo, n) in zip(axes[0], graphs):
        sel = runs[(runs["topology"] == topo) & (runs["nodes"] == n)]
        cats = sorted({(r.skew, r.compression) for r in sel.itertuples()})
        x = np.arange(len(cats))
        paper_drawn = False
        for off, prec, color in ((-0.2, "fp32", "red"), (0.2, "int8", "green")):
            accs = [
                sel[(sel["skew"] == s) & (sel["compression"] == c) & (sel["precision"] == prec)][
                    "acc"
                ]
                for s, c in cats
            ]
            vals = [a.mean() for a in accs]
            if not np.isfinite(vals).any():
                continue  # no run of this precision in the panel: no bars, no legend entry
            sds = [a.std(ddof=1) if len(a) > 1 else 0.0 for a in accs]
            ax.bar(
                x + off,
                vals,
                0.4,
                color=color,
                label="FP" if prec == "fp32" else "LP",
                yerr=sds if any(len(a) > 1 for a in accs) else None,
                capsize=3,
            )
            pv = [
                pap[
                    (pap["topology"] == topo)
                    & (pap["nodes"] == n)
                    & (pap["skew"] == s)
                    & (pap["compression"] == c)
                    & (pap["precision"] == prec)
                ]["value"].mean()
                for s, c in cats
            ]
            if np.isfinite(pv).any():  # the legend names the paper only where it is drawn
                ax.plot(x + off, pv, "k_", ms=14, mew=2, label=None if paper_drawn else "paper")
                paper_drawn = True
        ax.set_xticks(x, [f"skew {s:g}\n({c} % comp.)" for s, c in cats], fontsize=8)
        ax.set_title(f"{str(topo)} ({str(n)} nodes)", fontsize=9)
        ax.set_ylabel("test accuracy (%)")
        _chance(ax, sel)
        ax.legend(fontsize=7, loc="upper right")
    fig.suptitle(title, fontsize=10)
    note = _stand_in_note(runs)
    if note:
        fig.text(0.01, -0.03, note, fontsize=7, color="firebrick")
    fig.tight_layout()
    return fig


AT_CHANCE = 5.0  # points: a bar closer than this to chance (100 / classes %) "sits at chance"
NOTE_WIDTH = 30  # characters a line of a panel's note


def chance_note(accs: list[float], chance: float, epochs: int | None) -> str | None:
    """A Figure 6 panel's note where bars sit at chance: how many, and that these runs have not
    learnt at this scale; None where none does."""
    finite = [a for a in accs if math.isfinite(a)]
    low = [a for a in finite if a < chance + AT_CHANCE]
    if not low:
        return None
    runs = f"these {epochs}-epoch runs" if epochs else "these runs"
    text = (
        f"{len(low)} of {len(finite)} bars within {AT_CHANCE:g} points of chance "
        f"({chance:g} %, dotted): {runs} have not learnt at this scale"
    )
    return textwrap.fill(text, NOTE_WIDTH)  # narrow: the legend sits beside it


def _chance(ax: plt.Axes, sel: pd.DataFrame) -> None:
    """Figure 6: chance (100 / classes %) as a dotted line, and the panel's ``chance_note``."""
    classes = pd.to_numeric(sel.get("num_classes", pd.Series(dtype=float)), errors="coerce")
    if not classes.notna().any():
        return
    chance = 100.0 / float(classes.dropna().iloc[0])
    ax.axhline(chance, ls=":", color="dimgrey", lw=1, label=f"chance ({chance:g} %)")
    means = sel.groupby(["skew", "compression", "precision"])["acc"].mean()
    done = pd.to_numeric(sel.get("epochs_completed", pd.Series(dtype=float)), errors="coerce")
    epochs = int(done.max()) if done.notna().any() else None
    note = chance_note([float(v) for v in means], chance, epochs)
    if note:
        top = max(float(means.max()) if len(means) else chance, chance)
        ax.set_ylim(0, top * 1.8)  # room for the note above the bars
        ax.text(0.03, 0.97, note, transform=ax.transAxes, fontsize=6.5, va="top", color="dimgrey")


def write_figures(
    df: pd.DataFrame,
    paper: pd.DataFrame,
    cost: Path,
    analysis: Path,
    out_dir: Path,
    warn: Callable[[str], None] = lambda line: None,
) -> list[Path]:
    """Every figure that lpdt.report.artifacts lists, drawn by its maker into ``out_dir`` (.pdf
    and .png); a figure whose input is damaged or missing is drawn as a one-line message, which
    ``warn`` is also given (the report prints it on stderr: a figure that says only "could not
    draw" was found by opening it)."""
    inputs = {"runs": df, "paper": paper, "analysis": analysis, "cost": cost}
    written = []
    for figure in artifacts.FIGURE_LIST:
        try:
            fig = figure.make(inputs)
        except (KeyError, ValueError, TypeError, AttributeError, IndexError) as e:  # bad input
            fig = no_data_figure(figure.stem, f"could not draw {figure.stem}: {e}")
            warn(f"could not draw {figure.stem}: {e}")
        written += _save(fig, out_dir, figure.stem)
    return written
