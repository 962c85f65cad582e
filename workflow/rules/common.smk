# Grid expansion: config/studies.yaml x config/scales/<scale>.yaml -> one run per unique config.
# The logic is plain Python in lpdt.grid (src/lpdt/grid.py, unit-tested in tests/workflow/).

import hashlib
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError

from lpdt import grid
from lpdt.report.claims import study_claims

PY = sys.executable  # the interpreter running snakemake has lpdt installed
LPDT = f"{PY} -m lpdt.cli"
SCALE = config["scale"]
RESULTS = config["results"]
RUNS_DIR = f"{RESULTS}/runs"
MANIFEST = f"{RESULTS}/manifest.json"
STUDIES_FILE = config["studies"]
SCALE_FILE = f"{config['scales_dir']}/{SCALE}.yaml"

if not Path(SCALE_FILE).is_file():
    names = sorted(p.stem for p in Path(config["scales_dir"]).glob("*.yaml"))
    raise WorkflowError(f"unknown scale {SCALE!r}: no {SCALE_FILE}; choose one of: {', '.join(names)}")
try:  # the scale and the scales it names as its `base`
    SCALE_FILES = [str(path) for path, _ in grid.scale_chain(SCALE_FILE)]
except grid.GridError as e:
    raise WorkflowError(f"scale {SCALE!r}: {e}") from None
for _path in SCALE_FILES:
    validate(grid.read_yaml(_path), "../schemas/scale.schema.yaml")
SPEC = grid.load(STUDIES_FILE, SCALE_FILE)
validate(SPEC, "../schemas/studies.schema.yaml", set_default=False)
try:
    RUNS = grid.expand(SPEC)
except grid.GridError as e:
    raise WorkflowError(f"{STUDIES_FILE} with scale {SCALE!r}: {e}") from None

# Nothing is written while the DAG is built (`snakemake -n` is read-only): the per-run configs
# and the manifest are outputs of the rules `run_configs` and `manifest` below.
MANIFEST_DATA = grid.manifest(RUNS, SPEC, SCALE, RUNS_DIR)
MANIFEST_TEXT = grid.manifest_text(MANIFEST_DATA)
try:  # the claims a study declares (`claims:`): checked here, so a mistake stops the DAG at once
    study_claims(MANIFEST_DATA)
except ValueError as e:
    raise WorkflowError(f"{STUDIES_FILE} with scale {SCALE!r}: {e}") from None
# Runs of a cell with several seeds: their MLflow names end in the seed (lpdt.tracking.run_name).
MANIFEST_STAMP = f"{RESULTS}/.manifest/{hashlib.sha1(MANIFEST_TEXT.encode()).hexdigest()[:16]}"


# Batches (config batch_runs; rule train_batch): batch name -> its runs, and run -> its batch.
# auto: on where the jobs run on this machine's CPU with the simulated engine (not on GPUs, whose
# jobs share a GPU k at a time, nor under a cluster executor, where a job per run spreads).
_batching = config.get("batch_runs", "auto")
if _batching == "auto":
    from lpdt import gpus as _gpus

    _batching = (
        config.get("engine", "simulated") == "simulated"
        and workflow.local_exec
        and not workflow.remote_exec
        and not _gpus.visible_gpu_ids()
    )
BATCHES = grid.run_batches(RUNS) if _batching else {}
BATCH_OF = {r: b for b, ids in BATCHES.items() for r in ids}
# The first batch of each compiled graph (lpdt.cost.runtime.compiled_shape) starts before the
# others (rule train_batch_lead, a higher priority), so that the jobs that start together
# compile different graphs: on a fresh machine two jobs of one graph would both compile it
# cold, side by side (measured 2026-11-27: 172 s each, two busy loops beside them).
from lpdt.cost.runtime import compiled_shape as _compiled_shape

_leads = {}
for _b, _ids in BATCHES.items():  # batches of seeds (the long jobs) only
    if _b.startswith("seeds-"):
        _leads.setdefault(_compiled_shape(RUNS[_ids[0]].config) or _b, _b)
LEAD_BATCHES = sorted(_leads.values())
BATCH_DIR = f"{RESULTS}/batches"


def run_done(run_ids=None):
    """What says that the given runs (default: every run of the scale) are trained: a run's
    metrics.json (rule train), or its batch's stamp (rule train_batch), once per batch."""
    done = {}
    for r in RUNS if run_ids is None else run_ids:
        done.setdefault(f"{BATCH_DIR}/{BATCH_OF[r]}.txt" if r in BATCH_OF else f"{RUNS_DIR}/{r}/metrics.json")
    return list(done)


wildcard_constraints:
    run_id="[0-9a-f]{12}",


localrules:
    plan,
    run_configs,
    manifest,


rule run_configs:
    """`results/configs/<run_id>.yaml` of every run, the inputs of `lpdt train`. One job for all
    (each `run:` job re-reads the workflow in a subprocess: seconds). A config's name is the
    hash of its result-affecting content, and rule train takes it as ancient(), so rewriting
    the configs (when one is missing) reruns nothing."""
    output:
        [f"{RESULTS}/configs/{r}.yaml" for r in RUNS],
    run:
        for path, r in zip(output, RUNS.values()):
            grid.write_if_changed(path, grid.config_text(r))


rule manifest:
    """`results/manifest.json` (studies -> runs), read by lpdt report and mlflow_sync, and its
    content stamp: a file named by the manifest's hash. A manifest whose content changed (another
    scale, edited studies) has no stamp yet; the consumers (rules all, report, mlflow_sync) ask
    for the stamp too, so the manifest is rewritten before any of them runs, whatever the rerun
    triggers (the profiles use mtime only)."""
    output:
        manifest=MANIFEST,
        stamp=MANIFEST_STAMP,
    run:
        for old in Path(output.stamp).parent.iterdir():
            if old.name != Path(output.stamp).name:
                old.unlink()
        grid.write_if_changed(output.manifest, MANIFEST_TEXT)
        Path(output.stamp).write_text(f"{SCALE}\n")


rule plan:
    """`snakemake plan`: one row per run (studies, sizes, samples) and the totals, for budgeting."""
    input:
        STUDIES_FILE,
        SCALE_FILES,
    output:
        f"{RESULTS}/plan-{SCALE}.tsv",
    run:
        import csv
        from collections import Counter

        import os

        from lpdt.cost import probe, runtime

        # Whose costs: the reference CPU, or (the paper scale's default) one H100; the config
        # schema allows only those (runtime.MACHINES).
        machine = config.get("plan_machine", "h100" if SCALE == "paper" else "cpu")
        # The speed probe (CPU costs only; config plan_probe, default on): ~10 s of eager steps
        # of the claims' problem (fp32, 8-bit as eager jobs run it, 8-bit tensor operations as
        # compiled graphs fuse them), as many at once as there are job slots, scale the
        # reference machine's costs (lpdt.cost.probe). It runs here, when the plan is printed,
        # never while the workflow is parsed.
        slots = max(1, (os.cpu_count() or 1) // max(1, int(config.get("train_threads", 1))))
        if machine == "h100":
            slots = 1
        speed, probe_text = None, None
        if machine == "cpu" and config.get("plan_probe", True):
            try:
                measured, probe_text = probe.measure(slots)
                speed = probe.speed_factors(measured.ms)
            except (RuntimeError, OSError, ValueError) as e:  # the plan goes on, unscaled
                probe_text = f"speed probe failed ({e}): the reference machine's costs, unscaled"
        elif machine == "cpu":
            probe_text = "speed probe: off (config plan_probe): the reference machine's costs, unscaled"
        rows = grid.plan_rows(RUNS)
        # An empty torch.compile cache (a fresh machine): each compiled shape's first job
        # compiles cold (runtime.COLD_COMPILE_S). lpdt's cache: lpdt.default_inductor_cache_dir.
        import lpdt

        cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR", str(lpdt.default_inductor_cache_dir()))
        cold = {}
        if machine == "cpu" and runtime.compile_cache_is_empty(cache):
            # batches: the first jobs compile different graphs (rule train_batch_lead), so each
            # graph compiles cold once; else `slots` jobs of one graph may start side by side
            cold_slots = 1 if BATCHES else slots
            cold = runtime.cold_compile_seconds({k: r.config for k, r in RUNS.items()}, cold_slots)
        # GPU costs: k jobs of a model share a GPU (config gpu_jobs_per_gpu), each taking s(k)
        # times its time alone (runtime.H100_SHARE); a k without a measured s(k) counts as k = 1.
        from lpdt.gpus import jobs_per_gpu

        job_k, unmeasured = {}, set()
        for r in rows if machine == "h100" else []:
            k = jobs_per_gpu(config["gpu_jobs_per_gpu"], r["model"])
            if runtime.share_slowdown(r["model"], k) is None:
                unmeasured.add((r["model"], k))
                k = 1
            job_k[r["run_id"]] = k
        for r in rows:  # the job that trains each run: its batch (rule train_batch) or itself
            r["job"] = BATCH_OF.get(r["run_id"], r["run_id"])
        graphs = set()  # (job, compiled graph) already compiled by an earlier run of the job
        for r in rows:
            cfg = RUNS[r["run_id"]].config
            in_batch = machine == "cpu" and r["run_id"] in BATCH_OF and BATCHES[r["job"]][0] != r["run_id"]
            graph = (r["job"], runtime.compiled_shape(cfg))
            est = runtime.run_seconds(cfg, r["samples"], machine, speed, in_batch, in_batch and graph in graphs)
            graphs.add(graph)
            if est is not None:
                est += cold.get(r["run_id"], 0.0) * (speed or {}).get("fp32", 1.0)
            if est is not None and r["run_id"] in job_k:
                est *= runtime.share_slowdown(r["model"], job_k[r["run_id"]])
            r["est_s"] = None if est is None else round(est)
        with open(output[0], "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]), delimiter="\t")
            w.writeheader()
            w.writerows(rows)
        total = sum(r["samples"] or 0 for r in rows)
        by, secs = Counter(), Counter()
        for r in rows:
            by[(r["model"], r["precision"])] += r["samples"] or 0
            secs[(r["model"], r["precision"])] += r["est_s"] or 0
        print(f"scale {SCALE}: {len(rows)} runs, {total:,} training samples in all")
        for (m, p), n in sorted(by.items()):
            print(f"  {m:<16} {p:<5} {n:>12,} samples  ~{secs[(m, p)] / 60:6.1f} job-min")
        known = [r["est_s"] for r in rows if r["est_s"] is not None]
        if probe_text:
            print(probe_text)
        if cold:
            shapes = len({runtime.compiled_shape(RUNS[k].config) for k in cold})
            print(f"torch.compile cache {cache} is empty: {shapes} compiled shapes compile cold "
                  f"in their first {len(cold)} jobs (~{sum(cold.values()) / 60:.0f} job-min more)")
        if machine == "h100":  # G GPUs (config plan_gpus), k jobs on each
            n_gpus = config["plan_gpus"]
            jobs = [(r["est_s"], job_k[r["run_id"]]) for r in rows if r["est_s"] is not None]
            counted = {r["model"] for r in rows if r["est_s"] is not None}
            for m, k in sorted(u for u in unmeasured if u[0] in counted):
                print(f"  {m}: no measured sharing factor for {k} jobs per GPU "
                      f"(lpdt.cost.runtime.H100_SHARE); assuming k=1")
            wall = runtime.shared_gpu_wall_seconds(jobs, n_gpus)
            gpu_h, own_gpu_h = runtime.gpu_hours(jobs, n_gpus)
            per_gpu = ", ".join(str(k) for k in sorted({k for _, k in jobs})) or "1"
            print(f"estimated training wall time: ~{wall / 60:.0f} min on {n_gpus} GPU(s), "
                  f"{per_gpu} jobs per GPU = {gpu_h:.1f} GPU-hours (wall time x GPUs); "
                  f"the jobs' own GPU time {own_gpu_h:.1f} GPU-hours (each job's time / its k) "
                  f"(costs measured on {runtime.MACHINES[machine]}; lpdt.cost.runtime)")
        else:
            job_s = Counter()  # a batch is one job: its runs one after another
            for r in rows:
                if r["est_s"] is not None:
                    job_s[r["job"]] += r["est_s"]
            wall = runtime.packed_wall_seconds(job_s.values(), slots)
            batched = f", {len(BATCH_OF)} of them in {len(BATCHES)} batches" if BATCHES else ""
            print(f"{len(job_s)} training jobs for {len(known)} runs{batched} (config batch_runs)")
            print(f"estimated training wall time: ~{wall / 60:.0f} min with {slots} jobs at once "
                  f"= {sum(known) / 3600:.1f} job-hours "
                  f"(costs measured on {runtime.MACHINES[machine]}"
                  f"{', scaled to this machine' if speed else ''}; lpdt.cost.runtime)")
        if len(known) < len(rows):
            print(f"  ({len(rows) - len(known)} runs have no measured cost and are not counted)")
        print(f"per-run table: {output[0]}")
