"""benchmarks/bench_launches.py: kernels, aten operations, host syncs and compile times of the
training round, run at tiny shapes so that it cannot rot."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "bench_launches.py"


def _run(*args: str, timeout: float = 1200) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.slow  # four compiles from empty caches: 13 min on the 2-core VM under load (2026-11-28)
def test_every_row_compiles_and_counts(tmp_path: Path) -> None:
    out = tmp_path / "launches.tsv"
    tiny = ["--model", "tiny_cnn", "--nodes", "2", "--batch", "4", "--px", "8", "--iters", "1"]
    r = _run(*tiny, "--out", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    with out.open(newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    assert {(row["precision"], row["variant"]) for row in rows} == {
        (p, v) for p in ("fp32", "int8") for v in ("sequential", "batched")
    }
    for row in rows:
        assert row["ran"] == "compiled", row  # the 8-bit batched step too
        assert int(row["kernels"]) > 0 and float(row["compile_s"]) > 0, row
        assert int(row["host_syncs_round"]) == 0, row
        assert 0 < int(row["launches_round"]) <= int(row["aten_ops_round"]), row
        # on the CPU also the GPU's count, which combo kernels can only lower
        assert 0 < int(row["cuda_kernels_combo"]) <= int(row["cuda_kernels"]), row
        assert int(row["cuda_library_calls"]) > 0, row  # the convolutions
        assert row["cuda_graph_blockers"] == "none", row  # CUDA graphs could capture the round
    by = {(row["precision"], row["variant"]): row for row in rows}
    for variant in ("sequential", "batched"):  # the quantisers add operations
        fp32, int8 = by["fp32", variant], by["int8", variant]
        assert int(int8["aten_ops_round"]) > int(fp32["aten_ops_round"])
        assert int(int8["cuda_kernels"]) > int(fp32["cuda_kernels"])


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    r = _run("--precisions", "int4", "--out", str(tmp_path / "x.tsv"), timeout=120)
    assert r.returncode == 2 and "unknown ['int4']" in r.stderr and "Traceback" not in r.stderr
