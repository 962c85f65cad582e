# One training job per unique run config.
#
# - Outputs are the run's three files only: the checkpoint (results/runs/<id>/checkpoint.pt) is
#   not a declared output, so Snakemake keeps it when a job fails or is killed, and the rerun
#   continues from it (--resume).
# - `lpdt train` exits 3 for a run that diverged: that is a result (reported as such), not a
#   failure, so it is accepted here.
# - The run config is an ancient() input: its file name is the hash of its result-affecting
#   content (rule run_configs), so rewriting it never calls for a rerun.
# - threads: torch threads per job (OMP_NUM_THREADS); config train_threads (default 1). With
#   config engine: distributed a job starts one process per node and reserves that many cores
#   (each process then runs 1 torch thread per reserved core it shares; docs/distributed.md).
# - MLflow: the run is logged right after training; a logging failure only warns (the JSON
#   files are the source of truth; the final mlflow_sync step logs what is missing).
# - SIGTERM (SLURM's time limit or scancel; SLURM sends it before SIGKILL) ends the log with a
#   line saying so (docs/compute.md, "Running on SLURM").
# - Batches (config batch_runs; docs/workflow.md, "Batches of runs"): a cell of several seeds, and
#   the single runs of one model, are one job each, rule train_batch, whose `lpdt train` trains
#   its runs one after another in one process (they share the start-up and a compiled step: the
#   same runs, bit for bit). Its output is a stamp listing the runs; the runs' own files are not
#   outputs, so a batch that fails keeps its finished runs, and the rerun skips them
#   (`--resume`). Consumers ask for run_done().
# - GPUs (docs/compute.md, "GPUs"; lpdt.gpus): resource `gpu` is the GPUs a job uses (SLURM:
#   --gpus); `gpu_slot` its share of this machine's GPUs, k jobs per GPU (config
#   gpu_jobs_per_gpu), and the workflow caps it at GPUs x slots per GPU. `python -m lpdt.gpus
#   slot` then gives the job free slots of one GPU and sets CUDA_VISIBLE_DEVICES to it.


# The grid's distinct datasets (name, root, download), each with a run that reads it, and its
# distinct models that read files (ModelSpec.reads_files: DistilBERT's weights under the data
# root), each with a run that builds it: rule data_check reads each dataset and builds each such
# model once before any training job.
def data_key(run_config):
    """A run's dataset as data_check reads it: name, root, download."""
    data = run_config.get("data", {})
    return json.dumps({k: data.get(k) for k in ("dataset", "root", "download")}, sort_keys=True)


DATA_RUNS, MODEL_RUNS = {}, {}
for _run_id, _run in RUNS.items():
    DATA_RUNS.setdefault(data_key(_run.config), _run_id)
    _model = _run.config.get("model", {})
    if MODELS.get(_model.get("name")).reads_files:
        _key = [_model, _run.config.get("precision", {}), _run.config.get("data", {})]
        MODEL_RUNS.setdefault(json.dumps(_key, sort_keys=True), _run_id)
_DATA_KEY = hashlib.sha1("".join(sorted(DATA_RUNS) + sorted(MODEL_RUNS)).encode()).hexdigest()[:12]
DATA_READY = f"{RESULTS}/.data/ready-{_DATA_KEY}"


localrules:
    data_check,


rule data_check:
    """Every dataset of the grid read once, and every model that reads files built once
    (DistilBERT's pretrained weights under the data root), in Snakemake's own process (a local
    rule: on a cluster, the login node), before any training job: a dataset or weights that are
    missing or damaged stop the workflow at once, naming each, instead of failing every job
    that reads them (on SLURM after each got a GPU: 289 jobs, resubmitted once); with
    data.download: true it downloads here, once, not in many jobs at a time. Named by a hash of
    the datasets and models, so another grid's data is checked again. A training job that
    finished needs no check."""
    output:
        DATA_READY,
    run:
        from lpdt.data import load_dataset
        from lpdt.errors import LpdtError
        from lpdt.models import build_model

        bad_data, bad_models, unreadable = [], [], set()
        for key, run_id in DATA_RUNS.items():
            data = grid.config_from_dict(RUNS[run_id].config).data
            print(f"data_check: reading {data.dataset} (as run {run_id} will)", flush=True)
            try:
                load_dataset(data)
            except LpdtError as e:  # a missing or damaged dataset (DatasetError), one line each
                bad_data.append(f"  {data.dataset}: {e}")
                unreadable.add(key)
        for run_id in MODEL_RUNS.values():
            if data_key(RUNS[run_id].config) in unreadable:  # named above
                continue
            cfg = grid.config_from_dict(RUNS[run_id].config)
            print(f"data_check: building {cfg.model.name} (as run {run_id} will)", flush=True)
            try:
                info = load_dataset(cfg.data).info  # its input shape (a text run's length)
                build_model(cfg, info.num_classes, info.input_shape)
            except LpdtError as e:  # missing or damaged weights, one line each (the same files
                # of several configs: one line)
                bad_models.append(f"  {cfg.model.name}: {e}")
        if bad_data or bad_models:
            raise WorkflowError(
                f"{len(bad_data)} of the grid's {len(DATA_RUNS)} datasets and the files of "
                f"{len(bad_models)} of its {len(MODEL_RUNS)} pretrained models cannot be read (a "
                "model of a dataset that cannot be read is not built); no training job was "
                "started (docs/data.md):\n" + "\n".join(dict.fromkeys(bad_data + bad_models))
            )
        Path(output[0]).parent.mkdir(parents=True, exist_ok=True)
        Path(output[0]).write_text("".join(f"{s}\n" for s in sorted(DATA_RUNS) + sorted(MODEL_RUNS)))


def data_ready(*outputs):
    """A training rule's input function: the data check (DATA_READY) for a job that has not
    finished, none for one that has, i.e. whose ``outputs`` (patterns of its wildcards) all
    exist. As an input of a finished job, a check that runs again (a dataset added to the grid,
    data.download turned on: another DATA_READY) would make Snakemake rerun the finished job
    after it: with a job per run, as on GPUs and SLURM, the whole grid."""

    def inputs(wildcards):
        values = dict(wildcards.items())
        done = all(os.path.exists(pattern.format(**values)) for pattern in outputs)
        return [] if done else [DATA_READY]

    return inputs


def run_tree(run_id):
    """The run config of a training job: a run of the grid or a plateau check's 2x run
    (PLATEAU_RUNS, workflow/rules/plateau.smk)."""
    return RUNS[run_id].config if run_id in RUNS else PLATEAU_RUNS[run_id].config


def lead_run(wildcards):
    """The run whose config decides a job's threads and GPUs: the job's run, or a batch's first
    (a batch's runs are of one model, on one engine and device)."""
    return wildcards.run_id if "run_id" in wildcards.keys() else BATCHES[wildcards.batch][0]


def run_processes(run_id):
    """Processes a training job starts: 1, or one per node with the distributed engine."""
    if config.get("engine", "simulated") == "distributed":
        return grid.config_from_dict(run_tree(run_id)).topology.nodes
    return 1


def train_processes(wildcards):
    return run_processes(lead_run(wildcards))


def train_cores(wildcards):
    """Cores a training job reserves: its torch threads, or one per process (node) when the
    distributed engine runs it."""
    if config.get("engine", "simulated") == "distributed":
        return train_processes(wildcards)
    return config["train_threads"]


GPUS = len(GPU_IDS)  # GPU_IDS: this machine's GPUs (common.smk)
# The GPUs whose slots this Snakemake hands out: this machine's, where the jobs run here (not
# under a cluster executor, whose jobs get their GPUs from SLURM, nor inside such a job).
SLOT_GPU_IDS = [] if ON_CLUSTER else GPU_IDS
# The machine's GPU shares (lpdt.gpus.acquire): one folder for every invocation and results folder
# on the machine ($LPDT_GPU_SLOTS, else /tmp/lpdt-gpu-slots), keyed by the GPU.
GPU_SLOT_DIR = str(gpus.slot_dir())


def run_gpus(run_id):
    """GPUs a training job uses (resource `gpu`; config train_gpus, lpdt.gpus.job_gpus)."""
    device = run_tree(run_id).get("device", "auto")
    return gpus.job_gpus(config["train_gpus"], device, GPUS, run_processes(run_id))


def run_k(run_id):
    """k: training jobs of this run's model that share one GPU (config gpu_jobs_per_gpu)."""
    return gpus.jobs_per_gpu(config["gpu_jobs_per_gpu"], run_tree(run_id)["model"]["name"])


def run_slots(run_id):
    """Resource `gpu_slot`: the job's share of this machine's GPUs (lpdt.gpus.job_slots)."""
    slot_gpus = len(SLOT_GPU_IDS)
    return gpus.job_slots(run_gpus(run_id), run_processes(run_id), run_k(run_id), GPU_UNITS, slot_gpus)


# Slots per GPU: the least common multiple of the k of the jobs that use a GPU here. The total,
# GPUs x that, is the cap of resource gpu_slot (unless --resources gpu_slot=N sets one).
# (The plateau check's runs are the grid's claim cells at 2x epochs: no other models.)
GPU_UNITS = gpus.slot_units(run_k(r) for r in RUNS if SLOT_GPU_IDS and run_gpus(r))
if SLOT_GPU_IDS and "gpu_slot" not in set(workflow.global_resources):
    workflow.register_resource("gpu_slot", len(SLOT_GPU_IDS) * GPU_UNITS)
    if workflow.is_main_process:
        shares = sorted({(RUNS[r].config["model"]["name"], run_k(r)) for r in RUNS if run_gpus(r)})
        print(
            f"GPUs: {len(SLOT_GPU_IDS)} ({','.join(SLOT_GPU_IDS)}), {GPU_UNITS} slots each: "
            f"gpu_slot={len(SLOT_GPU_IDS) * GPU_UNITS}; training jobs per GPU: "
            f"{', '.join(f'{m} {k}' for m, k in shares) or 'none (no job uses a GPU)'}",
            file=sys.stderr,
        )


# A training job's GPU resources and allocator, from its run (rule train) or its batch's first run
# (rule train_batch): one definition for both rules.
def job_gpu(wildcards):
    """Resource `gpu`. train_gpus: auto: 1 per process on a machine with GPUs, at most all."""
    return run_gpus(lead_run(wildcards))


def job_gpu_slot(wildcards):
    """Resource `gpu_slot`: its share of this machine's GPUs, 1/k of one (config gpu_jobs_per_gpu)."""
    return run_slots(lead_run(wildcards))


# Shards and a whole GPU at once: the SLURM plugin would ask for both (--gres=shard:N and
# --gpus=1), and no GPU would be shared. The SLURM profile's set-resources gives train gpu: 1.
if config["slurm_gpu_shards"] > 0:
    _whole = workflow.resource_settings.overwrite_resources.get("train", {}).get("gpu")
    _whole = getattr(_whole, "value", _whole)  # a snakemake.resources.Resource
    if _whole not in (None, 0, "0"):
        raise WorkflowError(
            f"slurm_gpu_shards={config['slurm_gpu_shards']} asks each training job for GPU shards, "
            f"but the profile's set-resources gives rule train gpu={_whole}, a whole GPU as well "
            "(nothing would be shared): set `gpu: 0` under set-resources: train: in the profile"
        )


def job_gres(wildcards):
    """SLURM with GPU shards (config slurm_gpu_shards > 0): sbatch --gres=shard:N, 1/k of a GPU."""
    run_id = lead_run(wildcards)
    if run_tree(run_id).get("device", "auto") == "cpu":
        return None
    return gpus.slurm_gres(config["slurm_gpu_shards"], run_k(run_id))


def job_planned_s(wildcards):
    """The job's time on its GPU share (None where it has no price): a job holding its share
    past it (with a margin) is reported by name by the jobs that wait. Its price alone on the
    GPU (lpdt.plan.gpu) times k, the jobs sharing that GPU: a job among k takes up to about k
    times its time alone (s(k), measured only for node-by-node jobs, was 1.69 at k = 8, over
    gpus.HANG_FACTOR: priced alone, 150 of the paper's 151 ResNet runs would have been called
    hung while healthy)."""
    from lpdt.plan.gpu import run_price
    from lpdt.plan.samples import samples_per_run

    ids = BATCHES[wildcards.batch] if hasattr(wildcards, "batch") else [wildcards.run_id]
    prices = [run_price(RUNS[r].config, samples_per_run(RUNS[r].config)) for r in ids]
    if None in prices:
        return None
    return run_k(lead_run(wildcards)) * sum(p.seconds for p in prices)


def job_device(wildcards, resources):
    """" --set device=cuda" for a job given a GPU (resource gpu or gres) whose run leaves the
    device to auto: where the job cannot use a GPU (a driver too old for the locked torch's CUDA,
    a wrong GPU request) it stops at once ("CUDA is not available") instead of training on its
    few cores until its time limit, with `device cpu` in its log as the only sign. `device` is
    an execution key: the run id is the same."""
    if run_tree(lead_run(wildcards)).get("device", "auto") != "auto":
        return ""
    given_a_gpu = getattr(resources, "gpu", 0) or getattr(resources, "gres", None)
    return " --set device=cuda" if given_a_gpu else ""


def job_slot_command(wildcards):
    """"" without a GPU slot; else the allocator that execs `lpdt train` on its GPU."""
    slots = job_gpu_slot(wildcards)
    if slots <= 0 or not SLOT_GPU_IDS:
        return ""
    name = getattr(wildcards, "batch", None) or wildcards.run_id
    return gpus.slot_command(
        PY, GPU_SLOT_DIR, SLOT_GPU_IDS, slots, GPU_UNITS, name, job_planned_s(wildcards)
    )


RUN_FILES = ("metrics.json", "history.csv", "config.yaml")  # a training job's outputs


rule train:
    input:
        cfg=ancient(f"{RESULTS}/configs/{{run_id}}.yaml"),
        data=data_ready(*(f"{RUNS_DIR}/{{run_id}}/{name}" for name in RUN_FILES)),
    output:
        metrics=f"{RUNS_DIR}/{{run_id}}/metrics.json",
        history=f"{RUNS_DIR}/{{run_id}}/history.csv",
        config=f"{RUNS_DIR}/{{run_id}}/config.yaml",
    log:
        f"{RESULTS}/logs/train/{{run_id}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/train/{{run_id}}.tsv"
    threads: train_cores
    resources:
        gpu=job_gpu,
        gpu_slot=job_gpu_slot,
        gres=job_gres,
    params:
        out=f"{RUNS_DIR}/{{run_id}}",
        engine=config.get("engine", "simulated"),
        mlflow="true" if config["mlflow"] else "false",
        uri=TRACKING_URI,
        experiment=config["experiment"],
        scale=SCALE,
        gpu_slot=job_slot_command,
        device=job_device,
    shell:
        """
        export OMP_NUM_THREADS={threads} MKL_NUM_THREADS={threads}
        trap 'echo "lpdt train stopped by SIGTERM (a SLURM time limit, scancel or an interrupted Snakemake); a rerun resumes {params.out} from its last epoch checkpoint, or puts its complete record back" >> {log}; exit 143' TERM
        {params.gpu_slot}{LPDT} train --config {input.cfg} --out {params.out} --resume --set engine={params.engine}{params.device} > {log} 2>&1 \
            || [ $? -eq 3 ]
        if [ {params.mlflow} = true ]; then
            {PY} -m lpdt.tracking log {params.out} --uri {params.uri:q} \
                --experiment {params.experiment:q} --tag scale={params.scale} \
                >> {log} 2>&1 \
                || echo "warning: MLflow logging failed (mlflow_sync retries it)" >> {log}
        fi
        """


rule train_batch:
    """A batch (config batch_runs): the seeds of one cell, or single runs of one model, trained
    one after another by one `lpdt train` (repeated --config / --out), then logged to MLflow by
    one process. Output: a stamp listing the runs (their files are not outputs: see the
    header)."""
    input:
        cfgs=lambda w: [ancient(f"{RESULTS}/configs/{r}.yaml") for r in BATCHES[w.batch]],
        data=data_ready(f"{BATCH_DIR}/{{batch}}.txt"),
    output:
        f"{BATCH_DIR}/{{batch}}.txt",
    log:
        f"{RESULTS}/logs/train/{{batch}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/train/{{batch}}.tsv"
    wildcard_constraints:
        batch="(seeds|runs)-[0-9a-f]{12}-[0-9a-f]{6}",
    # batches before single runs: the long jobs first, the short ones fill the end
    priority: 1
    threads: train_cores
    resources:
        gpu=job_gpu,
        gpu_slot=job_gpu_slot,
        gres=job_gres,
    params:
        runs=lambda w: " ".join(f"--config {RESULTS}/configs/{r}.yaml --out {RUNS_DIR}/{r}" for r in BATCHES[w.batch]),
        dirs=lambda w: " ".join(f"{RUNS_DIR}/{r}" for r in BATCHES[w.batch]),
        ids=lambda w: " ".join(BATCHES[w.batch]),
        engine=config.get("engine", "simulated"),
        mlflow="true" if config["mlflow"] else "false",
        uri=TRACKING_URI,
        experiment=config["experiment"],
        scale=SCALE,
        gpu_slot=job_slot_command,
        device=job_device,
    shell:
        """
        export OMP_NUM_THREADS={threads} MKL_NUM_THREADS={threads}
        trap 'echo "lpdt train stopped by SIGTERM (a SLURM time limit, scancel or an interrupted Snakemake); a rerun skips the finished runs of this batch and resumes the next from its last epoch checkpoint" >> {log}; exit 143' TERM
        {params.gpu_slot}{LPDT} train {params.runs} --resume --set engine={params.engine}{params.device} > {log} 2>&1 \
            || [ $? -eq 3 ]
        if [ {params.mlflow} = true ]; then
            {PY} -m lpdt.tracking log {params.dirs} --uri {params.uri:q} \
                --experiment {params.experiment:q} --tag scale={params.scale} \
                >> {log} 2>&1 \
                || echo "warning: MLflow logging failed (mlflow_sync retries it)" >> {log}
        fi
        printf '%s\n' {params.ids} > {output}
        """


use rule train_batch as train_batch_lead with:
    wildcard_constraints:
        batch="|".join(LEAD_BATCHES) or "^$",
    priority: 4


use rule train_batch as train_batch_long with:
    wildcard_constraints:
        batch="|".join(LONG_BATCHES) or "^$",
    priority: 3


use rule train_batch as train_batch_mid with:
    wildcard_constraints:
        batch="|".join(MID_BATCHES) or "^$",
    priority: 2


ruleorder: train_batch_lead > train_batch_long > train_batch_mid > train_batch
