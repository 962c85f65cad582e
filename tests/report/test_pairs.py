"""Pairing (lpdt.report.pairs, lpdt.report.summary) on constructed frames whose answer is known,
computed here by hand: every pair accounted for (a diverged run counted as a loss on the claim's
side, else set aside; missing, unpaired, duplicate, not shared), the cells chosen for coverage at
the claim's minimum of seeds, the norm held fixed or each precision's paper norm, config values
beyond the coordinates."""

from __future__ import annotations

import math
import re

import pandas as pd
import pytest

from lpdt.report import pairs, summary
from lpdt.report.aggregate import KEYS
from lpdt.report.claim_accuracy import accuracy_claims
from lpdt.report.claims import BY_ID, Claim
from lpdt.report.stats import NO_DATA
from tests.report.conftest import CLAIM_CELL

BASE = {k: None for k in KEYS} | CLAIM_CELL | {"qgm": False}


def _runs(cells: dict[float, dict[int, tuple[object, object]]], study: str = "table3") -> list:
    """Rows of an FP and an 8-bit run per (skew, seed): (fp acc, int8 acc), an accuracy or
    "diverged" / "missing" / None (no run)."""
    rows = []
    for skew, seeds in cells.items():
        for seed, accs in seeds.items():
            for prec, acc in zip(("fp32", "int8"), accs, strict=True):
                if acc is None:
                    continue
                status = acc if isinstance(acc, str) else "ok"
                rows.append(
                    BASE
                    | {
                        "study": study,
                        "run_id": f"{prec}-{skew}-{seed}",
                        "skew": skew,
                        "precision": prec,
                        "seed": seed,
                        "status": status,
                        "acc": float("nan") if isinstance(acc, str) else acc,
                    }
                )
    return rows


def _dense(rows: list[dict]) -> dict:
    """lp_close_to_fp_dense (FP - LP, 0 % compression) on the rows."""
    return accuracy_claims(pd.DataFrame(rows), claims=[BY_ID["lp_close_to_fp_dense"]])[
        "lp_close_to_fp_dense"
    ]


# FP - LP = 1, 2, 3, 4 (skew 0) and 0, 1, 2, 3 (skew 0.9) for seeds 1-4.
CLEAN = {
    0.0: {s: (80.0 + s, 80.0 - 0.0) for s in (1, 2, 3, 4)},
    0.9: {s: (70.0 + s - 1, 70.0) for s in (1, 2, 3, 4)},
}


def test_clean_cells_pair_every_seed() -> None:
    r = _dense(_runs(CLEAN))
    assert (r["n"], r["seeds_of"], r["cells"], r["pairs"]) == (4, 4, 2, 8)
    assert r["per_seed"] == {"1": 0.5, "2": 1.5, "3": 2.5, "4": 3.5}
    assert "set_aside" not in r and "cells_left_out" not in r


def test_a_diverged_8bit_run_counts_as_a_loss() -> None:
    """Seed 3 diverged at 8 bits in the skew-0.9 cell. "8-bit loses less than a point" is about
    the 8-bit side, so its divergence counts against the claim, as 0 % accuracy: that pair's
    FP - LP is 72 - 0 = 72, seed 3's mean over the two cells (3 + 72) / 2 = 37.5; n stays 4."""
    cells = {k: dict(v) for k, v in CLEAN.items()}
    cells[0.9][3] = (72.0, "diverged")
    r = _dense(_runs(cells))
    assert (r["n"], r["seeds_of"], r["cells"], r["pairs"]) == (4, 4, 2, 8)
    assert r["per_seed"] == {"1": 0.5, "2": 1.5, "3": 37.5, "4": 3.5}
    # mean 43 / 4 = 10.75; deviations -10.25, -9.25, 26.75, -7.25: sum of squares 958.75
    sd = math.sqrt(958.75 / 3)
    half = 3.182446305284263 * sd / 2  # t(0.975, 3), sqrt(4)
    assert r["mean"] == pytest.approx(10.75)
    assert r["ci"] == pytest.approx([10.75 - half, 10.75 + half], abs=1e-4)
    assert r["verdict"] == "inconclusive"  # was held (1.83 over seeds 1, 2, 4) as missing data
    assert r["counted_as_loss"] == [
        {
            "cell": r["cells_used"][1],
            "seed": 3,
            "detail": "b (precision=int8) run int8-0.9-3 diverged: counted as a loss "
            "(0 % accuracy)",
        }
    ]
    assert r["cells_used"][1][5] == "0.9" and "set_aside" not in r


def test_a_diverged_fp_run_is_set_aside_and_its_cell_left_out_below_the_minimum() -> None:
    """The FP side of "8-bit loses less than a point" diverged (seed 3, skew 0.9): not a loss
    for the claim's side, so the pair is set aside; that cell then pairs 3 of the 4 seeds its
    design planned, which would take the claim below its minimum of 4: it is left out, named,
    and the skew-0 cell is read over its 4 seeds (FP - LP 1, 2, 3, 4)."""
    cells = {k: dict(v) for k, v in CLEAN.items()}
    cells[0.9][3] = ("diverged", 70.0)
    r = _dense(_runs(cells))
    assert (r["n"], r["cells"], r["min_seeds"], r["cells_excluded"]) == (4, 1, 4, 1)
    assert r["per_seed"] == {"1": 1.0, "2": 2.0, "3": 3.0, "4": 4.0}
    (left,) = r["cells_left_out"]
    assert left["cell"][5] == "0.9" and left["seeds"] == [1, 2, 4]
    assert left["why"] == (
        "below the minimum (3 seeds pair: 1, 2, 4): keeping it would take the claim's n to 3, "
        "below its minimum of 4 seeds"
    )
    assert left["set_aside"] == [
        {"seed": 3, "why": "diverged", "detail": "a (precision=fp32) run fp32-0.9-3 diverged"}
    ]


def test_a_cell_with_two_seeds_among_cells_with_five_is_left_out() -> None:
    """Three cells planned with seeds 1-5; the third lost seeds 3-5 (no record). The former rule
    kept every cell over the two seeds all share (n = 2, t(0.975, 1) = 12.7); now the short
    cell is left out and named, and the claim reads the other two over five seeds."""
    five = {s: (80.0 + s, 80.0) for s in (1, 2, 3, 4, 5)}  # FP - LP = seed
    short = {s: (60.0, 59.0 if s <= 2 else "missing") for s in (1, 2, 3, 4, 5)}
    r = _dense(_runs({0.0: five, 0.5: dict(five), 0.9: short}))
    assert (r["n"], r["cells"], r["min_seeds"]) == (5, 2, 5)
    assert r["per_seed"] == {"1": 1.0, "2": 2.0, "3": 3.0, "4": 4.0, "5": 5.0}
    half = 2.7764451051977987 * math.sqrt(2.5) / math.sqrt(5)  # t(0.975, 4); sd of 1..5
    assert r["ci"] == pytest.approx([3.0 - half, 3.0 + half], abs=1e-4)
    (left,) = r["cells_left_out"]
    assert left["cell"][5] == "0.9" and left["seeds"] == [1, 2]
    assert left["why"].startswith("below the minimum (2 seeds pair: 1, 2)")
    assert [d["why"] for d in left["set_aside"]] == ["missing"] * 3


def test_a_diverged_run_is_not_hidden_behind_a_duplicate() -> None:
    """Two runs of one cell, side and seed, one diverged: the finished one pairs (it used to be
    whichever came first); both finished: a duplicate, both named, the pair set aside."""
    rows = _runs(CLEAN)
    extra = next(r for r in rows if r["run_id"] == "int8-0.0-2") | {"run_id": "int8-0.0-2-bis"}
    diverged = [extra | {"status": "diverged", "acc": float("nan")}]
    r = _dense(diverged + rows)
    assert (r["n"], r["pairs"]) == (4, 8) and "set_aside" not in r
    r = _dense([*rows, extra | {"acc": 75.0}])
    # seed 2 is set aside in the skew-0 cell, which then pairs 3 of its 4 planned seeds: below
    # the claim's minimum of 4, so it is left out and the skew-0.9 cell read over seeds 1-4
    assert (r["n"], r["cells"]) == (4, 1)
    assert r["per_seed"] == {"1": 0.0, "2": 1.0, "3": 2.0, "4": 3.0}
    (left,) = r["cells_left_out"]
    (dup,) = left["set_aside"]
    assert (dup["seed"], dup["why"]) == (2, "duplicate")
    assert dup["detail"] == "b (precision=int8) has several runs (int8-0.0-2, int8-0.0-2-bis)"


def test_a_run_in_two_studies_counts_once() -> None:
    """fig4 lists table3's runs (same run ids): not a duplicate."""
    rows = _runs(CLEAN)
    both = [*rows, *(r | {"study": "table4"} for r in rows)]
    r = _dense(both)
    assert (r["n"], r["pairs"]) == (4, 8) and "set_aside" not in r


def test_a_cell_with_an_extra_seed_uses_the_shared_seeds() -> None:
    """A fifth seed in one cell: both cells are read over seeds 1-4 (the former rule read the
    5-seed cell alone), and seed 5 is named as set aside."""
    cells = {k: dict(v) for k, v in CLEAN.items()}
    cells[0.0][5] = (90.0, 80.0)
    r = _dense(_runs(cells))
    assert (r["n"], r["seeds_of"], r["cells"], r["pairs"]) == (4, 5, 2, 8)
    assert r["per_seed"] == {"1": 0.5, "2": 1.5, "3": 2.5, "4": 3.5}
    (extra,) = r["set_aside"]
    assert (extra["cell"][5], extra["seed"], extra["why"]) == ("0.0", 5, "not shared")


def test_a_one_seed_cell_is_left_out_and_named() -> None:
    """A cell run once (an illustrative study) does not cut the others down to one seed."""
    rows = _runs(CLEAN) + _runs({0.6: {1: (60.0, 50.0)}}, study="table4")
    r = _dense(rows)
    assert (r["n"], r["cells"], r["cells_excluded"]) == (4, 2, 1)
    (left,) = r["cells_left_out"]
    assert left["cell"][5] == "0.6" and left["seeds"] == [1]
    assert left["why"] == "one seed (1): the claim's other cells share 4"


def test_a_missing_run_and_an_unpaired_one() -> None:
    """Seed 2's 8-bit run is listed without a record (planned: it counts for the minimum), seed
    3's was never run (unpaired: not planned). One cell: the claim reads the 2 seeds that pair,
    below its minimum of 3, and says so."""
    cells = {0.0: {1: (81.0, 80.0), 2: (82.0, "missing"), 3: (83.0, None), 4: (84.0, 80.0)}}
    r = _dense(_runs(cells))
    assert r["n"] == 2 and r["seeds_of"] == 4 and r["min_seeds"] == 3
    assert r["why"] == "n=2, below the claim's minimum of 3 seeds: no cell pairs 3 seeds"
    whys = {d["seed"]: (d["why"], d["detail"]) for d in r["set_aside"]}
    assert whys == {
        2: ("missing", "b (precision=int8) run int8-0.0-2 has no record"),
        3: ("unpaired", "b (precision=int8): no run"),
    }


def test_nothing_pairs_is_no_data_with_the_reason() -> None:
    """FP runs that diverged are no evidence about the 8-bit side: nothing pairs."""
    r = _dense(_runs({0.0: {1: ("diverged", 80.0), 2: ("diverged", 80.0)}}))
    assert (r["verdict"], r["n"]) == (NO_DATA, 0)
    assert r["cells_left_out"][0]["why"] == "no pair (diverged)"


def test_every_8bit_run_diverged_is_not_held() -> None:
    """Both 8-bit runs diverged: FP - LP = 81 - 0 and 82 - 0, mean 81.5, sd sqrt(0.5): the
    interval [81.5 - 12.706 * 0.5, 81.5 + 12.706 * 0.5] lies above 1 point."""
    r = _dense(_runs({0.0: {1: (81.0, "diverged"), 2: (82.0, "diverged")}}))
    half = 12.706204736174707 * math.sqrt(0.5) / math.sqrt(2)  # t(0.975, 1)
    assert (r["verdict"], r["n"], r["mean"]) == ("not held", 2, 81.5)
    assert r["ci"] == pytest.approx([81.5 - half, 81.5 + half], abs=1e-4)
    assert len(r["counted_as_loss"]) == 2


def test_both_sides_diverged_is_set_aside() -> None:
    """No comparison where neither run finished: equal losses would read as no effect."""
    rows = _runs({0.0: {1: ("diverged", "diverged"), 2: (81.0, 80.0), 3: (82.0, 80.0)}})
    r = accuracy_claims(pd.DataFrame(rows), claims=[_within()])["w"]
    assert r["per_seed"] == {"2": 1.0, "3": 2.0}
    assert "counted_as_loss" not in r


def _within() -> Claim:
    """A range claim on FP - LP (both sides' divergence contradicts it)."""
    return Claim(
        "w", "s", "d", "FP - LP", "within", (-1.0, 1.0), vary="precision", a="fp32", b="int8"
    )


def test_a_range_claim_counts_either_sides_divergence() -> None:
    """For "within [-1, 1]" an FP run that diverged counts too: FP - LP = 0 - 80 = -80."""
    rows = _runs({0.0: {1: ("diverged", 80.0), 2: (81.0, 80.0), 3: (82.0, 80.0)}})
    r = accuracy_claims(pd.DataFrame(rows), claims=[_within()])["w"]
    assert r["per_seed"] == {"1": -80.0, "2": 1.0, "3": 2.0}
    assert r["counted_as_loss"][0]["detail"].startswith("a (precision=fp32) run fp32-0.0-1")


def test_loss_sides_follow_the_direction() -> None:
    assert pairs.loss_sides(">") == ("a",) and pairs.loss_sides("<=") == ("b",)
    assert pairs.loss_sides("within") == ("a", "b") and pairs.loss_sides(None) == ()


@pytest.mark.parametrize(
    ("sets", "minimum", "cells", "seeds"),
    [
        ({"A": {1, 2, 3}, "B": {1, 2, 3}}, 3, ["A", "B"], {1, 2, 3}),
        ({"A": {1, 2, 3, 4}, "B": {1, 2, 3}, "C": {1, 2, 3}}, 3, ["A", "B", "C"], {1, 2, 3}),
        ({"A": {1, 2, 3}, "B": {1}}, 3, ["A"], {1, 2, 3}),  # one seed: left out
        # each lost a different seed: at the minimum 2 both are kept over seeds 1, 2; at the
        # minimum 3 (the seeds planned) keeping both would take n to 2: the lowest seeds' cell
        ({"A": {1, 2, 4}, "B": {1, 2, 3}}, 2, ["A", "B"], {1, 2}),
        ({"A": {1, 2, 4}, "B": {1, 2, 3}}, 3, ["B"], {1, 2, 3}),
        ({"A": {1}, "B": {1}, "C": {2}}, 1, ["A", "B"], {1}),  # one seed each: the most cells
        # a cell with two seeds among cells with five: left out at the minimum 5
        ({"A": {1, 2, 3, 4, 5}, "B": {1, 2, 3, 4, 5}, "C": {1, 2}}, 5, ["A", "B"], {1, 2, 3, 4, 5}),
        ({"A": {1, 2, 3, 4, 5}, "B": {1, 2, 3, 4, 5}, "C": {1, 2}}, 2, ["A", "B", "C"], {1, 2}),
        # no cell reaches the minimum: as many as the best cell pairs
        ({"A": {1, 2, 3}, "B": {1, 2}}, 5, ["A"], {1, 2, 3}),
        ({}, 5, [], set()),
    ],
)
def test_choose_cells_prefers_coverage_at_the_minimum(
    sets: dict, minimum: int, cells: list, seeds: set
) -> None:
    used, shared = summary.choose_cells({(k,): frozenset(v) for k, v in sets.items()}, minimum)
    assert used == [(c,) for c in cells] and shared == seeds


def test_the_minimum_is_the_fewest_seeds_a_cell_planned() -> None:
    """Cells planned with 6, 5 and 1 seeds: the one-seed cell does not count (5)."""
    planned = {("A",): frozenset(range(6)), ("B",): frozenset(range(5)), ("C",): frozenset({1})}
    assert summary.minimum_seeds(planned) == 5
    assert summary.minimum_seeds({("C",): frozenset({1})}) == 1 and summary.minimum_seeds({}) == 1


def test_the_norm_a_run_trains_with() -> None:
    """A run's norm is the one it names, else its precision's paper norm."""
    assert pairs.effective_norm(None, "fp32") == "evonorm"
    assert pairs.effective_norm(None, "int8") == "rangeen"
    assert pairs.effective_norm("batchnorm", "int8") == "batchnorm"


@pytest.mark.parametrize(
    ("runs", "expect"),
    [
        # the paper's FP vs LP: no norm at both precisions, each its paper norm
        ([("a", "evonorm"), ("b", "rangeen")], ["evonorm|rangeen", "evonorm|rangeen"]),
        # one norm at both precisions: held fixed, whatever the paper's
        ([("a", "rangeen"), ("b", "rangeen")], ["rangeen", "rangeen"]),
        # Figure 1's cell: Range-EvoNorm at both precisions pairs on it; FP EvoNorm and
        # BatchNorm keep their own names (no partner)
        (
            [("a", "evonorm"), ("a", "batchnorm"), ("a", "rangeen"), ("b", "rangeen")],
            ["evonorm", "batchnorm", "rangeen", "rangeen"],
        ),
        ([("a", "batchnorm"), ("b", "rangeen")], ["batchnorm", "rangeen"]),
    ],
)
def test_norm_identities(runs: list[tuple[str, str]], expect: list[str]) -> None:
    sides, norms = [s for s, _ in runs], [n for _, n in runs]
    cells = [("c",)] * len(runs)
    assert pairs.norm_identities(cells, sides, norms, "precision", "fp32", "int8") == expect
    # varying anything else, the norm is compared as it is
    assert pairs.norm_identities(cells, sides, norms, "skew", 0.0, 0.9) == norms


def _fig1_rows(runs: tuple[tuple[str, str, float], ...]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            BASE
            | {"study": "fig1", "run_id": f"{norm}-{prec}", "norm": norm, "precision": prec}
            | {"skew": 0.8, "seed": 1, "status": "ok", "acc": acc}
            for norm, prec, acc in runs
        ]
    )


def test_figure_1_cell_pairs_the_norm_held_fixed() -> None:
    """Figure 1's cell varied in precision: FP Range-EvoNorm pairs with the 8-bit Range-EvoNorm
    run (identical but for the precision: 79.0 - 78.5); FP EvoNorm and FP BatchNorm have no
    8-bit partner and are named as unpaired, and the norm names the cells."""
    rows = _fig1_rows(
        (
            ("evonorm", "fp32", 80.0),
            ("batchnorm", "fp32", 70.0),
            ("rangeen", "fp32", 79.0),
            ("rangeen", "int8", 78.5),
        )
    )
    pr = pairs.pairing(rows, "precision", "fp32", "int8")
    assert pr.cell_keys[-1] == "norm"
    assert list(pr.pairs["diff"]) == [0.5] and list(pr.pairs["run_a"]) == ["rangeen-fp32"]
    assert list(pr.pairs["_norm"]) == ["rangeen"]
    aside = {c[-1]: (w, d) for c, w, d in pr.set_aside[["_cell", "why", "detail"]].values}
    assert aside == {
        "batchnorm": ("unpaired", "b (precision=int8): no run"),
        "evonorm": ("unpaired", "b (precision=int8): no run"),
    }


def test_without_a_shared_norm_each_precisions_paper_norm_pairs() -> None:
    """FP EvoNorm and 8-bit Range-EvoNorm (the paper's comparison): 80.0 - 78.5."""
    pr = pairs.pairing(
        _fig1_rows((("evonorm", "fp32", 80.0), ("rangeen", "int8", 78.5))),
        "precision",
        "fp32",
        "int8",
    )
    assert list(pr.pairs["diff"]) == [1.5] and list(pr.pairs["_norm"]) == ["evonorm|rangeen"]


def test_a_config_value_beyond_the_coordinates_splits_pairs() -> None:
    """Two FP runs of one cell and seed, one trained 2 epochs (another study's config): each
    pairs with the 8-bit run of its own config; a run without a record joins its cell's."""
    cfg = {"train": {"epochs": 1}, "seed": 1}
    rows = []
    for rid, prec, epochs, acc in (
        ("fp-1", "fp32", 1, 80.0),
        ("int8-1", "int8", 1, 79.0),
        ("fp-2", "fp32", 2, 85.0),
        ("int8-2", "int8", 2, None),
    ):
        rows.append(
            BASE
            | {"study": "t", "run_id": rid, "precision": prec, "skew": 0.0, "seed": 1}
            | {
                "status": "ok" if acc else "missing",
                "acc": acc if acc else float("nan"),
                "config": {**cfg, "train": {"epochs": epochs}} if acc else {},
            }
        )
    pr = pairs.pairing(pd.DataFrame(rows), "precision", "fp32", "int8")
    assert pr.cell_keys[-1] == "train.epochs"
    assert list(pr.pairs["run_a"]) == ["fp-1"] and list(pr.pairs["diff"]) == [1.0]
    (aside,) = pr.set_aside.to_dict("records")
    assert aside["_cell"][-1] == "2" and aside["why"] == "missing"
    assert aside["run_a"] == "fp-2" and aside["run_b"] == "int8-2"


def test_a_diverged_run_through_the_report_pipeline(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The seeded fake tree with table3's 8-bit run of one cell diverged at seed 2: claims.json
    says n = 2 of 3 and names the run; the claims table says what was set aside."""
    import json

    from lpdt.report.aggregate import aggregate
    from lpdt.report.claim_text import claims_md, effect_text, set_aside_text
    from lpdt.report.claims import check_claims
    from lpdt.report.paper import load_paper
    from tests.fake_records import fake_record
    from tests.report.conftest import PAPER_CSV, make_tree

    tree = make_tree(tmp_path, seeds=(1, 2, 3))
    m = json.loads(tree["manifest"].read_text())
    entry = next(
        e
        for e in m["studies"]["table3"]["runs"]
        if e["seed"] == 2
        and e["coords"]["precision"] == "int8"
        and e["coords"]["compression"] == 0
        and e["coords"]["skew"] == 0.0
        and e["coords"]["algorithm"] == "choco"
    )
    rid = entry["run_id"]
    config = {"model": {"name": "resnet20"}, "seed": 2}
    fake_record(rid, 50.0, status="diverged", config=config).write(tmp_path / entry["dir"])
    df, _ = aggregate(tree["manifest"])
    out = {c.id: c for c in check_claims(df, load_paper(PAPER_CSV), tree["cost"])}
    dense = out["lp_close_to_fp_dense"]
    # The claim reads 4 cells (table3, 0 %: skew 0 / 0.8 x DS / Choco) whose FP - LP is 0.7,
    # 0.5, 0.3 for seeds 1-3; the diverged 8-bit run counts as 0 % against its FP run's 81.0
    # (80 + 1 for Choco): seed 2's mean over the cells is (0.5 * 3 + 81) / 4 = 20.625.
    assert (dense.n, dense.numbers["seeds_of"]) == (3, 3)
    assert dense.mean == pytest.approx((0.7 + 20.625 + 0.3) / 3, abs=1e-4)
    assert dense.numbers["per_seed"] == {"1": 0.7, "2": 20.625, "3": 0.3}
    assert dense.verdict == "inconclusive"  # held before: the divergence read as missing data
    (lost,) = dense.numbers["counted_as_loss"]
    assert lost["detail"] == (
        f"b (precision=int8) run {rid} diverged: counted as a loss (0 % accuracy)"
    )
    assert effect_text(dense).endswith("(n=3)")
    assert set_aside_text(dense).startswith("1 diverged run counted as a loss")
    assert "1 diverged run counted as a loss" in claims_md(list(out.values()))
    # the PDF's claim details name it too
    from lpdt.report.prose import claim_details

    assert "counted as a loss: seed 2 of " in claim_details(dense)
    assert f"(b (precision=int8) run {rid} diverged: counted as a loss" in claim_details(dense)


@pytest.mark.parametrize(
    ("key", "spec", "says"),
    [
        ("nodes", ">1e400", "'1e400' is not a value of nodes (a whole number)"),
        ("nodes", "inf", "'inf' is not a value of nodes (a whole number)"),
        ("nodes", "!=inf", "'inf' is not a value of nodes (a whole number)"),
        ("nodes", "2.7", "'2.7' is not a value of nodes (a whole number)"),
        ("compression", "1e400", "'1e400' is not a value of compression (a finite number)"),
    ],
)
def test_a_value_no_coordinate_can_take_is_one_line(key: str, spec: str, says: str) -> None:
    """An infinite or huge number for a whole-number coordinate raised OverflowError (a
    traceback from lpdt compare --where), and nodes=2.7 was read as 3 ("no run has nodes=3");
    8, 8.0 and "8" are still one value."""
    with pytest.raises(ValueError, match=re.escape(says)):
        pairs.condition(key, spec)
    assert pairs.parse_value("nodes", "8") == pairs.parse_value("nodes", 8.0) == 8
