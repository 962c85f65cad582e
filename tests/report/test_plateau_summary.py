"""lpdt.report.plateau's side of `snakemake plateau_check`: the checked cells, the doubled
configs and the summary written from 1x / 2x run directories (ok, missing, diverged, different
commits), and how the report reads that summary."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from lpdt import grid
from lpdt.report.plateau import (
    SUMMARY_COLUMNS,
    checked_cells,
    claims_2x_sentence,
    claims_at_2x,
    doubled,
    load_check,
    plateau_gains,
    plateau_sentence,
    write_summary,
)
from tests.fake_records import fake_record

ROOT = Path(__file__).resolve().parents[2]
A, B = "a" * 40, "b" * 40


def _run(root: Path, name: str, acc: float, commit: str | None = A, **kw) -> Path:
    d = root / name
    d.mkdir(parents=True)
    fake_record(name, acc, epochs=4, provenance={"git_commit": commit}, **kw).write(d)
    return d


def test_summary_of_ok_missing_diverged_and_different_commit_pairs(tmp_path: Path) -> None:
    one, two = tmp_path / "runs", tmp_path / "plateau"
    pairs = [
        ("ok", _run(one, "r_ok", 80.0), _run(two, "d_ok", 82.5)),
        ("missing", _run(one, "r_miss", 80.0), two / "d_miss"),  # no 2x run
        ("diverged", _run(one, "r_div", 80.0), _run(two, "d_div", 0.0, status="diverged")),
        ("commits", _run(one, "r_com", 70.0), _run(two, "d_com", 71.0, commit=B)),
        ("unknown", _run(one, "r_unk", 70.0, commit=None), _run(two, "d_unk", 71.0, None)),
    ]
    out = write_summary(pairs, tmp_path / "results" / "plateau_check.csv")
    text = out.read_text()
    assert text.startswith("# plateau check") and "1 missing, 1 diverged, 2 different" in text
    df = pd.read_csv(out, comment="#", dtype=str).set_index("case")
    assert list(df.reset_index().columns) == SUMMARY_COLUMNS
    assert df["status"].to_dict() == {
        "ok": "ok",
        "missing": "missing",
        "diverged": "diverged",
        "commits": "different commits",
        "unknown": "different commits",  # an unrecorded commit cannot show one commit
    }
    assert df.loc["ok", "quick run"] == "r_ok" and df.loc["ok", "2x run"] == "d_ok"
    assert float(df.loc["ok", "gain of 2x (points)"]) == pytest.approx(2.5)
    assert df.loc["ok", "1x commit"] == A and df.loc["ok", "2x commit"] == A
    assert df.loc["commits", "2x commit"] == B and float(df.loc["commits", "acc at 2x (%)"]) == 71
    for case in ("missing", "diverged"):  # dropped: no accuracies
        assert df.loc[case, ["acc at 1x (%)", "acc at 2x (%)"]].isna().all()
    assert pd.isna(df.loc["missing", "2x commit"]) and df.loc["missing", "quick run"] == "r_miss"

    check = load_check(out)
    assert check is not None
    runs = pd.DataFrame({"run_id": ["r_ok", "r_miss", "r_div", "r_com", "r_unk"]})
    s = plateau_sentence(check, runs)
    assert f"commit {A[:7]}, {B[:7]}" not in s and f"commits {A[:7]}, {B[:7]}" in s
    assert "covers 3 of these runs' configurations" in s
    assert "2 of them compare a 1x and a 2x run of different commits" in s
    assert "1 missing and 1 diverged pair(s) dropped" in s
    assert "ok +2.5; commits +1.0 (different commits)" in plateau_gains(check, runs)


def test_a_different_commit_pair_is_not_used_to_rescore(shared_tree: dict, tmp_path: Path) -> None:
    """The shared tree's table-3 Choco pair at skew 0 (run04 fp32, run05 int8) checked at 2x:
    with both 2x runs of the 1x runs' commit the claim is re-scored; with run04's 2x run of
    another commit the pair is left out, and the sentence says why."""
    from lpdt.report.aggregate import aggregate

    df, _ = aggregate(shared_tree["manifest"])
    for commit, expect in ((A, "moves the effects of 1 accuracy claim"), (B, "not re-scored")):
        root = tmp_path / commit[:1]
        pairs = [
            ("fp", _run(root / "1x", "run04", 81.0), _run(root / "2x", "fp2", 84.0, commit)),
            ("lp", _run(root / "1x", "run05", 80.5), _run(root / "2x", "lp2", 80.5)),
        ]
        check = load_check(write_summary(pairs, root / "check.csv"))
        moved = claims_at_2x(check, df)
        assert [c.id for c in moved] == (["lp_close_to_fp_dense"] if commit == A else [])
        s = claims_2x_sentence(check, df)
        assert s is not None and expect in s, s
    assert "1 checked cell whose 1x and 2x runs come from different commits left out" in s


def test_load_check_falls_back_to_the_shipped_check_and_names_it(tmp_path: Path) -> None:
    shipped = ROOT / "config" / "plateau_check.csv"
    check = load_check(tmp_path / "results" / "plateau_check.csv", shipped)
    assert check is not None
    commits = set(pd.read_csv(shipped, comment="#")["1x commit"].astype(str))
    assert len(commits) == 1  # the shipped check was measured by one commit: it is named
    assert check.attrs["source"] == f"the shipped check of commit {commits.pop()[:7]}"
    # a check written before the commit and status columns existed
    old = tmp_path / "old.csv"
    old.write_text(
        "case,quick run,quick epochs,acc at 1x (%),acc at 2x (%),gain of 2x (points)\n"
        "c,abc,8,80.0,81.0,1.0\n"
    )
    older = load_check(tmp_path / "results" / "plateau_check.csv", old)
    assert older is not None
    assert older.attrs["source"] == "the shipped check, commit not recorded"
    assert (older["status"] == "ok").all()
    measured = write_summary(
        [("ok", _run(tmp_path, "r1", 80.0), _run(tmp_path, "d1", 81.0))], tmp_path / "m.csv"
    )
    mine = load_check(measured, shipped)
    assert mine is not None
    assert mine.attrs["source"] == f"this workflow's check of commit {A[:7]}"
    with pytest.raises(ValueError, match="not found"):
        load_check(tmp_path / "a.csv", tmp_path / "b.csv")
    bad = tmp_path / "bad.csv"
    bad.write_text(Path(measured).read_text().replace(",ok\n", ",fine\n"))
    with pytest.raises(ValueError, match="unknown status"):
        load_check(bad)


def test_checked_cells_are_the_multi_seed_cells_at_their_first_seed() -> None:
    spec = grid.load(ROOT / "config/studies.yaml", ROOT / "config/scales/quick.yaml")
    runs = grid.expand(spec)
    cells = checked_cells(runs)
    want = {}  # (study, block, coords) -> seeds, built independently from the runs' memberships
    for r in runs.values():
        for study, members in r.studies.items():
            for m in members:
                want.setdefault((study, m.block, str(sorted(m.coords.items()))), []).append(
                    (m.seed, r.run_id)
                )
    several = {min(v)[1] for v in want.values() if len(v) > 1}
    assert set(cells) == several and len(several) >= 9  # the quick scale's claim cells
    for rid in cells:
        assert runs[rid].config["seed"] == 1234  # the first seed
    assert len(set(cells.values())) == len(cells)  # case names tell the cells apart


def test_doubled_changes_only_the_budget() -> None:
    spec = grid.load(ROOT / "config/studies.yaml", ROOT / "config/scales/quick.yaml")
    run = next(iter(grid.expand(spec)[r] for r in checked_cells(grid.expand(spec))))
    cfg = run.config
    two = doubled(cfg)
    assert two["train"]["epochs"] == 2 * cfg["train"]["epochs"]
    assert two["schedule"]["milestones"] == [2 * m for m in cfg["schedule"]["milestones"]]
    rest = {k: v for k, v in two.items() if k not in ("train", "schedule")}
    assert rest == {k: v for k, v in cfg.items() if k not in ("train", "schedule")}
    assert {k: v for k, v in two["train"].items() if k != "epochs"} == {
        k: v for k, v in cfg["train"].items() if k != "epochs"
    }
    assert cfg["train"]["epochs"] != two["train"]["epochs"]  # the input is not changed
    linear = {**cfg, "schedule": {**cfg["schedule"], "decay": "linear"}}
    assert doubled(linear)["schedule"] == linear["schedule"]  # linear decay scales by itself


def test_report_cli_reads_the_fallback_and_rejects_a_third_path(
    shared_tree: dict, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from lpdt.cli import main

    base = ["report", "--manifest", str(shared_tree["manifest"]), "--paper"]
    base += [str(shared_tree["paper"]), "--only", "claims", "--claims", str(tmp_path / "c.json")]
    absent, shipped = (
        str(tmp_path / "results" / "plateau_check.csv"),
        str(ROOT / "config" / "plateau_check.csv"),
    )
    assert main([*base, "--plateau", absent, shipped]) == 0
    assert main([*base, "--plateau", absent, shipped, shipped]) == 2
    assert "--plateau takes a file and a fallback, got 3 paths" in capsys.readouterr().err
    assert main([*base, "--plateau", absent, absent]) == 2
    assert "not found" in capsys.readouterr().err
