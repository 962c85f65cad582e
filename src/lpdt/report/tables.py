"""Tables 2-7, 9, 10: our value, the paper's value and the difference side by side.

Each table is written as ``tableN.csv`` (long, numeric: one row per cell), ``tableN.md`` and
``tableN.tex`` (the paper's layout, one "ours / paper (diff)" text per cell). Cells the grid does
not cover at this scale show the paper's value with ours "not run at this scale". A cell run with
several seeds shows the mean over its finished runs, ``mean ± sd (n=K)``; the CSV has ``ours``
(the mean), ``ours_sd``, ``n`` (finished runs averaged), ``runs`` (runs listed) and ``seeds``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pandas as pd

from lpdt.decentral.catalog import ALGORITHMS
from lpdt.report import artifacts
from lpdt.report.aggregate import BY_NAME, KEYS, stand_in_names
from lpdt.report.describe import cost_setup, energy_text, illustrative_text, setup_text
from lpdt.report.formatting import table_cell
from lpdt.report.paper import paper_accuracy

# A table cell's coordinates: the paper's cell keys without the normalisation layer.
CELL_KEYS = [k for k in KEYS if k != "norm"]

NOT_RUN = "not run at this scale"
PREC = {"fp32": "FP (32-bit)", "int8": "LP (8-bit)"}


def variant(algorithm: str, precision: str) -> str:
    """A column of one algorithm at one precision, by the algorithm's short name
    (``lpdt.decentral.catalog``): "DS (32-bit)", "LP-Choco (8-bit)"."""
    spec = ALGORITHMS.find(algorithm)
    if spec is None or precision not in PREC:
        return f"{algorithm} {precision}"
    short = spec.short
    return f"LP-{short} (8-bit)" if precision == "int8" else f"{short} (32-bit)"


@dataclass
class AccuracyTable:
    """How a paper table maps to its study's runs (``lpdt.report.artifacts``: the study): row
    coordinates, column (variant) coordinates, the coordinates a cell matches the paper's by."""

    table: int
    title: str
    rows: list[str]
    cols: list[str]
    match: list[str]

    @property
    def study(self) -> str:
        return artifacts.TABLE_STUDY[self.table]


ACCURACY_TABLES = {
    2: AccuracyTable(
        2,
        "Table 2: single-node baselines (the paper's setting), test accuracy (%)",
        ["dataset", "model"],
        ["precision"],
        ["dataset", "model", "precision"],
    ),
    3: AccuracyTable(
        3,
        "Table 3: CIFAR-10, decentralized training (the paper's setting), test accuracy (%)",
        ["model", "topology", "nodes", "compression", "skew"],
        ["algorithm", "precision"],
        CELL_KEYS,
    ),
    4: AccuracyTable(
        4,
        "Table 4: ResNet-20, 8-node directed ring, Choco with QGM (the paper's "
        "setting), test accuracy (%)",
        ["compression", "skew"],
        ["precision"],
        CELL_KEYS,
    ),
    5: AccuracyTable(
        5,
        "Table 5: Imagenette, Choco (the paper's setting), test accuracy (%)",
        ["model", "topology", "nodes", "compression", "skew"],
        ["precision"],
        CELL_KEYS,
    ),
    6: AccuracyTable(
        6,
        "Table 6: NLP (DistilBERT), directed ring (the paper's setting), test accuracy (%)",
        ["dataset", "compression", "skew"],
        ["algorithm", "precision"],
        CELL_KEYS,
    ),
}


@dataclass
class Rendered:
    """One printable table: a title, caption lines, a header and text rows."""

    title: str
    header: list[str]
    rows: list[list[str]]
    caption: list[str] = field(default_factory=list)


def _s(v: object) -> str:
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)


def _label(col: str, v: object) -> str:
    """A row's coordinate value as its table cell (``Coordinate.label``; "" where missing)."""
    return "" if _s(v) == "" else BY_NAME[col].label(v)


def stand_in_caption(labels: pd.Series) -> list[str]:
    names = stand_in_names(labels)
    return [f"STAND-IN: {n}." for n in names]


def compare(df: pd.DataFrame, paper: pd.DataFrame, spec: AccuracyTable) -> pd.DataFrame:
    """Long frame: one row per cell with ours, paper, diff, status, stand_in, note."""
    ours = df[df["study"] == spec.study].copy()
    keep = [*spec.match, "status", "acc", "acc_avg_model", "stand_in", "run_id", "seed"]
    ours = ours[[k for k in keep if k in ours]] if len(ours) else pd.DataFrame(columns=keep)
    if "seed" not in ours:
        ours["seed"] = None
    ours["qgm"] = ours["qgm"].fillna(False).astype(bool) if "qgm" in ours else False
    # Several runs per cell (seeds): mean and sd over the ok runs; a cell is ok if any run is.
    ours = ours.drop_duplicates("run_id")
    groups = []
    for key, g in ours.groupby(spec.match, dropna=False, sort=False):
        ok = g[g["status"] == "ok"]
        status = (
            "ok" if len(ok) else ("diverged" if (g["status"] == "diverged").any() else "missing")
        )
        seeds = sorted({int(x) for x in g["seed"].dropna()})
        groups.append(
            dict(zip(spec.match, key if isinstance(key, tuple) else (key,)))
            | {
                "status": status,
                "ours": ok["acc"].mean() if len(ok) else math.nan,
                "ours_sd": ok["acc"].std(ddof=1) if len(ok) > 1 else math.nan,
                "n": len(ok),
                "ours_avg_model": ok["acc_avg_model"].mean() if len(ok) else math.nan,
                "runs": len(g),
                "seeds": " ".join(map(str, seeds)),
                "stand_in": "; ".join(sorted(set(g["stand_in"]) - {""})),
                "run_ids": " ".join(g["run_id"]),
            }
        )
    ours = pd.DataFrame(
        groups,
        columns=[
            *spec.match,
            "status",
            "ours",
            "ours_sd",
            "n",
            "ours_avg_model",
            "runs",
            "seeds",
            "stand_in",
            "run_ids",
        ],
    )
    pap = paper_accuracy(paper, spec.table)[[*spec.match, "value", "note"]].rename(
        columns={"value": "paper"}
    )
    pap["_order"] = range(len(pap))  # keep the paper's row order; our extra cells after it
    m = pap.merge(ours, on=spec.match, how="outer", sort=False)
    m = m.sort_values("_order", na_position="last", kind="stable").reset_index(drop=True)
    m["status"] = m["status"].fillna(NOT_RUN)
    m["diff"] = m["ours"] - m["paper"]
    m["table"] = spec.table
    m["note"] = m["note"].fillna("")
    m["stand_in"] = m["stand_in"].fillna("")
    m["n"] = m["n"].fillna(0).astype(int)
    m["runs"] = m["runs"].fillna(0).astype(int)
    m["seeds"] = m["seeds"].fillna("")
    cols = [
        "table",
        *spec.match,
        "ours",
        "ours_sd",
        "n",
        "paper",
        "diff",
        "status",
        "ours_avg_model",
        "runs",
        "seeds",
        "stand_in",
        "note",
        "run_ids",
    ]
    return m[cols]


def ours_text(r: pd.Series) -> str:
    """'81.00' for one run; '81.00 ± 0.52 (n=3)' over seeds ('n=2 of 3' when one failed)."""
    n, runs = int(r.get("n", 1) or 0), int(r.get("runs", 1) or 0)
    if n < 2 and runs < 2:
        return table_cell(r["ours"])
    sd = f" ± {table_cell(r['ours_sd'])}" if n >= 2 else ""
    of = f" of {runs}" if runs > n else ""
    return f"{table_cell(r['ours'])}{sd} (n={n}{of})"


def cell_text(r: pd.Series) -> str:
    p = table_cell(r["paper"])
    if r["status"] == "ok":
        o = ours_text(r)
        return f"{o} / {p} ({r['diff']:+.2f})" if p else f"{o} / -"
    ours = "not run" if r["status"] == NOT_RUN else r["status"]
    return f"{ours} / {p or '-'}"


def render_accuracy(
    m: pd.DataFrame, spec: AccuracyTable, scale: str, runs: pd.DataFrame | None = None
) -> Rendered:
    """The paper's layout; ``runs`` (the study's rows of the run table) give the caption's
    description of what we ran."""

    def colname(key: tuple) -> str:
        if spec.cols == ["algorithm", "precision"]:
            return variant(str(key[0]), str(key[1]))
        label = PREC.get(key[0], str(key[0]))
        return (
            f"{'LP-Choco' if key[0] == 'int8' else 'Choco'} with QGM" if spec.table == 4 else label
        )

    order = {name: i for i, name in enumerate(ALGORITHMS.ordered())} | {"fp32": 0, "int8": 1}

    def sort_val(v: object) -> tuple:
        v = None if _s(v) == "" else v
        if isinstance(v, str) and v in order:
            return (False, "", order[v])
        return (v is None, str(type(v)), v if v is not None else 0)

    col_keys = sorted(
        {tuple(r) for r in m[spec.cols].itertuples(index=False)},
        key=lambda k: tuple(sort_val(x) for x in k),
    )
    row_keys = list(dict.fromkeys(tuple(r) for r in m[spec.rows].itertuples(index=False)))
    # Paper rows first, in the paper's order; then ours that the paper lacks, sorted.
    paper_rows = [
        k for k in row_keys if m[(m[spec.rows].apply(tuple, axis=1) == k)]["paper"].notna().any()
    ]
    extra = sorted(
        (k for k in row_keys if k not in paper_rows), key=lambda k: tuple(sort_val(x) for x in k)
    )
    header = [c.capitalize() for c in spec.rows] + [colname(k) for k in col_keys]
    rows = []
    idx = {tuple(r[c] for c in spec.rows + spec.cols): r for _, r in m.iterrows()}
    for rk in [*paper_rows, *extra]:
        cells = [_label(c, v) for c, v in zip(spec.rows, rk)]
        for ck in col_keys:
            r = idx.get(tuple(rk) + tuple(ck))
            cells.append("" if r is None else cell_text(r))
        rows.append(cells)
    caption = [
        f"Cells: ours / paper (ours - paper), accuracy in %; ours = mean node test accuracy "
        f"after the final gossip rounds (reference §9); scale: {scale}.",
        "A cell with several seeds reads mean ± sd (n=K): mean and sample standard "
        "deviation over its K finished runs ('n=K of R' when only K of its R runs "
        "finished); a bare number is one run.",
        "'not run' = cell not in our grid at this scale; 'missing' = run listed but no "
        "record; '-' = not in the paper.",
    ]
    if runs is not None:
        ok = runs[runs["status"] == "ok"]
        caption.append(f"Our runs: {setup_text(ok)}.")
        caption += [t for t in [illustrative_text(ok, scale)] if t]
    caption += stand_in_caption(m["stand_in"])
    caption += sorted({f"Note: {n}" for n in m["note"] if n})
    return Rendered(spec.title, header, rows, caption)


# --- cost tables (7, 9, 10) ---------------------------------------------------------------------

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
    c = pd.read_csv(path)
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
    ours = pd.read_csv(path) if path.exists() else pd.DataFrame()
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
                    "precision": _s(prec),
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
    d = pd.read_csv(path)
    epochs = d["epochs"] if "epochs" in d else pd.Series([""] * len(d))
    rows = [
        [
            r["model"],
            r["reading"],
            r["topology"],
            str(r["nodes"]),
            _s(e),
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


# --- writers -----------------------------------------------------------------------------------


def to_md(parts: list[Rendered]) -> str:
    out = []
    for t in parts:
        out.append(f"### {t.title}\n")
        out.append("| " + " | ".join(t.header) + " |")
        out.append("|" + "---|" * len(t.header))
        out += ["| " + " | ".join(c.replace("|", "/") for c in r) + " |" for r in t.rows]
        out.append("")
        out += [f"{c}  " for c in t.caption]
        out.append("")
    return "\n".join(out)


def tex_escape(s: str) -> str:
    for a, b in (
        ("\\", r"\textbackslash{}"),
        ("&", r"\&"),
        ("%", r"\%"),
        ("_", r"\_"),
        ("#", r"\#"),
        ("$", r"\$"),
        ("{", r"\{"),
        ("}", r"\}"),
        ("^", r"\^{}"),
        ("~", r"\~{}"),
        ("§", r"\S{}"),
    ):
        s = s.replace(a, b)
    return s


def to_tex(parts: list[Rendered]) -> str:
    out = []
    for t in parts:
        out += [
            r"\begin{table}[ht]",
            r"\centering\small",
            f"\\caption{{{tex_escape(t.title)}}}",
            r"\begin{tabular}{" + "l" * len(t.header) + "}",
            r"\hline",
            " & ".join(tex_escape(h) for h in t.header) + r" \\",
            r"\hline",
        ]
        out += [" & ".join(tex_escape(c) for c in r) + r" \\" for r in t.rows]
        out += [r"\hline", r"\end{tabular}"]
        out += [f"\\par\\footnotesize {tex_escape(c)}" for c in t.caption]
        out += [r"\end{table}", ""]
    return "\n".join(out)


def accuracy_table(
    number: int, df: pd.DataFrame, paper: pd.DataFrame, cost_dir: Path, scale: str
) -> tuple[pd.DataFrame, list[Rendered]]:
    """Accuracy table ``number`` (2 to 6, ``ACCURACY_TABLES``): our cells beside the paper's;
    Table 3 also prints the data sent per iteration (``data_table``)."""
    spec = ACCURACY_TABLES[number]
    m = compare(df, paper, spec)
    parts = [render_accuracy(m, spec, scale, df[df["study"] == spec.study])]
    if number == 3:
        d = data_table(cost_dir)
        if d is not None:
            parts.append(d)
    return m, parts


def build_tables(
    df: pd.DataFrame, paper: pd.DataFrame, cost_dir: Path, scale: str
) -> dict[int, tuple[pd.DataFrame, list[Rendered]]]:
    """Every table that lpdt.report.artifacts lists, built by its maker: number -> (long frame
    for the CSV, printable parts)."""
    inputs = {"runs": df, "paper": paper, "cost": cost_dir, "scale": scale}
    return {table.number: table.make(inputs) for table in artifacts.TABLE_LIST}


def write_tables(
    tables: dict[int, tuple[pd.DataFrame, list[Rendered]]], out_dir: Path
) -> list[Path]:
    from lpdt.io import write_text_atomic

    written = []
    for n, (frame, parts) in sorted(tables.items()):
        base = out_dir / f"table{n}"
        write_text_atomic(base.with_suffix(".csv"), frame.to_csv(index=False))
        write_text_atomic(base.with_suffix(".md"), to_md(parts))
        write_text_atomic(base.with_suffix(".tex"), to_tex(parts))
        written += [base.with_suffix(e) for e in (".csv", ".md", ".tex")]
    return written
