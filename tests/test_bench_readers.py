"""benchmarks/bench_readers.py: the image readers timed side by side, run at tiny sizes so that
it cannot rot."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "bench_readers.py"


def test_both_readers_are_timed(tmp_path: Path) -> None:
    out = tmp_path / "readers.tsv"
    tiny = ["--images", "20", "--batch", "8", "--rounds", "2", "--width", "64", "--height", "48"]
    r = subprocess.run(
        [sys.executable, str(SCRIPT), *tiny, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    with out.open(newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    assert [row["reader"] for row in rows] == ["cifar10", "imagenette"]
    for row in rows:
        assert 0 < float(row["ms_min"]) <= float(row["ms_per_image"]) <= float(row["ms_max"])
    assert "imagenette - cifar10:" in r.stdout
    # the Imagenette images were decoded once, at the warm-up, not in the timed epochs
    assert r.stdout.count("decoding the 20 train images once") == 1


def test_bad_sizes_are_one_line(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, str(SCRIPT), "--images", "4", "--batch", "8"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "--images must be at least --batch" in r.stderr
