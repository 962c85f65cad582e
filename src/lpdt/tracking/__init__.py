"""Run records in MLflow, for browsing and comparing runs (``lpdt ui``).

The run record (``lpdt.record``) stays the source of truth; MLflow is a view of it. Four
layers, each importing only those before it (store, names, runs, cli), and the app:

- ``lpdt.tracking.store``: the store itself: opening a SQLite store from many processes at once
  (``store_lock``, ``with_retry``), experiments (``init_store``), where artifacts go
  (``local_artifact_dir``), ``TrackingError``;
- ``lpdt.tracking.names``: what a run is called and described as (``run_name``, ``cell_name``,
  ``recipe_version``, ``run_note``);
- ``lpdt.tracking.runs``: what lpdt logs: one finished run from its record (``log_run``: name,
  params, metrics, dataset, tags, description, files), the report of a scale in an experiment
  of its own (``log_report``, ``report_experiment``),
  every run of a workflow manifest (``sync_manifest``);
- ``lpdt.tracking.cli``: ``lpdt ui`` (``ui``) and ``python -m lpdt.tracking
  init|log|sync|report`` (``main``), the command the workflow runs;
- ``lpdt.tracking.webapp``: the MLflow app ``lpdt ui`` serves (MLflow's, its pages in the Model
  training view), an MLflow app plugin.

The public names of the four layers are importable from ``lpdt.tracking`` itself.
"""

import os

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")  # before any import of MLflow

from lpdt.tracking.cli import (  # noqa: E402
    PORTS,
    WORKFLOW_PARAM,
    add_arguments,
    app_registered,
    check_address,
    check_arguments,
    check_uri,
    main,
    run,
    ui,
    ui_command,
    ui_env,
    ui_url,
)
from lpdt.tracking.names import (  # noqa: E402
    NO_CLAIM,
    NO_RECIPE,
    NORM_TOKENS,
    PRECISION_TOKENS,
    UNKNOWN,
    cell_name,
    recipe_tag,
    recipe_version,
    run_name,
    run_note,
)
from lpdt.tracking.runs import (  # noqa: E402
    CELL_TAG,
    COMPLETE_TAG,
    EPOCH_PREFIX,
    FINAL_EVAL_FIELDS,
    METRICS_LAYOUT,
    METRICS_LAYOUT_TAG,
    NOTE_TAG,
    REPORT_TAG,
    RUN_FILES,
    RUN_ID_TAG,
    SERIES_POINTS,
    SUMMARY_METRICS,
    SYSTEM_FIELDS,
    SYSTEM_PREFIX,
    find_run,
    flatten,
    log_report,
    log_run,
    read_record,
    report_experiment,
    run_params,
    run_tags,
    series_key,
    sync_manifest,
)
from lpdt.tracking.store import (  # noqa: E402
    ARTIFACTS_DIR,
    DEFAULT_EXPERIMENT,
    DEFAULT_URI,
    EXPERIMENT_KIND,
    EXPERIMENT_KIND_TAG,
    HTTP_WAITS,
    LOCK_TIMEOUT_S,
    TrackingError,
    artifacts_root,
    bound_http_waits,
    check_is_mlflow_store,
    init_store,
    local_artifact_dir,
    log_files,
    open_client,
    open_experiment,
    search_runs,
    sqlite_path,
    store_error_line,
    store_lock,
    with_retry,
)

__all__ = [
    "ARTIFACTS_DIR",
    "CELL_TAG",
    "COMPLETE_TAG",
    "DEFAULT_EXPERIMENT",
    "DEFAULT_URI",
    "EPOCH_PREFIX",
    "EXPERIMENT_KIND",
    "EXPERIMENT_KIND_TAG",
    "FINAL_EVAL_FIELDS",
    "HTTP_WAITS",
    "LOCK_TIMEOUT_S",
    "METRICS_LAYOUT",
    "METRICS_LAYOUT_TAG",
    "NORM_TOKENS",
    "NOTE_TAG",
    "NO_CLAIM",
    "NO_RECIPE",
    "PORTS",
    "PRECISION_TOKENS",
    "REPORT_TAG",
    "RUN_FILES",
    "RUN_ID_TAG",
    "SERIES_POINTS",
    "SUMMARY_METRICS",
    "SYSTEM_FIELDS",
    "SYSTEM_PREFIX",
    "TrackingError",
    "UNKNOWN",
    "WORKFLOW_PARAM",
    "add_arguments",
    "app_registered",
    "artifacts_root",
    "bound_http_waits",
    "cell_name",
    "check_address",
    "check_is_mlflow_store",
    "check_uri",
    "check_arguments",
    "find_run",
    "flatten",
    "init_store",
    "local_artifact_dir",
    "log_files",
    "log_report",
    "log_run",
    "main",
    "open_client",
    "open_experiment",
    "read_record",
    "recipe_tag",
    "recipe_version",
    "report_experiment",
    "run",
    "run_name",
    "run_note",
    "run_params",
    "run_tags",
    "search_runs",
    "series_key",
    "sqlite_path",
    "store_error_line",
    "store_lock",
    "sync_manifest",
    "ui",
    "ui_command",
    "ui_env",
    "ui_url",
    "with_retry",
]
