"""The paper's numbers (``lpdt.report.paper.load_paper``): a row the report would misread names
its line."""

from __future__ import annotations

from pathlib import Path

import pytest

from lpdt.report.paper import load_paper
from tests.report.conftest import PAPER_CSV


def test_the_shipped_numbers_are_read_whole() -> None:
    df = load_paper(PAPER_CSV)
    rows = [s for s in PAPER_CSV.read_text().splitlines() if s.strip() and not s.startswith("#")]
    assert len(df) == len(rows) - 1  # less the header
    assert df["value"].notna().all()


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        # each was dropped or read as a missing value without a word (exit 0)
        (lambda s: s.replace(",91.25,", ",abc,", 1), "value 'abc' is not a finite number"),
        (lambda s: s.replace("\n2,cifar10", "\n99,cifar10", 1), "table '99' is none of '2'"),
        (lambda s: s.replace(",params_m,", ",acx,", 1), "metric 'acx' is none of 'acc'"),
        (lambda s: s.replace(",0.0,", ",x,", 1), "skew: 'x' is not a finite number"),
    ],
)
def test_a_row_the_report_would_misread_names_its_line(edit, says: str, tmp_path: Path) -> None:
    text = PAPER_CSV.read_text()
    changed = edit(text)
    assert changed != text
    line = next(
        i + 1 for i, (a, b) in enumerate(zip(text.splitlines(), changed.splitlines())) if a != b
    )
    bad = tmp_path / "paper.csv"
    bad.write_text(changed)
    with pytest.raises(ValueError) as e:
        load_paper(bad)
    assert str(e.value).startswith(f"{bad} line {line}: ") and says in str(e.value), e.value


def test_the_same_cell_twice_names_both_lines(tmp_path: Path) -> None:
    """A row copied with another value: the table showed the cell twice (91.25 and 11.0)."""
    lines = PAPER_CSV.read_text().splitlines()
    first = next(i for i, s in enumerate(lines) if ",91.25," in s)
    bad = tmp_path / "paper.csv"
    bad.write_text("\n".join([*lines, lines[first].replace(",91.25,", ",11.0,")]) + "\n")
    with pytest.raises(ValueError) as e:
        load_paper(bad)
    assert str(e.value) == (
        f"{bad} line {len(lines) + 1}: the same cell as {bad} line {first + 1} (table, "
        "coordinates, phase and metric): one value per cell"
    )
