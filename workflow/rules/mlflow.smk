# MLflow: one store + experiment created before any training job (concurrent schema creation on
# a fresh SQLite file fails), and a final sync that logs any run still missing and sets each
# run's `studies` tag from the manifest (runs shared by several studies list all of them).

MLFLOW_INIT = f"{RESULTS}/mlflow/experiment.json"
MLFLOW_SYNCED = f"{RESULTS}/mlflow/synced.json"


def mlflow_targets():
    return [MLFLOW_SYNCED] if config["mlflow"] else []


localrules:
    mlflow_init,
    mlflow_sync,


rule mlflow_init:
    output:
        MLFLOW_INIT,
    params:
        uri=config["tracking_uri"],
        experiment=config["experiment"],
    log:
        f"{RESULTS}/logs/mlflow_init.log",
    shell:
        "{PY} -m lpdt.tracking init --uri {params.uri:q} --experiment {params.experiment:q}"
        " --out {output} > {log} 2>&1"


rule mlflow_sync:
    input:
        MLFLOW_INIT,
        MANIFEST,
        MANIFEST_STAMP,  # the manifest of this scale (rule manifest)
        run_metrics(),
    output:
        MLFLOW_SYNCED,
    params:
        uri=config["tracking_uri"],
        experiment=config["experiment"],
    log:
        f"{RESULTS}/logs/mlflow_sync.log",
    shell:
        "{PY} -m lpdt.tracking sync --manifest {MANIFEST} --uri {params.uri:q}"
        " --experiment {params.experiment:q} --out {output} > {log} 2>&1"
