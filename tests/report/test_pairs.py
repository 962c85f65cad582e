"""Pairing (lpdt.report.pairs) on constructed frames whose answer is known: every pair
accounted for (diverged, missing, unpaired, duplicate, not shared), the cells chosen for
coverage, the norm as each precision brings it, config values beyond the coordinates."""

from __future__ import annotations

import pandas as pd
import pytest

from lpdt.report import pairs
from lpdt.report.aggregate import KEYS
from lpdt.report.claims import BY_ID, accuracy_claims
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


def test_a_diverged_seed_drops_that_seed_and_says_so() -> None:
    """Seed 3 diverged at 8 bits in the skew-0.9 cell: the claim uses seeds 1, 2, 4 in both
    cells (n = 4 - 1), and names the pair and why; the other cell's seed 3 is named too."""
    cells = {k: dict(v) for k, v in CLEAN.items()}
    cells[0.9][3] = (72.0, "diverged")
    r = _dense(_runs(cells))
    assert (r["n"], r["seeds_of"], r["cells"]) == (3, 4, 2)
    assert r["per_seed"] == {"1": 0.5, "2": 1.5, "4": 3.5}
    aside = {(d["cell"][5], d["seed"]): d for d in r["set_aside"]}  # cell[5]: skew
    assert set(aside) == {("0.9", 3), ("0.0", 3)}
    assert aside[("0.9", 3)]["why"] == "diverged"
    assert aside[("0.9", 3)]["detail"] == "b (precision=int8) run int8-0.9-3 diverged"
    assert aside[("0.0", 3)]["why"] == "not shared"
    assert "cells_excluded" not in r  # no cell is excluded for it (the former behaviour)


def test_a_diverged_run_is_not_hidden_behind_a_duplicate() -> None:
    """Two runs of one cell, side and seed, one diverged: the finished one pairs (it used to be
    whichever came first); both finished: a duplicate, both named, the pair set aside."""
    rows = _runs(CLEAN)
    extra = next(r for r in rows if r["run_id"] == "int8-0.0-2") | {"run_id": "int8-0.0-2-bis"}
    diverged = [extra | {"status": "diverged", "acc": float("nan")}]
    r = _dense(diverged + rows)
    assert (r["n"], r["pairs"]) == (4, 8) and "set_aside" not in r
    r = _dense([*rows, extra | {"acc": 75.0}])
    assert r["n"] == 3  # seed 2 is set aside in the skew-0 cell, so not shared by both cells
    dup = next(d for d in r["set_aside"] if d["why"] == "duplicate")
    assert dup["seed"] == 2
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
    cells = {0.0: {1: (81.0, 80.0), 2: (82.0, "missing"), 3: (83.0, None), 4: (84.0, 80.0)}}
    r = _dense(_runs(cells))
    assert r["n"] == 2 and r["seeds_of"] == 4
    whys = {d["seed"]: (d["why"], d["detail"]) for d in r["set_aside"]}
    assert whys == {
        2: ("missing", "b (precision=int8) run int8-0.0-2 has no record"),
        3: ("unpaired", "b (precision=int8): no run"),
    }


def test_nothing_pairs_is_no_data_with_the_reason() -> None:
    r = _dense(_runs({0.0: {1: (81.0, "diverged"), 2: (82.0, "diverged")}}))
    assert (r["verdict"], r["n"]) == (NO_DATA, 0)
    assert r["cells_left_out"][0]["why"] == "no pair (diverged)"


@pytest.mark.parametrize(
    ("sets", "cells", "seeds"),
    [
        ({"A": {1, 2, 3}, "B": {1, 2, 3}}, ["A", "B"], {1, 2, 3}),
        ({"A": {1, 2, 3, 4}, "B": {1, 2, 3}, "C": {1, 2, 3}}, ["A", "B", "C"], {1, 2, 3}),
        ({"A": {1, 2, 3}, "B": {1}}, ["A"], {1, 2, 3}),  # one seed: left out
        ({"A": {1, 2, 4}, "B": {1, 2, 3}}, ["A", "B"], {1, 2}),  # each lost a different seed
        ({"A": {1}, "B": {1}, "C": {2}}, ["A", "B"], {1}),  # one seed each: the most cells
        ({}, [], set()),
    ],
)
def test_choose_cells_prefers_coverage(sets: dict, cells: list, seeds: set) -> None:
    used, shared = pairs.choose_cells({(k,): frozenset(v) for k, v in sets.items()})
    assert used == [(c,) for c in cells] and shared == seeds


def test_the_norm_a_precision_brings_does_not_split_its_pairs() -> None:
    """Varying precision, FP-EvoNorm (named or the default) meets 8-bit Range-EvoNorm; an FP
    BatchNorm run only its like; varying anything else, the norm is compared as it is."""
    own = "evonorm|rangeen"
    assert pairs.norm_identity(None, "fp32", "precision", "fp32", "int8") == own
    assert pairs.norm_identity("evonorm", "fp32", "precision", "fp32", "int8") == own
    assert pairs.norm_identity("rangeen", "int8", "precision", "fp32", "int8") == own
    assert pairs.norm_identity(None, "int8", "precision", "fp32", "int8") == own
    assert pairs.norm_identity("batchnorm", "fp32", "precision", "fp32", "int8") == "batchnorm"
    assert pairs.norm_identity("rangeen", "fp32", "precision", "fp32", "int8") == "rangeen"
    assert pairs.norm_identity(None, "fp32", "algorithm", "choco", "deepsqueeze") == "evonorm"
    assert pairs.norm_identity("batchnorm", "fp32", "skew", 0, 0.8) == "batchnorm"


def test_figure_1_cell_pairs_its_own_runs_only() -> None:
    """Figure 1's cell varied in precision: FP EvoNorm pairs with the 8-bit Range-EvoNorm run;
    FP BatchNorm and FP Range-EvoNorm have no 8-bit partner and are named as unpaired, and the
    norm names the cells."""
    rows = []
    for norm, prec, acc in (
        ("evonorm", "fp32", 80.0),
        ("batchnorm", "fp32", 70.0),
        ("rangeen", "fp32", 79.0),
        ("rangeen", "int8", 78.5),
    ):
        rows.append(
            BASE
            | {"study": "fig1", "run_id": f"{norm}-{prec}", "norm": norm, "precision": prec}
            | {"skew": 0.8, "seed": 1, "status": "ok", "acc": acc}
        )
    pr = pairs.pairing(pd.DataFrame(rows), "precision", "fp32", "int8")
    assert pr.cell_keys[-1] == "norm"
    assert list(pr.pairs["diff"]) == [1.5] and list(pr.pairs["run_a"]) == ["evonorm-fp32"]
    aside = {c[-1]: (w, d) for c, w, d in pr.set_aside[["_cell", "why", "detail"]].values}
    assert aside == {
        "batchnorm": ("unpaired", "b (precision=int8): no run"),
        "rangeen": ("unpaired", "b (precision=int8): no run"),
    }


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
    from lpdt.report.claims import check_claims, claims_md, effect_text, set_aside_text
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
    assert (dense.n, dense.numbers["seeds_of"]) == (2, 3)
    assert dense.mean == pytest.approx(0.5)  # seeds 1 and 3 of the tree: FP - LP 0.7 and 0.3
    diverged = [d for d in dense.numbers["set_aside"] if d["why"] == "diverged"]
    assert [d["detail"] for d in diverged] == [f"b (precision=int8) run {rid} diverged"]
    assert effect_text(dense).endswith("(n=2 of 3)")
    assert set_aside_text(dense).startswith("4 pairs set aside (diverged, not shared)")
    assert "pairs set aside (diverged, not shared)" in claims_md(list(out.values()))
