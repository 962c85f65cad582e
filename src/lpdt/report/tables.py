"""The accuracy tables (2-6): our value, the paper's value and the difference side by side; and
``build_tables``, every table of ``lpdt.report.artifacts`` built by its maker (the cost tables 7,
9, 10: ``lpdt.report.cost_tables``; their files: ``lpdt.report.table_text.write_tables``).

Each table is written as ``tableN.csv`` (long, numeric: one row per cell), ``tableN.md`` and
``tableN.tex`` (the paper's layout, one "ours / paper (diff)" text per cell). Cells the grid does
not cover at this scale show the paper's value with ours "not run at this scale". A cell run with
several seeds shows the mean over its finished runs, ``mean ± sd (n=K)``; the CSV has ``ours``
(the mean), ``ours_sd``, ``n`` (finished runs averaged), ``runs`` (runs listed) and ``seeds``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from lpdt.decentral.catalog import ALGORITHMS
from lpdt.report import artifacts
from lpdt.report.aggregate import BY_NAME, KEYS, shared_seed, stand_in_names
from lpdt.report.cost_tables import data_table
from lpdt.report.describe import illustrative_text, setup_text
from lpdt.report.formatting import as_text, table_cell
from lpdt.report.paper import paper_accuracy
from lpdt.report.table_text import Rendered

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


def _label(col: str, v: object) -> str:
    """A row's coordinate value as its table cell (``Coordinate.label``; "" where missing)."""
    return "" if as_text(v) == "" else BY_NAME[col].label(v)


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
        shared = shared_seed(g, [])  # a mean over seeds: one run each
        if shared:
            cell = ", ".join(
                f"{k}={v}" for k, v in zip(spec.match, key if isinstance(key, tuple) else (key,))
            )
            raise ValueError(
                f"study {spec.study}, cell {cell}: {shared}; Table {spec.table} would average "
                "them as seeds (keep one run per seed in the manifest)"
            )
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
        v = None if as_text(v) == "" else v
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
