"""lpdt.report.plateau: the plateau check read into the report, matched to the runs by run id."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from lpdt.report.plateau import COLUMNS, load_check
from lpdt.report.plateau_rescore import claims_at_2x
from lpdt.report.plateau_text import (
    claims_2x_sentence,
    plateau_gains,
    plateau_row,
    plateau_sentence,
)
from tests.report.conftest import report_args

ROOT = Path(__file__).resolve().parents[2]


def _check(
    rows: list[tuple[str, str, float]], at_1x: dict[str, float] | None = None
) -> pd.DataFrame:
    """A check summary: (case, run id, gain at 2x) with 16 epochs and a 1x accuracy of 80 %,
    or ``at_1x[run id]``."""
    acc = at_1x or {}
    return pd.DataFrame(
        [
            {
                "case": c,
                "quick run": rid,
                "quick epochs": 16,
                "acc at 1x (%)": acc.get(rid, 80.0),
                "acc at 2x (%)": acc.get(rid, 80.0) + g,
                "gain of 2x (points)": g,
            }
            for c, rid, g in rows
        ],
        columns=COLUMNS,
    )


RUNS = pd.DataFrame({"run_id": ["aaa", "bbb", "ccc", "zzz"]})


def test_sentence_counts_cells_near_and_far_from_their_plateau() -> None:
    check = _check(
        [("iid", "aaa", -0.2), ("skew", "bbb", 2.9), ("top", "ccc", 1.0), ("other", "yyy", 9.0)]
    )
    s = plateau_sentence(check, RUNS)
    # 'other' has no run here (another configuration): it is not counted.
    assert "covers 3 of these runs' configurations" in s
    assert "2 end within 1 point of the longer run (-0.2 to +1.0 points)" in s
    assert "1 move further (+2.9 points; each cell: Plateau check)" in s and "other" not in s
    assert "twice its 16 epochs" in s
    assert (
        plateau_gains(check, RUNS) == "iid -0.2; skew +2.9; top +1.0 points at 2x epochs (one seed)"
    )
    assert plateau_row(check, RUNS).startswith("3 cells, their first seed trained twice as long")


def test_all_near_says_nothing_about_verdicts_moving() -> None:
    s = plateau_sentence(_check([("iid", "aaa", 0.3), ("skew", "bbb", -0.9)]), RUNS)
    assert "2 end within 1 point" in s and "move further" not in s and "may change" not in s


def test_a_check_of_other_configurations_or_none_is_said_so() -> None:
    other = plateau_sentence(_check([("iid", "old", 0.1)]), RUNS)
    assert "not measured here" in other and "other configurations" in other
    assert "no plateau check was given" in plateau_sentence(None, RUNS)
    assert plateau_row(None, RUNS) == "not measured for these configurations"


def test_claims_at_2x_recompute_each_claim_on_the_checked_runs(shared_tree: dict) -> None:
    """The shared tree's table-3 Choco pair at skew 0 (run04 fp32 81.0 %, run05 int8 80.5 %),
    checked at those 1x accuracies: FP - LP is 0.5 at 1x. The check puts them at 84.0 / 81.0 %
    at 2x: 3.0, across the claim's threshold of 1. run02 (the DS fp32 run) is not
    checked, so the DS pair does not enter, at 1x either."""
    from lpdt.report.aggregate import aggregate

    df, _ = aggregate(shared_tree["manifest"])
    own = {"run04": 81.0, "run05": 80.5, "run03": 79.5}
    check = _check([("fp", "run04", 3.0), ("lp", "run05", 0.5), ("ds_lp", "run03", 0.0)], own)
    moved = {c.id: c for c in claims_at_2x(check, df)}
    assert set(moved) == {"lp_close_to_fp_dense"}  # no other claim has a checked pair
    c = moved["lp_close_to_fp_dense"]
    assert (c.cells, c.at_1x, c.at_2x, c.same_side) == (1, 0.5, 3.0, False)
    s = claims_2x_sentence(check, df)
    assert s is not None and "moves the effects of 1 accuracy claim by +2.5 points" in s
    assert "1 crosses its threshold" in s and "0.50 to 3.00 (FP - LP accuracy (points) <= 1)" in s
    # 2x equal to 1x: no move, no crossing; no check: no sentence
    same = _check([("fp", "run04", 1.0), ("lp", "run05", 0.5)], own)
    assert "none crosses its threshold" in claims_2x_sentence(same, df)
    assert claims_2x_sentence(None, df) is None and claims_at_2x(None, df) == []


def test_load_check(tmp_path: Path) -> None:
    assert load_check(None) is None and load_check("none") is None
    with pytest.raises(ValueError, match="not found"):
        load_check(tmp_path / "nope.csv")
    bad = tmp_path / "bad.csv"
    bad.write_text("case,gain\nx,1\n")
    with pytest.raises(ValueError, match="no column"):
        load_check(bad)
    good = tmp_path / "good.csv"
    good.write_text("# a comment line, as in config/plateau_check.csv\n")
    _check([("iid", "aaa", 0.5)]).to_csv(good, mode="a", index=False)
    assert load_check(good)["quick run"].tolist() == ["aaa"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        # each said "plateau check <the fallback> not found", or nothing at all
        (("{d}", None), "plateau check {d} is a folder; give the summary CSV's path"),
        (
            ("{d}/a.csv", "{d}/b.csv"),
            "plateau check {d}/a.csv and its fallback {d}/b.csv not found",
        ),
        (("none", "{d}/x.csv"), "--plateau none takes no second file (got {d}/x.csv)"),
    ],
)
def test_a_check_path_that_cannot_be_meant_is_one_line(tmp_path: Path, args, says: str) -> None:
    d = str(tmp_path)
    with pytest.raises(ValueError) as e:
        load_check(*(a.format(d=d) if a else a for a in args))
    assert str(e.value).startswith(says.format(d=d)), e.value


def test_the_shipped_check_is_a_check_of_the_quick_grid() -> None:
    """config/plateau_check.csv loads, and its run ids are run ids of the quick scale's grid
    (a grid change that alters them makes the report say the check does not match)."""
    from lpdt import grid

    check = load_check(ROOT / "config" / "plateau_check.csv")
    assert check is not None and len(check)
    spec = grid.load(ROOT / "config" / "studies.yaml", ROOT / "config" / "scales" / "quick.yaml")
    ids = set(grid.expand(spec))
    stale = set(check["quick run"]) - ids
    assert not stale, (
        f"config/plateau_check.csv lists run ids the quick grid no longer has "
        f"({sorted(stale)}): run make plateau-check again (docs/quick-scale.md, 'Plateau "
        "check') and copy its results/plateau_check.csv there"
    )


def test_report_summary_page_carries_the_check(shared_tree: dict, tmp_path: Path) -> None:
    from lpdt.report import cli

    check = tmp_path / "check.csv"
    _check(
        [("iid", "run00", 0.2), ("skew", "run03", 2.5), ("fp", "run04", 3.0), ("lp", "run05", 0.5)]
    ).to_csv(check, index=False)
    assert (
        cli.run(report_args({**shared_tree, "plateau": check}, tmp_path / "out", only="pdf")) == 0
    )
    if not shutil.which("pdftotext"):
        pytest.skip("poppler-utils not installed")
    text = subprocess.run(
        ["pdftotext", "-l", "1", str(tmp_path / "out" / "report.pdf"), "-"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    text = " ".join(text.split())
    assert "covers 4 of these runs' configurations" in text
    assert "2 move further (+2.5 to +3.0 points; each cell: Plateau check)" in text
    assert "twice the epochs moves the effects of 1 accuracy claim" in text
    # which commit's pairs, and how the check's 1x (80 % each) compares with these runs' (run00
    # 90.0, run03 79.5, run04 81.0, run05 80.5: differences -10, +0.5, -1, -0.5, mean -2.75)
    assert "own 1x and 2x runs (commit not recorded; one seed)" in text
    assert "The check's pairs have no recorded commit (these runs: commit ccccccc)" in text
    assert (
        "its 1x accuracies differ from theirs by up to 10.00 points (mean of the check's minus "
        "these runs': -2.75)"
    ) in text
    assert "Plateau check" in text  # the last row of What ran: the summary holds on one page
    rest = subprocess.run(
        ["pdftotext", str(tmp_path / "out" / "report.pdf"), "-"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "Claims at twice the epochs" in rest


def test_report_cli_missing_check_is_a_one_line_error(
    shared_tree: dict, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from lpdt.cli import main

    argv = [
        "report",
        "--manifest",
        str(shared_tree["manifest"]),
        "--paper",
        str(shared_tree["paper"]),
        "--plateau",
        str(tmp_path / "typo.csv"),
        "--only",
        "claims",
        "--claims",
        str(tmp_path / "claims.json"),
    ]
    assert main(argv) == 2
    assert "plateau check" in capsys.readouterr().err
