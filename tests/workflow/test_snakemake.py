"""The Snakemake workflow end to end, run in a temporary directory (`--directory`), never in
the repository: config validation, the paper grid's dry run, and the smoke pipeline."""

import csv
import hashlib
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from lpdt import grid
from lpdt.plan import probe
from lpdt.report import artifacts

REPO = Path(__file__).resolve().parents[2]
SNAKEMAKE = Path(sys.executable).parent / "snakemake"


def workdir(tmp_path: Path) -> Path:
    """A working directory with a copy of config/ (results go there, not into the repo)."""
    wd = tmp_path / "wf"
    shutil.copytree(REPO / "config", wd / "config")
    paper = wd / "config" / "paper_results.csv"
    if not paper.exists():  # until the report package provides it
        paper.write_text("table,row,column,value\n")
    return wd


def snakemake(wd: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "PATH": f"{SNAKEMAKE.parent}:{os.environ['PATH']}",
    }
    cmd = [str(SNAKEMAKE), "-s", str(REPO / "Snakefile"), "--directory", str(wd), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def job_counts(out: str) -> dict[str, int]:
    """The 'Job stats' table of a (dry) run."""
    table = out.split("Job stats:", 1)[1]
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M)}


# -- validation: a typo stops snakemake at once, naming the key ---------------------------------


def test_a_missing_dataset_stops_the_workflow_before_any_training_job(tmp_path, monkeypatch):
    """Rule data_check reads each dataset of the grid once, before any training job (every one
    takes its output as an input): with no data, the paper grid stops there, naming each of its
    four datasets in one line (on SLURM each of 289 jobs failed only once it had a GPU)."""
    monkeypatch.setenv("LPDT_DATA_ROOT", str(tmp_path / "empty"))
    wd = workdir(tmp_path)
    r = snakemake(wd, "--cores", "1", "data_check", "--config", "scale=paper", "plan_probe=False")
    out = r.stdout + r.stderr
    assert r.returncode != 0, out[-3000:]
    assert re.search(
        r"4 of the grid's 4 datasets and the files of 0 of its \d+ pretrained models cannot be read",
        out,
    )
    for name in ("cifar10: cifar10 not found", "imagenette: ", "agnews: ", "sentlen: "):
        assert f"\n  {name}" in out, name
    assert not (wd / "results/.data").exists()


def test_missing_pretrained_weights_stop_the_workflow_before_any_training_job(
    tmp_path, monkeypatch
):
    """Rule data_check also builds each model of the grid once: DistilBERT without its weights
    under the data root (the smoke scale's data is generated, and its tokenizer the installed
    MiniLM's) stopped only its own training jobs, each as it started."""
    monkeypatch.setenv("LPDT_DATA_ROOT", str(tmp_path / "empty"))
    wd = workdir(tmp_path)
    (wd / "config/scales/bert.yaml").write_text(
        "base: smoke\ncoordinates:\n"
        "  model: {distilbert: {model: {name: distilbert, pretrained: true}}}\n"
    )
    r = snakemake(wd, "--cores", "1", "data_check", "--config", "scale=bert", "plan_probe=False")
    out = r.stdout + r.stderr
    line = next((x for x in out.splitlines() if "cannot be read" in x), out[-3000:])
    # every config of DistilBERT (fp32, 8-bit, ...), in one line; no other model
    pattern = r"0 of the grid's \d+ datasets and the files of [1-9] of its \d+ pretrained models"
    assert re.search(pattern, line), line
    assert out.count("\n  distilbert: DistilBERT not found: ") == 1 and r.returncode != 0, out
    assert "\n  tiny_cnn" not in out and "\n  distilbert_tiny" not in out
    assert not (wd / "results/.data").exists()
    # (the check passing, stamp written: the smoke pipeline test, slow, and `make report`)


def test_the_default_mlflow_store_and_report_follow_the_results_folder(tmp_path):
    """tracking_uri: auto, report: auto. It was sqlite:///results/mlflow.db whatever `results` said, so the runs
    of results=elsewhere went into the default folder's store."""
    wd = workdir(tmp_path)
    r = snakemake(wd, "-n", "-p", "mlflow_init", "--config", "scale=smoke", "results=out/two")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "--uri sqlite:///out/two/mlflow.db " in r.stdout, r.stdout[-2000:]
    # and the report: one reports/report.pdf was every folder's, and another folder's was
    # attached to this folder's store
    r = snakemake(wd, "-n", "mlflow_report", "--config", "scale=smoke", "results=out/two")
    assert re.search(r"output: .*out/two/report\.pdf", r.stdout), r.stdout[-2000:]
    assert "reports/report.pdf" not in r.stdout
    r = snakemake(wd, "-n", "mlflow_report", "--config", "scale=smoke")
    assert re.search(r"output: .*reports/report\.pdf", r.stdout), r.stdout[-2000:]


@pytest.mark.slow  # three Snakemake runs, 12 s of the default suite (2026-12-01)
def test_a_deleted_store_is_made_again(tmp_path):
    """Deleting results/mlflow.db (to start it afresh) left its receipts, which said it held the
    runs: Snakemake made nothing, and the store stayed empty. Now they go, with a line saying
    so; while the store is there they stay."""
    wd = workdir(tmp_path)
    receipts = [wd / "results/mlflow" / f for f in ("experiment.json", "synced.json")]
    for f in receipts:
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("{}")
    (wd / "results/mlflow.db").touch()
    r = snakemake(wd, "-n", "--config", "scale=smoke")
    assert r.returncode == 0 and "is gone" not in r.stderr and all(f.exists() for f in receipts)
    (wd / "results/mlflow.db").unlink()
    r = snakemake(wd, "-np", "--config", "scale=smoke")  # a dry run writes nothing
    assert r.returncode == 0 and "a run (not a dry run) removes" in r.stderr, r.stderr[-2000:]
    assert all(f.exists() for f in receipts)
    r = snakemake(wd, "--cores", "1", "manifest", "--config", "scale=smoke")  # any real run
    assert r.returncode == 0, r.stderr[-2000:]
    assert "MLflow: results/mlflow.db is gone; its receipts" in r.stderr, r.stderr[-2000:]
    assert not any(f.exists() for f in receipts)


def test_make_report_prints_the_plan_first(tmp_path):
    """`make report`'s first lines, run as make would run them (``make -n``), in a working
    directory of their own: they print the plan. `--quiet all plan` had `--quiet` take `plan`
    for one of its values ("invalid choice"), and the pipe into `sed` hid the error: no plan
    was printed or written (2026-11-30)."""
    wd = workdir(tmp_path)
    make = subprocess.run(
        ["make", "-n", "--no-print-directory", "report", "SCALE=smoke"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = make.stdout.replace("\\\n", "").splitlines()
    first = next(i for i, x in enumerate(lines) if x.startswith("mkdir -p results"))
    last = next(i for i, x in enumerate(lines) if "snakemake --cores all" in x)  # the pipeline
    script = "\n".join(lines[first:last])
    assert "snakemake plan" in script and "plan.log" in script, make.stdout
    script = script.replace(".venv/bin/snakemake ", f"{SNAKEMAKE} -s {REPO / 'Snakefile'} ")
    script = script.replace("scale=smoke", "scale=smoke plan_probe=False")
    r = subprocess.run(["bash", "-ec", script], cwd=wd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("scale smoke") and "per-run" in r.stdout, r.stdout + r.stderr


def test_config_typo_names_the_key(tmp_path):
    """In a few lines: Snakemake's own error printed the whole schema after it (about 190 lines
    for a misspelt key); a value out of range said only "not valid under any of the given
    schemas"."""
    wd = workdir(tmp_path)
    r = snakemake(wd, "-n", "--config", "sclae=paper")
    assert r.returncode != 0
    assert "'sclae' was unexpected" in r.stdout + r.stderr
    assert len((r.stdout + r.stderr).strip().splitlines()) < 10
    r = snakemake(wd, "-n", "--config", "gpu_jobs_per_gpu=0")
    assert r.returncode != 0 and "config gpu_jobs_per_gpu: 0 is less than the minimum of 1" in (
        r.stdout + r.stderr
    )
    # one branch of a choice was named: "'maybe' is not one of ['auto']" (true passes too)
    r = snakemake(wd, "-n", "--config", "batch_runs=maybe")
    assert r.returncode != 0 and (
        "config batch_runs: 'maybe' is not one of ['auto']; expected true or false, or 'auto'"
    ) in (r.stdout + r.stderr)


def test_scale_file_typo_names_the_key(tmp_path):
    wd = workdir(tmp_path)
    overlay = {"studies": {"table3": {"blocks": {"resnet": {"gird": {"skew": [0.0]}}}}}}
    (wd / "config/scales/typo.yaml").write_text(yaml.safe_dump(overlay))
    r = snakemake(wd, "-n", "--config", "scale=typo")
    assert r.returncode != 0
    assert "'gird' was unexpected" in r.stdout + r.stderr


def test_bad_seeds_name_the_key(tmp_path):
    wd = workdir(tmp_path)
    (wd / "config/scales/typo.yaml").write_text(
        yaml.safe_dump({"studies": {"table4": {"seeds": 0}}})
    )
    r = snakemake(wd, "-n", "--config", "scale=typo")
    assert r.returncode != 0
    out = r.stdout + r.stderr
    assert "with scale 'typo' at studies.table4.seeds: 0 is less than the minimum of 1" in out


# A user's small study with a claim of its own (docs/claims.md, Claims declared in a study).
USER_STUDY = {
    "kind": "grid",
    "title": "a user's study: 8-bit vs FP at skew 0.8, two seeds",
    "seeds": 2,
    "fixed": {
        "dataset": "cifar10",
        "model": "resnet20",
        "recipe": "cifar_resnet",
        "topology": "directed_ring",
        "nodes": 4,
        "algorithm": "choco",
        "compression": 0,
        "skew": 0.8,
    },
    "grid": {"precision": ["fp32", "int8"]},
    "claims": [
        {
            "id": "mine_lp_within_50",
            "statement": "8-bit is within 50 points of FP here",
            "vary": "precision",
            "a": "fp32",
            "b": "int8",
            "direction": "within",
            "threshold": [-50, 50],
        }
    ],
}


def with_user_study(wd: Path, **claim_change) -> None:
    studies = yaml.safe_load((wd / "config/studies.yaml").read_text())
    study = json.loads(json.dumps(USER_STUDY))
    study["claims"][0].update(claim_change)
    studies["studies"]["mine"] = study
    (wd / "config/studies.yaml").write_text(yaml.safe_dump(studies, sort_keys=False))


def test_claim_typo_names_the_key(tmp_path):
    wd = workdir(tmp_path)
    with_user_study(wd, thresold=1)
    r = snakemake(wd, "-n", "--config", "scale=smoke")
    assert r.returncode != 0
    assert "'thresold' was unexpected" in r.stdout + r.stderr


def test_claim_bad_condition_is_one_line(tmp_path):
    wd = workdir(tmp_path)
    with_user_study(wd, where={"skew": ">=high"})
    r = snakemake(wd, "-n", "--config", "scale=smoke")
    assert r.returncode != 0
    line = next(x for x in (r.stdout + r.stderr).splitlines() if "'high'" in x)
    assert "study 'mine', claim 1 (mine_lp_within_50): skew: 'high' is not a value of skew" in line


def test_unknown_scale_lists_the_scales(tmp_path):
    r = snakemake(workdir(tmp_path), "-n", "--config", "scale=huge")
    assert r.returncode != 0
    out = r.stdout + r.stderr
    assert "unknown scale 'huge'" in out and "paper, quick, quick-claims, smoke" in out


# (setting, what the one line says): results with a space (the rules' shell commands take paths
# unquoted: `results=my results` would have written to a file named `my`) or a ~ (the shell
# expands it, Snakemake does not), results that is a file (a 66-line traceback), a report path
# that is a folder (Snakemake's ChildIOException), a paper_results file that does not exist (a
# MissingInputException listing ~40 files), a tracking URI of no MLflow store (it stopped the
# first MLflow job). The first two run in the default suite, the rest (a Snakemake process each,
# 2.4 s) with the slow tests (2026-12-01).
UNTAKEN_PATHS = [
    ("results=my results", "results='my results': a space in a path breaks"),
    ("tracking_uri=htp://x", "MLflow has no store for the scheme 'htp'"),
    ("results=~/lpdt", "results='~/lpdt': the character '~' in a path breaks"),
    ("results=afile", "results=afile is a file, not a folder"),
    ("report=config", "report=config is a folder; give the path of a file"),
    ("paper_results=nope.csv", "paper_results=nope.csv: no such file"),
]


@pytest.mark.parametrize(
    "cases", [UNTAKEN_PATHS[:2], pytest.param(UNTAKEN_PATHS[2:], marks=pytest.mark.slow)]
)
def test_a_path_the_rules_cannot_take_is_one_line(tmp_path, cases):
    """Each setting of ``UNTAKEN_PATHS``: one line saying why, before any job."""
    wd = workdir(tmp_path)
    (wd / "afile").write_text("")
    for setting, says in cases:
        r = snakemake(wd, "-n", "--config", "scale=smoke", setting)
        out = r.stdout + r.stderr
        assert r.returncode != 0 and says in out and "Traceback" not in out, out[-2000:]
    assert not (wd / "my").exists()


def test_a_studies_file_cut_short_is_one_line_naming_it_and_the_key(tmp_path):
    """A studies file cut short mid-file (it still parses) breaks the schema: one line naming
    the file and the key, not Snakemake's "Failed validating ... in schema" and the schema
    (14 lines for this cut, 108 for an empty file)."""
    wd = workdir(tmp_path)
    cut = wd / "config" / "cut.yaml"
    text = (wd / "config" / "studies.yaml").read_text()
    cut.write_text(text[: text.index("compression:")] + "compression:\n")
    r = snakemake(wd, "-n", "--config", "scale=smoke", "studies=config/cut.yaml")
    out = r.stdout + r.stderr
    assert r.returncode != 0 and "Failed validating" not in out, out[-3000:]
    line = next(x for x in out.splitlines() if "config/cut.yaml with scale 'smoke' at " in x)
    assert "coordinates.compression" in line, line


# Slow since 2026-12-02 (two Snakemake invocations, 8.7 s of the default suite, whose CI took
# 654 s with setup), as the edge paths below are.
@pytest.mark.slow
def test_scales_that_drop_studies(tmp_path):
    """Each of these stopped the DAG with an IndexError (2026-11-30): a scale without Figures 2
    and 3 (nothing to analyse), one with no training run (its plan: "no training runs")."""
    wd = workdir(tmp_path)
    scales = wd / "config/scales"
    (scales / "nofig23.yaml").write_text("base: smoke\nstudies: {fig2: null, fig3: null}\n")
    trained = [s for s in yaml.safe_load((wd / "config/studies.yaml").read_text())["studies"]]
    dropped = {s: None for s in trained if s not in ("fig2", "fig3", "cost")}
    (scales / "notrain.yaml").write_text(yaml.safe_dump({"base": "smoke", "studies": dropped}))
    r = snakemake(wd, "-n", "--config", "scale=nofig23")
    assert r.returncode == 0 and "rule report:" in r.stdout, r.stderr[-1500:]
    r = snakemake(wd, "--cores", "1", "plan", "--config", "scale=notrain")
    assert r.returncode == 0 and "scale notrain: no training runs" in r.stdout, r.stderr[-1500:]


@pytest.mark.slow
def test_a_results_path_with_a_slash_a_missing_scales_folder_and_a_broken_studies_file(tmp_path):
    """The rest of the workflow's edge paths of 2026-11-30 (slow since 2026-11-30: three
    Snakemake invocations, about 10 s of the default suite): ``results=out/`` printed hundreds
    of warnings, a studies file that is not YAML a traceback; and those of 2026-12-02."""
    wd = workdir(tmp_path)
    r = snakemake(wd, "-n", "--config", "scale=smoke", "results=out/")
    assert r.returncode == 0 and "double '/'" not in r.stdout + r.stderr, r.stderr[-1500:]
    r = snakemake(wd, "-n", "--config", "scales_dir=nope")
    assert r.returncode != 0 and "nope holds no scale" in r.stdout + r.stderr
    (wd / "bad.yaml").write_text("a: [1,\n")
    r = snakemake(wd, "-n", "--config", "scale=smoke", "studies=bad.yaml")
    assert r.returncode != 0 and "bad.yaml is not valid YAML" in r.stdout + r.stderr
    # the workflow's own folder: results/plateau_check.csv was config/plateau_check.csv
    r = snakemake(wd, "-n", "--config", "scale=smoke", "results=config")
    assert (
        r.returncode != 0 and "results=config is the workflow's own folder" in r.stdout + r.stderr
    )
    # an empty value ("None is not of type 'string'"), a report that is no PDF (accepted)
    r = snakemake(wd, "-n", "--config", "scale=")
    assert "config scale: empty; give it a value" in r.stdout + r.stderr and r.returncode != 0
    r = snakemake(wd, "-n", "--config", "scale=smoke", "report=x.txt")
    assert "report=x.txt: the report is a PDF" in r.stdout + r.stderr and r.returncode != 0
    # a scale is a name: a path was read (and named results/plan-../scales/smoke.tsv)
    r = snakemake(wd, "-n", "--config", "scale=../scales/smoke")
    assert r.returncode != 0, r.stdout[-1500:]
    assert "a scale is a name in scales_dir, not a path; choose one of: " in r.stdout + r.stderr


def test_run_config_typo_names_study_and_key(tmp_path):
    wd = workdir(tmp_path)
    smoke = yaml.safe_load((wd / "config/scales/smoke.yaml").read_text())
    smoke["defaults"]["train"]["epoch"] = 1
    (wd / "config/scales/typo.yaml").write_text(yaml.safe_dump(smoke))
    r = snakemake(wd, "-n", "--config", "scale=typo")
    assert r.returncode != 0
    assert re.search(r"study 'table2', block '\w+'.*unknown config key 'train.epoch'", r.stdout)


# -- the paper grid ---------------------------------------------------------------------------------

PAPER_RUNS = 14 + 192 + 16 + 16 + 48 + 5 - 2  # Figure 1's EvoNorm and LP cells are Table 3 cells


def test_paper_dry_run_lists_the_full_grid_quickly(tmp_path):
    wd = workdir(tmp_path)
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = snakemake(wd, "-n", "--config", "scale=paper")
    elapsed = time.perf_counter() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime
    assert r.returncode == 0, r.stderr[-2000:]
    counts = job_counts(r.stdout)
    assert counts["train"] == PAPER_RUNS
    assert counts["report"] == 1 and counts["mlflow_init"] == 1 and counts["cost"] == 1
    assert counts["run_configs"] == 1 and counts["manifest"] == 1
    # CPU time, not wall time: the test machine may be busy (about 5-8 s CPU here)
    assert cpu < 30, f"dry run took {cpu:.1f} s CPU ({elapsed:.1f} s wall)"
    assert not (wd / "results").exists()  # a dry run writes nothing
    spec = grid.load(REPO / "config/studies.yaml", REPO / "config/scales/paper.yaml")
    m = grid.manifest(grid.expand(spec), spec, "paper", "results/runs")
    sizes = {s: len(e.runs) for s, e in m.studies.items()}
    assert sizes == {
        "table2": 14,
        "table3": 192,
        "fig4": 192,
        "table4": 16,
        "fig5": 16,
        "table5": 16,
        "fig6": 16,
        "table6": 48,
        "fig1": 5,
    }


# slow: 40 s (the speed probe itself); the default suite keeps the plan without it
@pytest.mark.slow
def test_plan_probes_this_machine_only_when_printed_and_not_when_turned_off(tmp_path):
    """The plan's speed probe runs in the `plan` rule (not while the workflow is parsed: a dry
    run prints no probe line), by default; `plan_probe=False` turns it off."""
    wd = workdir(tmp_path)
    dry = snakemake(wd, "-n", "--cores", "1", "--forceall", "plan", "--config", "scale=smoke")
    assert dry.returncode == 0, dry.stderr[-2000:]
    assert "speed probe" not in dry.stdout + dry.stderr
    on = snakemake(wd, "--cores", "2", "--forceall", "plan", "--config", "scale=smoke")
    assert on.returncode == 0, on.stderr[-2000:]
    pattern = r"^speed probe \(\d+ at once\): fp32 [\d.]+ ms/step .*: estimates scaled$"
    assert re.search(pattern, on.stdout, re.M), on.stdout
    assert "speed probe: timing this machine's training steps, 2 at once" in on.stdout
    assert "scaled to this machine" in on.stdout
    # the factors beside the table, for a refit of this invocation's jobs (fit_runtime.py)
    recorded = probe.read_factors(wd / "results/plan-smoke.probe.json")
    assert recorded is not None and set(recorded) == set(probe.KINDS)
    off = snakemake(
        wd, "--cores", "1", "--forceall", "plan", "--config", "scale=smoke", "plan_probe=False"
    )
    assert off.returncode == 0, off.stderr[-2000:]
    assert "speed probe: off (config plan_probe)" in off.stdout
    assert "scaled to this machine" not in off.stdout
    assert probe.read_factors(wd / "results/plan-smoke.probe.json") is None


# slow (23 s; plan_check's comparison is tested in tests/plan/test_runtime.py): make test-slow runs it
@pytest.mark.slow
def test_a_successful_invocation_compares_finished_jobs_with_the_plan(tmp_path):
    """Snakemake's onsuccess reads the plan's table and the train rule's benchmark files: none
    before any job has run; none for a benchmark file of an earlier invocation (a no-op rerun);
    one line once a job of this invocation has (here a constructed benchmark file for the quick
    scale's first run's job, which has a measured cost, dated after the invocation started)."""
    wd = workdir(tmp_path)
    args = ("--cores", "1", "--forceall", "plan", "--config", "scale=quick", "plan_probe=False")
    before = snakemake(wd, *args)
    assert before.returncode == 0, before.stderr[-2000:]
    assert "training jobs:" not in before.stdout + before.stderr
    # the job that trains the quick scale's first run (a batch: config batch_runs) and its runs
    with (wd / "results/plan-quick.tsv").open() as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    job = rows[0]["job"]
    n_runs = sum(r["job"] == job for r in rows)
    bench = wd / "results/benchmarks/train" / f"{job}.tsv"
    bench.parent.mkdir(parents=True)
    bench.write_text("s\th:m:s\n12.5\t0:00:12\n")
    old = snakemake(wd, *args)  # the job ran in an earlier invocation
    assert old.returncode == 0, old.stderr[-2000:]
    assert "training jobs:" not in old.stdout + old.stderr
    later = time.time() + 3600  # as if written by a job of the next invocation
    os.utime(bench, (later, later))
    after = snakemake(wd, *args)
    assert after.returncode == 0, after.stderr[-2000:]
    pattern = (
        rf"training jobs: {n_runs} of the plan's \d+ runs ran in this invocation; their own times sum "
        r"to 12 s against [\d,]+ s planned"
    )
    assert re.search(pattern, after.stdout + after.stderr), after.stdout + after.stderr


def tree_digest(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root``, by relative path."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_dry_run_leaves_results_byte_identical(tmp_path):
    """`snakemake -n` is read-only: a results directory from another scale (its manifest, a
    config, a run) is left exactly as it was, and no file is added."""
    wd = workdir(tmp_path)
    res = wd / "results"
    (res / "configs").mkdir(parents=True)
    (res / "manifest.json").write_text('{"scale": "quick", "studies": {}}\n')
    (res / "configs" / "0123456789ab.yaml").write_text("seed: 1\n")
    (res / "runs" / "0123456789ab").mkdir(parents=True)
    (res / "runs" / "0123456789ab" / "history.csv").write_text("epoch\n0\n")
    before = tree_digest(res)
    r = snakemake(wd, "-n", "--cores", "1", "--config", "scale=smoke")
    assert r.returncode == 0, r.stderr[-2000:]
    assert job_counts(r.stdout)["manifest"] == 1  # the manifest is stale: it would be rewritten
    assert tree_digest(res) == before


# -- the smoke pipeline: the whole DAG ------------------------------------------------------------


@pytest.mark.slow
def test_smoke_pipeline_runs_the_whole_dag_and_is_idempotent(tmp_path):
    wd = workdir(tmp_path)
    with_user_study(wd)  # a user's study with a claim of its own runs through the DAG too
    t0 = time.perf_counter()
    r = snakemake(wd, "--cores", "2", "--config", "scale=smoke", timeout=1200)
    elapsed = time.perf_counter() - t0
    logs = "\n".join(p.read_text()[-1500:] for p in (wd / "results/logs").rglob("*.log"))
    assert r.returncode == 0, (r.stderr[-3000:], logs[-3000:])
    print(f"smoke pipeline: {elapsed:.0f} s")
    res = wd / "results"
    for t in artifacts.TABLE_NUMBERS:
        assert (res / f"tables/table{t}.csv").is_file()
    for f in artifacts.FIGURE_NUMBERS:
        assert (res / f"figures/fig{f}.png").is_file()
    assert (wd / "reports/report.pdf").stat().st_size > 0
    # the user's claim: checked on its study's 2 seeds x 2 precisions, listed beside the paper's
    claims = {c["id"]: c for c in json.loads((res / "claims.json").read_text())["claims"]}
    mine = claims["mine_lp_within_50"]
    assert mine["source"] == "study mine" and mine["n"] == 2 and mine["numbers"]["pairs"] == 2
    assert mine["verdict"] in ("held", "inconclusive", "not held") and mine["ci"] is not None
    assert "8-bit is within 50 points of FP here" in (res / "claims.md").read_text()
    m = json.loads((res / "manifest.json").read_text())
    run_ids = {e["run_id"] for s in m["studies"].values() for e in s["runs"]}
    # cells of 2 seeds (the user's study) and the single runs of one model are batches (config
    # batch_runs: auto on this CPU): one job each, its stamp listing its runs, its benchmark
    # file named after it
    batches = {p.stem: p.read_text().split() for p in (res / "batches").glob("*.txt")}
    assert sum(b.startswith("seeds-") for b in batches) >= 2
    assert all(len(ids) >= 2 for ids in batches.values())
    job_of = {r: b for b, ids in batches.items() for r in ids}
    assert set(job_of) <= run_ids
    for rid in run_ids:
        assert (res / f"runs/{rid}/metrics.json").is_file()
        assert (res / f"benchmarks/train/{job_of.get(rid, rid)}.tsv").is_file()
    synced = json.loads((res / "mlflow/synced.json").read_text())
    assert set(synced["runs"]) == run_ids
    # the report and the figures are attached to the scale's report run, inside the store
    from mlflow.tracking import MlflowClient

    from lpdt.tracking import local_artifact_dir

    uri = f"sqlite:///{res}/mlflow.db"
    mid = json.loads((res / "mlflow/report-smoke.json").read_text())["mlflow_run_id"]
    arts = local_artifact_dir(uri, MlflowClient(uri).get_run(mid).info.artifact_uri)
    assert (arts / "report.pdf").read_bytes() == (wd / "reports/report.pdf").read_bytes()
    assert {f"fig{i}.png" for i in artifacts.FIGURE_NUMBERS} <= {
        p.name for p in (arts / "figures").iterdir()
    }
    # a second invocation has nothing to do
    again = snakemake(wd, "-n", "--config", "scale=smoke")
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr
    # the user's claim on the PDF's first page; last, so that without poppler-utils (make setup
    # installs it) the test is skipped, as tests/report/'s PDF checks are, after all the others
    if not shutil.which("pdftotext"):
        pytest.skip("poppler-utils not installed: the PDF's first page is not read")
    page1 = subprocess.run(
        ["pdftotext", "-l", "1", str(wd / "reports/report.pdf"), "-"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    flat = " ".join(page1.split())
    assert "Claims declared in the studies" in flat and "mine_lp_within_50" in flat


@pytest.mark.slow
def test_a_finished_run_forced_to_run_again_is_put_back_not_trained(tmp_path):
    """Snakemake removes a job's outputs before it reruns it (forced, or marked incomplete after
    Snakemake was stopped while the job finished: `rerun-incomplete: true`) and after it fails
    (SIGTERM during the MLflow log after training). A complete run has no checkpoint, so it was
    trained again from scratch; its record's copy now puts it back."""
    wd = workdir(tmp_path)
    spec = grid.load(REPO / "config/studies.yaml", REPO / "config/scales/smoke.yaml")
    rid = next(iter(grid.expand(spec)))
    target = f"results/runs/{rid}/metrics.json"
    config = ["--config", "scale=smoke", "batch_runs=False", "mlflow=False"]
    first = snakemake(wd, "--cores", "1", target, *config)
    assert first.returncode == 0, first.stderr[-3000:]
    record = (wd / target).read_bytes()
    log = wd / f"results/logs/train/{rid}.log"
    assert "epoch 1/" in log.read_text()
    again = snakemake(wd, "--cores", "1", target, "--forcerun", "train", *config)
    assert again.returncode == 0, again.stderr[-3000:]
    text = log.read_text()
    assert "put back from .record-copy.json" in text and "epoch 1/" not in text, text
    assert (wd / target).read_bytes() == record
