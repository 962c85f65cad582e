"""Intervals, verdicts and pairing by seed on constructed inputs whose answers are known."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from lpdt.report import cli
from lpdt.report.aggregate import KEYS, aggregate
from lpdt.report.claim_accuracy import accuracy_claims
from lpdt.report.claims import check_claims, paper_cells
from lpdt.report.paper import load_paper
from lpdt.report.stats import (
    HELD,
    INCONCLUSIVE,
    NO_DATA,
    NOT_HELD,
    point_verdict,
    t_interval,
    t_quantile,
    verdict,
)
from tests.report.conftest import PAPER_CSV, report_args

# --- the t quantile and the interval ------------------------------------------------------------


@pytest.mark.parametrize(
    ("df", "q"), [(1, 12.706), (2, 4.303), (4, 2.776), (9, 2.262), (29, 2.045), (10_000, 1.960)]
)
def test_t_quantile_known_values(df: int, q: float) -> None:
    assert t_quantile(0.975, df) == pytest.approx(q, abs=1e-3)
    assert t_quantile(0.025, df) == pytest.approx(-q, abs=1e-3)


def test_t_quantile_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="degrees of freedom"):
        t_quantile(0.975, 0)
    with pytest.raises(ValueError, match="p must be"):
        t_quantile(1.0, 3)


def test_t_interval_of_one_two_three() -> None:
    iv = t_interval([1.0, 2.0, 3.0])
    half = 4.302653 / math.sqrt(3)
    assert (iv.n, iv.mean, iv.sd) == (3, pytest.approx(2.0), pytest.approx(1.0))
    assert iv.ci == pytest.approx([2.0 - half, 2.0 + half], abs=1e-5)


def test_t_interval_two_values_and_constant_values() -> None:
    iv = t_interval([0.0, 2.0])  # mean 1, sd sqrt(2), t(0.975, 1) = 12.706
    assert iv.ci == pytest.approx([1 - 12.7062, 1 + 12.7062], abs=1e-3)
    assert t_interval([2.0, 2.0, 2.0]).ci == pytest.approx([2.0, 2.0])


def test_t_interval_needs_two_values() -> None:
    one = t_interval([5.0, float("nan")])  # NaN dropped
    assert (one.n, one.mean, one.sd, one.ci) == (1, 5.0, None, None)
    none = t_interval([])
    assert (none.n, none.mean, none.ci) == (0, None, None)


# --- the verdict rule -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("low", "high", "threshold", "direction", "expected"),
    [
        (0.2, 0.8, 1.0, "<=", HELD),  # entirely at or below the threshold
        (0.5, 1.0, 1.0, "<=", HELD),  # the threshold itself is on the claim's side
        (1.2, 2.0, 1.0, "<=", NOT_HELD),  # entirely above
        (0.5, 1.5, 1.0, "<=", INCONCLUSIVE),  # straddles
        (1.0, 2.0, 1.0, "<=", INCONCLUSIVE),  # touches from the other side
        (0.1, 1.0, 0.0, ">", HELD),
        (-1.0, -0.1, 0.0, ">", NOT_HELD),
        (-1.0, 0.0, 0.0, ">", NOT_HELD),  # 0 is no improvement
        (0.0, 1.0, 0.0, ">", INCONCLUSIVE),
        (-1.0, 1.0, 0.0, ">", INCONCLUSIVE),
        (None, None, 0.0, ">", NO_DATA),
    ],
)
def test_verdict(low, high, threshold, direction, expected) -> None:  # noqa: ANN001
    assert verdict(low, high, threshold, direction) == expected


def test_verdict_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="direction"):
        verdict(0.0, 1.0, 0.0, ">=")
    with pytest.raises(ValueError, match="low > high"):
        verdict(1.0, 0.0, 0.0, ">")


def test_point_verdict() -> None:
    assert point_verdict(0.13, 1.0, "<=") == HELD
    assert point_verdict(-0.07, 0.0, ">") == NOT_HELD
    assert point_verdict(None, 0.0, ">") == NO_DATA


# --- pairing by seed -----------------------------------------------------------------------------


def _cells(rows: list[dict]) -> pd.DataFrame:
    base = {k: None for k in KEYS} | {
        "study": "table3",
        "dataset": "cifar10",
        "model": "resnet20",
        "topology": "directed_ring",
        "nodes": 8,
        "qgm": False,
        "compression": 0,
        "skew": 0.0,
        "algorithm": "choco",
    }
    return pd.DataFrame([base | r for r in rows])


def _fp_lp(fp: dict[int, float], lp: dict[int, float], **coords: object) -> list[dict]:
    return [{"precision": "fp32", "seed": s, "acc": a, **coords} for s, a in fp.items()] + [
        {"precision": "int8", "seed": s, "acc": a, **coords} for s, a in lp.items()
    ]


def test_pairs_are_formed_by_seed() -> None:
    # The seeds differ a lot (70 / 80 / 90) but FP - LP per seed is 1, 2, 3: only pairing by seed
    # gives sd 1 (unpaired, the spread between seeds would dominate).
    fp = {1: 70.0, 2: 80.0, 3: 90.0}
    lp = {1: 69.0, 2: 78.0, 3: 87.0}
    r = accuracy_claims(_cells(_fp_lp(fp, lp)))["lp_close_to_fp_dense"]
    assert (r["n"], r["mean"], r["sd"]) == (3, pytest.approx(2.0), pytest.approx(1.0))
    assert r["ci"] == pytest.approx([2 - 4.302653 / 3**0.5, 2 + 4.302653 / 3**0.5], abs=1e-4)
    assert r["per_seed"] == {"1": 1.0, "2": 2.0, "3": 3.0}
    assert r["verdict"] == INCONCLUSIVE  # the interval [-0.48, 4.48] straddles 1.0


def test_pooled_cells_average_per_seed() -> None:
    # Cell A: diffs 1, 2, 3; cell B (skew 0.8): 3, 4, 5 -> per seed 2, 3, 4: mean 3, sd 1, n 3
    rows = _fp_lp({1: 80.0, 2: 80.0, 3: 80.0}, {1: 79.0, 2: 78.0, 3: 77.0})
    rows += _fp_lp({1: 70.0, 2: 70.0, 3: 70.0}, {1: 67.0, 2: 66.0, 3: 65.0}, skew=0.8)
    r = accuracy_claims(_cells(rows))["lp_close_to_fp_dense"]
    assert (r["n"], r["cells"], r["pairs"]) == (3, 2, 6)
    assert r["mean"] == pytest.approx(3.0) and r["sd"] == pytest.approx(1.0)
    assert r["verdict"] == INCONCLUSIVE


def test_a_seed_missing_on_one_side_drops_that_pair_only() -> None:
    rows = _fp_lp({1: 80.0, 2: 80.0, 3: 80.0}, {1: 79.9, 2: 79.8, 3: float("nan")})
    r = accuracy_claims(_cells(rows))["lp_close_to_fp_dense"]
    assert r["n"] == 2 and r["per_seed"] == {"1": pytest.approx(0.1), "2": pytest.approx(0.2)}
    assert r["verdict"] == HELD  # 0.15 +- 12.706 * 0.0707 / sqrt(2) = [-0.49, 0.79] <= 1


def test_a_cell_with_fewer_seeds_is_excluded_not_mixed_in() -> None:
    # Cell A (3 seeds): diffs 1, 2, 3. Cell B (table5, seed 1 only): diff 10. Mixing B into seed
    # 1's mean would make it 5.5; the claim instead uses A's seed set and counts B as excluded.
    rows = _fp_lp({1: 80.0, 2: 80.0, 3: 80.0}, {1: 79.0, 2: 78.0, 3: 77.0})
    rows += _fp_lp({1: 70.0}, {1: 60.0}, study="table5", dataset="imagenette")
    r = accuracy_claims(_cells(rows))["lp_close_to_fp_dense"]
    assert r["per_seed"] == {"1": 1.0, "2": 2.0, "3": 3.0}
    assert (r["n"], r["cells"], r["cells_excluded"]) == (3, 1, 1)


def test_skew_series_pair_by_seed() -> None:
    rows = []
    for seed, (a0, a8) in {1: (80.0, 70.0), 2: (82.0, 71.0), 3: (84.0, 72.0)}.items():
        rows += [
            {"precision": "fp32", "seed": seed, "skew": 0.0, "acc": a0},
            {"precision": "fp32", "seed": seed, "skew": 0.8, "acc": a8},
        ]
    r = accuracy_claims(_cells(rows))["acc_falls_with_skew"]
    assert r["per_seed"] == {"1": 10.0, "2": 11.0, "3": 12.0}
    assert r["verdict"] == HELD  # 11 +- 2.48 > 0


def test_paper_effect_is_the_mean_paired_difference_of_the_paper() -> None:
    """The paper's own effect comes from the same code: check one by hand."""
    paper = load_paper(PAPER_CSV)
    p = paper_cells(paper)
    d = p[p["study"].isin(["table3", "table4", "table5", "table6"]) & (p["compression"] == 0)]
    keys = [k for k in KEYS if k not in ("precision", "norm")]
    m = d[d["precision"] == "fp32"].merge(d[d["precision"] == "int8"], on=keys)
    want = float((m["acc_x"] - m["acc_y"]).mean())
    r = accuracy_claims(p)["lp_close_to_fp_dense"]
    assert r["n"] == 1 and r["mean"] == pytest.approx(want, abs=1e-4)
    assert r["cells"] == len(m) > 10


# --- the report with seeds -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def seeded_out(seeded_tree: dict, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("seeded_out")
    assert cli.run(report_args(seeded_tree, out)) == 0
    return out


def test_aggregate_keeps_the_seed(seeded_tree: dict) -> None:
    df, _ = aggregate(seeded_tree["manifest"])
    t3 = df[df["study"] == "table3"]
    assert sorted(set(t3["seed"])) == [1, 2, 3]
    assert (t3.groupby("seed").size() == len(t3) // 3).all()


def test_tables_print_mean_sd_n(seeded_out: Path) -> None:
    t3 = pd.read_csv(seeded_out / "tables" / "table3.csv")
    c = t3[
        (t3["skew"] == 0.0)
        & (t3["compression"] == 0)
        & (t3["algorithm"] == "choco")
        & (t3["precision"] == "int8")
    ].iloc[0]
    # 8-bit accuracies 80.5 - 0.2, 80.5, 80.5 + 0.2 over the seeds
    assert c["ours"] == pytest.approx(80.5) and c["ours_sd"] == pytest.approx(0.2)
    assert c["n"] == 3 and c["runs"] == 3 and c["seeds"] == "1 2 3"
    md = (seeded_out / "tables" / "table3.md").read_text()
    assert "80.50 ± 0.20 (n=3) / " in md
    assert "81.00 ± 0.00 (n=3) / 90.96 (-9.96)" in md
    assert "mean ± sd (n=K)" in md


def test_claims_json_with_seeds(seeded_out: Path) -> None:
    d = json.loads((seeded_out / "claims.json").read_text())
    ids = {c["id"]: c for c in d["claims"]}
    dense = ids["lp_close_to_fp_dense"]
    # FP - LP per seed: 0.5 + 0.2, 0.5, 0.5 - 0.2 -> mean 0.5, sd 0.2
    assert (
        dense["n"] == 3
        and dense["mean"] == pytest.approx(0.5)
        and dense["sd"] == pytest.approx(0.2)
    )
    half = 4.302653 * 0.2 / 3**0.5
    assert dense["ci"] == pytest.approx([0.5 - half, 0.5 + half], abs=1e-4)
    assert dense["verdict"] == HELD and dense["threshold"] == 1.0 and dense["direction"] == "<="
    assert dense["paper_effect"] is not None and "t-interval" in dense["interval_method"]
    assert ids["choco_beats_ds"]["verdict"] == HELD  # Choco is +1 in every seed


def test_check_claims_works_without_a_seed_column(shared_tree: dict, seeded_tree: dict) -> None:
    df, _ = aggregate(shared_tree["manifest"])  # one run per cell
    out = check_claims(df.drop(columns="seed"), load_paper(PAPER_CSV), shared_tree["cost"])
    assert {c.id: c.n for c in out}["lp_close_to_fp_dense"] == 1  # one unnamed seed
    # Three runs per cell and side with no seed to tell them apart: ambiguous, so nothing pairs,
    # and the claim names the runs (no first-found run is taken).
    df, _ = aggregate(seeded_tree["manifest"])
    out = check_claims(df.drop(columns="seed"), load_paper(PAPER_CSV), seeded_tree["cost"])
    dense = {c.id: c for c in out}["lp_close_to_fp_dense"]
    assert dense.n == 0 and dense.verdict == NO_DATA
    left = dense.numbers["cells_left_out"]
    # (the tree's skew-0.4 FP run is listed without a record: missing, and nothing to pair with)
    assert {c["why"] for c in left} == {"no pair (duplicate)", "no pair (missing)"}
    assert "has several runs (run" in left[0]["set_aside"][0]["detail"]


def test_summary_page(seeded_out: Path) -> None:
    pdf = seeded_out / "report.pdf"
    if not shutil.which("pdftotext"):
        pytest.skip("poppler-utils not installed")
    first = subprocess.run(
        ["pdftotext", "-f", "1", "-l", "1", "-layout", str(pdf), "-"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for s in (
        "reproduction summary",
        "Of 9 accuracy claims",
        "± / detectable",
        "±0.50 / 0.62",  # lp_close_to_fp_dense: sd 0.2, n 3 (test_claims_json_with_seeds)
        "figure only",
        "over 3 seeds",
        "What ran",
        "3 seeds (1-3)",
        "testscale",
        "fashion_mnist standing in for cifar10",
        "training wall time",
        "0.50 [",
        "(n=3)",
        "Verdict",
        "The largest gap to the paper",
        "accuracy claims.",
        "60 of 66 runs finished (3 diverged, 3 missing)",
    ):
        assert s in " ".join(first.split()), s
    text = subprocess.run(
        ["pdftotext", "-layout", str(pdf), "-"], capture_output=True, text=True, check=True
    ).stdout
    # Figures before the long tables; versions in the appendix at the end
    assert text.index("Figure 4.") < text.index("Table 3: CIFAR-10") < text.index("Appendix")
    assert text.index("Appendix") < text.index("Version: python")


# --- rules that match the words (claims version 4) ------------------------------------------------


@pytest.mark.parametrize(
    ("low", "high", "want"),
    [
        (0.2, 1.8, HELD),
        (0.0, 2.0, HELD),  # the whole interval in [0, 2]
        (-4.0, -1.0, NOT_HELD),
        (2.5, 3.0, NOT_HELD),  # entirely below / above the range
        (-0.5, 1.0, INCONCLUSIVE),
        (1.5, 2.5, INCONCLUSIVE),
        (-1.0, 3.0, INCONCLUSIVE),
    ],
)
def test_range_verdict(low: float, high: float, want: str) -> None:
    assert verdict(low, high, (0.0, 2.0), "within") == want


def test_range_needs_a_range() -> None:
    with pytest.raises(ValueError, match="needs a threshold"):
        verdict(0.0, 1.0, 2.0, "within")
    assert point_verdict(-3.0, (0.0, 2.0), "within") == NOT_HELD
    assert point_verdict(1.2, (0.0, 2.0), "within") == HELD


def _compressed(fp: dict[int, float], lp: dict[int, float]) -> dict:
    rows = _fp_lp(fp, lp, compression=99)
    return accuracy_claims(_cells(rows))["lp_loss_compressed"]


@pytest.mark.parametrize(
    ("lp", "want"),
    [
        ({1: 79.0, 2: 79.1, 3: 78.9}, HELD),  # FP - LP = 1.0, 0.9, 1.1: a loss within 2 points
        (
            {1: 83.0, 2: 83.1, 3: 82.9},
            NOT_HELD,
        ),  # LP 3 points *better*: not the loss the paper says
        ({1: 76.0, 2: 76.1, 3: 75.9}, NOT_HELD),  # a 4-point loss
        ({1: 80.5, 2: 79.0, 3: 79.5}, INCONCLUSIVE),  # -0.5, 1.0, 0.5: the interval straddles 0
    ],
)
def test_lp_loss_compressed_is_a_loss_of_at_most_2_points(lp: dict, want: str) -> None:
    r = _compressed({1: 80.0, 2: 80.0, 3: 80.0}, lp)
    assert r["verdict"] == want, r


def test_paper_effect_over_our_cells(seeded_tree: dict) -> None:
    """The paper's effect is the mean over the paper's cells that match the cells ours used
    (coordinates compared canonically: 8 and 8.0 nodes are one cell); its all-cells effect stays
    beside it."""
    paper = load_paper(PAPER_CSV)
    df, _ = aggregate(seeded_tree["manifest"])
    out = {c.id: c for c in check_claims(df, paper, seeded_tree["cost"])}
    dense = out["lp_close_to_fp_dense"]
    # ours: table3's 8-node ring, 0 %, skew 0 and 0.8, Choco and Deep-Squeeze (ResNet-20)
    p = paper_cells(paper)
    sel = p[
        (p["study"] == "table3")
        & (p["model"] == "resnet20")
        & (p["nodes"] == 8)
        & (p["compression"] == 0)
        & p["skew"].isin([0.0, 0.8])
    ]
    fp, lp = sel[sel["precision"] == "fp32"], sel[sel["precision"] == "int8"]
    m = fp.merge(lp, on=["skew", "algorithm"])
    assert len(m) == 4 and dense.paper_cells == 4
    assert dense.paper_effect == pytest.approx(float((m["acc_x"] - m["acc_y"]).mean()), abs=1e-4)
    everything = accuracy_claims(p)["lp_close_to_fp_dense"]
    assert dense.paper_cells_all == everything["cells"] > 4
    assert dense.paper_effect_all_cells == everything["mean"] != dense.paper_effect


def test_paper_effect_is_none_when_the_paper_has_none_of_our_cells() -> None:
    """A claim whose cells the paper does not have (here: skew 0.3, which no table has) gets no
    paper effect, not the paper's effect over other cells."""
    paper = load_paper(PAPER_CSV)
    rows = _fp_lp({1: 80.0, 2: 80.0}, {1: 79.5, 2: 79.0}, skew=0.3)
    df = _cells(rows).assign(stand_in="")
    out = {c.id: c for c in check_claims(df, paper, Path("/nonexistent"))}
    assert out["lp_close_to_fp_dense"].mean == pytest.approx(0.75)
    assert out["lp_close_to_fp_dense"].paper_effect is None
    assert out["lp_close_to_fp_dense"].paper_cells == 0
    assert out["lp_close_to_fp_dense"].paper_effect_all_cells is not None


def test_paper_cells_of_the_nearest_ring_match_ours() -> None:
    """Our 4-node claim cells stand for the paper's 8-node ones: Table 3 has no 4-node ResNet-20
    cell, so exact matching would find none (the choice among several node counts:
    test_paper_match_takes_the_nearest_node_count_only_where_the_rest_is_equal)."""
    paper = load_paper(PAPER_CSV)
    p = paper_cells(paper)
    rows = _fp_lp({1: 80.0, 2: 80.0}, {1: 79.5, 2: 79.0}, nodes=4)
    df = _cells(rows).assign(stand_in="")
    dense = {c.id: c for c in check_claims(df, paper, Path("/nonexistent"))}["lp_close_to_fp_dense"]
    base = df.iloc[0]
    sel = p[
        (p["study"] == "table3")
        & (p["model"] == base["model"])
        & (p["algorithm"] == base["algorithm"])
        & (p["compression"] == 0)
        & (p["skew"] == base["skew"])
    ]
    assert 4 not in set(sel["nodes"]) and 8 in set(sel["nodes"])
    eight = sel[sel["nodes"] == 8]
    fp, lp = eight[eight["precision"] == "fp32"], eight[eight["precision"] == "int8"]
    assert dense.paper_cells == 1
    want = float(fp["acc"].iloc[0] - lp["acc"].iloc[0])
    assert dense.paper_effect == pytest.approx(want, abs=1e-4)


def test_paper_match_takes_the_nearest_node_count_only_where_the_rest_is_equal() -> None:
    from lpdt.report.claims import paper_match

    keys = ["model", "nodes", "skew"]
    theirs = {("r20", "8", "0.0"), ("r20", "16", "0.0"), ("r20", "16", "0.9"), ("r54", "8", "0.0")}
    assert paper_match({("r20", "4", "0.0")}, theirs, keys) == {("r20", "8", "0.0")}
    assert paper_match({("r20", "4", "0.9")}, theirs, keys) == {("r20", "16", "0.9")}
    assert paper_match({("r20", "4", "0.4")}, theirs, keys) == set()
    assert paper_match({("r20", "16", "0.0")}, theirs, keys) == {("r20", "16", "0.0")}
    assert paper_match({("r20", "4", "0.0")}, theirs, ["model", "x", "skew"]) == set()
