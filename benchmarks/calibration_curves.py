"""Is the quick scale trained to a plateau? One accuracy-vs-epochs curve per model family.

The report's plateau check is the workflow target ``snakemake plateau_check`` (``make
plateau-check``; docs/workflow.md, "Plateau check"): it trains the 2x runs as ordinary workflow
jobs and records each run's commit. This script draws the curves (an evaluation every
``--eval-every`` epochs, so its runs are not the check's); its ``curves_summary.csv`` has the
report's columns but no commits or status.

Usage: ``.venv/bin/python benchmarks/calibration_curves.py [--out results/calibration]
[--cases resnet20_fp32,...] [--results results]``

For each case, takes the quick scale's own run config of one cell (from the grid, seed 1234),
trains it for **twice** the quick scale's epochs (milestones doubled too) with an evaluation
every epoch, and compares the end of that curve with the quick scale's final accuracy of the same
cell (read from ``--results`` when the quick pipeline has run, otherwise trained here at 1x).
Writes ``curves.csv`` / ``curves.md`` / ``curves.png`` under ``--out`` (docs/workflow.md quotes
them). Every case costs about twice its quick-scale job (2 cases at once by default), plus its
evaluations (``--eval-every``). Finished runs under ``--out`` are kept, so the script can train
the 2x runs first and be run again for the comparison once the pipeline has run.
"""

from __future__ import annotations

import argparse
import copy
import multiprocessing as mp
from pathlib import Path

import pandas as pd

# lpdt.grid: the workflow's grid expansion, the very configs the pipeline runs
from lpdt import grid, record
from lpdt.report import plateau

ROOT = Path(__file__).resolve().parents[1]

# case -> (study, coordinates that pick one cell)
R20 = {"model": "resnet20", "nodes": 8, "algorithm": "choco"}
CASES = {
    # the accuracy claims' cells (ResNet-20, 8-node ring; lpdt.report.claims)
    "resnet20_fp32": ("table3", {**R20, "compression": 0, "skew": 0.0, "precision": "fp32"}),
    "resnet20_int8": ("table3", {**R20, "compression": 0, "skew": 0.0, "precision": "int8"}),
    "resnet20_fp32_skew0.9": (
        "table3",
        {**R20, "compression": 0, "skew": 0.9, "precision": "fp32"},
    ),
    "resnet20_int8_skew0.9": (
        "table3",
        {**R20, "compression": 0, "skew": 0.9, "precision": "int8"},
    ),
    "resnet20_fp32_top99": ("table3", {**R20, "compression": 99, "skew": 0.0, "precision": "fp32"}),
    "resnet20_int8_top99": ("table3", {**R20, "compression": 99, "skew": 0.0, "precision": "int8"}),
    "resnet20_fp32_ds99": (
        "table3",
        {**R20, "algorithm": "deepsqueeze", "compression": 99, "skew": 0.0, "precision": "fp32"},
    ),
    "resnet20_fp32_qgm_skew0.9": ("table4", {"compression": 0, "skew": 0.9, "precision": "fp32"}),
    "resnet20_int8_qgm_skew0.9": ("table4", {"compression": 0, "skew": 0.9, "precision": "int8"}),
    # one cell of each other model family (shown, no claim)
    "vgg11_fp32": ("table2", {"model": "vgg11", "dataset": "cifar10", "precision": "fp32"}),
    "resnet18_fp32": (
        "table5",
        {"model": "resnet18", "nodes": 4, "compression": 0, "precision": "fp32"},
    ),
    "minilm_fp32": (
        "table6",
        {"model": "minilm", "compression": 0, "skew": 0.0, "precision": "fp32"},
    ),
}


def quick_run(study: str, coords: dict, scale: str = "quick") -> grid.Run:
    spec = grid.load(ROOT / "config" / "studies.yaml", ROOT / "config" / "scales" / f"{scale}.yaml")
    for run in grid.expand(spec).values():
        for entry in run.studies.get(study, []):
            c = entry.coords
            if entry.seed == 1234 and all(c.get(k) == v for k, v in coords.items()):
                return run
    raise SystemExit(f"no {scale} run of {study} with {coords}")


def longer(cfg: dict, factor: int, eval_every: int = 1) -> dict:
    c = copy.deepcopy(cfg)
    c["train"]["epochs"] *= factor
    c["schedule"]["milestones"] = [m * factor for m in c["schedule"]["milestones"]]
    c["train"]["eval_every"] = eval_every
    return c


def complete(out: str) -> bool:
    """A finished run in ``out`` (kept: the script can be run again, e.g. after the pipeline)."""
    f = Path(out) / record.METRICS_FILE
    return f.exists() and record.read(f).status == "ok"


def _train(args: tuple[str, dict, str]) -> str:
    from lpdt.config import config_from_dict
    from lpdt.engine import train

    name, cfg, out = args
    cfg = copy.deepcopy(cfg)
    cfg["threads"] = 1
    train(config_from_dict(cfg), Path(out), log=lambda s: print(f"[{name}] {s}", flush=True))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/calibration")
    ap.add_argument("--results", default="results", help="the quick pipeline's results directory")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument(
        "--eval-every",
        type=int,
        default=1,
        help="evaluate the 2x runs every N epochs (each costs two passes over the test split)",
    )
    a = ap.parse_args()
    unknown = [c for c in a.cases.split(",") if c not in CASES]
    if unknown:
        ap.error(f"unknown case(s) {', '.join(unknown)}; known: {', '.join(CASES)}")
    out = Path(a.out)
    jobs, rows = [], []
    for name in a.cases.split(","):
        study, coords = CASES[name]
        run = quick_run(study, coords)
        base = run.config
        quick_metrics = Path(a.results) / "runs" / run.run_id / record.METRICS_FILE
        if not quick_metrics.exists():
            jobs.append((f"{name}_1x", longer(base, 1, a.eval_every), str(out / f"{name}_1x")))
        jobs.append((f"{name}_2x", longer(base, 2, a.eval_every), str(out / f"{name}_2x")))
        rows.append((name, run.run_id, quick_metrics, base["train"]["epochs"]))
    done_before = [j for j in jobs if complete(j[2])]
    if done_before:
        print(f"kept {len(done_before)} finished run(s) in {out}", flush=True)
    jobs = [j for j in jobs if not complete(j[2])]
    jobs.sort(key=lambda j: (j[1]["precision"]["mode"] != "int8", -j[1]["train"]["epochs"]))
    print(f"{len(jobs)} training runs, {a.jobs} at once (8-bit first)", flush=True)
    with mp.get_context("spawn").Pool(a.jobs) as pool:  # one run per task: the pool stays busy
        for done in pool.imap_unordered(_train, jobs, chunksize=1):
            print(f"done: {done}", flush=True)

    records, curves = [], []
    for name, run_id, quick_metrics, epochs in rows:
        one = quick_metrics if quick_metrics.exists() else out / f"{name}_1x" / record.METRICS_FILE
        acc_1x = record.read(one).final.acc_node_mean
        two = record.read(out / f"{name}_2x" / record.METRICS_FILE).final
        hist = pd.read_csv(out / f"{name}_2x" / "history.csv")
        hist = hist[hist["epoch"] != "final"].dropna(subset=["acc_node_mean"])
        for _, h in hist.iterrows():
            curves.append({"case": name, "epoch": int(h["epoch"]) + 1, "acc": h["acc_node_mean"]})
        curves.append({"case": name, "epoch": 2 * epochs, "acc": two.acc_node_mean})
        # the columns the report reads (lpdt.report.plateau.COLUMNS), then where 1x came from
        values = [
            name,
            run_id,
            epochs,
            round(acc_1x, 2),
            round(two.acc_node_mean, 2),
            round(two.acc_node_mean - acc_1x, 2),
        ]
        records.append(
            dict(zip(plateau.COLUMNS, values, strict=True))
            | {"1x source": "quick results" if one == quick_metrics else "trained here"}
        )
    table = pd.DataFrame(records)
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "curves_summary.csv", index=False)
    pd.DataFrame(curves).to_csv(out / "curves.csv", index=False)
    (out / "curves.md").write_text(table.to_markdown(index=False) + "\n")
    print(table.to_markdown(index=False))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    c = pd.DataFrame(curves)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    colors = plt.get_cmap("tab20").colors
    for i, ((name, g), rec) in enumerate(zip(c.groupby("case", sort=False), records, strict=True)):
        style = "--" if "int8" in name else "-"  # 8-bit dashed, as in the report's figures
        line = ax.plot(
            g["epoch"],
            g["acc"],
            style,
            color=colors[i % len(colors)],
            marker=".",
            label=f"{name} (2x)",
        )[0]
        ax.scatter(
            [rec["quick epochs"]],
            [rec["acc at 1x (%)"]],
            color=line.get_color(),
            marker="o",
            zorder=3,
        )
    ax.set_xlabel("epoch (dot: the quick scale's final accuracy at 1x)")
    ax.set_ylabel("mean node accuracy (%)")
    ax.set_title("Quick scale: each cell trained twice as long (points: its evaluations)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right", ncol=2)
    fig.tight_layout()
    fig.savefig(out / "curves.png", dpi=120)
    print(f"wrote {out / 'curves.png'}")


if __name__ == "__main__":
    main()
