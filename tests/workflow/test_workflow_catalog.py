"""The workflow as a catalog workflow: GPU accounting of training jobs (resources `gpu` and
`gpu_slot`, the workflow's cap), results marked for `snakemake --report`, and `snakemake --lint`
warnings limited to the ones docs/workflow.md justifies."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import zipfile
from pathlib import Path

import pytest

from lpdt import gpus, grid
from lpdt.report import artifacts
from tests.workflow.test_snakemake import REPO, snakemake, workdir


def test_visible_gpus_reads_cuda_visible_devices_then_the_driver(tmp_path):

    driver = tmp_path / "gpus"
    assert gpus.visible_gpus({}, driver) == 0  # no driver, no variable
    for name in ("0000:01:00.0", "0000:02:00.0"):
        (driver / name).mkdir(parents=True)
    assert gpus.visible_gpus({}, driver) == 2
    assert gpus.visible_gpus({"CUDA_VISIBLE_DEVICES": "1"}, driver) == 1
    assert gpus.visible_gpus({"CUDA_VISIBLE_DEVICES": ""}, driver) == 0
    assert gpus.visible_gpus({"CUDA_VISIBLE_DEVICES": "-1"}, driver) == 0
    assert gpus.visible_gpus({"CUDA_VISIBLE_DEVICES": "0,1,2"}, tmp_path / "none") == 3


@pytest.mark.parametrize(
    ("setting", "device", "visible", "expected"),
    [
        ("auto", "auto", 1, 1),
        ("auto", "cuda:0", 2, 1),
        ("auto", "cpu", 1, 0),
        ("auto", "auto", 0, 0),
        (0, "auto", 1, 0),
        (2, "cpu", 0, 2),
    ],
)
def test_job_gpus(setting, device, visible, expected):

    assert gpus.job_gpus(setting, device, visible) == expected


@pytest.mark.parametrize(("processes", "visible", "expected"), [(8, 8, 8), (8, 2, 2), (4, 0, 0)])
def test_distributed_jobs_reserve_a_gpu_per_process_up_to_the_machines(
    processes, visible, expected
):

    assert gpus.job_gpus("auto", "auto", visible, processes) == expected


def _gpu_env(visible: str) -> dict[str, str]:
    return {"CUDA_VISIBLE_DEVICES": visible}


def run_workflow(wd: Path, *args: str, env: dict[str, str] | None = None, timeout: int = 600):
    old = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    try:
        return snakemake(wd, *args, timeout=timeout)
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _train_gpus(out: str) -> set[int]:
    """The `gpu` resource of every training job a dry run lists (rule train, and the batches of
    runs, rules train_batch*, where config batch_runs has them)."""
    blocks = [
        b
        for b in re.split(r"\n(?=(?:local)?rule )", out)
        if b.startswith(("rule train:", "rule train_batch"))
    ]
    assert blocks, out[-2000:]
    return {int(m.group(1)) for b in blocks for m in [re.search(r"\bgpu=(\d+)", b)] if m}


def check_paper_training_jobs(out: str, gpus: set[int]) -> None:
    """A paper-scale dry run's training jobs: each asks for the ``gpus`` given, and a job given
    a GPU trains with device=cuda. (Their MLflow logging bounds its own wait for a server:
    tests/tracking/test_cli.py, tests/test_cli.py.)"""
    assert _train_gpus(out) == gpus
    trains = re.findall(r"lpdt\.cli train .*", out)
    assert len(trains) == 289 and all(("--set device=cuda" in t) == (gpus == {1}) for t in trains)


# One visible GPU (CUDA_VISIBLE_DEVICES=0) is checked on the dry run of
# tests/workflow/test_gpu_share.py::test_auto_k_per_model_on_the_paper_grid, the same command.
@pytest.mark.parametrize(("visible", "gpus"), [("", {0}), ("0,1", {1})])
def test_paper_training_jobs_ask_for_a_gpu_only_on_a_gpu_machine(tmp_path, visible, gpus):
    """train_gpus: auto gives each paper-scale training job gpu=1 where a GPU is visible and 0
    where none is (CUDA_VISIBLE_DEVICES stands in for the machine). A job given a GPU trains
    with device=cuda, so that one that cannot use it stops at once (not on the CPU, silently)."""
    r = run_workflow(workdir(tmp_path), "-n", "--config", "scale=paper", env=_gpu_env(visible))
    assert r.returncode == 0, r.stderr[-2000:]
    check_paper_training_jobs(r.stdout, gpus)


def test_cpu_runs_never_ask_for_a_gpu(tmp_path):
    """The smoke scale's runs have device: cpu, so they ask for no GPU even on a GPU machine;
    a number in train_gpus overrides auto."""
    wd = workdir(tmp_path)
    r = run_workflow(wd, "-n", "--config", "scale=smoke", env=_gpu_env("0"))
    assert r.returncode == 0, r.stderr[-2000:]
    assert _train_gpus(r.stdout) == {0}
    r = run_workflow(wd, "-n", "--config", "scale=smoke", "train_gpus=1", env=_gpu_env(""))
    assert _train_gpus(r.stdout) == {1}
    assert "--set device=cuda" not in r.stdout  # a run that says device: cpu keeps it


def test_default_profile_leaves_the_gpu_cap_to_the_workflow(tmp_path):
    """profiles/default caps no resource: the workflow caps gpu_slot at the GPUs' slots (k jobs
    per GPU; tests/workflow/test_gpu_share.py), and on one GPU with k = 1 at one job."""
    import yaml

    profile = yaml.safe_load((REPO / "profiles" / "default" / "config.yaml").read_text())
    assert "resources" not in profile
    r = run_workflow(
        workdir(tmp_path),
        "-n",
        "--config",
        "scale=smoke",
        "train_gpus=1",
        "gpu_jobs_per_gpu=1",
        env=_gpu_env("0"),
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "GPUs: 1 (0), 1 slots each: gpu_slot=1" in r.stderr


def _intervals(wd: Path, run_ids: list[str]) -> list[tuple[dt.datetime, dt.datetime]]:
    out = []
    for rid in run_ids:
        prov = json.loads((wd / "results" / "runs" / rid / "metrics.json").read_text())[
            "provenance"
        ]
        out.append(
            (
                dt.datetime.fromisoformat(prov["started"]),
                dt.datetime.fromisoformat(prov["finished"]),
            )
        )
    return sorted(out)


def train_four_smoke_runs_on_gpus(wd: Path, cores: int, jobs_per_gpu: int, gpus: str) -> list[str]:
    """Train the smoke scale's first four runs, each asking for a GPU, on fake GPUs
    (``CUDA_VISIBLE_DEVICES=gpus``; they train on the CPU); returns their run ids."""
    spec = grid.load(REPO / "config/studies.yaml", REPO / "config/scales/smoke.yaml")
    run_ids = list(grid.expand(spec))[:4]
    targets = [f"results/runs/{r}/metrics.json" for r in run_ids]
    r = run_workflow(
        wd,
        *targets,
        "--cores",
        str(cores),
        "--config",
        "scale=smoke",
        "train_gpus=1",
        f"gpu_jobs_per_gpu={jobs_per_gpu}",
        "mlflow=False",
        env={**_gpu_env(gpus), "LPDT_GPU_SLOTS": str(wd / "gpu-slots")},  # this test's GPUs only
        timeout=1200,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return run_ids


@pytest.mark.slow
def test_one_gpu_trains_one_job_at_a_time(tmp_path):
    """Four smoke runs that each ask for the GPU (train_gpus=1), one fake GPU
    (CUDA_VISIBLE_DEVICES=0), one job per GPU, two cores: their training never overlaps."""
    wd = workdir(tmp_path)
    run_ids = train_four_smoke_runs_on_gpus(wd, cores=2, jobs_per_gpu=1, gpus="0")
    spans = _intervals(wd, run_ids)
    for (_, end), (start, _) in zip(spans, spans[1:]):
        assert start >= end, spans


# --- snakemake --report -----------------------------------------------------------------------


def test_results_are_marked_for_the_report_with_captions():
    """Every figure (PNG), every table (CSV), the claims and the PDF are report() outputs with a
    caption file that exists."""
    text = (REPO / "workflow" / "rules" / "report.smk").read_text()
    captions = re.findall(r'"([\w.]+\.rst)"|f"(fig\{f\}\.rst)"', text)
    names = {a or b for a, b in captions}
    files = (
        {n.replace("{f}", str(i)) for n in names for i in artifacts.FIGURE_NUMBERS}
        if names
        else set()
    )
    assert {f"fig{i}.rst" for i in artifacts.FIGURE_NUMBERS} | {
        "table.rst",
        "claims.rst",
        "report_pdf.rst",
    } <= files
    for name in files:
        assert (REPO / "workflow" / "report" / name).is_file(), name
    assert 'report: "workflow/report/workflow.rst"' in (REPO / "Snakefile").read_text()


def test_figure_captions_are_the_ones_artifacts_writes():
    """Each figure's caption file only shows the caption the report rule passes (its text:
    lpdt.report.artifacts), rendered as Snakemake renders captions (Jinja2)."""
    from types import SimpleNamespace

    import jinja2

    captions = {f: artifacts.snakemake_caption(f, "quick") for f in artifacts.FIGURES}
    fake = SimpleNamespace(params=SimpleNamespace(captions=captions), config={"scale": "quick"})
    for f in artifacts.FIGURES:
        text = (REPO / "workflow" / "report" / f"{f}.rst").read_text()
        assert text == artifacts.CAPTION_TEMPLATE.format(figure=f)
        rendered = jinja2.Environment().from_string(text).render(snakemake=fake)
        assert rendered.strip() == captions[f]
        assert rendered.startswith(f"Figure {f[3:]} of the paper, scale quick: ")
    assert "illustrative" in captions["fig6"] and "illustrative" not in captions["fig7"]
    assert "captions=" in (REPO / "workflow" / "rules" / "report.smk").read_text()


@pytest.mark.slow
def test_snakemake_report_shows_figures_tables_and_pdf(tmp_path):
    """`snakemake --report report.zip` after the smoke pipeline holds the figures, tables,
    claims and PDF with their captions."""
    wd = workdir(tmp_path)
    r = snakemake(wd, "--cores", "2", "--config", "scale=smoke", "mlflow=False", timeout=1800)
    assert r.returncode == 0, r.stderr[-3000:]
    r = snakemake(wd, "--report", "report.zip", "--config", "scale=smoke", "mlflow=False")
    assert r.returncode == 0, r.stderr[-3000:]
    names = zipfile.ZipFile(wd / "report.zip").namelist()
    for f in [
        *(f"fig{i}.png" for i in artifacts.FIGURE_NUMBERS),
        *(f"table{t}.csv" for t in (2, 3, 10)),
        "claims.md",
        "report.pdf",
    ]:
        assert any(n.endswith("/" + f) for n in names), f
    html = zipfile.ZipFile(wd / "report.zip").read("report/report.html").decode()
    for i in artifacts.FIGURE_NUMBERS:  # the captions, rendered (workflow/report/fig*.rst)
        first = artifacts.snakemake_caption(f"fig{i}", "smoke").split()[:6]
        assert " ".join(first) in " ".join(html.split()), i


# --- snakemake --lint -------------------------------------------------------------------------

# Lint messages docs/workflow.md ("Snakemake's lint") explains, and the rules they may come from.
JUSTIFIED = {
    "Specify a conda environment or container for each rule.",
    "Shell command directly uses variable LPDT from outside of the rule",
    "Shell command directly uses variable PY from outside of the rule",
    "Mixed rules and functions in same snakefile.",
    "No log directive defined",
    "Migrate long run directives into scripts or notebooks",
}


def test_lint_warns_only_about_what_the_docs_justify(tmp_path):
    r = snakemake(workdir(tmp_path), "--lint")
    out = r.stdout + r.stderr
    warnings = set(re.findall(r"^\s+\* (.+?):?$", out, re.M))
    assert warnings, out[-2000:]  # the lint ran and printed its findings
    assert warnings <= JUSTIFIED, sorted(warnings - JUSTIFIED)
    docs = " ".join((REPO / "docs" / "workflow.md").read_text().split())
    for w in JUSTIFIED:
        assert w.rstrip(".") in docs, w
    # the rules a per-rule warning names are the rules the page names for it
    for w in ("No log directive defined", "Migrate long run directives into scripts or notebooks"):
        blocks = re.split(r"^Lints for ", out, flags=re.M)[1:]  # "rule NAME (line ...):\n..."
        linted = {b.split()[1] for b in blocks if b.startswith("rule ") and f"* {w}" in b}
        named = re.search(rf"\*{w}\* \(rules ([^)]*)\)", docs)
        assert named and set(re.findall(r"`(\w+)`", named[1])) == linted, (w, linted)
