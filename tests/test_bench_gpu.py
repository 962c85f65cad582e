"""benchmarks/bench_gpu.py: the prepared GPU measurement, run on the CPU with tiny shapes so that
it cannot rot between the rare runs on a GPU machine."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "bench_gpu.py"


def _run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def test_steps_and_jobs_tables(tmp_path: Path) -> None:
    """Every variant of both precisions gives a row (uncompiled here: a CPU compile of each
    would take minutes); the batched step's gradients equal eager's; a job runs (k > 1 spawns
    the same worker k times)."""
    out = tmp_path / "out"
    r = _run(
        "--cases",
        "tiny_cnn:2:4:8",
        "--precisions",
        "fp32,int8",
        "--eager-only",
        "--iters",
        "1",
        "--rounds",
        "2",
        "--jobs",
        "1",
        "--job-seconds",
        "0.5",
        "--job-samples",
        "256",
        "--job-warmup",
        "1",
        "--out",
        str(out),
    )
    assert r.returncode == 0, r.stderr[-2000:]
    steps = _rows(out / "steps.tsv")
    assert {(s["precision"], s["variant"]) for s in steps} == {
        (p, v)
        for p in ("fp32", "int8")
        for v in ("eager", "sequential", "graphs", "batched", "batched-graphs")
    }
    for s in steps:
        assert s["ran"] == "eager" and float(s["img_s"]) > 0, s
        assert len(s["blocks"].split(",")) == 2  # one ratio per block
        assert float(s["grad_vs_eager"]) < 1e-3, s  # zero gradients would read 1.0
    jobs = _rows(out / "jobs.tsv")
    assert [j["k"] for j in jobs] == ["1"]
    assert all(float(j["img_s_gpu"]) > 0 and int(j["iters"]) >= int(j["k"]) for j in jobs)
    assert (out / "env.txt").read_text().startswith("torch ")


def test_budget_skips_what_would_not_finish(tmp_path: Path) -> None:
    r = _run(
        "--cases",
        "tiny_cnn:2:4:8",
        "--precisions",
        "fp32",
        "--variants",
        "eager",
        "--eager-only",
        "--iters",
        "1",
        "--rounds",
        "1",
        "--jobs",
        "1",
        "--job-seconds",
        "60",
        "--budget",
        "30",
        "--out",
        str(tmp_path),
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "jobs: k=1 skipped (past --budget 30.0 s)" in r.stdout
    assert not (tmp_path / "jobs.tsv").exists() or len(_rows(tmp_path / "jobs.tsv")) == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cases", "resnet20:8"], "expected model:nodes:batch:px"),
        (["--variants", "fast"], "unknown variant or precision ['fast']"),
        (["--device", "cuda"], "no GPU here"),
    ],
)
def test_bad_input_is_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    r = _run(*args, "--out", str(tmp_path), timeout=60)
    if "cuda" in args:  # the test's own --device cpu comes first; the later one wins
        import torch

        if torch.cuda.is_available():
            pytest.skip("this machine has a GPU")
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr
