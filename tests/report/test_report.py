"""lpdt.report on a fake results tree: tables, figures, claims, PDF; each check can fail."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from lpdt.report import artifacts, cli
from lpdt.report.aggregate import KEYS, aggregate, engine_counts, run_counts
from lpdt.report.claim_accuracy import accuracy_claims
from lpdt.report.claim_cost import cost_claims
from lpdt.report.claims import (
    ARITHMETIC,
    CLAIMS_VERSION,
    HELD,
    INCONCLUSIVE,
    NO_DATA,
    NOT_HELD,
)
from lpdt.report.paper import load_paper
from lpdt.report.tables import build_tables
from tests.report.conftest import PAPER_CSV, make_tree, report_args, report_argv, write_cost

COST_PAPER = Path(__file__).resolve().parents[2] / "src" / "lpdt" / "cost" / "paper_table10.csv"


# --- the paper's numbers ---------------------------------------------------------------------


def test_paper_results_cover_the_tables() -> None:
    p = load_paper(PAPER_CSV)
    acc = p[p["metric"] == "acc"]
    # Table 2: 7 rows x FP/LP; Table 3: 7 blocks x 3 skews x 4 variants; Table 4: 2 x 4 x 2;
    # Table 5: 8 rows x 2; Table 6: 2 datasets x 2 comp x 3 skews x 4 variants.
    assert acc.groupby("table").size().to_dict() == {2: 14, 3: 84, 4: 16, 5: 16, 6: 48}
    one = acc[
        (acc["table"] == 3)
        & (acc["model"] == "resnet54")
        & (acc["nodes"] == 16)
        & (acc["skew"] == 0.4)
        & (acc["algorithm"] == "deepsqueeze")
        & (acc["precision"] == "fp32")
    ]
    assert one["value"].tolist() == [90.23]
    assert (acc[acc["table"] == 4]["qgm"]).all() and not acc[acc["table"] == 3]["qgm"].any()


def test_table10_agrees_with_cost_package_copy() -> None:
    """Two transcriptions of Table 10 (ours here, the cost model's) must agree."""
    assert COST_PAPER.exists(), f"{COST_PAPER}: the cost package's copy of Table 10 is missing"
    p = load_paper(PAPER_CSV)
    p = p[p["table"] == 10]
    c = pd.read_csv(COST_PAPER, comment="#")
    assert len(p) == 72
    for _, r in c.iterrows():
        for prec in ("fp32", "int8"):
            for met, col in (("memory_mib", f"memory_{prec}"), ("energy_mj", f"energy_{prec}")):
                mine = p[
                    (p["model"] == r["model"])
                    & (p["norm"] == r["norm"])
                    & (p["phase"] == r["phase"])
                    & (p["metric"] == met)
                    & (p["precision"] == prec)
                ]["value"]
                assert mine.tolist() == [pytest.approx(float(r[col]))], (
                    r["model"],
                    r["norm"],
                    met,
                    prec,
                )


# --- aggregation -----------------------------------------------------------------------------


def test_aggregate_statuses_and_stand_ins(tree: dict) -> None:
    df, manifest = aggregate(tree["manifest"])
    assert manifest.scale == "testscale"
    assert run_counts(df) == {"ok": 20, "diverged": 1, "missing": 1, "total": 22}
    assert df[df["status"] != "ok"]["acc"].isna().all()
    ok = df[df["status"] == "ok"]
    assert ok["acc"].notna().all()
    assert (ok["stand_in"] == "fashion_mnist standing in for cifar10").all()
    assert set(KEYS) <= set(df.columns)


def test_a_record_copied_into_another_runs_directory_is_refused(tree: dict) -> None:
    """A run directory holding another run's ``metrics.json`` (a copy, a move gone wrong): the
    report refuses it, naming the file, instead of showing that run's numbers in this run's
    cell."""
    from lpdt.grid import ManifestError

    df, _ = aggregate(tree["manifest"])
    ok = df[df["status"] == "ok"].drop_duplicates("run_id")
    a, b = ok.iloc[0], ok.iloc[1]
    root = tree["manifest"].resolve().parent.parent  # the run dirs are relative to it
    shutil.copy(root / a["dir"] / "metrics.json", root / b["dir"] / "metrics.json")
    expected = f"the record of run {a['run_id']}, where the manifest expects run {b['run_id']}"
    with pytest.raises(ManifestError, match=expected):
        aggregate(tree["manifest"])


def test_a_copied_results_folder_reads_its_own_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A results folder copied or renamed (an archive of an earlier grid), read from the project
    where ./results holds other numbers: its own runs are read, and a run missing in it is
    missing, not taken from ./results (which its manifest's relative ``dir`` names)."""
    from tests.report.conftest import make_tree

    make_tree(tmp_path)
    archive = tmp_path / "archive" / "results-old"
    shutil.copytree(tmp_path / "results", archive)
    current, _ = aggregate(tmp_path / "results" / "manifest.json")
    ok = current[current["status"] == "ok"].drop_duplicates("run_id")
    changed, removed = ok.iloc[0], ok.iloc[1]
    metrics = archive / "runs" / changed["run_id"] / "metrics.json"
    m = json.loads(metrics.read_text())
    m["final"]["acc_node_mean"] = changed["acc"] + 10.0
    metrics.write_text(json.dumps(m))
    (archive / "runs" / removed["run_id"] / "metrics.json").unlink()
    monkeypatch.chdir(tmp_path)  # ./results/runs/<run_id> exists here
    old, _ = aggregate(Path("archive/results-old/manifest.json"))
    by_id = old.drop_duplicates("run_id").set_index("run_id")
    assert by_id.loc[changed["run_id"], "acc"] == pytest.approx(changed["acc"] + 10.0)
    assert math.isnan(by_id.loc[removed["run_id"], "acc"])
    assert by_id.loc[removed["run_id"], "status"] != "ok"


def test_the_report_says_which_engine_produced_the_runs(tree: dict) -> None:
    """Runs of both engines mix in one report: the summary counts them per engine and a table's
    setup names the engine when it is not the default simulator."""
    import dataclasses

    from lpdt import record
    from lpdt.report.describe import setup_text
    from lpdt.report.prose import what_ran

    d = tree["manifest"].parent / "runs" / "run00"
    dataclasses.replace(record.read(d / "metrics.json"), engine="distributed").write(d)
    df, manifest = aggregate(tree["manifest"])
    assert engine_counts(df) == {"distributed": 1, "simulated": 20}
    assert dict(what_ran(df, manifest))["Scale; engine"].endswith(
        "engine distributed: 1 run, simulated: 20 runs"
    )
    assert "engine distributed" in setup_text(df[df["run_id"] == "run00"])
    assert "engine" not in setup_text(df[df["run_id"] == "run01"])


def test_missing_manifest_is_a_clear_error(tmp_path: Path) -> None:
    from lpdt.cli import main

    assert (
        main(["report", "--manifest", str(tmp_path / "nope.json"), "--paper", str(PAPER_CSV)]) == 2
    )


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("nodes", [8], "coords.nodes: [8] is a list, not one value"),
        ("dataset", {"a": 1}, "coords.dataset: {'a': 1} is a dict, not one value"),
        ("skew", "abc", "coords.skew: 'abc' is not a finite number"),
        ("nodes", 2.5, "coords.nodes: 2.5 is not a whole number"),
    ],
)
def test_a_manifest_coordinate_of_the_wrong_kind_names_its_place(
    key: str, value: object, says: str, tmp_path: Path
) -> None:
    """A list (a TypeError's traceback, exit 1), a word for a number or a fraction of a node
    ("could not convert string to float", naming nothing): ``ManifestError`` naming the manifest,
    the run's place in it and the key."""
    from lpdt.grid import ManifestError

    tree = make_tree(tmp_path)
    data = json.loads(tree["manifest"].read_text())
    data["studies"]["table3"]["runs"][1]["coords"][key] = value
    tree["manifest"].write_text(json.dumps(data))
    with pytest.raises(ManifestError) as e:
        aggregate(tree["manifest"])
    assert str(e.value).startswith(f"manifest {tree['manifest']}: studies.table3.runs[1].{says}")


def test_two_runs_of_one_seed_in_a_table_cell_are_refused(tmp_path: Path) -> None:
    """A manifest listing a second run of a cell's seed 1 (another run id): Table 3 showed the
    cell's mean over four runs as "n=4" of seeds 1 2 3, without a word (the claims leave such a
    cell out; lpdt compare refuses it)."""
    tree = make_tree(tmp_path, seeds=(1, 2, 3))
    data = json.loads(tree["manifest"].read_text())
    runs = data["studies"]["table3"]["runs"]
    first = next(r for r in runs if r["seed"] == 1)
    rec = json.loads((tree["root"] / first["dir"] / "metrics.json").read_text())
    rec["run_id"] = first["run_id"] + "b"
    rec["final"]["acc_node_mean"] = 60.0
    again = tree["root"] / "results" / "runs" / rec["run_id"]
    again.mkdir(parents=True)
    (again / "metrics.json").write_text(json.dumps(rec))
    runs.append({**first, "run_id": rec["run_id"], "dir": f"results/runs/{rec['run_id']}"})
    tree["manifest"].write_text(json.dumps(data))
    df, _ = aggregate(tree["manifest"])
    with pytest.raises(ValueError) as e:
        build_tables(df, load_paper(PAPER_CSV), tree["cost"], "quick")
    assert f"runs {first['run_id']}, {rec['run_id']} share seed 1; Table 3 would average" in str(
        e.value
    )


# --- tables ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def report_out(shared_tree: dict, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("out")
    assert cli.run(report_args(shared_tree, out)) == 0
    return out


def _cell(t: pd.DataFrame, **kw: object) -> pd.Series:
    sel = t
    for k, v in kw.items():
        sel = sel[sel[k] == v]
    assert len(sel) == 1, kw
    return sel.iloc[0]


def test_tables_side_by_side(report_out: Path) -> None:
    for n in artifacts.TABLE_NUMBERS:
        for ext in ("csv", "md", "tex"):
            assert (report_out / "tables" / f"table{n}.{ext}").stat().st_size > 0
    t3 = pd.read_csv(report_out / "tables" / "table3.csv")
    base = dict(model="resnet20", topology="directed_ring", nodes=8, compression=0)
    c = _cell(t3, **base, skew=0.0, algorithm="choco", precision="fp32")
    assert c["ours"] == pytest.approx(81.0) and c["paper"] == pytest.approx(90.96)
    assert c["diff"] == pytest.approx(81.0 - 90.96) and c["status"] == "ok"
    assert _cell(t3, **base, skew=0.4, algorithm="choco", precision="fp32")["status"] == "missing"
    nr = _cell(t3, **base, skew=0.4, algorithm="deepsqueeze", precision="fp32")
    assert nr["status"] == "not run at this scale" and nr["paper"] == pytest.approx(90.36)
    assert math.isnan(nr["ours"])
    t2 = pd.read_csv(report_out / "tables" / "table2.csv")
    assert _cell(t2, dataset="cifar10", model="resnet20", precision="int8")["status"] == "diverged"
    md = (report_out / "tables" / "table3.md").read_text()
    assert "STAND-IN: fashion_mnist standing in for cifar10" in md
    assert "81.00 / 90.96 (-9.96)" in md and "not run / 90.36" in md
    assert "missing / 90.37" in md
    assert "illustrative, not at a plateau" in md  # scale testscale, one seed per cell
    tex = (report_out / "tables" / "table3.tex").read_text()
    assert r"\begin{tabular}" in tex and "fashion\\_mnist" in tex
    t10 = (report_out / "tables" / "table10.md").read_text()
    assert "100.00 / 170.60" in t10  # our fake memory beside the paper's


def test_one_seed_cells_are_labelled_illustrative_below_the_paper_scale() -> None:
    """Below the paper scale a cell with one seed is drawn on a short budget and read by no
    claim: its table's or figure's caption says it is illustrative, not at a plateau."""
    from lpdt.report.describe import illustrative_text

    runs = pd.DataFrame(
        {
            "run_id": ["a", "b", "c", "d"],
            "model": ["resnet20"] * 3 + ["vgg11"],
            "seed": [1, 2, 3, 1],
        }
    )
    assert illustrative_text(runs, "quick") == (
        "1 of its 2 cells: one seed on a short budget; illustrative, not at a plateau "
        "(no claim reads it)."
    )
    assert illustrative_text(runs[runs["model"] == "vgg11"], "quick").startswith("Every cell:")
    assert illustrative_text(runs[runs["model"] == "resnet20"], "quick") == ""  # 3 seeds
    assert illustrative_text(runs, "paper") == ""  # one seed per cell is the paper's protocol


# --- figures ---------------------------------------------------------------------------------


def test_figures_written(report_out: Path) -> None:
    for i in artifacts.FIGURE_NUMBERS:
        for ext in ("pdf", "png"):
            assert (report_out / "figures" / f"fig{i}.{ext}").stat().st_size > 1000


def test_fig1_last_epoch_from_final_evaluation(tree: dict) -> None:
    """The last epoch is evaluated once, after the final gossip rounds: Fig. 1 plots that value."""
    from lpdt.report.figures import fig1

    df, _ = aggregate(tree["manifest"])
    for h in df.loc[df["study"] == "fig1", "history"]:
        assert h[-1]["epoch"] == "final"
        del h[-2]["acc_avg_model"]  # as `lpdt train` leaves the last epoch: not evaluated
        h[-1]["acc_avg_model"] = 42.0  # the evaluation after the final gossip rounds
    fig = fig1(df)
    lines = fig.axes[0].get_lines()
    assert len(lines) == 2
    for line in lines:
        assert list(line.get_xdata()) == [1, 2, 3]
        assert line.get_ydata()[-1] == pytest.approx(100 - 42.0)


def test_partial_inputs_degrade(
    tree: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No cost CSVs, no analyses: every output is still written (with 'missing' notes), and
    one warning line per missing folder says so (a mistyped folder was silent)."""
    shutil.rmtree(tree["cost"])
    shutil.rmtree(tree["analysis"])
    out = tmp_path / "o"
    assert cli.run(report_args(tree, out)) == 0
    assert capsys.readouterr().err.splitlines() == [
        f"lpdt report: warning: cost folder {tree['cost']} does not exist; the cost tables, "
        "Figure 7 and the cost claims have no data",
        f"lpdt report: warning: analysis folder {tree['analysis']} does not exist; Figures 2 "
        "and 3 have no data",
    ]
    assert "not found" in (out / "tables" / "table10.md").read_text()
    assert all((out / "figures" / f"fig{i}.png").exists() for i in artifacts.FIGURE_NUMBERS)
    claims = {
        c["id"]: c["verdict"] for c in json.loads((out / "claims.json").read_text())["claims"]
    }
    assert claims["energy_20x"] == NO_DATA


def test_an_input_folder_without_its_files_is_a_warning(tmp_path: Path) -> None:
    """An empty cost folder, or an analysis folder that is a file, is a warning too; a folder
    that holds its files is none, and the analysis folder is checked only for the parts that
    read it (the figures and the PDF)."""
    empty, file = tmp_path / "empty", tmp_path / "file.json"
    empty.mkdir()
    file.write_text("{}")
    assert cli.input_warnings(empty, file, {"pdf"}) == [
        f"lpdt report: warning: cost folder {empty} holds no CSV file (`lpdt cost all` writes "
        "them); the cost tables, Figure 7 and the cost claims have no data",
        f"lpdt report: warning: analysis folder {file} is not a folder; Figures 2 and 3 have "
        "no data",
    ]
    assert cli.input_warnings(empty, file, {"claims"}) == cli.input_warnings(
        empty, empty, {"tables"}
    )
    assert len(cli.input_warnings(empty, file, {"claims"})) == 1
    (empty / "table7.csv").write_text("x\n")
    (tmp_path / "topology_ring.json").write_text("{}")
    assert cli.input_warnings(empty, tmp_path, set(cli.ONLY)) == []


def test_a_claims_file_ending_in_md_is_refused_before_any_work(
    tree: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--claims out/claims.md`` wrote the Markdown over the JSON (``wrote out/claims.md``
    twice): one line, exit 2, before the manifest is read or anything written."""
    from lpdt.cli import main
    from lpdt.report.claim_text import write_claims

    out = tmp_path / "o"
    argv = report_argv(tree, out, "claims")
    argv[argv.index("--claims") + 1] = str(out / "claims.md")
    assert main(["report", *argv]) == 2
    got = capsys.readouterr()
    assert got.out == "" and len(got.err.strip().splitlines()) == 1
    assert got.err.startswith(
        f"lpdt report: error: the claims file {out / 'claims.md'} ends in .md"
    )
    assert not out.exists()
    with pytest.raises(ValueError, match="ends in .md"):
        write_claims([], out / "claims.MD")
    assert not out.exists()
    argv[argv.index("--only") + 1] = "tables"  # no claims written: no collision to refuse
    assert main(["report", *argv]) == 0


@pytest.mark.parametrize(
    ("option", "input_key", "says"),
    [
        ("--tables", "cost", "is the input folder --cost; its files would be written over"),
        ("--figures", "analysis", "is the input folder --analysis"),
        ("--claims", "manifest", "is the input --manifest; it would be written over"),
        ("--pdf", "paper", "is the input --paper"),
    ],
)
def test_an_output_that_is_an_input_is_refused_before_any_work(
    option: str, input_key: str, says: str, tree: dict, tmp_path: Path, capsys
) -> None:
    """``--tables <the cost folder>`` replaced the cost model's table7.csv, table9.csv and
    table10.csv with the report's tables of those names (the next report failed); ``--claims``
    the manifest and ``--pdf`` the paper's CSV were written over. Each exited 0. Now one line,
    exit 2, every input as it was."""
    import shutil

    from lpdt.cli import main

    paper = tmp_path / "paper.csv"
    shutil.copy(tree["paper"], paper)
    inputs = {**tree, "paper": paper}
    argv = report_argv(inputs, tmp_path / "o")
    argv[argv.index("--paper") + 1] = str(paper)
    argv[argv.index(option) + 1] = str(inputs[input_key])
    before = {
        f: f.read_bytes()
        for k in ("cost", "analysis", "manifest", "paper")
        for f in ([inputs[k]] if inputs[k].is_file() else sorted(inputs[k].iterdir()))
    }
    assert main(["report", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"lpdt report: error: {option} {inputs[input_key]} {says}"), err
    assert {f: f.read_bytes() for f in before} == before


def test_a_damaged_analysis_file_is_drawn_as_a_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An analysis file of the wrong shape (a list where an object goes, an empty histogram) is
    left out of the text and drawn as its figure's one-line message (it stopped the report with
    an AttributeError or an IndexError). Figure 2 alone is drawn, to keep this quick."""
    from lpdt.report.describe import partition_text
    from lpdt.report.figures import write_figures

    monkeypatch.setattr(artifacts, "FIGURE_LIST", [artifacts.FIGURE_BY_STEM["fig2"]])
    path = tmp_path / "partition.json"
    cases = (("[1, 2]", True), ('{"nodes": 4, "skews": {"0.0": []}}', False), ("", True))
    for i, (damaged, names_the_file) in enumerate(cases):
        path.write_text(damaged)
        if i == 0:
            assert partition_text(tmp_path).startswith("no partition JSON")
        out = tmp_path / f"figures{i}"
        warned: list[str] = []
        written = write_figures(
            pd.DataFrame(), pd.DataFrame(), tmp_path, tmp_path, out, warned.append
        )
        assert {p.name for p in written} == {"fig2.pdf", "fig2.png"}
        # the warning the report prints on stderr; a file that is no JSON object is named
        assert len(warned) == 1 and warned[0].startswith("could not draw fig2: "), warned
        assert (str(path) in warned[0]) is names_the_file, warned


# --- claims ----------------------------------------------------------------------------------


def _cells(rows: list[dict]) -> pd.DataFrame:
    base = {k: None for k in KEYS} | {
        "dataset": "cifar10",
        "model": "resnet20",
        "topology": "directed_ring",
        "nodes": 8,
        "qgm": False,
        "compression": 0,
        "skew": 0.0,
    }
    return pd.DataFrame([base | r for r in rows])


def _grid(
    lp_gap_dense: float,
    lp_gap_comp: float,
    choco_minus_ds: float,
    skew_drop: float,
    qgm_gain: float,
    jitter: tuple[float, ...] = (-0.1, 0.0, 0.1),
) -> pd.DataFrame:
    """Every effect is its argument + jitter[k] on seed k + 1 (jitter sums to 0: mean = argument)."""
    rows = []
    for k, j in enumerate(jitter):
        for c in (0, 99):
            for s in (0.0, 0.9):
                for a in ("deepsqueeze", "choco"):
                    for p in ("fp32", "int8"):
                        acc = (
                            80.0 - (skew_drop + j) * s + (choco_minus_ds + j if a == "choco" else 0)
                        )
                        acc -= (lp_gap_dense if c == 0 else lp_gap_comp) + j if p == "int8" else 0
                        rows.append(
                            {
                                "study": "table3",
                                "compression": c,
                                "skew": s,
                                "algorithm": a,
                                "precision": p,
                                "acc": acc,
                                "seed": k + 1,
                            }
                        )
        base = 80.0 - (skew_drop + j) * 0.9 + choco_minus_ds + j
        rows.append(
            {
                "study": "table4",
                "qgm": True,
                "compression": 0,
                "skew": 0.9,
                "algorithm": "choco",
                "precision": "fp32",
                "acc": base + qgm_gain + j,
                "seed": k + 1,
            }
        )
    return _cells(rows)


def test_claims_hold_on_constructed_data() -> None:
    r = accuracy_claims(
        _grid(lp_gap_dense=0.5, lp_gap_comp=1.5, choco_minus_ds=0.3, skew_drop=5, qgm_gain=1)
    )
    for k in (
        "lp_close_to_fp_dense",
        "lp_loss_compressed",
        "choco_beats_ds",
        "acc_falls_with_skew",
        "qgm_helps_high_skew",
    ):
        assert r[k]["verdict"] == HELD, (k, r[k])
        assert r[k]["n"] == 3 and len(r[k]["ci"]) == 2
    d = r["lp_close_to_fp_dense"]
    assert d["mean"] == pytest.approx(0.5) and d["sd"] == pytest.approx(0.1)
    assert d["ci"] == pytest.approx(
        [0.5 - 4.3027 * 0.1 / 3**0.5, 0.5 + 4.3027 * 0.1 / 3**0.5], abs=1e-3
    )
    assert d["cells"] == 4 and d["pairs"] == 12
    assert r["lp_gain_high_skew"]["verdict"] == NOT_HELD  # LP is 0.5 +- 0.1 below FP at skew 0.9


def test_claims_fail_on_constructed_data() -> None:
    r = accuracy_claims(
        _grid(lp_gap_dense=1.5, lp_gap_comp=3.0, choco_minus_ds=-0.3, skew_drop=-2, qgm_gain=-1)
    )
    for k in (
        "lp_close_to_fp_dense",
        "lp_loss_compressed",
        "choco_beats_ds",
        "acc_falls_with_skew",
        "qgm_helps_high_skew",
    ):
        assert r[k]["verdict"] == NOT_HELD, (k, r[k])
    gain = accuracy_claims(
        _grid(
            lp_gap_dense=-0.4,
            lp_gap_comp=1,
            choco_minus_ds=0,
            skew_drop=1,
            qgm_gain=0,
            jitter=(0.0, 0.0, 0.0),
        )
    )
    assert gain["lp_gain_high_skew"]["verdict"] == HELD
    assert gain["qgm_helps_high_skew"]["verdict"] == NOT_HELD  # 0 is no improvement


def test_claims_inconclusive_when_the_interval_straddles() -> None:
    # FP - LP = 0.5 + (-2, 0, 2) over the seeds: mean 0.5, interval about [-4.5, 5.5]
    r = accuracy_claims(
        _grid(
            lp_gap_dense=0.5,
            lp_gap_comp=1.5,
            choco_minus_ds=0.3,
            skew_drop=5,
            qgm_gain=1,
            jitter=(-2.0, 0.0, 2.0),
        )
    )
    assert r["lp_close_to_fp_dense"]["verdict"] == INCONCLUSIVE
    assert r["lp_close_to_fp_dense"]["mean"] == pytest.approx(0.5)


def test_claims_one_seed_is_not_enough() -> None:
    r = accuracy_claims(
        _grid(
            lp_gap_dense=0.5,
            lp_gap_comp=1.5,
            choco_minus_ds=0.3,
            skew_drop=5,
            qgm_gain=1,
            jitter=(0.0,),
        )
    )
    d = r["lp_close_to_fp_dense"]
    assert d["verdict"] == NO_DATA and d["n"] == 1 and d["ci"] is None
    assert d["mean"] == pytest.approx(0.5) and "one seed" in d["why"]


def test_claims_without_data() -> None:
    r = accuracy_claims(
        _cells(
            [
                {"study": "table3", "precision": "fp32", "algorithm": "choco", "acc": 80.0},
                {"study": "table3", "precision": "int8", "algorithm": "choco", "acc": float("nan")},
            ]
        )
    )
    assert {v["verdict"] for v in r.values()} == {NO_DATA}


@pytest.mark.parametrize(
    ("kw", "verdict"),
    [
        ({}, HELD),
        ({"comm_ratio": 2.0}, NOT_HELD),
        # the paper's Table 3 counts a top-k 8-bit message as fp32 / 4: not what 8-bit values give
        ({"topk_ratio": 4.0}, NOT_HELD),
        ({"topk_ratio": 1.6}, NOT_HELD),
        ({"topk_ratio": 1.8}, HELD),
    ],
)
def test_comm_claim_tests_the_ratio_each_format_implies(
    tmp_path: Path, kw: dict, verdict: str
) -> None:
    """4x for dense messages, (4 + 2) / (1 + 2) = 2x for top-k with uint16 indices, +-12.5 %."""
    write_cost(tmp_path, **kw)
    r = cost_claims(tmp_path)["comm_4x"]
    assert r["verdict"] == verdict and r["n"] == 2
    assert r["dense_implied"] == [4.0] and r["top-k_implied"] == [2.0]
    assert r["top-k_ratio"] == [pytest.approx(kw.get("topk_ratio", 2.0))] * 2


def test_comm_claim_without_wire_bytes_says_which_file(tmp_path: Path) -> None:
    r = cost_claims(tmp_path)["comm_4x"]
    assert r["verdict"] == NO_DATA and "wire_bytes.csv not found" in r["why"]


@pytest.mark.parametrize(
    ("claim", "kw", "value"),
    [
        ("energy_20x", {"energy_eff": 10.0}, 10.0),
        ("energy_20x", {}, 19.9),
        ("memory_3_5x_resnet", {"mem_eff": 1.3}, 1.3),
    ],
)
def test_energy_and_memory_are_arithmetic_without_a_verdict(
    tmp_path: Path, claim: str, kw: dict, value: float
) -> None:
    write_cost(tmp_path, **kw)
    r = cost_claims(tmp_path)[claim]
    assert r["verdict"] == ARITHMETIC and r["mean"] == pytest.approx(value)


def test_claims_file(report_out: Path) -> None:
    d = json.loads((report_out / "claims.json").read_text())
    ids = {c["id"]: c for c in d["claims"]}
    # One seed per cell in the fake tree: a mean, no interval
    choco = ids["choco_beats_ds"]
    assert choco["verdict"] == NO_DATA and choco["mean"] == pytest.approx(1.0)  # Choco is +1
    assert choco["n"] == 1 and choco["ci"] is None and "one seed" in choco["numbers"]["why"]
    assert ids["lp_close_to_fp_dense"]["mean"] == pytest.approx(0.5)
    for c in d["claims"]:
        for key in (
            "verdict",
            "mean",
            "ci",
            "n",
            "threshold",
            "direction",
            "paper_effect",
            "interval_method",
            "effect",
            "rule",
            "paper_verdict",
        ):
            assert key in c, (c["id"], key)
    assert ids["comm_4x"]["verdict"] == HELD and ids["comm_4x"]["threshold"] == [0.875, 1.125]
    assert ids["comm_4x"]["paper_verdict"] == NOT_HELD  # the paper's top-k 8-bit GB is fp32 / 4
    # energy and memory: shown, no verdict, not counted
    assert {ids[k]["verdict"] for k in ("energy_20x", "memory_3_5x_resnet")} == {ARITHMETIC}
    # counts: the 9 accuracy claims (interval against a threshold); the measured cost claim
    # (comm_4x, held above) apart in cost_counts; energy and memory in neither
    assert d["counts"] == {"held": 0, "not held": 0, "inconclusive": 0, "not enough data": 9}
    assert d["cost_counts"] == {"held": 1, "not held": 0, "inconclusive": 0, "not enough data": 0}
    assert d["version"] == CLAIMS_VERSION and {c["version"] for c in d["claims"]} == {
        CLAIMS_VERSION
    }
    assert (report_out / "claims.md").read_text().count("\n") == len(d["claims"]) + 2


# --- PDF -------------------------------------------------------------------------------------


def test_pdf(report_out: Path) -> None:
    pdf = report_out / "report.pdf"
    assert pdf.read_bytes()[:4] == b"%PDF"
    if not shutil.which("pdftotext") or not shutil.which("pdfinfo"):
        pytest.skip("poppler-utils not installed")
    info = subprocess.run(["pdfinfo", str(pdf)], capture_output=True, text=True, check=True).stdout
    pages = int(next(line.split()[-1] for line in info.splitlines() if line.startswith("Pages:")))
    assert pages >= 8
    text = subprocess.run(
        ["pdftotext", str(pdf), "-"], capture_output=True, text=True, check=True
    ).stdout
    for s in (
        "testscale",
        "STAND-IN",
        "fashion_mnist standing in for cifar10",
        "Claims check",
        "Table 10",
        "Figure 7",
        "1 diverged",
        "1 missing",
        "Where our numbers differ",
    ):
        assert s in text, s


def test_the_energy_table_says_whether_its_file_is_missing_or_damaged(tmp_path: Path) -> None:
    """The cost model's summary.json: missing, cut short (was reported as "missing" too) or
    without the energy table: each said as it is; a whole one is quoted."""
    from lpdt.report.describe import energy_text

    assert "summary.json missing" in energy_text(tmp_path)
    (tmp_path / "summary.json").write_text('{"energy_table_pj": {"fp32_add": 0.9,')
    assert "summary.json cannot be read" in energy_text(tmp_path)
    (tmp_path / "summary.json").write_text("{}")
    assert "none in" in energy_text(tmp_path)
    table = {"fp32_add": 0.9, "fp32_mult": 3.7, "int8_add": 0.03, "int8_mult": 0.2}
    (tmp_path / "summary.json").write_text(json.dumps({"energy_table_pj": table}))
    assert energy_text(tmp_path).startswith("Energy per operation (fp32 add 0.9, mult 3.7;")


def test_tables_alone_need_no_plateau_check(tree: dict, tmp_path: Path, capsys) -> None:
    """``--only tables`` (or figures) read the plateau check all the same, and stopped where no
    file was found; the claims and the PDF, which use it, still need it."""
    from lpdt.cli import main

    argv = report_argv({**tree, "plateau": tmp_path / "none.csv"}, tmp_path / "out", "tables")
    assert main(["report", *argv]) == 0, capsys.readouterr().err
    argv[argv.index("--only") + 1] = "claims"
    assert main(["report", *argv]) == 2
    assert "plateau check" in capsys.readouterr().err
