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
#   (each process then runs 1 torch thread per reserved core it shares; docs/engine.md).
# - MLflow: the run is logged right after training; a logging failure only warns (the JSON
#   files are the source of truth; the final mlflow_sync step logs what is missing).
# - SIGTERM (SLURM's time limit or scancel; SLURM sends it before SIGKILL) ends the log with a
#   line saying so (docs/workflow.md, "Running on SLURM").


def run_tree(run_id):
    """The run config of a training job: a run of the grid or a plateau check's 2x run
    (PLATEAU_RUNS, workflow/rules/plateau.smk)."""
    return RUNS[run_id].config if run_id in RUNS else PLATEAU_RUNS[run_id].config


def train_processes(wildcards):
    """Processes a training job starts: 1, or one per node with the distributed engine."""
    if config.get("engine", "simulated") == "distributed":
        return grid.config_from_dict(run_tree(wildcards.run_id)).topology.nodes
    return 1


def train_cores(wildcards):
    """Cores a training job reserves: its torch threads, or one per process (node) when the
    distributed engine runs it."""
    if config.get("engine", "simulated") == "distributed":
        return train_processes(wildcards)
    return config["train_threads"]


from lpdt import gpus

GPUS = gpus.visible_gpus()


rule train:
    input:
        cfg=ancient(f"{RESULTS}/configs/{{run_id}}.yaml"),
        mlflow=[MLFLOW_INIT] if config["mlflow"] else [],
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
        # train_gpus: auto: 1 per process on a machine with GPUs, at most all of them (lpdt.gpus)
        gpu=lambda w: gpus.job_gpus(config["train_gpus"], run_tree(w.run_id).get("device", "auto"), GPUS, train_processes(w)),
    params:
        out=f"{RUNS_DIR}/{{run_id}}",
        engine=config.get("engine", "simulated"),
        mlflow="true" if config["mlflow"] else "false",
        uri=config["tracking_uri"],
        experiment=config["experiment"],
        scale=SCALE,
        seed_in_name=lambda w: "--seed-in-name" if w.run_id in SEEDED_RUNS else "",
    shell:
        """
        export OMP_NUM_THREADS={threads} MKL_NUM_THREADS={threads}
        trap 'echo "lpdt train stopped by SIGTERM (a SLURM time limit, scancel or an interrupted Snakemake); a rerun resumes {params.out} from its last epoch checkpoint" >> {log}; exit 143' TERM
        {LPDT} train --config {input.cfg} --out {params.out} --resume --set engine={params.engine} > {log} 2>&1 \
            || [ $? -eq 3 ]
        if [ {params.mlflow} = true ]; then
            {PY} -m lpdt.tracking log {params.out} --uri {params.uri:q} \
                --experiment {params.experiment:q} --tag scale={params.scale} \
                {params.seed_in_name} >> {log} 2>&1 \
                || echo "warning: MLflow logging failed (mlflow_sync retries it)" >> {log}
        fi
        """
