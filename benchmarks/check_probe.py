"""How well the plan's speed probe predicts real jobs on this machine, on an ordinary and on a
slow day.

Usage: ``.venv/bin/python benchmarks/check_probe.py [--scale quick] [--busy 0,1]``.

For each number of busy-loop processes in ``--busy`` (0: the machine as it is; 1: one process
spinning beside the jobs, a simulated slow day), it runs the plan's speed probe
(``lpdt.plan.probe``, two copies at once) and then two real training jobs at once, as the
workflow runs them: the fp32 and the 8-bit claim cell of the scale's first seed (Table 3, skew 0,
no compression), one torch thread each. It prints each job's wall time, the plan's estimate for
it (the reference machine's costs, and scaled by the probe) and their ratio. What to compare: a
job's slowdown from one row to the next against the probe's. The bare jobs do not log to MLflow,
which the plan's constants include (6-8 s per job). The compile cache is used as it is;
inductor's cache keys depend on the checkout's path, so the first run in a checkout may compile
cold, and a second run is warm. Takes about 4 minutes.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lpdt import grid
from lpdt.plan import probe, runtime, samples

ROOT = Path(__file__).resolve().parents[1]


def claim_cells(scale: str) -> dict[str, grid.GridRun]:
    """precision -> the Table 3 claim cell (skew 0, 0 % compression) of the first seed."""
    spec = grid.load(ROOT / "config" / "studies.yaml", ROOT / "config" / "scales" / f"{scale}.yaml")
    found: dict[str, grid.GridRun] = {}
    for run in grid.expand(spec).values():
        for m in run.studies.get("table3", []):
            c = m.coords
            if m.block == "claims" and float(c.get("skew", 0)) == 0 and c.get("compression") == 0:
                p = c["precision"]
                if p not in found or run.config["seed"] < found[p].config["seed"]:
                    found[p] = run
    if set(found) != {"fp32", "int8"}:
        sys.exit(f"scale {scale!r}: no Table 3 claim cells (block 'claims') at both precisions")
    return found


def run_pair(cells: dict[str, grid.GridRun], work: Path) -> dict[str, float]:
    """Both jobs at once, one thread each; wall seconds per precision."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    lpdt = Path(sys.executable).with_name("lpdt")
    if not lpdt.is_file():
        sys.exit(f"no `lpdt` beside {sys.executable}: run this with the project's .venv/bin/python")
    procs, start, took = {}, {}, {}
    for p, run in cells.items():
        cfg = work / f"{run.run_id}.yaml"
        cfg.write_text(grid.config_text(run))
        out = work / f"out_{p}"
        start[p] = time.perf_counter()
        cmd = [str(lpdt), "train", "--config", str(cfg), "--out", str(out)]
        # the job's output to a file: a pipe nobody reads would stall a chatty job once full
        log = (work / f"{p}.log").open("w")
        procs[p] = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
        log.close()  # the child holds its own descriptor
    deadline = time.perf_counter() + 1800
    try:
        while procs:
            for p in list(procs):
                if procs[p].poll() is not None:
                    if procs[p].returncode != 0:
                        tail = (work / f"{p}.log").read_text(errors="replace")[-2000:]
                        sys.exit(f"the {p} job failed: {tail}")
                    took[p] = time.perf_counter() - start[p]
                    del procs[p]
            if time.perf_counter() > deadline:
                sys.exit("the jobs ran over 30 minutes: stopped")
            time.sleep(0.2)
    finally:
        for proc in procs.values():  # a job still running when the other failed or time ran out
            proc.kill()
            proc.wait()
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", default="quick")
    ap.add_argument("--busy", default="0,1", help="busy-loop processes per row (default 0,1)")
    a = ap.parse_args()
    try:
        rows = [int(b) for b in a.busy.split(",")]
    except ValueError:
        sys.exit(f"--busy {a.busy!r}: a comma list of whole numbers, e.g. 0,1")
    cells = claim_cells(a.scale)
    for busy in rows:
        spinners = [
            subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)
        ]
        try:
            time.sleep(1.0)
            measured, line = probe.measure(2)
            speed = probe.speed_factors(measured.ms)
            with tempfile.TemporaryDirectory() as work:
                took = run_pair(cells, Path(work))
        finally:
            for s in spinners:
                s.kill()
                s.wait()
        print(f"busy-loop processes: {busy}\n  {line}", flush=True)
        for p, run in cells.items():
            n_samples = samples.samples_per_run(run.config)
            ref = runtime.run_seconds(run.config, n_samples)
            scaled = runtime.run_seconds(run.config, n_samples, speed=speed)
            print(
                f"  {p} job {run.run_id}: took {took[p]:.1f} s; plan {ref:.1f} s (reference), "
                f"{scaled:.1f} s (scaled); took / scaled {took[p] / scaled:.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
