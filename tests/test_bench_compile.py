"""benchmarks/bench_compile.py: eager vs compiled step times, and the profile behind docs/engine.md."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "bench_compile.py"


# slow (10 s with inductor's cache warm, 39 s in a fresh clone, compiling fp32 and 8-bit steps
# with profiling; the compiled steps themselves stay in the default suite, tests/engine/test_steps.py):
# make test-slow runs it
@pytest.mark.slow
def test_times_and_profiles_both_precisions(tmp_path: Path) -> None:
    """A tiny model, one round: the ratios and the floor print, and each step's profile splits
    aten's convolutions from the rest. In a subprocess: --profile changes inductor's code generation."""
    out = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--cases",
            "tiny_cnn:2",
            "--iters",
            "1",
            "--rounds",
            "1",
            "--size",
            "8",
            "--batch",
            "4",
            "--threads",
            "1",
            "--profile",
            "3",
            "--ablate",
            "act_bits=32",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    text = out.stdout
    for prec in ("fp32", "int8"):
        for step in ("eager", "compiled"):
            m = re.search(
                rf"profile: tiny_cnn x 2 {prec} {step}: self time ([\d.]+) ms per node "
                r"step, of which convolutions ([\d.]+) ms \((\d+) %\); inductor kernels "
                r"([\d.]+) ms, other aten operators ([\d.]+) ms, the rest \(.*\) (-?[\d.]+) ms",
                text,
            )
            assert m, f"no profile line for {prec} {step}"
            total, conv, _, fused, aten, rest = map(float, m.groups())
            assert 0 < conv <= total
            assert (fused > 0) == (step == "compiled")  # eager steps run no inductor kernel
            assert aten > 0 and rest >= 0
            assert abs(conv + fused + aten + rest - total) < 0.1 + 0.01 * total
        assert re.search(rf"tiny_cnn x 2 {prec}: compile [\d.]+ s \| eager .* compiled/eager", text)
    assert re.search(r"int8 compiled / fp32 compiled [\d.]+ \(blocks [\d.]+\)", text)
    # the ablation: timed in the same blocks, compared with both compiled steps, not profiled
    assert re.search(
        r"tiny_cnn x 2: int8 \[act_bits=32\] compiled [\d.]+ ms/step; saves -?[\d.]+ \(blocks "
        r"-?[\d.]+\) ms against int8 compiled; / fp32 compiled [\d.]+ \(blocks [\d.]+\)",
        text,
    ), text[-2000:]
    assert "profile: tiny_cnn x 2 int8 [" not in text
    m = re.search(
        r"floor ([\d.]+) GFLOP per node step .* = ([\d.]+) ms; fp32 compiled best block "
        r"([\d.]+) ms",
        text,
    )
    assert m and float(m.group(1)) > 0 and float(m.group(2)) > 0, text[-2000:]


@pytest.mark.parametrize(
    "argv",
    [
        ["--cases", "resnet20"],
        ["--cases", "nosuch:2"],
        ["--precisions", "fp16"],
        ["--ablate", "act_bits=99"],
        ["--ablate", "bits=8"],
        ["--precisions", "fp32", "--ablate", "act_bits=32"],
    ],
)
def test_bad_arguments_are_one_line_errors(argv: list[str], capsys: pytest.CaptureFixture) -> None:
    spec = importlib.util.spec_from_file_location("bench_compile", SCRIPT)
    assert spec is not None and spec.loader is not None
    bench_compile = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench_compile)
    assert bench_compile.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
