"""The plan: ``snakemake plan`` (and ``make report``, before it starts) prints the runs of a
scale, their training samples, the estimated wall time of its training jobs, and writes one row
per run to ``results/plan-<scale>.tsv`` (docs/compute.md, "The time estimate").

Whose costs: the reference CPU's (``lpdt.plan.runtime``), scaled by the speed probe on this
machine (``lpdt.plan.probe``; config ``plan_probe``), or one H100's (the paper scale's default,
config ``plan_machine``). The probe runs here, when the plan is printed, never while the workflow
is parsed.
"""

from __future__ import annotations

import csv
import os
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lpdt import grid
from lpdt.plan import probe, runtime, samples


def probe_file(plan_tsv: str | Path) -> Path:
    """Where the plan writes the speed factors it scaled ``plan_tsv``'s estimates by:
    ``plan-<scale>.probe.json`` beside it."""
    plan_tsv = Path(plan_tsv)
    return plan_tsv.with_name(f"{plan_tsv.stem}.probe.json")


def write_plan(
    runs: Mapping[str, grid.GridRun],
    batches: Mapping[str, list[str]],
    config: Mapping[str, Any],
    scale: str,
    out: str | Path,
    on_cluster: bool = False,
) -> None:
    """Print the plan of ``runs`` (the workflow's RUNS) and write its table to ``out``.

    ``batches``: the workflow's batches of runs (``grid.run_batches``; empty when config
    ``batch_runs`` is off): a batch is one job, its runs one after another. ``config``: the
    workflow's settings (``plan_machine``, ``train_threads``, ``plan_probe``,
    ``gpu_jobs_per_gpu``, ``plan_gpus``, ``slurm_gpu_shards``); ``on_cluster``: the jobs go to
    a cluster executor (SLURM), where a job gets a whole GPU unless shards are configured."""
    import lpdt

    Path(out).parent.mkdir(parents=True, exist_ok=True)  # the rule declares no output
    if not runs:  # a scale that keeps only the analyses and the cost model
        Path(out).write_text("")
        print(f"scale {scale}: no training runs")
        return
    batch_of = {r: b for b, ids in batches.items() for r in ids}
    # Whose costs: the reference CPU, or (the paper scale's default) one H100; the config
    # schema allows only those (runtime.MACHINES).
    machine = config.get("plan_machine", "h100" if scale == "paper" else "cpu")
    if machine == "h100":  # the price of every run, measured or derived (lpdt.plan.gpu)
        from lpdt.plan.gpu_table import write_gpu_plan

        write_gpu_plan(runs, config, scale, out, on_cluster)
        return
    # The speed probe (CPU costs only; config plan_probe, default on): ~10 s of eager steps of
    # the claims' problem (fp32, 8-bit as eager jobs run it, 8-bit tensor operations as compiled
    # graphs fuse them), as many at once as there are job slots, scale the reference machine's
    # costs (lpdt.plan.probe).
    slots = max(1, (os.cpu_count() or 1) // max(1, int(config.get("train_threads", 1))))
    speed, probe_text = None, None
    if machine == "cpu" and config.get("plan_probe", True):
        print(f"speed probe: timing this machine's training steps, {slots} at once ...", flush=True)
        try:
            measured, probe_text = probe.measure(slots)
            speed = probe.speed_factors(measured.ms)
        except (RuntimeError, OSError, ValueError) as e:  # the plan goes on, unscaled
            probe_text = f"speed probe failed ({e}): the reference machine's costs, unscaled"
    elif machine == "cpu":
        probe_text = "speed probe: off (config plan_probe): the reference machine's costs, unscaled"
    # The factors beside the table (none: the reference's costs, unscaled), so that the jobs of
    # this invocation can refit the costs later (benchmarks/fit_runtime.py reads them).
    probe.write_factors(probe_file(out), speed, probe_text)
    rows = samples.plan_rows(dict(runs))
    # An empty torch.compile cache (a fresh machine): each compiled shape's first job compiles
    # cold (runtime.COLD_COMPILE_S). lpdt's cache: lpdt.default_inductor_cache_dir.
    cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR", str(lpdt.default_inductor_cache_dir()))
    cold: dict[str, float] = {}
    if machine == "cpu" and runtime.compile_cache_is_empty(cache):
        # batches: the first jobs compile different graphs (rule train_batch_lead), so each
        # graph compiles cold once; else `slots` jobs of one graph may start side by side
        cold_slots = 1 if batches else slots
        cold = runtime.cold_compile_seconds({k: r.config for k, r in runs.items()}, cold_slots)
    for r in rows:  # the job that trains each run: its batch (rule train_batch) or itself
        r["job"] = batch_of.get(r["run_id"], r["run_id"])
    by_job: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_job.setdefault(r["job"], []).append(r)
    ests: dict[str, float | None] = {}
    for job, job_rows in by_job.items():  # a batch's runs in the order it trains them
        order = {run_id: n for n, run_id in enumerate(batches.get(job, [job]))}
        job_rows = sorted(job_rows, key=lambda r: order[r["run_id"]])
        job_ests = runtime.job_run_seconds(
            [(runs[r["run_id"]].config, r["samples"]) for r in job_rows], speed
        )
        ests.update(zip((r["run_id"] for r in job_rows), job_ests, strict=True))
    for r in rows:
        est = ests[r["run_id"]]
        if est is not None:
            est += cold.get(r["run_id"], 0.0) * (speed or {}).get("fp32", 1.0)
        r["est_s"] = None if est is None else round(est)
    with open(out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]), delimiter="\t")
        w.writeheader()
        w.writerows(rows)
    total = sum(r["samples"] or 0 for r in rows)
    by: Counter[tuple[str, str]] = Counter()
    secs: Counter[tuple[str, str]] = Counter()
    for r in rows:
        by[(r["model"], r["precision"])] += r["samples"] or 0
        secs[(r["model"], r["precision"])] += r["est_s"] or 0
    print(f"scale {scale}: {len(rows)} runs, {total:,} training samples in all")
    for (m, p), n in sorted(by.items()):
        print(f"  {m:<16} {p:<5} {n:>12,} samples  ~{secs[(m, p)] / 60:6.1f} job-min")
    known = [r["est_s"] for r in rows if r["est_s"] is not None]
    if probe_text:
        print(probe_text)
    if cold:
        shapes = len({runtime.compiled_shape(runs[k].config) for k in cold})
        print(
            f"torch.compile cache {cache} is empty: {shapes} compiled shapes compile cold "
            f"in their first {len(cold)} jobs (~{sum(cold.values()) / 60:.0f} job-min more)"
        )
    job_s: Counter[str] = Counter()  # a batch is one job: its runs one after another
    for r in rows:
        if r["est_s"] is not None:
            job_s[r["job"]] += r["est_s"]
    if not known:  # it printed "0 training jobs for 0 runs, 32 of them in 2 batches", ~0 min
        print(
            f"no time estimate: none of the {len(rows)} runs has a measured cost on "
            f"{runtime.MACHINES[machine]} (lpdt.plan.runtime prices the quick scales' "
            "models)"
        )
        print(f"per-run table: {out}")
        return
    wall = runtime.packed_wall_seconds(job_s.values(), slots)
    batched = f", {len(batch_of)} of them in {len(batches)} batches" if batches else ""
    print(f"{len(job_s)} training jobs for {len(known)} runs{batched} (config batch_runs)")
    print(
        f"estimated training wall time: ~{wall / 60:.0f} min with {slots} jobs at once "
        f"= {sum(known) / 3600:.1f} job-hours "
        f"(costs measured on {runtime.MACHINES[machine]}"
        f"{', scaled to this machine' if speed else ''}; lpdt.plan.runtime)"
    )
    if len(known) < len(rows):
        print(f"  ({len(rows) - len(known)} runs have no measured cost and are not counted)")
    print(f"per-run table: {out}")
