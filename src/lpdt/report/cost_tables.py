"""The cost tables beside the paper's: Table 7 (training) and Table 9 (inference), operations
per layer type (``ops_table``: the paper's formulas and the cost model's counts), Table 10, memory
and energy per node per iteration (``table10``, its ours / paper ratios ``ratio_ranges``), and
Table 3's "Data (GB)" column (``data_table``), each read from ``lpdt cost all``'s CSV files.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, cast

import pandas as pd

from lpdt.cost.cost_tables import TABLE3_DATA_COLUMNS
from lpdt.io import read_csv
from lpdt.report.describe import cost_setup, energy_text
from lpdt.report.formatting import as_text, table_cell
from lpdt.report.table_text import Rendered

FORMULAS = {  # layer label -> (adds, mults) for Table 7 (training) and Table 9 (inference)
    7: {
        "Conv": ("3 b Cout Cin K^2 Lo^2", "3 b Cout Cin K^2 Lo^2"),
        "Linear": ("3 b Cout Cin", "3 b Cout Cin"),
        "Quantization (activation)": ("2 b Cin L^2", "4 b Cin L^2"),
        "Quantization (weight)": ("2 Cout Cin K^2", "4 Cout Cin K^2"),
        "Range batch-norm + ReLU": ("9 b Cin L^2", "6 b Cin L^2 + 7 Cin"),
        "Range EvoNorm": ("6 b Cin L^2", "10 b Cin L^2 + 5 Cin"),
        "Skip connection": ("2 b Cin L^2", "-"),
        "Average pool": ("b Cin L^2", "2 b Cin"),
    },
    9: {
        "Conv": ("b Cout Cin K^2 Lo^2", "b Cout Cin K^2 Lo^2"),
        "Linear": ("b Cout Cin", "b Cout Cin"),
        "Quantization (weight)": ("2 Cout Cin K^2", "4 Cout Cin K^2"),
        "Range batch-norm + ReLU": ("3 b Cin L^2", "2 b Cin L^2 + 3 Cin"),
        "Range EvoNorm": ("2 b Cin L^2", "4 b Cin L^2 + 2 Cin"),
        "Skip connection": ("2 b Cin L^2", "-"),
        "Average pool": ("b Cin L^2", "b Cin"),
    },
}
NORM_LABEL = {"rangebn": "RBN", "rangeen": "REN"}


# The columns of lpdt cost's table7.csv / table9.csv (the operation counts) the tables read
COUNT_COLUMNS = (
    "label",
    "norm",
    "precision",
    "layers",
    "additions",
    "multiplications",
    "energy_mj",
)


def _num(v: float) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    for unit, f in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(v) >= f:
            return f"{v / f:.3g} {unit}"
    return f"{v:.3g}"


def ops_table(cost_dir: Path, table: int) -> tuple[pd.DataFrame, list[Rendered]]:
    """Table 7 (training) / 9 (inference): the paper's formulas + the cost model's counts (model
    and batch as in its CSV)."""
    title = {
        7: "Table 7: operations per layer type, training (forward + backward)",
        9: "Table 9: operations per layer type, inference (forward)",
    }[table]
    f = FORMULAS[table]
    formulas = Rendered(
        title + " - formulas (paper)",
        ["Layer type", "Additions", "Multiplications"],
        [[k, a, m] for k, (a, m) in f.items()],
        ["b batch, Cin/Cout channels, K kernel, L input and Lo output size (Table 8)."],
    )
    path = cost_dir / f"table{table}.csv"
    if not path.exists():
        formulas.caption.append(f"Numeric counts missing: {path} not found (run `lpdt cost all`).")
        return pd.DataFrame(), [formulas]
    c = read_csv(path, COUNT_COLUMNS)
    c["formula_adds"] = [f.get(lbl, ("", ""))[0] for lbl in c["label"]]
    c["formula_mults"] = [f.get(lbl, ("", ""))[1] for lbl in c["label"]]
    setup = cost_setup(cost_dir, f"table{table}.csv")
    model, batch = ", ".join(setup.get("model", [])), ", ".join(setup.get("batch", []))
    rows = []
    rank = {k: i for i, k in enumerate([*f, "Total"])}
    c = c.sort_values(
        ["norm", "label"], key=lambda s: s.map(rank) if s.name == "label" else s, kind="stable"
    )
    for (norm, label), g in c.groupby(["norm", "label"], sort=False):
        by = {p: r for p, r in zip(g["precision"], g.to_dict("records"))}
        fp, lp = by.get("fp32"), by.get("int8")
        # Not None: a group has a row, and every row is fp32 or int8 (lpdt.cost.ops.PRECISIONS).
        ref = cast(dict[str, Any], fp or lp)
        rows.append(
            [
                NORM_LABEL.get(str(norm), str(norm)),
                str(label),
                str(ref["layers"]),
                _num(fp["additions"]) if fp else "-",
                _num(fp["multiplications"]) if fp else "-",
                _num(lp["additions"]) if lp else "-",
                _num(lp["multiplications"]) if lp else "-",
                table_cell(fp["energy_mj"], 3) if fp else "-",
                table_cell(lp["energy_mj"], 4) if lp else "-",
            ]
        )
    numeric = Rendered(
        f"{title.split(' - ')[0]} - our counts for {model}, b={batch} (per node per iteration)",
        [
            "Norm",
            "Layer type",
            "Layers",
            "Adds FP",
            "Mults FP",
            "Adds LP",
            "Mults LP",
            "Energy FP (mJ)",
            "Energy LP (mJ)",
        ],
        rows,
        [
            "From lpdt cost (model traced with hooks); the paper gives formulas only, no numbers.",
            energy_text(cost_dir),
        ],
    )
    return c, [formulas, numeric]


def table10(cost_dir: Path, paper: pd.DataFrame) -> tuple[pd.DataFrame, list[Rendered]]:
    """Memory (MiB) and energy (mJ), ours (cost model) vs the paper's Table 10."""
    p = paper[paper["table"] == 10]
    path = cost_dir / "table10.csv"
    ours = read_csv(path, ("phase", "model", "norm")) if path.exists() else pd.DataFrame()
    batch = ", ".join(cost_setup(cost_dir, "table10.csv").get("batch", []))
    title = "Table 10: memory and energy per node per iteration, ours / paper" + (
        f" (our batch: {batch})" if batch else ""
    )
    out = []
    for _, r in p[["phase", "model", "norm"]].drop_duplicates().iterrows():
        sel = p[(p["phase"] == r["phase"]) & (p["model"] == r["model"]) & (p["norm"] == r["norm"])]
        o = (
            ours[
                (ours["phase"] == r["phase"])
                & (ours["model"] == r["model"])
                & (ours["norm"] == r["norm"])
            ]
            if len(ours)
            else ours
        )
        orow = o.iloc[0] if len(o) else None
        for _, pr in sel.iterrows():
            met, prec = pr["metric"], pr["precision"]
            col = {
                "memory_mib": f"memory_{prec}_mib",
                "energy_mj": f"energy_{prec}_mj",
                "memory_efficiency": "memory_efficiency",
                "energy_efficiency": "energy_efficiency",
            }[met]
            ov = float(orow[col]) if orow is not None and col in orow else math.nan
            out.append(
                {
                    "table": 10,
                    "phase": r["phase"],
                    "model": r["model"],
                    "norm": r["norm"],
                    "metric": met,
                    "precision": as_text(prec),
                    "ours": ov,
                    "paper": pr["value"],
                    "diff": ov - pr["value"],
                    "ratio": ov / pr["value"] if pr["value"] else math.nan,
                    "status": "ok" if orow is not None else "missing",
                }
            )
    m = pd.DataFrame(out)
    header = [
        "Phase",
        "Model",
        "Norm",
        "Mem FP (MiB)",
        "Mem LP (MiB)",
        "Mem eff.",
        "Energy FP (mJ)",
        "Energy LP (mJ)",
        "Energy eff.",
    ]
    rows = []
    for (ph, mo, no), g in m.groupby(["phase", "model", "norm"], sort=False):

        def cell(met: str, prec: str = "", g: pd.DataFrame = g) -> str:
            s = g[(g["metric"] == met) & (g["precision"] == prec)]
            if not len(s):
                return ""
            row = s.iloc[0]
            return (
                f"{table_cell(row['ours'])} / {table_cell(row['paper'])}"
                if row["status"] == "ok"
                else f"missing / {table_cell(row['paper'])}"
            )

        rows.append(
            [
                str(ph),
                str(mo),
                NORM_LABEL.get(str(no), str(no)),
                cell("memory_mib", "fp32"),
                cell("memory_mib", "int8"),
                cell("memory_efficiency"),
                cell("energy_mj", "fp32"),
                cell("energy_mj", "int8"),
                cell("energy_efficiency"),
            ]
        )
    cap = [
        "Cells: ours (analytic cost model, lpdt cost) / paper. RBN Range batch-norm, REN Range EvoNorm."
    ]
    ratios = ratio_ranges(m)
    if ratios:
        cap.append(
            "Ours / paper: "
            + "; ".join(f"{k} {lo:.2f}-{hi:.2f}x" for k, (lo, hi) in ratios.items())
            + " (docs/cost.md compares the cost model with the paper)."
        )
    if not len(ours):
        cap.append(f"Our values missing: {path} not found (run `lpdt cost all`).")
    return m, [Rendered(title, header, rows, cap)]


def ratio_ranges(m: pd.DataFrame) -> dict[str, tuple[float, float]]:
    """Table 10's ours / paper ratios, (min, max) per metric family, from the long frame."""
    if not len(m) or "ratio" not in m:
        return {}
    ok = m[(m["status"] == "ok") & m["ratio"].notna()]
    out = {}
    for label, metrics in (
        ("memory", ["memory_mib"]),
        ("energy", ["energy_mj"]),
        ("memory efficiency", ["memory_efficiency"]),
        ("energy efficiency", ["energy_efficiency"]),
    ):
        r = ok[ok["metric"].isin(metrics)]["ratio"]
        if len(r):
            out[label] = (float(r.min()), float(r.max()))
    return out


def data_table(cost_dir: Path) -> Rendered | None:
    """Table 3's "Data (GB)" column: communication per node, ours (cost model) / paper."""
    path = cost_dir / "table3_data.csv"
    if not path.exists():
        return None
    d = read_csv(path, TABLE3_DATA_COLUMNS)
    epochs = d["epochs"] if "epochs" in d else pd.Series([""] * len(d))
    rows = [
        [
            r["model"],
            r["reading"],
            r["topology"],
            str(r["nodes"]),
            as_text(e),
            f"{round(r['compression'] * 100)} %",
            f"{r['gb_fp32']:.4g} / {r['gb_fp32_paper']:g}",
            f"{r['gb_int8']:.4g} / {r['gb_int8_paper']:g}",
            "yes" if str(r["agrees_printed"]) == "True" else "no",
        ]
        for (_, r), e in zip(d.iterrows(), epochs)
    ]
    ratios = sorted({f"{a / b:.3g}" for a, b in zip(d["gb_fp32"], d["gb_int8"]) if b})
    caption = [
        "Analytic (lpdt cost comm); the paper's 8-bit value is its fp32 value / 4; ours is "
        f"fp32 / {', '.join(ratios) or '-'} (the messages themselves stay fp32)."
    ]
    disagree = d[d["agrees_printed"].astype(str) != "True"]
    notes = sorted(
        {str(n) for n in disagree.get("note", pd.Series(dtype=object)).dropna() if str(n)}
    )
    if len(disagree):
        caption.append(
            f"{len(disagree)} of {len(d)} rows do not agree with the printed digits"
            + (f": {'; '.join(notes)}." if notes else ".")
        )
    return Rendered(
        "Table 3 'Data' column: GB sent per node during training, ours / paper",
        ["Model", "Reading", "Topology", "n", "Epochs", "Comp.", "FP (GB)", "LP (GB)", "Agrees"],
        rows,
        caption,
    )
