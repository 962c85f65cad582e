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
    doubled,
    load_check,
    write_summary,
)
from lpdt.report.plateau_rescore import claims_at_2x
from lpdt.report.plateau_text import claims_2x_sentence, plateau_gains, plateau_sentence
from tests.fake_records import fake_record

ROOT = Path(__file__).resolve().parents[2]
A, B = "a" * 40, "b" * 40


def _run(
    root: Path, name: str, acc: float, commit: str | None = A, dirty: bool = False, **kw
) -> Path:
    """A run directory with a record of ``acc`` %, trained by ``commit`` (``dirty``: from a tree
    with uncommitted changes)."""
    d = root / name
    d.mkdir(parents=True)
    prov = {"git_commit": commit, "git_dirty": dirty}
    fake_record(name, acc, epochs=4, provenance=prov, **kw).write(d)
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


# -- the re-scoring on the check's own pairs, and how they compare with this report's runs -------

C = "c" * 40  # the commit of the shared tree's runs (tests.fake_records)


def _shared_runs(shared_tree: dict) -> pd.DataFrame:
    from lpdt.report.aggregate import aggregate

    df, _ = aggregate(shared_tree["manifest"])
    return df


def _checked(root: Path, commit: str, fp: tuple[float, float], lp: tuple[float, float]) -> Path:
    """A check of the shared tree's table-3 Choco pair at skew 0 (run04 fp32, run05 int8): their
    1x and 2x runs, all of ``commit``, at accuracies ``fp`` and ``lp`` (1x, 2x)."""
    pairs = [
        ("fp", _run(root / "1x", "run04", fp[0], commit), _run(root / "2x", "fp2", fp[1], commit)),
        ("lp", _run(root / "1x", "run05", lp[0], commit), _run(root / "2x", "lp2", lp[1], commit)),
    ]
    return write_summary(pairs, root / "check.csv")


def test_a_check_of_another_commit_is_rescored_on_its_own_pairs(
    shared_tree: dict, tmp_path: Path
) -> None:
    """This report's run04 / run05 (commit C) are at 81.0 / 80.5 %. A check of commit A measured
    them at 82.0 / 80.0 % (1x) and 84.0 / 80.5 % (2x). The claim FP - LP is re-scored on the
    check's own pairs: 2.0 at 1x, 3.5 at 2x (this report's 1x would give 0.5: two commits
    mixed). The check is flagged as of another commit, its 1x off by up to 1.0 point (check -
    these runs: +1.0 and -0.5, mean +0.25), in the sentence and in claims.json."""
    import json

    from lpdt.report import cli
    from lpdt.report.plateau_rescore import rescore
    from tests.report.conftest import report_args

    df = _shared_runs(shared_tree)
    check = load_check(_checked(tmp_path, A, (82.0, 84.0), (80.0, 80.5)))
    r = rescore(check, df)
    assert r is not None
    (c,) = r.claims
    assert (c.id, c.cells, c.at_1x, c.at_2x) == ("lp_close_to_fp_dense", 1, 2.0, 3.5)
    assert r.pairs_commits == (A,) and r.runs_commits == (C,) and not r.same_commit
    assert (r.cells, r.compared, r.max_abs_diff_1x, r.mean_diff_1x) == (2, 2, 1.0, 0.25)
    assert not r.agree
    s = claims_2x_sentence(check, df)
    assert s is not None
    assert f"On the check's own 1x and 2x runs (commit {A[:7]}; one seed)" in s
    assert "moves the effects of 1 accuracy claim by +1.5 points" in s
    assert f"another commit than these runs (commit {C[:7]})" in s
    assert (
        "differ from theirs by up to 1.00 points (mean of the check's minus these runs': +0.25)"
        in s
    )
    # claims.json says the same
    shared = {**shared_tree, "plateau": tmp_path / "check.csv"}
    assert cli.run(report_args(shared, tmp_path / "out", only="claims")) == 0
    doc = json.loads((tmp_path / "out" / "claims.json").read_text())["plateau_rescoring"]
    assert doc["pairs_commits"] == [A] and doc["runs_commits"] == [C]
    assert doc["same_commit"] is False and doc["agree"] is False
    assert doc["max_abs_diff_1x"] == 1.0 and doc["mean_diff_1x"] == 0.25
    assert [(x["id"], x["at_1x"], x["at_2x"]) for x in doc["claims"]] == [
        ("lp_close_to_fp_dense", 2.0, 3.5)
    ]
    assert f"(commit {A[:7]}). The check's pairs are of another commit" in doc["text"]


def test_a_check_of_these_runs_commit_and_accuracies_agrees(
    shared_tree: dict, tmp_path: Path
) -> None:
    """The check's 1x runs are these runs (commit C, 81.0 / 80.5 %): same commit, 1x equal."""
    from lpdt.report.plateau_rescore import rescore

    df = _shared_runs(shared_tree)
    check = load_check(_checked(tmp_path, C, (81.0, 84.0), (80.5, 80.5)))
    r = rescore(check, df)
    assert r is not None and r.same_commit and r.agree and r.max_abs_diff_1x == 0.0
    assert (r.claims[0].at_1x, r.claims[0].at_2x) == (0.5, 3.5)
    s = claims_2x_sentence(check, df)
    assert s is not None
    assert "The check's pairs are of these runs' commit, and its 1x accuracies equal theirs." in s


def test_a_dirty_tree_at_the_same_head_is_another_commit(shared_tree: dict, tmp_path: Path) -> None:
    """A 2x run trained from a dirty tree at its 1x run's HEAD is not of the 1x run's commit
    (status different commits, left out of the re-scoring); nor are two dirty runs at one HEAD;
    and a clean check of commit C does not count as these runs' commit when these runs were
    trained from a dirty tree at C."""
    from lpdt.report.plateau_rescore import rescore

    one, two = tmp_path / "1x", tmp_path / "2x"
    pairs = [
        ("clean", _run(one, "r1", 80.0), _run(two, "d1", 81.0, dirty=True)),
        ("dirty", _run(one, "r2", 80.0, dirty=True), _run(two, "d2", 81.0, dirty=True)),
        ("ok", _run(one, "r3", 80.0), _run(two, "d3", 81.0)),
    ]
    out = write_summary(pairs, tmp_path / "check.csv")
    df = pd.read_csv(out, comment="#", dtype=str).set_index("case")
    assert df["status"].to_dict() == {
        "clean": "different commits",
        "dirty": "different commits",
        "ok": "ok",
    }
    assert df.loc["clean", "1x commit"] == A and df.loc["clean", "2x commit"] == f"{A}-dirty"
    assert "1 ok, 0 missing, 0 diverged, 2 different commits" in out.read_text()
    assert load_check(out).attrs["source"] == f"the check of commits {A[:7]}, {A[:7]}-dirty"
    # these runs dirty at C, the check's pairs clean at C
    runs = _shared_runs(shared_tree)
    check = load_check(_checked(tmp_path / "c", C, (81.0, 84.0), (80.5, 80.5)))
    assert rescore(check, runs).same_commit  # type: ignore[union-attr]
    dirty = runs.assign(git_dirty=True)
    r = rescore(check, dirty)
    assert r is not None and not r.same_commit and r.runs_commits == (f"{C}-dirty",)
    assert r.agree  # the accuracies are equal; the commit is not
    s = claims_2x_sentence(check, dirty)
    assert f"another commit than these runs (commit {C[:7]}-dirty)" in s  # type: ignore[operator]


def test_the_shipped_check_is_rescored_on_its_own_pairs(tmp_path: Path) -> None:
    """A fresh report of the quick grid falling back to config/plateau_check.csv (measured at
    another commit): the claims are re-scored on the shipped pairs whatever this report's runs
    hold. Without run records nothing is compared; with records of another commit whose 1x is
    0.3 below the check's, the claims are unchanged and the difference is reported. Two claims
    computed by hand from the shipped rows: EvoNorm - BatchNorm, Range-EvoNorm - EvoNorm."""
    import json

    from lpdt.report.aggregate import aggregate
    from lpdt.report.plateau_rescore import rescore

    shipped = ROOT / "config" / "plateau_check.csv"
    rows = pd.read_csv(shipped, comment="#").set_index("case")
    spec = grid.load(ROOT / "config/studies.yaml", ROOT / "config/scales/quick.yaml")
    manifest = grid.manifest(grid.expand(spec), spec, "quick", "results/runs")
    path = tmp_path / "results" / "manifest.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(manifest.to_dict()))
    check = load_check(tmp_path / "results" / "plateau_check.csv", shipped)
    commit = str(rows["1x commit"].iloc[0])

    bare, _ = aggregate(path)  # a fresh report before any run: every run missing
    r = rescore(check, bare)
    assert r is not None and r.pairs_commits == (commit,) and r.runs_commits == ()
    assert r.cells == len(rows) and r.compared == 0 and not r.agree
    by_id = {c.id: c for c in r.claims}

    def effect(a: str, b: str, col: str) -> float:
        return round(float(rows.loc[a, col] - rows.loc[b, col]), 4)

    bn, ev, re_ = "fig1/fp32 norm=batchnorm", "fig1/fp32 norm=evonorm", "fig1/rangeen"
    for cid, a, b in (("evonorm_beats_batchnorm", ev, bn), ("rangeen_equiv_evonorm", re_, ev)):
        got = by_id[cid]
        assert got.at_1x == pytest.approx(effect(a, b, "acc at 1x (%)"))
        assert got.at_2x == pytest.approx(effect(a, b, "acc at 2x (%)"))
    s = claims_2x_sentence(check, bare)
    assert f"(commit {commit[:7]}; one seed)" in s  # type: ignore[operator]
    assert "None of these configurations has a run record here" in s  # type: ignore[operator]

    for rid, acc in zip(rows["quick run"], rows["acc at 1x (%)"], strict=True):
        d = tmp_path / "results" / "runs" / rid
        d.mkdir(parents=True)
        fake_record(rid, float(acc) - 0.3, provenance={"git_commit": B}).write(d)
    trained, _ = aggregate(path)
    r2 = rescore(check, trained)
    assert r2 is not None and r2.claims == r.claims  # the check's own pairs, not these runs
    assert r2.runs_commits == (B,) and not r2.same_commit
    assert (r2.compared, r2.max_abs_diff_1x, r2.mean_diff_1x) == (len(rows), 0.3, 0.3)
    s2 = claims_2x_sentence(check, trained)
    assert f"another commit than these runs (commit {B[:7]})" in s2  # type: ignore[operator]
    assert (
        "differ from theirs by up to 0.30 points (mean of the check's minus these runs': +0.30)"
        in s2
    )  # type: ignore[operator]
