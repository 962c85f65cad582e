"""What lpdt logs to MLflow: one run from its record, the report of a scale, a workflow's runs.

The run record (``lpdt.record``: ``metrics.json`` and ``history.csv``) stays the source of
truth; MLflow is a view of it, and everything logged is derived from the record:

- the run's name from its grid coordinates, short, what tells the runs of the studies apart
  first (``run_name``: ``lp sk0.8 s1235 top99 choco rn20 rangeen ring8 cifar10``;
  ``lpdt.tracking.names``), its start and end times from the training times in its provenance,
  its status from the record's status;
- the config without its ``tracking`` section as params (``run_params``); each history row as
  step metrics stamped with the wall-clock time the row was written (``RunRecord.row_times``):
  the curves under ``epoch/`` (a curve of evaluations ends at the final one), the host's CPU
  share, memory, threads and images/s under ``system/`` (the run page's "System metrics" tab),
  each with two points at least (``SERIES_POINTS``); the summaries users sort and filter by
  (``SUMMARY_METRICS``: the final evaluation, GB per node, wall time) as one-value metrics at
  the last step under the record's names (``final.acc_node_mean``), charted after the curves
  (``series_key``, ``EPOCH_PREFIX``), the rest of the summary in ``metrics.json`` only;
- the dataset (name, source, stand-in) as an MLflow dataset input;
- tags: the lpdt run id, dataset, model, status, the provenance captured at training time (git
  commit and dirty flag, host, lpdt version, device) and the host's CPU model and cores from the
  record's system metrics, never the state of the machine that logs, so logging a run again
  (``mlflow_sync``) does not change them; ``cell`` (``cell_name``: the coordinates without the
  seed, and the 8-bit recipe version, so that the UI's "Group by" aggregates a cell's seeds and
  only those) and ``recipe_version`` (``recipe_tag``: ``none for fp32`` where no recipe
  applies); from the workflow the studies and the claims that read the run (``sync_manifest``:
  ``no claim reads it`` where none does);
- the run's description (``mlflow.note.content``, ``run_note``): one paragraph saying what was
  trained on which data standing in for which, who reads it, its final accuracy, its files;
- ``metrics.json``, ``history.csv`` and ``config.yaml`` as artifacts.

``log_run`` is idempotent: a run already logged (found by its ``lpdt_run_id`` tag) is not logged
twice; only its tags and name are brought up to date (studies sharing a run may be added later),
and the per-epoch series of an earlier metric layout are added (its MLflow run id stays).
``log_report`` attaches the report PDF and the figures of one scale to one run per scale, in an
experiment of its own (``report_experiment``), away from the training runs.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import math
import shutil
from collections.abc import Iterable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from lpdt import record
from lpdt.record import RecordError, RunRecord
from lpdt.tracking.names import NO_CLAIM, cell_name, recipe_tag, run_name, run_note
from lpdt.tracking.store import (
    DEFAULT_EXPERIMENT,
    DEFAULT_URI,
    TrackingError,
    local_artifact_dir,
    log_files,
    open_client,
    open_experiment,
    search_runs,
    store_lock,
    with_retry,
)

RUN_ID_TAG = "lpdt_run_id"
REPORT_TAG = "lpdt_report_scale"  # on the one run per scale that holds the report and figures
COMPLETE_TAG = "lpdt_logged"  # set last: a run without it was interrupted while logging
# When the logged record's training started: a run of the same id trained again (--force, or an
# execution key such as train.curve_images changed) is another record, logged anew (its numbers
# and files stayed the first training's, under the new description)
TRAINED_TAG = "lpdt_trained"
CELL_TAG = "cell"
NOTE_TAG = "mlflow.note.content"  # the run's description in the UI
RUN_FILES = (record.METRICS_FILE, record.HISTORY_FILE, record.CONFIG_FILE)  # logged as artifacts

T = TypeVar("T")


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}} -> {"a.b": 1}`` (lists are kept as values)."""
    out: dict[str, Any] = {}
    for k, v in tree.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _chunks(items: list[T], size: int) -> Iterable[list[T]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _finite(v: Any) -> float | None:
    """A finite number as float; None for None, booleans, strings, NaN and infinities."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v) if math.isfinite(v) else None


def _ms(t: dt.datetime) -> int:
    return int(t.timestamp() * 1000)


def _time_ms(iso: str) -> int:
    return _ms(record.parse_time(iso))


def find_run(uri: str, experiment: str, run_id: str) -> str | None:
    """The MLflow run id of a completely logged lpdt run, or None."""
    client = open_client(uri)
    exp = with_retry(lambda: client.get_experiment_by_name(experiment))
    if exp is None:
        return None
    for r in search_runs(client, exp.experiment_id, RUN_ID_TAG, run_id):
        if r.data.tags.get(COMPLETE_TAG) == "true":
            return r.info.run_id
    return None


def read_record(run_dir: str | Path) -> RunRecord:
    """The record of a finished run directory (``TrackingError`` if it has none or it is not
    valid; the message is ``lpdt.record.read``'s one line)."""
    try:
        return record.read(run_dir)
    except RecordError as e:
        raise TrackingError(str(e)) from None


def _tag(v: Any) -> str:
    if v is None:
        return "unknown"
    return str(v).lower() if isinstance(v, bool) else str(v)


def run_tags(
    rec: RunRecord, tags: dict[str, Any] | None = None, run_dir: str | Path | None = None
) -> dict[str, str]:
    """The tags of an MLflow run: lpdt run id, cell (``cell_name``), the precision's recipe
    version (``recipe_tag``; "none for fp32", "unknown" where the run id does not tell it), dataset (and whether it is a
    stand-in), model, status, the provenance recorded at training time (git commit and dirty
    flag, host, lpdt version, device; "unknown" where the record has none), the host's CPU model
    and logical cores (system metrics; "unknown" in a record without them), plus the caller's
    tags (studies, claims, scale), and the description (``run_note``, which names ``run_dir``).
    A function of the record, the caller's tags and ``run_dir``: logging the same run again
    gives the same tags."""
    prov, system = rec.provenance, rec.system
    out = {
        RUN_ID_TAG: rec.run_id,
        CELL_TAG: cell_name(rec),
        "recipe_version": recipe_tag(rec),
        "dataset": rec.dataset.name,
        "stand_in": _tag(rec.dataset.stand_in),
        "stand_in_for": rec.dataset.stand_in_for or "",
        "model": rec.model.name,
        "status": rec.status,
        "git_commit": _tag(prov.git_commit),
        "git_dirty": _tag(prov.git_dirty),
        "host": _tag(prov.host),
        "lpdt_version": _tag(prov.lpdt_version),
        "device": _tag(prov.device),
        "engine": rec.engine,  # simulated | distributed
        "cpu_model": _tag(system.cpu_model if system else None),
        "cpu_count": _tag(system.cpu_count if system else None),
    }
    if prov.git_commit:  # shown by the MLflow UI as the run's source version
        out["mlflow.source.git.commit"] = prov.git_commit
    out.update({str(k): str(v) for k, v in (tags or {}).items()})
    out[NOTE_TAG] = run_note(rec, run_dir, out.get("studies", ""), out.get("claims", ""))
    return out


# Metric keys. MLflow's charts (run page and experiment chart view) put a key with a ``/`` in the
# section named by what comes before it, list the other sections (sorted) before "Model metrics"
# (keys without ``/``) and "System metrics" (``system/``), and sort the charts of a section by
# key (mlflow/server/js, ``getBaseChartAndSectionConfigs``; tests/tracking/ checks the bundle).
# So the per-epoch curves go to the section ``epoch``, shown first; the run's system metrics per
# epoch to ``system/``, the run page's "System metrics" tab; the one-value summaries keep their
# names without ``/`` (``final.acc_node_mean``, what users sort and filter the runs table by)
# and come after the curves, in "Model metrics".
EPOCH_PREFIX = "epoch/"
SYSTEM_PREFIX = "system/"
# History columns that measure the host, not the training (``record.HistoryRow``, its fields'
# metadata): under system/.
SYSTEM_FIELDS = record.SYSTEM_FIELDS
# The evaluation of the final row (after the final gossip rounds), logged as the last point of
# the curves of the evaluations made during training (Figure 1's runs evaluate every epoch).
FINAL_EVAL_FIELDS = record.EVALUATION_FIELDS
# A series needs this many points: a column with fewer (a run evaluated on the whole test split
# only at its end: one point, the final evaluation) is no curve, and the one value is the
# summary's (``final.*``), so that no number is charted twice as a dot.
SERIES_POINTS = 2
# The one-value summaries logged as metrics, what users sort and filter the runs table by: the
# final evaluation (the paper's number, its spread over the nodes, the average model, the
# consensus distance), the GB each node sent, the run's wall time. MLflow charts every metric,
# one dot each, so the rest of the record's summary (model size, the other communication and
# timing counts, the host's CPU share, memory and threads over the run, which the system/
# series show per epoch) is left to metrics.json, an artifact of the run; its final training
# loss is the last point of epoch/train_loss.
SUMMARY_METRICS = (
    *(f"final.{f}" for f in FINAL_EVAL_FIELDS if f in record.FINAL_FIELDS),
    "communication.gb_per_node",
    "time.total_s",
)
# The layout of the logged metrics; a run logged with another one gets the current series added
# when it is logged again (``log_run``; MLflow cannot delete a metric, so old keys stay).
METRICS_LAYOUT = "2"
METRICS_LAYOUT_TAG = "lpdt_metrics_layout"


def series_key(field: str) -> str:
    """The MLflow key of a history column: ``system/cpu_share``, ``epoch/train_loss``."""
    return (SYSTEM_PREFIX if field in SYSTEM_FIELDS else EPOCH_PREFIX) + field


def _series_metrics(rec: RunRecord) -> list[Any]:
    """Per-epoch metrics (``series_key``) at step = epoch, stamped with the time each row was
    written; the final evaluation (``FINAL_EVAL_FIELDS``, after the final gossip rounds) at the
    step after the last epoch (the summary's step), stamped with the time of the final row, so
    that a curve of evaluations ends at the final accuracy. A column with fewer than
    ``SERIES_POINTS`` points is left out (its one value, if an evaluation, is the summary's)."""
    from mlflow.entities import Metric

    series: dict[str, list[Metric]] = {}
    last_epoch = 0
    for row, when in zip(rec.history, rec.row_times(), strict=True):
        values = row.to_dict()
        if row.epoch == "final":
            fields: Iterable[str] = FINAL_EVAL_FIELDS
            step = last_epoch + 1
        else:
            fields = [k for k in values if k != "epoch"]
            step = last_epoch = row.epoch
        for k in fields:
            x = _finite(values.get(k))
            if x is not None:
                key = series_key(k)
                series.setdefault(key, []).append(Metric(key, x, _ms(when), step))
    return [m for points in series.values() if len(points) >= SERIES_POINTS for m in points]


def _summary_metrics(rec: RunRecord) -> list[Any]:
    """The summary's ``SUMMARY_METRICS``, one value each under the record's names
    (``final.acc_node_mean``), at the step after the last epoch, stamped with the finish time
    (a diverged run has no final evaluation: its GB and time only)."""
    from mlflow.entities import Metric

    epochs = [row.epoch for row in rec.history if isinstance(row.epoch, int)]
    last_step = max(epochs) + 1 if epochs else 0
    summary: dict[str, Any] = {}
    for section in ("final", "communication", "time"):
        obj = getattr(rec, section)
        if obj is not None:
            summary.update({f"{section}.{k}": v for k, v in dataclasses.asdict(obj).items()})
    finished = _time_ms(rec.provenance.finished or rec.provenance.started)
    out: list[Metric] = []
    for k in SUMMARY_METRICS:
        x = _finite(summary.get(k))
        if x is not None:
            out.append(Metric(k, x, finished, last_step))
    return out


def _run_metrics(rec: RunRecord) -> list[Any]:
    """Every metric of a run: the per-epoch series, then the summary."""
    return _series_metrics(rec) + _summary_metrics(rec)


def _dataset_input(rec: RunRecord) -> Any:
    """The record's dataset as an MLflow dataset input (context "train"): name, and as its
    source the dataset's source and stand-in status; sizes as its profile."""
    from mlflow.entities import Dataset, DatasetInput, InputTag
    from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT

    d = rec.dataset
    source = json.dumps(
        {"source": d.source, "stand_in": d.stand_in, "stand_in_for": d.stand_in_for}, sort_keys=True
    )
    profile = json.dumps(
        {
            "num_classes": d.num_classes,
            "train_samples": d.train_samples,
            "test_samples": d.test_samples,
        },
        sort_keys=True,
    )
    digest = hashlib.sha256(f"{d.name}\n{source}\n{profile}".encode()).hexdigest()[:16]
    ds = Dataset(name=d.name, digest=digest, source_type="lpdt", source=source, profile=profile)
    return DatasetInput(ds, tags=[InputTag(MLFLOW_DATASET_CONTEXT, "train")])


def run_params(rec: RunRecord) -> dict[str, str]:
    """The run's params: its flattened config without the ``tracking`` section, which says how
    ``lpdt train`` was to log the run, not what it trained (``tracking.mlflow: False`` on a run
    the workflow logged would read as "not in MLflow"; the run id leaves it out too)."""
    return {
        k: str(v)[:6000]
        for k, v in sorted(flatten(rec.config).items())
        if not k.startswith("tracking.")
    }


def _refresh(client: Any, run: Any, rec: RunRecord, tags: dict[str, str], name: str) -> None:
    """Bring a completely logged run up to date: the per-epoch series of the current metric
    layout if it was logged with another one, its tags, its name. Its MLflow run id stays."""
    from mlflow.entities import RunTag

    mid = run.info.run_id
    if run.data.tags.get(METRICS_LAYOUT_TAG) != METRICS_LAYOUT:
        for chunk in _chunks(_series_metrics(rec), 1000):
            with_retry(partial(client.log_batch, mid, metrics=chunk))
    stale = [RunTag(k, v) for k, v in tags.items() if run.data.tags.get(k) != v]
    if stale:
        with_retry(lambda: client.log_batch(mid, tags=stale))
    if run.info.run_name != name:
        with_retry(lambda: client.update_run(mid, name=name))


def log_run(
    run_dir: str | Path,
    uri: str = DEFAULT_URI,
    experiment: str = DEFAULT_EXPERIMENT,
    tags: dict[str, Any] | None = None,
) -> str:
    """Log one finished run (see the module docstring); return its MLflow run id. Idempotent:
    if the run is already logged, its tags and name are brought up to date, and a run logged
    with an earlier metric layout (``METRICS_LAYOUT``) gets the current per-epoch series; its
    MLflow run id stays. A logged run of another training of the same run id (``TRAINED_TAG``)
    is deleted, and this record logged in its place."""
    from mlflow.entities import Param, RunTag

    rec = read_record(run_dir)
    client, exp_id = open_experiment(uri, experiment)
    trained = str(rec.provenance.started)
    all_tags = {
        **run_tags(rec, tags, run_dir),
        METRICS_LAYOUT_TAG: METRICS_LAYOUT,
        TRAINED_TAG: trained,
    }
    name = run_name(rec)

    for r in search_runs(client, exp_id, RUN_ID_TAG, rec.run_id):
        logged = r.data.tags.get(TRAINED_TAG)  # None: logged before the tag (kept, refreshed)
        if r.data.tags.get(COMPLETE_TAG) == "true" and logged in (None, trained):
            _refresh(client, r, rec, all_tags, name)
            return r.info.run_id
        # Interrupted while logging earlier, or another training of the run: remove the
        # logged record and log this one.
        with_retry(partial(client.delete_run, r.info.run_id))
        local = local_artifact_dir(uri, r.info.artifact_uri)
        if local is not None:
            shutil.rmtree(local, ignore_errors=True)

    run = with_retry(
        lambda: client.create_run(
            exp_id,
            start_time=_time_ms(rec.provenance.started),
            run_name=name,
            tags={RUN_ID_TAG: rec.run_id},
        )
    )
    mid = run.info.run_id
    params = [Param(k, v) for k, v in run_params(rec).items()]
    for chunk in _chunks(params, 100):
        with_retry(partial(client.log_batch, mid, params=chunk))
    for chunk in _chunks(_run_metrics(rec), 1000):
        with_retry(partial(client.log_batch, mid, metrics=chunk))
    with_retry(lambda: client.log_inputs(mid, datasets=[_dataset_input(rec)]))
    d = Path(run_dir)
    log_files(client, uri, run, [d / f for f in RUN_FILES if (d / f).is_file()])
    tag_list = [RunTag(k, v) for k, v in all_tags.items()]
    for tag_chunk in _chunks(tag_list, 100):
        with_retry(partial(client.log_batch, mid, tags=tag_chunk))
    status = "FINISHED" if rec.status == "ok" else "FAILED"
    end = _time_ms(rec.provenance.finished or rec.provenance.started)
    with_retry(lambda: client.set_terminated(mid, status=status, end_time=end))
    with_retry(lambda: client.set_tag(mid, COMPLETE_TAG, "true"))  # last
    return mid


def report_experiment(experiment: str) -> str:
    """The experiment that holds the report runs of ``experiment``'s scales: ``lpdt-reports``
    for ``lpdt``. Apart, so that the training-run table, its run count and its charts show
    training runs only."""
    return f"{experiment}-reports"


def log_report(
    report: str | Path,
    figures: Iterable[str | Path],
    scale: str,
    uri: str = DEFAULT_URI,
    experiment: str = DEFAULT_EXPERIMENT,
) -> str:
    """Attach the report PDF and the figures of one scale to that scale's report run (named
    ``report <scale>``, tagged ``lpdt_report_scale``, in ``report_experiment(experiment)``;
    created on first use, its files replaced afterwards); return its MLflow run id. Start and
    end times are the oldest and newest file modification times (when the report was built).
    A report run that an earlier lpdt left among the training runs of ``experiment`` is
    deleted (MLflow's soft delete: the UI's "Deleted" filter still shows it)."""
    files = [Path(report), *map(Path, figures)]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise TrackingError(f"report files not found: {', '.join(missing)}")
    mtimes = [int(f.stat().st_mtime * 1000) for f in files]
    client, train_id = open_experiment(uri, experiment)
    _, exp_id = open_experiment(uri, report_experiment(experiment))
    for old in search_runs(client, train_id, REPORT_TAG, scale):
        with_retry(partial(client.delete_run, old.info.run_id))
    with store_lock(uri):  # one report run per scale, also with two loggers at once
        runs = search_runs(client, exp_id, REPORT_TAG, scale)
        if runs:
            run = runs[0]
        else:
            run = with_retry(
                lambda: client.create_run(
                    exp_id,
                    start_time=min(mtimes),
                    run_name=f"report {scale}",
                    tags={REPORT_TAG: scale, "scale": scale},
                )
            )
    log_files(client, uri, run, files[:1])
    log_files(client, uri, run, files[1:], "figures")
    mid = run.info.run_id
    with_retry(lambda: client.set_terminated(mid, status="FINISHED", end_time=max(mtimes)))
    return mid


def sync_manifest(
    manifest: str | Path,
    uri: str = DEFAULT_URI,
    experiment: str = DEFAULT_EXPERIMENT,
    tags: dict[str, Any] | None = None,
) -> dict[str, str]:
    """Log every run of a workflow manifest (``results/manifest.json``) that is not logged yet and
    refresh the ``studies`` and ``claims`` tags of the others (``claims``: the paper's accuracy
    claims that read the run, ``lpdt.report.readers``; ``NO_CLAIM``, "no claim reads it", if
    none does); returns
    {lpdt run id: MLflow run id}."""
    from lpdt.report.aggregate import aggregate
    from lpdt.report.readers import claims_by_run

    frame, m = aggregate(manifest)
    claims = claims_by_run(frame)
    studies: dict[str, list[str]] = {}
    for study, entry in sorted(m.studies.items()):
        for r in entry.runs:
            studies.setdefault(r.run_id, []).append(study)
    # the directories the report reads (a copied results folder's own runs, not ./results)
    dirs: dict[str, str] = dict(zip(frame["run_id"], frame["dir"], strict=True))
    out = {}
    for rid, d in sorted(dirs.items()):
        if not (Path(d) / record.METRICS_FILE).is_file():
            continue
        t = {
            "studies": ",".join(sorted(set(studies[rid]))),
            "scale": m.scale,
            "claims": ",".join(claims.get(rid, [])) or NO_CLAIM,
        }
        out[rid] = log_run(d, uri, experiment, {**t, **(tags or {})})
    return out
