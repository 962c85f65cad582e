# MLflow: one store + experiment, a final sync that logs any run still missing and sets each
# run's `studies` tag from the manifest (runs shared by several studies list all of them), and
# the report PDF and the figures attached to one run per scale (named "report <scale>", in the
# experiment "<experiment>-reports", apart from the training runs), so that the MLflow UI shows
# them (src/lpdt/tracking/runs.py). Training jobs log their own runs as they finish and do not
# wait for the init (every process opens a SQLite store under a lock: docs/mlflow.md): as an
# input of theirs, a store made later (MLflow turned on after training) retrained every run
# that is a job of its own. The store and experiment are a settings file of the init, so that
# another tracking_uri or experiment syncs and reports again, into the new store.

MLFLOW_INIT = f"{RESULTS}/mlflow/experiment.json"
MLFLOW_SYNCED = f"{RESULTS}/mlflow/synced.json"
MLFLOW_REPORT = f"{RESULTS}/mlflow/report-{SCALE}.json"


def mlflow_targets():
    return [MLFLOW_SYNCED, MLFLOW_REPORT] if config["mlflow"] else []


localrules:
    mlflow_init,
    mlflow_sync,
    mlflow_report,


rule mlflow_init:
    input:
        settings_file(
            "mlflow", {"uri": config["tracking_uri"], "experiment": config["experiment"]}
        ),
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
        CLAIMS_FILE,  # each run's `claims` tag
        MANIFEST_STAMP,  # the manifest of this scale (rule manifest)
        run_done(),
        manifest=MANIFEST,
    output:
        MLFLOW_SYNCED,
    params:
        uri=config["tracking_uri"],
        experiment=config["experiment"],
    log:
        f"{RESULTS}/logs/mlflow_sync.log",
    shell:
        "{PY} -m lpdt.tracking sync --manifest {input.manifest:q} --uri {params.uri:q}"
        " --experiment {params.experiment:q} --out {output} > {log} 2>&1"


rule mlflow_report:
    input:
        MLFLOW_INIT,
        # functions: report.smk (REPORT_PDF, FIGURES) is included after this file
        pdf=lambda w: REPORT_PDF,
        figures=lambda w: FIGURES,
    output:
        MLFLOW_REPORT,
    params:
        scale=SCALE,
        uri=config["tracking_uri"],
        experiment=config["experiment"],
    log:
        f"{RESULTS}/logs/mlflow_report.log",
    shell:
        "{PY} -m lpdt.tracking report --scale {params.scale} --report {input.pdf:q} {input.figures:q}"
        " --uri {params.uri:q} --experiment {params.experiment:q} --out {output} > {log} 2>&1"
