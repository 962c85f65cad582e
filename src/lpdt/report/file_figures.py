"""Figures 2, 3 and 7 in the paper's form, drawn from files rather than runs: the partitioner's
class histograms and the graphs (``lpdt partition`` / ``lpdt topology`` JSON under
``results/analysis``) and the cost model's memory and energy (``lpdt cost all`` CSVs under
``results/cost``). Written by ``lpdt.report.figures.write_figures`` like the others.

Figure 7's energy panel stacks only the layer types a reader can see at its scale (``VISIBLE``
of a bar at least); the others are summed into one segment named in full in its legend, and
its legends sit beside the panels, never over a bar.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from lpdt.io import read_csv
from lpdt.report.figures import no_data_figure


def analysis_json(path: Path) -> dict:
    """An analysis file (``lpdt partition`` / ``lpdt topology --json``): a ``ValueError`` naming
    the file when it is not a JSON object (a figure said "'list' object has no attribute 'get'"
    or "Expecting value", naming no file)."""
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path} is not JSON ({e})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} holds a JSON {type(data).__name__}, not an object")
    return data


def fig2(analysis: Path) -> plt.Figure:
    title = "Fig. 2: classes per node for each degree of skew"
    files = sorted(analysis.glob("partition*.json"))
    if not files:
        return no_data_figure(title, f"no partition JSON in {analysis}")
    d = analysis_json(files[0])
    skews = d.get("skews") or {}
    fig, axes = plt.subplots(1, len(skews), figsize=(3.2 * len(skews), 3), squeeze=False)
    cmap = plt.get_cmap("tab10")
    for ax, (s, hist) in zip(axes[0], sorted(skews.items(), key=lambda kv: float(kv[0]))):
        h = np.asarray(hist, dtype=float)
        bottom = np.zeros(h.shape[0])
        for c in range(h.shape[1]):
            ax.bar(
                np.arange(h.shape[0]),
                h[:, c],
                bottom=bottom,
                color=cmap(c % 10),
                label=f"class {c}",
            )
            bottom += h[:, c]
        ax.set_title(f"skew {float(s):g}", fontsize=9)
        ax.set_xlabel("node")
        ax.set_xticks(np.arange(h.shape[0]))
    axes[0][0].set_ylabel("samples")
    axes[0][-1].legend(fontsize=6, bbox_to_anchor=(1.02, 1), loc="upper left")
    fig.suptitle(
        f"{title} ({d.get('dataset')}, {d.get('nodes')} nodes, seed {d.get('seed')})", fontsize=10
    )
    fig.tight_layout()
    return fig


def fig3(analysis: Path) -> plt.Figure:
    title = "Fig. 3: graph topologies"
    files = sorted(analysis.glob("topology*.json"))
    if not files:
        return no_data_figure(title, f"no topology JSON in {analysis}")
    graphs = [analysis_json(f) for f in files]
    graphs.sort(key=lambda g: (g.get("name") != "directed_ring", g.get("nodes", 0)))
    fig, axes = plt.subplots(1, len(graphs), figsize=(4 * len(graphs), 4), squeeze=False)
    for ax, g in zip(axes[0], graphs):
        n = int(g["nodes"])
        pos = g.get("positions") or [
            [math.cos(2 * math.pi * i / n), math.sin(2 * math.pi * i / n)] for i in range(n)
        ]
        pos = np.asarray(pos, dtype=float)
        directed = g.get("directed", g.get("name") == "directed_ring")
        edges = {tuple(e) for e in g.get("edges", []) if e[0] != e[1]}
        for a, b in edges:
            if not directed and (b, a) in edges and a > b:
                continue
            pa, pb = pos[a], pos[b]
            wrap = np.linalg.norm(pb - pa) > 1.5 and g.get("name") == "torus"
            style = dict(
                arrowstyle="-|>" if directed else "-",
                color="gray",
                lw=1,
                connectionstyle="arc3,rad=0.35" if wrap else "arc3,rad=0.0",
                shrinkA=9,
                shrinkB=9,
                mutation_scale=12,
            )
            ax.annotate("", xy=pb, xytext=pa, arrowprops=style)
        ax.scatter(pos[:, 0], pos[:, 1], s=300, color="tab:blue", zorder=3)
        for i, (x, y) in enumerate(pos):
            ax.text(x, y, str(i), ha="center", va="center", color="white", fontsize=8, zorder=4)
        gap = g.get("spectral_gap")
        ax.set_title(
            f"{n}-node {g.get('name', '').replace('_', ' ')}"
            + (f" (spectral gap {gap:.3f})" if gap is not None else ""),
            fontsize=9,
        )
        ax.set_aspect("equal")
        ax.axis("off")
        ax.margins(0.15)
    fig.suptitle(title, fontsize=10)
    return fig


VISIBLE = 0.01  # a stacked segment under this share of its panel's tallest bar is not drawn
BAR_LABELS = {"rangebn": "RBN", "rangeen": "REN", "fp32": "FP", "int8": "LP"}


def _stack(
    ax: plt.Axes,
    values: dict[str, np.ndarray],
    colors: dict[str, object],
    labels: list[str],
    unit: str,
) -> list[str]:
    """Stacked bars of ``values`` (segment name -> one value per bar) with each bar's total
    above it; a segment under ``VISIBLE`` of the tallest bar in every bar is left out (its name
    returned). The legend, beside the axes, names only what is drawn."""
    totals = np.sum(list(values.values()), axis=0) if values else np.zeros(len(labels))
    top = float(totals.max()) if len(labels) else 0.0
    hidden = [k for k, v in values.items() if top <= 0 or float(v.max()) < VISIBLE * top]
    bottom = np.zeros(len(labels))
    for k, v in values.items():
        if k not in hidden:
            ax.bar(range(len(labels)), v, bottom=bottom, color=colors[k], label=k)
            bottom += v
    for i, t in enumerate(totals):
        ax.text(i, bottom[i], f"{t:.3g}{unit}", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(labels)), labels, fontsize=8)
    ax.set_ylim(0, top * 1.12 if top > 0 else 1)
    ax.legend(fontsize=6.5, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return hidden


def fig7(cost: Path) -> plt.Figure:
    """Training memory by kind; training compute energy by layer type, then the energy besides
    the convolutions (about 1-2 % of it) on its own scale, so that every layer type a reader is
    told of can be seen. A type too small to draw even there is named under the panel."""
    title = "Fig. 7: memory and compute per node per iteration, FP vs LP"
    mpath, cpath = cost / "fig7_memory.csv", cost / "fig7_compute.csv"
    if not mpath.exists() or not cpath.exists():
        return no_data_figure(title, f"cost model outputs missing in {cost} (run `lpdt cost all`)")
    mem = read_csv(mpath, ("norm", "precision", "kind", "mib"))
    comp = read_csv(cpath, ("mode", "norm", "precision", "label", "energy_mj"))
    setup = ", ".join(
        f"{k} {', '.join(sorted({str(v) for v in mem[k]}))}" for k in ("model", "batch") if k in mem
    )
    title += f" ({setup})" if setup else ""
    bars = [
        (n, p)
        for n in ("rangebn", "rangeen")
        for p in ("fp32", "int8")
        if ((mem["norm"] == n) & (mem["precision"] == p)).any()
    ]
    labels = [f"{BAR_LABELS.get(n, n)}\n{BAR_LABELS.get(p, p)}" for n, p in bars]
    cmap = plt.get_cmap("tab10")

    def per_bar(frame: pd.DataFrame, col: str, key: str, value: str) -> np.ndarray:
        return np.array(
            [
                frame[(frame["norm"] == n) & (frame["precision"] == p) & (frame[col] == key)][
                    value
                ].sum()
                for n, p in bars
            ]
        )

    fig, (a1, a2, a3) = plt.subplots(1, 3, figsize=(15, 4.2))
    kinds = list(dict.fromkeys(mem["kind"]))
    memory = {k.replace("_", " "): per_bar(mem, "kind", k, "mib") for k in kinds}
    colors: dict[str, object] = {k: cmap(i % 10) for i, k in enumerate(memory)}
    _hidden_note(a1, _stack(a1, memory, colors, labels, ""), memory, "of the memory")
    a1.set_ylabel("training memory (MiB)")
    a1.set_title("memory", fontsize=9)
    tr = comp[comp["mode"] == "training"]
    types = list(dict.fromkeys(tr["label"]))
    energy = {t: per_bar(tr, "label", t, "energy_mj") for t in types}
    colors = {t: cmap(i % 10) for i, t in enumerate(types)}
    big = max(types, key=lambda t: float(energy[t].sum())) if types else ""
    rest = {t: v for t, v in energy.items() if t != big}
    if not rest:
        _stack(a2, energy, colors, labels, " mJ")
        a3.axis("off")
    else:
        others = "all other types (right)"
        colors[others] = "lightgrey"
        other_sum = np.sum(list(rest.values()), axis=0)
        _stack(a2, {big: energy[big], others: other_sum}, colors, labels, " mJ")
        totals = np.sum(list(energy.values()), axis=0)
        share = {t: 100 * v / np.where(totals > 0, totals, 1) for t, v in rest.items()}
        hidden = _stack(a3, share, colors, labels, " %")
        _hidden_note(a3, hidden, energy, "of the energy")
        a3.set_ylabel(f"share of the bar's energy besides {big} (%)")
        a3.set_title(f"the energy besides {big}, in % of each bar", fontsize=9)
    a2.set_ylabel("training compute energy (mJ)")
    a2.set_title("compute energy by layer type", fontsize=9)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def _hidden_note(ax: plt.Axes, hidden: list[str], values: dict[str, np.ndarray], of: str) -> None:
    """Under a panel: the segments too small to draw, and their share of the whole."""
    if not hidden:
        return
    total = sum(float(v.sum()) for v in values.values())
    share = sum(float(values[k].sum()) for k in hidden) / total if total else 0.0
    ax.text(
        0.0,
        -0.2,
        f"too small to draw: {', '.join(hidden)} ({100 * share:.2g} % {of})",
        transform=ax.transAxes,
        fontsize=7,
        va="top",
        wrap=True,
    )
