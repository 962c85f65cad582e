"""The quick scale's fp32 and 8-bit claim jobs, one after the other: the end-to-end 8-bit cost.

The Table 3 claim cell (skew 0, no compression, first seed) at both precisions, as the grid
runs it (`lpdt train` of the cell's config, compiled, one thread, MLflow off), alone on the
machine, alternating fp32 and 8-bit. One untimed pair first warms the inductor cache; then
``--rounds`` timed pairs. For each job: its wall time, and from its ``metrics.json`` the training
loop (``time.train_s``, compile included) and the whole run (``time.total_s``). The ratios
8-bit / fp32 are taken within each pair and reported as the median with every pair's value.

    .venv/bin/python benchmarks/bench_job_pair.py              # about 4 minutes here
    .venv/bin/python benchmarks/bench_job_pair.py --rounds 3

Run it on an idle machine: anything else running changes both jobs, but not alike.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from check_probe import claim_cells, run_pair


def one_job(cells: dict, precision: str, work: Path) -> dict[str, float]:
    """Run one precision's claim job alone; its wall, training-loop and run seconds."""
    took = run_pair({precision: cells[precision]}, work)
    metrics = json.loads((work / f"out_{precision}" / "metrics.json").read_text())
    return {"wall": took[precision], **{k: metrics["time"][k] for k in ("train_s", "total_s")}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", default="quick", help="the scale whose claim cells run (quick)")
    ap.add_argument("--rounds", type=int, default=2, help="timed pairs after the warm-up (2)")
    a = ap.parse_args(argv)
    if a.rounds < 1:
        print(f"error: --rounds {a.rounds}: at least 1", file=sys.stderr)
        return 2
    cells = claim_cells(a.scale)
    print(
        "claim cells: "
        + ", ".join(f"{p} {run.run_id}" for p, run in sorted(cells.items()))
        + f"; one warm-up pair, then {a.rounds} timed",
        flush=True,
    )
    ratios: dict[str, list[float]] = {"wall": [], "train_s": [], "total_s": []}
    for r in range(a.rounds + 1):
        pair = {}
        for p in ("fp32", "int8"):
            with tempfile.TemporaryDirectory() as work:
                pair[p] = one_job(cells, p, Path(work))
        label = "warm-up" if r == 0 else f"pair {r}"
        print(
            f"{label}: "
            + "; ".join(
                f"{p} wall {t['wall']:.1f} s, training {t['train_s']:.1f} s, run {t['total_s']:.1f} s"
                for p, t in pair.items()
            ),
            flush=True,
        )
        if r:
            for k in ratios:
                ratios[k].append(pair["int8"][k] / pair["fp32"][k])
    for k, label in (("wall", "job wall"), ("train_s", "training loop"), ("total_s", "run")):
        vals = ratios[k]
        print(
            f"8-bit / fp32, {label}: {statistics.median(vals):.2f} "
            f"(pairs {', '.join(f'{v:.2f}' for v in vals)})",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
