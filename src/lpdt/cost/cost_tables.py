"""The cost model's outputs for the report: Tables 7, 9, 10, Figure 7 data, Table 3 "Data" and
the measured wire bytes of fp32 and 8-bit messages (``lpdt.cost.wire``).

Every table sets our number beside the paper's (where the paper prints one) with the ratio
ours / paper. ``write_all`` writes them as CSV files plus a ``summary.json`` (``lpdt cost all``).
"""

from __future__ import annotations

import csv
import errno
import io
import math
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from lpdt.cost import published
from lpdt.cost.comm import comm_volume, gossiped_numels
from lpdt.cost.energy import HOROWITZ_45NM, EnergyTable
from lpdt.cost.memory import MEMORY_KINDS, mib
from lpdt.cost.model import CIFAR_SHAPE, ModelCost, build, model_cost
from lpdt.cost.ops import LAYER_TYPES, MODES, PRECISIONS
from lpdt.cost.trace import trace_model
from lpdt.cost.wire import wire_rows

TABLE10_MODELS = ("resnet20", "resnet54", "vgg11")
TABLE10_NORMS = ("rangebn", "rangeen")
FIG7_MODEL = "resnet20"
# The one Table 10 memory entry the reference's memory model does not reproduce within 1 %
# (reference §11.6: the paper's ResNet-20 8-bit RBN - REN difference, 10.72 MiB, is not a quarter
# of the fp32 difference, 46.0 MiB, unlike every other model; ours is within 0.5 MiB).
MEMORY_EXCEPTIONS = {("resnet20", "rangebn", "training", "int8")}

Costs = dict[tuple[str, str, str], ModelCost]


# The columns of table3_data.csv that summary.json repeats and the report's Table 3 "Data" column
# reads (lpdt.report.cost_tables)
TABLE3_DATA_COLUMNS = (
    "model",
    "reading",
    "topology",
    "nodes",
    "compression",
    "gb_fp32",
    "gb_fp32_paper",
    "gb_int8",
    "gb_int8_paper",
    "agrees_printed",
)


def compute_costs(
    models: Sequence[str] = TABLE10_MODELS,
    norms: Sequence[str] = TABLE10_NORMS,
    *,
    batch: int = 32,
    energy: EnergyTable = HOROWITZ_45NM,
    algorithm: str = "choco",
) -> Costs:
    """``ModelCost`` for every (model, norm, precision); each model is built once per norm."""
    costs: Costs = {}
    for name in models:
        for norm in norms:
            net = build(name, norm, 10, CIFAR_SHAPE)
            records = trace_model(net, CIFAR_SHAPE)
            for prec in PRECISIONS:
                costs[(name, norm, prec)] = model_cost(
                    net,
                    CIFAR_SHAPE,
                    batch=batch,
                    precision=prec,
                    energy=energy,
                    algorithm=algorithm,
                    name=name,
                    norm=norm,
                    records=records,
                )
    return costs


def _finite_or_none(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _ratio(ours: float, theirs: float) -> float:
    return ours / theirs if theirs else float("nan")


# --- Tables 7 and 9 ------------------------------------------------------------------------------


def op_table(costs: Costs, mode: str, model: str = FIG7_MODEL) -> list[dict]:
    """Numeric Table 7 (``mode="training"``) or Table 9 (``"inference"``) for ``model``: one row
    per (norm, precision, layer type) with adds, mults and energy, plus a total per block."""
    rows = []
    for (name, norm, prec), c in costs.items():
        if name != model:
            continue
        e = c.energy_by_type_mj(mode)
        total = sum(e.values())
        for t, label in LAYER_TYPES.items():
            if c.layer_counts[t] == 0:
                continue
            o = c.ops[mode][t]
            if o.adds == 0 and o.mults == 0:
                continue  # e.g. activation quantization at inference (Table 9 has no such row)
            rows.append(
                {
                    "model": name,
                    "batch": c.batch,
                    "norm": norm,
                    "precision": prec,
                    "layer_type": t,
                    "label": label,
                    "layers": c.layer_counts[t],
                    "additions": o.adds,
                    "multiplications": o.mults,
                    "energy_mj": e[t],
                    "energy_share": e[t] / total if total else 0.0,
                }
            )
        tot = c.total_ops(mode)
        rows.append(
            {
                "model": name,
                "batch": c.batch,
                "norm": norm,
                "precision": prec,
                "layer_type": "total",
                "label": "Total",
                "layers": len(
                    [r for r in c.records if r.kind in ("conv", "linear", "norm", "add", "avgpool")]
                ),
                "additions": tot.adds,
                "multiplications": tot.mults,
                "energy_mj": total,
                "energy_share": 1.0,
            }
        )
    return rows


# --- Table 10 ------------------------------------------------------------------------------------


def table10_rows(costs: Costs) -> list[dict]:
    """Ours beside the paper's Table 10 (memory MiB, energy mJ, per node per iteration)."""
    printed = published.table10_lookup()
    rows = []
    for phase in MODES:
        for name in TABLE10_MODELS:
            for norm in TABLE10_NORMS:
                if (name, norm, "fp32") not in costs:
                    continue
                fp, lp = costs[(name, norm, "fp32")], costs[(name, norm, "int8")]
                if phase == "training":
                    mem = {"fp32": fp.memory_training_mib, "int8": lp.memory_training_mib}
                else:
                    mem = {"fp32": fp.memory_inference_mib, "int8": lp.memory_inference_mib}
                en = {"fp32": fp.energy_mj(phase), "int8": lp.energy_mj(phase)}
                p = printed.get((name, norm, phase))
                row: dict = {"model": name, "norm": norm, "phase": phase, "batch": fp.batch}
                for prec in PRECISIONS:
                    theirs = float(p[f"memory_{prec}"]) if p else float("nan")
                    row[f"memory_{prec}_mib"] = mem[prec]
                    row[f"memory_{prec}_paper"] = theirs
                    row[f"memory_{prec}_ratio"] = _ratio(mem[prec], theirs)
                    row[f"memory_{prec}_within_1pct"] = abs(mem[prec] / theirs - 1) <= 0.01
                row["memory_efficiency"] = mem["fp32"] / mem["int8"]
                row["memory_efficiency_paper"] = (
                    float(p["memory_efficiency"]) if p else float("nan")
                )
                for prec in PRECISIONS:
                    theirs = float(p[f"energy_{prec}"]) if p else float("nan")
                    row[f"energy_{prec}_mj"] = en[prec]
                    row[f"energy_{prec}_paper"] = theirs
                    row[f"energy_{prec}_ratio"] = _ratio(en[prec], theirs)
                # (an 8-bit table overridden to 0 pJ: no ratio)
                row["energy_efficiency"] = _ratio(en["fp32"], en["int8"])
                row["energy_efficiency_paper"] = (
                    float(p["energy_efficiency"]) if p else float("nan")
                )
                notes = [
                    "absolute energy not reproducible from the Table 7/9 formulas (docs/cost.md)"
                ]
                for prec in PRECISIONS:
                    if (name, norm, phase, prec) in MEMORY_EXCEPTIONS:
                        notes.append(
                            f"{prec} memory: the paper's RBN-REN gap for this model is not 1/4 of "
                            "the fp32 gap (reference §11.6); ours is within 0.5 MiB"
                        )
                row["note"] = "; ".join(notes)
                rows.append(row)
    return rows


# --- Figure 7 ------------------------------------------------------------------------------------


def fig7_memory_rows(costs: Costs, model: str = FIG7_MODEL) -> list[dict]:
    """Training memory per node per iteration by kind (MiB), fp32 vs int8."""
    rows = []
    for (name, norm, prec), c in costs.items():
        if name != model:
            continue
        total = sum(c.memory_training.values())
        for kind in MEMORY_KINDS:
            rows.append(
                {
                    "model": name,
                    "norm": norm,
                    "precision": prec,
                    "batch": c.batch,
                    "kind": kind,
                    "mib": mib(c.memory_training[kind]),
                    "share": c.memory_training[kind] / total,
                }
            )
    return rows


def fig7_compute_rows(costs: Costs, model: str = FIG7_MODEL) -> list[dict]:
    """Operations and energy per node per iteration by layer type, fp32 vs int8, both modes."""
    rows = []
    for mode in MODES:
        for r in op_table(costs, mode, model):
            if r["layer_type"] != "total":
                rows.append({"mode": mode} | r)
    return rows


# --- Table 3 "Data" ------------------------------------------------------------------------------

VGG_NOTE = (
    "paper value not derivable for a 16-node torus (4 out-peers, 39,200 iterations): 744.5 GB is "
    "19,600 iterations x 1 out-peer (the reference code's ring), and 8.120 GB matches no formula "
    "(reference §4.5)"
)


def table3_rows(off_by_one: bool = False) -> list[dict]:
    """Our communication volume per node beside the paper's Table 3 "Data" column.

    For the VGG-11 torus rows a second reading is added: the reference code (which cannot run a
    torus) as a directed ring for 100 epochs, i.e. 19,600 iterations x 1 out-peer.
    """
    rows = []
    numels_cache: dict[tuple[str, str], list[int]] = {}
    for p in published.table3_data():
        key = (p["model"], p["norm"])
        if key not in numels_cache:
            numels_cache[key] = gossiped_numels(build(p["model"], p["norm"], 10, CIFAR_SHAPE))
        readings = [("paper configuration", p["topology"], int(p["epochs"]))]
        if p["topology"] == "torus":
            readings.append(("reference code: 1 out-peer, 100 epochs", "directed_ring", 100))
        for reading, topo, epochs in readings:
            ratio = float(p["compression"])
            v = comm_volume(
                numels_cache[key],
                topology=topo,
                nodes=int(p["nodes"]),
                compression="topk" if ratio > 0 else "none",
                ratio=ratio,
                epochs=epochs,
                train_size=int(p["train_size"]),
                batch_size=int(p["batch"]),
                off_by_one=off_by_one,
            )
            fp_ok = published.agrees_to_printed(v.gb_per_node, p["data_gb_fp32"])
            lp_ok = published.agrees_to_printed(v.gb_per_node_8bit_analytic, p["data_gb_int8"])
            note = ""
            if p["model"] == "vgg11":
                note = VGG_NOTE
                if reading.startswith("reference") and ratio == 0:
                    note = "reproduces the paper's dense value"
                elif reading.startswith("reference"):
                    note = "the paper's 99 % value matches no formula (reference §4.5)"
            rows.append(
                {
                    "model": p["model"],
                    "norm": p["norm"],
                    "reading": reading,
                    "topology": topo,
                    "nodes": v.nodes,
                    "compression": ratio,
                    "epochs": epochs,
                    "train_size": int(p["train_size"]),
                    "batch": int(p["batch"]),
                    "iterations_per_epoch": v.iterations_per_epoch,
                    "messages_counted": v.messages_counted,
                    "out_peers": v.out_peers,
                    "params": v.params,
                    "kept": v.kept,
                    "bytes_per_message": v.bytes_per_message,
                    "gb_fp32": v.gb_per_node,
                    "gb_fp32_paper": float(p["data_gb_fp32"]),
                    "gb_fp32_printed": published.as_printed(v.gb_per_node, p["data_gb_fp32"]),
                    "gb_fp32_ratio": _ratio(v.gb_per_node, float(p["data_gb_fp32"])),
                    "gb_int8": v.gb_per_node_8bit_analytic,
                    "gb_int8_paper": float(p["data_gb_int8"]),
                    "gb_int8_printed": published.as_printed(
                        v.gb_per_node_8bit_analytic, p["data_gb_int8"]
                    ),
                    "gb_int8_ratio": _ratio(v.gb_per_node_8bit_analytic, float(p["data_gb_int8"])),
                    "agrees_printed": fp_ok and lp_ok,
                    "note": note,
                }
            )
    return rows


def table3_wire_rows() -> list[dict]:
    """The wire bytes of an fp32 and an 8-bit message for every (model, norm, compression) of
    Table 3's "Data" column, beside the paper's fp32 / 8-bit ratio for that cell."""
    cells: dict[tuple[str, str, float], float] = {}
    for p in published.table3_data():
        key = (p["model"], p["norm"], float(p["compression"]))
        cells.setdefault(key, float(p["data_gb_fp32"]) / float(p["data_gb_int8"]))
    rows = wire_rows(cells)
    for r in rows:
        r["paper_ratio"] = cells[(r["model"], r["norm"], r["compression"])]
    return rows


# --- summary and files ---------------------------------------------------------------------------


def summary(
    costs: Costs, t10: list[dict], t3: list[dict], energy: EnergyTable, wire: Sequence[dict] = ()
) -> dict:
    """Headline numbers and acceptance checks (what docs/cost.md and the report quote)."""
    train = [r for r in t10 if r["phase"] == "training"]
    infer = [r for r in t10 if r["phase"] == "inference"]

    def eff(rows: Iterable[dict], key: str) -> dict[str, float | None]:
        # a ratio that is no number (a 0 pJ what-if table) is null: summary.json stays strict
        # JSON (it held NaN, which Python reads and JSON.parse refuses)
        return {f"{r['model']}/{r['norm']}": _finite_or_none(r[key]) for r in rows}

    mem_checks = []
    for r in t10:
        for prec in PRECISIONS:
            exception = (r["model"], r["norm"], r["phase"], prec) in MEMORY_EXCEPTIONS
            mem_checks.append(
                {
                    "row": f"{r['phase']}/{r['model']}/{r['norm']}/{prec}",
                    "ours_mib": r[f"memory_{prec}_mib"],
                    "paper_mib": r[f"memory_{prec}_paper"],
                    "ratio": r[f"memory_{prec}_ratio"],
                    "within_1pct": r[f"memory_{prec}_within_1pct"],
                    "reference_exception": exception,
                }
            )
    all_eff = [r["energy_efficiency"] for r in t10 if math.isfinite(r["energy_efficiency"])]
    return {
        "batch": next(iter(costs.values())).batch if costs else None,
        "paper_source": {
            "table10": str(published.table10_source()),
            "table3": str(published.TABLE3_CSV),
        },
        "energy_table_pj": {
            "fp32_add": energy.fp32_add,
            "fp32_mult": energy.fp32_mult,
            "int8_add": energy.int8_add,
            "int8_mult": energy.int8_mult,
            "source": energy.source,
        },
        "params": {f"{m}/{n}": c.params for (m, n, p), c in costs.items() if p == "fp32"},
        "energy_efficiency_training": eff(train, "energy_efficiency"),
        "energy_efficiency_inference": eff(infer, "energy_efficiency"),
        "energy_efficiency_range": [min(all_eff), max(all_eff)] if all_eff else None,
        "memory_efficiency_training": eff(train, "memory_efficiency"),
        "energy_ratio_ours_to_paper_fp32_training": eff(train, "energy_fp32_ratio"),
        "memory_checks": mem_checks,
        "memory_all_within_1pct_except_noted": all(
            c["within_1pct"] for c in mem_checks if not c["reference_exception"]
        ),
        "communication_8bit_reduction_analytic": sorted(
            {round(r["gb_fp32"] / r["gb_int8"], 6) for r in t3}
        ),
        "communication_8bit_wire": [
            {
                k: r[k]
                for k in (
                    "model",
                    "norm",
                    "format",
                    "compression",
                    "bytes_fp32",
                    "bytes_int8",
                    "ratio",
                    "implied_ratio",
                )
            }
            for r in wire
        ],
        "table3_data": [{k: r[k] for k in TABLE3_DATA_COLUMNS} for r in t3],
    }


def to_csv(rows: list[dict]) -> str:
    if not rows:
        return ""
    buf = io.StringIO()
    fields = list(rows[0])
    for r in rows[1:]:
        fields += [k for k in r if k not in fields]
    w = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
    return buf.getvalue()


def write_all(
    out_dir: str | Path,
    *,
    batch: int = 32,
    energy: EnergyTable = HOROWITZ_45NM,
    off_by_one: bool = False,
    log: Callable[[str], object] = lambda line: None,
) -> dict[str, Path]:
    """Write table7/9/10, fig7_memory/compute, table3_data, wire_bytes CSVs and summary.json to
    ``out_dir``; ``log`` hears what is being computed (about 10 s in all on the 2-core VM)."""
    from lpdt.io import make_dirs, write_json_atomic, write_text_atomic

    out = Path(out_dir)
    make_dirs(out)  # first: a folder that cannot be made fails now, not after the counting
    if not os.access(out, os.W_OK):
        raise PermissionError(errno.EACCES, "cannot write in this folder", str(out))
    log("counting the models' operations and memory (Tables 7, 9, 10, Figure 7)")
    costs = compute_costs(batch=batch, energy=energy)
    t10 = table10_rows(costs)
    t3 = table3_rows(off_by_one=off_by_one)
    log("measuring the messages of tiny fp32 and 8-bit runs (wire_bytes)")
    wire = table3_wire_rows()
    files = {
        "table7": (out / "table7.csv", op_table(costs, "training")),
        "table9": (out / "table9.csv", op_table(costs, "inference")),
        "table10": (out / "table10.csv", t10),
        "fig7_memory": (out / "fig7_memory.csv", fig7_memory_rows(costs)),
        "fig7_compute": (out / "fig7_compute.csv", fig7_compute_rows(costs)),
        "table3_data": (out / "table3_data.csv", t3),
        "wire_bytes": (out / "wire_bytes.csv", wire),
    }
    written: dict[str, Path] = {}
    for key, (path, rows) in files.items():
        write_text_atomic(path, to_csv(rows))
        written[key] = path
    write_json_atomic(out / "summary.json", summary(costs, t10, t3, energy, wire))
    written["summary"] = out / "summary.json"
    return written
