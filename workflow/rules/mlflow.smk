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


def forget_a_deleted_store():
    """A SQLite store deleted after the workflow made it (to start it afresh, or lost): its
    receipts (results/mlflow/*.json) said it held the runs, so nothing made it again. They are
    removed, with a line saying so, and the store is made and the runs and reports logged anew."""
    if workflow.remote_exec or not config["mlflow"]:
        return  # (a cluster job's own Snakemake process: the main process decides)
    from lpdt.tracking.store import sqlite_path  # ~0.2 s: not in every cluster job's start

    db = sqlite_path(TRACKING_URI)
    receipts = sorted(Path(RESULTS, "mlflow").glob("*.json"))
    if db is None or db.exists() or not receipts:
        return
    if DRY_RUN:  # writes nothing
        print(
            f"MLflow: {db} is gone; a run (not a dry run) removes its receipts in "
            f"{RESULTS}/mlflow/, makes the store and logs every run into it again",
            file=sys.stderr,
        )
        return
    for receipt in receipts:
        receipt.unlink()
    print(
        f"MLflow: {db} is gone; its receipts in {RESULTS}/mlflow/ are removed, so the store is "
        "made and every run logged into it again",
        file=sys.stderr,
    )


forget_a_deleted_store()


def mlflow_targets():
    return [MLFLOW_SYNCED, MLFLOW_REPORT] if config["mlflow"] else []


localrules:
    mlflow_init,
    mlflow_sync,
    mlflow_report,


rule mlflow_init:
    input:
        LPDT_CODE,
        settings_file(
            "mlflow", {"uri": TRACKING_URI, "experiment": config["experiment"]}
        ),
    output:
        MLFLOW_INIT,
    params:
        uri=TRACKING_URI,
        experiment=config["experiment"],
    log:
        f"{RESULTS}/logs/mlflow_init.log",
    shell:
        "{PY} -m lpdt.tracking init --uri {params.uri:q} --experiment {params.experiment:q}"
        " --out {output} > {log} 2>&1"


rule mlflow_sync:
    input:
        MLFLOW_INIT,
        LPDT_CODE,  # lpdt.tracking, and the claims (each run's `claims` tag)
        MANIFEST_STAMP,  # the manifest of this scale (rule manifest)
        run_done(),
        manifest=MANIFEST,
    output:
        MLFLOW_SYNCED,
    params:
        uri=TRACKING_URI,
        experiment=config["experiment"],
    log:
        f"{RESULTS}/logs/mlflow_sync.log",
    shell:
        "{PY} -m lpdt.tracking sync --manifest {input.manifest:q} --uri {params.uri:q}"
        " --experiment {params.experiment:q} --out {output} > {log} 2>&1"


rule mlflow_report:
    input:
        MLFLOW_INIT,
        LPDT_CODE,
        # functions: report.smk (REPORT_PDF, FIGURES) is included after this file
        pdf=lambda w: REPORT_PDF,
        figures=lambda w: FIGURES,
    output:
        MLFLOW_REPORT,
    params:
        scale=SCALE,
        uri=TRACKING_URI,
        experiment=config["experiment"],
    log:
        f"{RESULTS}/logs/mlflow_report.log",
    shell:
        "{PY} -m lpdt.tracking report --scale {params.scale} --report {input.pdf:q} {input.figures:q}"
        " --uri {params.uri:q} --experiment {params.experiment:q} --out {output} > {log} 2>&1"
