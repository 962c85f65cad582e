"""What a user sees of a logged run in MLflow (issue 41): chart order, system metrics, the
accuracy curve, run names, the report run kept apart, relogging an older layout."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import mlflow

from lpdt import record, tracking
from tests.fake_records import fake_record
from tests.tracking.conftest import write_run

REPO = Path(__file__).resolve().parents[2]

# The run-name column shows about this many characters at its default width (the issue saw
# "resnet8 ring4 choco den…").
VISIBLE = 23


def _bundle() -> str:
    js = Path(mlflow.__file__).parent / "server" / "js" / "build" / "static" / "js"
    return "".join(f.read_text(errors="ignore") for f in sorted(js.glob("*.js")))


def ui_chart_order(keys: list[str]) -> list[str]:
    """The order in which MLflow's chart views list a run's metrics: by section (the key up to
    its last "/"; other sections sorted, then "Model metrics" for keys without "/", then
    "System metrics" for system/), then by key (test_the_bundle_orders_charts_so pins it)."""

    def section(key: str) -> tuple[int, str]:
        name = key.rsplit("/", 1)[0] if "/" in key else ""
        return (1, "") if name == "" else (2, "") if name == "system" else (0, name)

    return sorted(keys, key=lambda k: (section(k), k))


def test_the_bundle_orders_charts_so():
    """The facts ui_chart_order models, in the installed MLflow UI's JavaScript."""
    text = _bundle()
    assert re.search(r"\.split\(\w\)\.slice\(0,-1\)\.join\(\w\);return \w===\w+\.QB\?", text)
    assert re.search(
        r"Object\.keys\(\w+\)\.filter\(\w+=>\w+!==\w+\.NN&&\w+!==\w+\.rx\)\.sort\(\)", text
    )
    assert re.search(r"Array\.from\(\w+\)\.sort\(\)\.forEach", text)
    assert 'B="system/",j="System metrics",V="",q="Model metrics"' in text


def _keys_and_points(store: str, mid: str) -> dict[str, int]:
    c = tracking.open_client(store)
    run = c.get_run(mid)
    return {k: len(c.get_metric_history(mid, k)) for k in run.data.metrics}


def test_curves_come_before_the_one_value_summaries(store, tmp_path):
    d = write_run(tmp_path / "run", "r1", {"seed": 7}, epochs=4)
    mid = tracking.log_run(d, store, "lpdt")
    points = _keys_and_points(store, mid)
    model_view = [k for k in ui_chart_order(list(points)) if not k.startswith("system/")]
    curves = [k for k in model_view if k.startswith("epoch/")]
    summaries = [k for k in model_view if "/" not in k]
    assert model_view == curves + summaries  # the whole epoch section first
    assert all(points[k] == 1 for k in summaries)  # the single points all come after it
    assert points["epoch/train_loss"] == 4 and points["epoch/acc_avg_model"] == 5
    assert "final.acc_node_mean" in summaries  # the runs table still sorts and filters by it
    rec = record.read(d)
    assert tracking.open_client(store).get_run(mid).data.metrics["final.acc_node_mean"] == (
        rec.final.acc_node_mean
    )


def _steps(store: str, mid: str) -> dict[str, list[int]]:
    """Each logged key of a run and the steps of its points, in order."""
    c = tracking.open_client(store)
    return {
        k: sorted(m.step for m in c.get_metric_history(mid, k)) for k in c.get_run(mid).data.metrics
    }


def test_metric_keys_and_steps_chart_no_value_twice(store, tmp_path):
    """Issue 53 item 3: the one-value charts are the summaries users sort and filter by, each
    once, at the step after the last epoch; everything else is a series of two points at least
    (step = epoch, a curve of evaluations ending at the final one); one CPU share."""
    end = _evaluated_at_the_end_only(fake_record("r8", 61.0, epochs=5))  # a claim run
    end.write(tmp_path / "end")
    every = write_run(tmp_path / "every", "r9", {}, epochs=3)  # a Figure 1 run
    for d, epochs in ((tmp_path / "end", 5), (every, 3)):
        steps = _steps(store, tracking.log_run(d, store, "lpdt"))
        dots = {k for k, s in steps.items() if len(s) == 1}
        assert dots == set(tracking.SUMMARY_METRICS), sorted(dots ^ set(tracking.SUMMARY_METRICS))
        assert all(steps[k] == [epochs] for k in dots)
        for k, s in steps.items():
            if k in dots:
                continue
            assert k.startswith(("epoch/", "system/")), k
            assert s == sorted(set(s)) and s[0] == 0 and s[-1] <= epochs, (k, s)
            assert len(s) >= tracking.SERIES_POINTS, (k, s)
        assert [k for k in steps if "cpu_share" in k] == ["system/cpu_share"]
        assert "final.train_loss" not in steps  # the last point of epoch/train_loss
    # the claim run: its accuracy is the summary's only (it was evaluated once), and a curve of
    # every epoch's loss; the Figure 1 run: accuracy curves ending at the final evaluation
    assert "epoch/acc_node_mean" not in _steps(store, tracking.find_run(store, "lpdt", "r8"))
    assert _steps(store, tracking.find_run(store, "lpdt", "r9"))["epoch/acc_node_mean"] == [
        0,
        1,
        2,
        3,
    ]


def test_system_metrics_are_logged_per_epoch_under_system(store, tmp_path):
    d = write_run(tmp_path / "run", "r2", {}, epochs=3)
    mid = tracking.log_run(d, store, "lpdt")
    c = tracking.open_client(store)
    rec = record.read(d)
    epochs = [row for row in rec.history if row.epoch != "final"]
    for field in ("cpu_share", "peak_rss_mb", "threads", "images_per_s"):
        hist = sorted(c.get_metric_history(mid, f"system/{field}"), key=lambda m: m.step)
        assert [(m.step, m.value) for m in hist] == [
            (row.epoch, float(getattr(row, field))) for row in epochs
        ], field
    keys = set(c.get_run(mid).data.metrics)
    assert "cpu_share" not in keys and "epoch/cpu_share" not in keys
    assert {k for k in keys if k.startswith("system/")} == {
        "system/cpu_share",
        "system/peak_rss_mb",
        "system/threads",
        "system/images_per_s",
    }
    # the run's own CPU share (over the whole process) stays in metrics.json: one CPU share
    assert "system.cpu_share" not in keys and rec.system.cpu_share is not None


def _evaluated_at_the_end_only(rec: record.RunRecord) -> record.RunRecord:
    """The record of a run with eval_every past its epochs: no epoch row has an accuracy."""
    drop = dict.fromkeys(tracking.FINAL_EVAL_FIELDS)
    rows = [r if r.epoch == "final" else dataclasses.replace(r, **drop) for r in rec.history]
    return dataclasses.replace(rec, history=tuple(rows))


def test_every_run_has_its_final_accuracy_and_its_evaluations_as_a_curve(store, tmp_path):
    c = tracking.open_client(store)
    # a claim run: evaluated after the final gossip rounds only: one value, the summary's
    end = _evaluated_at_the_end_only(fake_record("r3", 61.0, epochs=5))
    end.write(tmp_path / "end")
    mid = tracking.log_run(tmp_path / "end", store, "lpdt")
    assert c.get_metric_history(mid, "epoch/acc_avg_model") == []
    (point,) = c.get_metric_history(mid, "final.acc_avg_model")
    assert (point.step, point.value) == (5, end.final.acc_avg_model)
    # a Figure 1 run: every evaluated epoch, then the final evaluation after the last epoch
    every = write_run(tmp_path / "every", "r4", {}, epochs=3)
    mid = tracking.log_run(every, store, "lpdt")
    rec = record.read(every)
    hist = sorted(c.get_metric_history(mid, "epoch/acc_avg_model"), key=lambda m: m.step)
    expected = [(r.epoch, r.acc_avg_model) for r in rec.history if r.epoch != "final"]
    assert [(m.step, m.value) for m in hist] == [*expected, (3, rec.final.acc_avg_model)]
    # a diverged run has no final evaluation: its curve stops where it does
    div = write_run(tmp_path / "div", "r5", {}, epochs=3, status="diverged")
    mid = tracking.log_run(div, store, "lpdt")
    assert max(m.step for m in c.get_metric_history(mid, "epoch/acc_avg_model")) < 3


TABLE3_CELL = {
    "model": {"name": "resnet54"},
    "topology": {"name": "directed_ring", "nodes": 16},
    "algorithm": {"name": "deepsqueeze", "compression": {"name": "topk", "ratio": 0.99}},
    "partition": {"skew": 0.8},
    "precision": {"mode": "int8"},
    "seed": 1234,
}


def _name(**change) -> str:
    cfg = json.loads(json.dumps(TABLE3_CELL))
    for key, value in change.items():
        section, _, leaf = key.partition("__")
        if leaf:
            cfg.setdefault(section, {})[leaf] = value
        else:
            cfg[section] = value
    if cfg["precision"]["mode"] == "int8":
        cfg["model"]["norm"] = "rangeen"  # the study's precision coordinate sets both
    return tracking.run_name(fake_record(config=cfg))


def test_names_tell_the_runs_of_a_study_apart_where_the_table_cuts_them():
    pairs = {
        "seeds": (_name(seed=1234), _name(seed=1235)),
        "skews": (_name(partition__skew=0.4), _name(partition__skew=0.9)),
        "precisions": (_name(precision__mode="fp32"), _name(precision__mode="int8")),
        "Dirichlet alphas": (
            _name(partition={"kind": "dirichlet", "alpha": 0.1}),
            _name(partition={"kind": "dirichlet", "alpha": 1.0}),
        ),
        "compressions": (
            _name(algorithm={"name": "choco", "compression": {"name": "topk", "ratio": 0.9}}),
            _name(algorithm={"name": "choco", "compression": {"name": "none", "ratio": 0.0}}),
        ),
        "algorithms": (
            _name(algorithm={"name": "choco", "compression": {"name": "topk", "ratio": 0.99}}),
            _name(
                algorithm={"name": "deepsqueeze", "compression": {"name": "topk", "ratio": 0.99}}
            ),
        ),
    }
    for what, (a, b) in pairs.items():
        assert a != b and a[:VISIBLE] != b[:VISIBLE], (what, a, b)


def test_the_quick_scales_names_all_differ_where_the_table_cuts_them():
    """Issue 53 item 4: the 89 runs of the quick scale have 89 different first 22 characters
    (the issue counted 50 with the earlier names)."""
    from lpdt import grid

    spec = grid.load(REPO / "config" / "studies.yaml", REPO / "config" / "scales" / "quick.yaml")
    runs = grid.expand(spec)
    names = []
    for rid, run in runs.items():
        rec = fake_record(rid, config=run.config)
        used = dataclasses.replace(rec.dataset, name=run.config["data"]["dataset"])
        names.append(tracking.run_name(dataclasses.replace(rec, dataset=used)))
    assert len(runs) == 89 and len(set(names)) == 89
    seen: dict[str, str] = {}
    for n in names:
        assert n[:22] not in seen, (n, seen.get(n[:22]))
        seen[n[:22]] = n


def test_names_read_the_paper_words():
    fp = tracking.run_name(fake_record(config={"partition": {"skew": 0.9}, "seed": 1235}))
    assert fp.startswith("fp sk0.9 s1235 ") and " evonorm " in fp
    lp = _name(partition__skew=0.9)
    assert lp.startswith("lp sk0.9 s1234 top99 deepsqueeze rn54 rangeen ring16 ")
    bn = tracking.run_name(fake_record(config={"model": {"norm": "batchnorm"}, "seed": 1}))
    assert bn.startswith("fp-bn ") and " batchnorm " in bn  # not the paper's fp32 norm
    single = tracking.run_name(
        fake_record(config={"topology": {"name": "directed_ring", "nodes": 1}, "seed": 3})
    )
    assert single.startswith("fp s3 ") and single.endswith(" evonorm 1node")


def test_figure1_runs_differ_where_visible_and_the_8bit_one_says_rangeen_and_its_seed():
    base = {"partition": {"skew": 0.8}, "seed": 1234}
    names = [
        tracking.run_name(fake_record(config={**base, "model": {"norm": norm}}))
        for norm in ("batchnorm", "groupnorm", "evonorm", "rangeen")
    ]
    lp = tracking.run_name(
        fake_record(config={**base, "precision": {"mode": "int8"}, "model": {"norm": "rangeen"}})
    )
    assert "rangeen" in lp.split() and "s1234" in lp.split()
    visible = {n[:VISIBLE] for n in [*names, lp]}
    assert len(visible) == 5, [*names, lp]


def test_tags_say_what_does_not_apply_in_words():
    """Issue 53 item 4: no tag value reads like missing data where nothing is missing."""
    fp = tracking.run_tags(fake_record(config={"seed": 1}))
    assert fp["recipe_version"] == "none for fp32"
    assert tracking.NO_CLAIM == "no claim reads it"


def test_the_report_run_stays_out_of_the_training_runs(store, tmp_path):
    from mlflow.tracking import MlflowClient

    mid = tracking.log_run(write_run(tmp_path / "run", "r6", {}), store, "lpdt")
    c = MlflowClient(store)
    train = c.get_experiment_by_name("lpdt")
    # a report run as an earlier lpdt logged it: among the training runs
    old = c.create_run(
        train.experiment_id, run_name="report quick", tags={"lpdt_report_scale": "quick"}
    )
    pdf = tmp_path / "report.pdf"
    pdf.write_bytes(b"%PDF")
    rid = tracking.log_report(pdf, [], "quick", store, "lpdt")
    training_view = c.search_runs([train.experiment_id])  # active runs, as the table lists them
    assert [r.info.run_id for r in training_view] == [mid]
    assert c.get_run(old.info.run_id).info.lifecycle_stage == "deleted"
    reports = c.get_experiment_by_name(tracking.report_experiment("lpdt"))
    assert reports.tags["mlflow.experimentKind"] == "custom_model_development"
    assert [r.info.run_id for r in c.search_runs([reports.experiment_id])] == [rid]
    assert tracking.log_report(pdf, [], "quick", store, "lpdt") == rid  # one per scale


def test_a_run_logged_by_an_earlier_layout_keeps_its_id_and_gets_the_curves(store, tmp_path):
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    d = write_run(tmp_path / "run", "r7", {}, epochs=3)
    c = MlflowClient(store)
    exp = c.get_experiment_by_name("lpdt")
    old = c.create_run(
        exp.experiment_id,
        run_name="resnet20 ring8 choco dense skew0 fp32 fashion_mnist",
        tags={"lpdt_run_id": "r7", "lpdt_logged": "true"},
    )
    c.log_batch(old.info.run_id, metrics=[Metric("train_loss", 2.0, 0, 0)])
    assert tracking.log_run(d, store, "lpdt") == old.info.run_id
    run = c.get_run(old.info.run_id)
    rec = record.read(d)
    assert run.info.run_name == tracking.run_name(rec)
    assert run.data.tags[tracking.METRICS_LAYOUT_TAG] == tracking.METRICS_LAYOUT
    assert len(c.get_metric_history(old.info.run_id, "epoch/train_loss")) == 3
    assert len(c.get_metric_history(old.info.run_id, "system/cpu_share")) == 3
    # logged again: nothing added twice
    tracking.log_run(d, store, "lpdt")
    assert len(c.get_metric_history(old.info.run_id, "epoch/train_loss")) == 3


def test_the_description_says_why_fewer_samples_than_the_subset():
    # fake records hold 1,000 training samples on 8 nodes
    rec = fake_record(config={"data": {"train_subset": 1004}})
    assert "of the 1,004 that data.train_subset keeps, 4 unused" in tracking.run_note(rec)
    for subset in (None, 1000, 5000):  # no subset, all kept, a dataset smaller than the subset
        note = tracking.run_note(fake_record(config={"data": {"train_subset": subset}}))
        assert "data.train_subset" not in note, subset


def test_the_curve_is_an_mlflow_series_per_epoch(store, tmp_path):
    """The evaluation's accuracy curve (``lpdt.engine.evaluation``): MLflow key
    ``epoch/acc_subset_node_mean`` at step = epoch (docs/mlflow.md)."""
    from lpdt.tracking.runs import series_key

    assert series_key("acc_subset_node_mean") == "epoch/acc_subset_node_mean"
    rec = fake_record("curve")
    rows = tuple(
        dataclasses.replace(r, acc_subset_node_mean=30.0 + 10 * r.epoch)
        if isinstance(r.epoch, int)
        else r
        for r in rec.history
    )
    dataclasses.replace(rec, history=rows).write(tmp_path / "curve")
    mid = tracking.log_run(tmp_path / "curve", store, "lpdt")
    points = tracking.open_client(store).get_metric_history(mid, "epoch/acc_subset_node_mean")
    assert sorted((m.step, m.value) for m in points) == [(0, 30.0), (1, 40.0), (2, 50.0)]


def test_a_run_trained_again_is_logged_anew_not_kept_with_the_first_numbers(store, tmp_path):
    """The same run id trained again (``--force``, or an execution key such as
    ``train.curve_images`` changed) kept the first training's numbers and files in MLflow, under
    a description naming the new folder; logging the same record again changes nothing."""
    from mlflow.tracking import MlflowClient

    c = MlflowClient(store)
    first = tracking.log_run(write_run(tmp_path / "a", "r9", {}, acc=60.0), store, "lpdt")
    assert tracking.log_run(tmp_path / "a", store, "lpdt") == first  # the same record: kept
    later = {"started": "2026-12-02T01:00:00+00:00"}
    d = write_run(tmp_path / "b", "r9", {}, acc=70.0, provenance=later)
    second = tracking.log_run(d, store, "lpdt")
    assert second != first and c.get_run(first).info.lifecycle_stage == "deleted"
    run = c.get_run(second)
    assert run.data.metrics["final.acc_node_mean"] == record.read(d).final.acc_node_mean
    assert run.data.tags[tracking.TRAINED_TAG] == later["started"]
    exp = c.get_experiment_by_name("lpdt").experiment_id
    live = c.search_runs([exp], "tags.lpdt_run_id = 'r9'")
    assert [r.info.run_id for r in live] == [second]
