"""What a finished workflow reruns when something that decides a derived output changes, and
what it leaves alone (dry runs only: nothing trains). The profiles' rerun triggers are mtimes
only, so each such thing must be an input file: a settings file (common.smk, rule settings) or
the code that makes the output."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.workflow.test_snakemake import job_counts, snakemake, with_user_study, workdir

SMOKE = ("scale=smoke", "batch_runs=False")


def finished(wd: Path, *config: str) -> None:
    """``wd`` as after a complete run with ``config``: the settings files written by their rule,
    every other output of the DAG an empty file, their mtimes in build order (`snakemake
    --touch`, which touches only files that exist)."""
    dry = snakemake(wd, "-n", "--config", *config)
    assert dry.returncode == 0, dry.stderr[-2000:]
    rule, settings = "", []
    for line in dry.stdout.splitlines():
        if m := re.match(r"(?:local)?rule (\w+):", line):
            rule = m[1]
        elif m := re.match(r"\s+output: (.*)", line):
            for name in m[1].split(", "):
                path = wd / name
                if rule == "settings":
                    settings.append(name)
                elif rule == "cost":  # a directory() output
                    path.mkdir(parents=True, exist_ok=True)
                else:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.touch()
    (wd / "results/mlflow.db").touch()  # the store (not a declared output: rule mlflow_init's)
    if settings:
        made = snakemake(wd, "--cores", "1", *settings, "--config", *config)
        assert made.returncode == 0, made.stderr[-2000:]
    touched = snakemake(wd, "--cores", "1", "--touch", "--config", *config)
    assert touched.returncode == 0, touched.stderr[-2000:]
    done = planned(wd, *config)
    assert "Nothing to be done" in done.stdout + done.stderr, done.stdout[-3000:]


def planned(wd: Path, *config: str):
    r = snakemake(wd, "-n", "--config", *config)
    assert r.returncode == 0, r.stderr[-2000:]
    return r


def job_inputs(out: str) -> dict[str, list[str]]:
    """The inputs of each job of a dry run, by rule (the last job of a rule wins)."""
    inputs: dict[str, list[str]] = {}
    for rule, text in re.findall(r"(?:local)?rule (\w+):\n((?:    .*\n)+)", out):
        listed = re.search(r"^    input: (.*)$", text, re.M)
        inputs[rule] = listed[1].split(", ") if listed else []
    return inputs


def test_derived_outputs_take_what_decides_them_as_inputs(tmp_path):
    """The cheap rules' inputs (one dry run; the slow tests below check the reruns they give):
    each analysis and the MLflow init take a settings file; the report its plateau choice's
    settings; every cheap rule that runs lpdt its code's (the paper's claims among it:
    claims.yaml, where docs/extending.md has users add theirs); training does not wait for the
    MLflow init, and takes no code; the run configs take their texts'."""
    inputs = job_inputs(planned(workdir(tmp_path), *SMOKE).stdout)

    def has(rule: str, *wanted: str) -> bool:
        return all(any(w in f for f in inputs[rule]) for w in wanted)

    assert has("report", "/.settings/report-"), inputs
    cheap = ("report", "cost", "partition", "topology", "mlflow_init", "mlflow_sync")
    assert all(has(rule, "/.settings/code-") for rule in (*cheap, "mlflow_report")), inputs
    assert has("mlflow_init", "/.settings/mlflow-") and has("partition", "/.settings/analysis_")
    assert not any("mlflow" in f or "code-" in f for f in inputs["train"]), inputs["train"]
    assert has("train", "/.data/ready-")  # rule data_check: every dataset read once, first
    assert has("run_configs", "/.settings/configs-"), inputs["run_configs"]


@pytest.mark.slow  # each of these: 10-11 Snakemake invocations, about a minute
def test_mlflow_turned_on_or_moved_after_training_retrains_nothing(tmp_path):
    """MLflow turned on after training made every training job wait for the store's init and
    rerun after it (with a job per run, as on GPUs and SLURM: the whole grid retrained). Now it
    makes the store and logs the runs, and another store or experiment (the documented switch
    to a tracking server) does that again, into the new store."""
    wd = workdir(tmp_path)
    finished(wd, *SMOKE, "mlflow=False")
    jobs = job_counts(planned(wd, *SMOKE).stdout)  # mlflow: true, the default
    assert "train" not in jobs and jobs["mlflow_init"] == 1 and jobs["mlflow_sync"] == 1, jobs
    finished(wd, *SMOKE)
    for change in ("tracking_uri=http://127.0.0.1:1", "experiment=other"):
        jobs = job_counts(planned(wd, *SMOKE, change).stdout)
        assert "train" not in jobs, (change, jobs)
        assert {"mlflow_init", "mlflow_sync", "mlflow_report"} <= set(jobs), (change, jobs)
    (wd / "results/mlflow.db").unlink()  # deleted, to start the store afresh
    r = snakemake(wd, "--cores", "1", "manifest", "--config", *SMOKE)  # a real run (not -n)
    assert r.returncode == 0 and "results/mlflow.db is gone" in r.stderr, r.stderr[-2000:]
    jobs = job_counts(planned(wd, *SMOKE).stdout)
    assert "train" not in jobs, jobs
    assert {"mlflow_init", "mlflow_sync", "mlflow_report"} <= set(jobs), jobs


@pytest.mark.slow
def test_an_analysis_reruns_when_its_parameters_change_and_only_then(tmp_path):
    """Figure 2's partition with another node count in the scale (an override the studies file
    does not show) reruns it and the report; going back to the first parameters reruns it again
    (their settings file is written anew); the graphs, the cost model and training stay."""
    wd = workdir(tmp_path)
    finished(wd, *SMOKE)
    scale = wd / "config/scales/smoke.yaml"
    original = scale.read_text()
    scale.write_text(original.replace("studies:", "studies:\n  fig2: {nodes: 4}", 1))
    jobs = job_counts(planned(wd, *SMOKE).stdout)
    assert jobs.get("partition") == 1 and jobs.get("report") == 1, jobs
    assert not {"topology", "cost", "train"} & set(jobs), jobs
    finished(wd, *SMOKE)
    scale.write_text(original)
    assert job_counts(planned(wd, *SMOKE).stdout).get("partition") == 1


@pytest.mark.slow
def test_another_plateau_choice_redraws_the_report(tmp_path):
    """config plateau_check=none after a report with the shipped check redraws the report (it
    said "Nothing to be done") and trains nothing."""
    wd = workdir(tmp_path)
    finished(wd, *SMOKE)
    jobs = job_counts(planned(wd, *SMOKE, "plateau_check=none").stdout)
    assert jobs.get("report") == 1 and "train" not in jobs, jobs


@pytest.mark.slow
def test_a_data_check_that_runs_again_retrains_only_what_is_left(tmp_path):
    """data.download turned on (docs/data.md's way to fetch the paper's data), or a dataset
    added, gives the grid's data check a new name, and it runs again for the runs still to
    train. As an input of every training job it made Snakemake rerun the finished ones after it
    too: with a job per run, as on GPUs and SLURM, the whole grid retrained. A finished job
    takes no data check."""
    wd = workdir(tmp_path)
    finished(wd, *SMOKE)
    with_user_study(wd)  # 4 runs more: 2 precisions x 2 seeds
    scale = wd / "config/scales/smoke.yaml"
    scale.write_text(scale.read_text().replace("  data: {", "  data: {download: true, ", 1))
    jobs = job_counts(planned(wd, *SMOKE).stdout)
    assert jobs.get("data_check") == 1 and jobs.get("train") == 4, jobs


@pytest.mark.slow
def test_an_execution_key_reaches_the_run_configs_and_retrains_nothing(tmp_path):
    """data.root set in the scale (as data_check's error suggests) keeps every run id, so every
    config file existed and the rule that writes them did not run: the jobs still to train read
    the old root. Now the configs are written again, and no finished run trains."""
    wd = workdir(tmp_path)
    finished(wd, *SMOKE)
    scale = wd / "config/scales/smoke.yaml"
    scale.write_text(scale.read_text().replace("  data: {", "  data: {root: elsewhere, ", 1))
    plan = planned(wd, *SMOKE).stdout
    jobs = job_counts(plan)
    assert jobs.get("run_configs") == 1 and "train" not in jobs, jobs
    settings = re.search(r"results/\.settings/configs-[0-9a-f]{12}\.json", plan)
    assert settings, plan[-2000:]  # rule all asks for it; here, only it and the configs
    made = snakemake(wd, "--cores", "1", settings[0], "run_configs", "--config", *SMOKE)
    assert made.returncode == 0, made.stderr[-2000:]
    configs = list((wd / "results/configs").glob("*.yaml"))
    assert configs and all("root: elsewhere" in c.read_text() for c in configs)
