"""The series claim (``acc_falls_with_skew``: acc(skew 0) - acc(highest skew) > 0) on constructed
runs whose answers are computed here by hand: it pairs through ``lpdt.report.pairs.pairing``, so
a diverged, missing or duplicate run is counted as a loss or named, never dropped in silence, the
highest skew stays the highest when its runs diverged, and ``where`` selects."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from lpdt.report.aggregate import KEYS
from lpdt.report.claim_accuracy import accuracy_claims
from lpdt.report.claims import BY_ID, Claim
from tests.report.conftest import CLAIM_CELL

BASE = dict.fromkeys(KEYS) | CLAIM_CELL | {"qgm": False}
T975_2 = 4.302652729749464  # t(0.975, 2): three seeds
SEEDS = (1, 2, 3)
# acc(skew 0) - acc(skew 0.9) per seed: FP 5, 4, 6; 8-bit 3, 2, 4. Per seed, the mean over the
# two series: 4, 3, 5 (mean 4, sd 1).
DROP = {"fp32": {1: 5.0, 2: 4.0, 3: 6.0}, "int8": {1: 3.0, 2: 2.0, 3: 4.0}}


def _row(prec: str, skew: float, seed: int, acc: float | str, **kw: object) -> dict:
    status = acc if isinstance(acc, str) else "ok"
    rid = kw.pop("run_id", f"{prec[:2]}-{skew}-{seed}")
    return (
        BASE
        | {"study": "table3", "run_id": rid, "precision": prec, "skew": skew, "seed": seed}
        | {"status": status, "acc": math.nan if isinstance(acc, str) else acc}
        | kw
    )


def series_runs() -> list[dict]:
    """Two series (FP and 8-bit Choco, table3), skews 0, 0.5 and 0.9, seeds 1-3:
    acc(0) = 85 + seed, acc(0.5) = acc(0) - 1, acc(0.9) = acc(0) - DROP."""
    rows = []
    for prec, drop in DROP.items():
        for s in SEEDS:
            rows += [
                _row(prec, 0.0, s, 85.0 + s),
                _row(prec, 0.5, s, 84.0 + s),
                _row(prec, 0.9, s, 85.0 + s - drop[s]),
            ]
    return rows


def _skew(rows: list[dict], claim: Claim = BY_ID["acc_falls_with_skew"]) -> dict:
    return accuracy_claims(pd.DataFrame(rows), claims=[claim])[claim.id]


def _ci(mean: float, sd: float) -> list[float]:
    half = T975_2 * sd / math.sqrt(3)
    return [mean - half, mean + half]


def test_clean_series() -> None:
    r = _skew(series_runs())
    assert (r["n"], r["cells"], r["pairs"], r["verdict"]) == (3, 2, 6, "held")
    assert r["per_seed"] == {"1": 4.0, "2": 3.0, "3": 5.0}
    assert r["ci"] == pytest.approx(_ci(4.0, 1.0), abs=1e-4)
    assert "set_aside" not in r and "cells_left_out" not in r


def test_every_top_skew_run_of_a_series_diverged() -> None:
    """The 8-bit runs at skew 0.9 all diverged. The highest skew stays 0.9 (the former code took
    the next one, 0.5, without a word): the 8-bit series has no pair and is named; the claim
    reads the FP series alone (5, 4, 6). Divergence at the highest skew would favour "accuracy
    falls", so it is set aside, not counted."""
    rows = [r for r in series_runs() if not (r["precision"] == "int8" and r["skew"] == 0.9)]
    rows += [_row("int8", 0.9, s, "diverged") for s in SEEDS]
    r = _skew(rows)
    assert (r["n"], r["cells"]) == (3, 1)
    assert r["per_seed"] == {"1": 5.0, "2": 4.0, "3": 6.0}
    assert r["ci"] == pytest.approx(_ci(5.0, 1.0), abs=1e-4)
    (left,) = r["cells_left_out"]
    assert "int8" in left["cell"] and left["why"] == "no pair (diverged)"
    assert [d["detail"] for d in left["set_aside"]] == [
        f"b (skew=0.9) run in-0.9-{s} diverged" for s in SEEDS
    ]


def test_a_diverged_skew_0_run_counts_as_a_loss() -> None:
    """FP seed 2 diverged at skew 0: a loss on the side the claim is about (acc(skew 0) is
    counted as 0): its difference is 0 - (85 + 2 - 4) = -83, seed 2's mean (-83 + 2) / 2 =
    -40.5. Mean (4 - 40.5 + 5) / 3 = -10.5; deviations 14.5, -30, 15.5."""
    rows = [r for r in series_runs() if r["run_id"] != "fp-0.0-2"]
    rows.append(_row("fp32", 0.0, 2, "diverged"))
    r = _skew(rows)
    assert r["per_seed"] == {"1": 4.0, "2": -40.5, "3": 5.0}
    sd = math.sqrt((14.5**2 + 30**2 + 15.5**2) / 2)
    assert r["mean"] == pytest.approx(-10.5)
    assert r["ci"] == pytest.approx(_ci(-10.5, sd), abs=1e-4)
    assert r["verdict"] == "inconclusive"
    (lost,) = r["counted_as_loss"]
    assert lost["seed"] == 2
    assert lost["detail"] == "a (skew=0) run fp-0.0-2 diverged: counted as a loss (0 % accuracy)"


def test_a_duplicate_in_a_series_is_named_not_resolved_by_order() -> None:
    """Two finished FP runs at skew 0.9, seed 1 (two ids): the former code kept the first; now
    the pair is set aside naming both, and the FP series, left with 2 of its 3 planned seeds,
    would take the claim below its minimum of 3: left out. The 8-bit series: 3, 2, 4."""
    rows = series_runs()
    rows.append(_row("fp32", 0.9, 1, 50.0, run_id="fp-0.9-1-bis"))
    for first in (rows, rows[::-1]):
        r = _skew(first)
        assert (r["n"], r["cells"]) == (3, 1)
        assert r["per_seed"] == {"1": 3.0, "2": 2.0, "3": 4.0}
        (left,) = r["cells_left_out"]
        assert left["why"].startswith("below the minimum (2 seeds pair: 2, 3)")
        (dup,) = left["set_aside"]
        assert (dup["seed"], dup["why"]) == (1, "duplicate")
        assert dup["detail"] == "b (skew=0.9) has several runs (fp-0.9-1, fp-0.9-1-bis)"


def test_where_selects_the_series() -> None:
    """A series claim with ``where: precision fp32`` reads the FP series only (5, 4, 6)."""
    base = BY_ID["acc_falls_with_skew"]
    fp_only = Claim(
        "fp_falls",
        base.statement,
        base.definition,
        base.effect,
        base.direction,
        base.threshold,
        kind="series",
        vary="skew",
        a=0.0,
        b=">=0.8",
        where={"precision": "fp32"},
        studies=("table3",),
    )
    r = _skew(series_runs(), fp_only)
    assert (r["n"], r["cells"], r["per_seed"]) == (3, 1, {"1": 5.0, "2": 4.0, "3": 6.0})


def test_a_series_without_skew_0_is_named() -> None:
    """Table 4's QGM cell runs skew 0.9 only: a series whose highest skew meets the claim but
    that has no run at skew 0; named as left out (unpaired), no longer passed over in silence."""
    rows = series_runs() + [
        _row("fp32", 0.9, s, 80.0, qgm=True, study="table4", run_id=f"q-{s}") for s in SEEDS
    ]
    r = _skew(rows)
    assert (r["n"], r["cells"], r["per_seed"]) == (3, 2, {"1": 4.0, "2": 3.0, "3": 5.0})
    (left,) = r["cells_left_out"]
    assert "True" in left["cell"] and left["why"] == "no pair (unpaired)"


def test_a_run_of_another_config_is_its_own_series() -> None:
    """An FP run at skew 0.9 trained 40 epochs (another study's config; the others 20): a
    config value beyond the coordinates, so it joins no pair of the 20-epoch series, and is
    named (unpaired) rather than taken as a duplicate or a member of the series."""
    rows = [r | {"config": {"train": {"epochs": 20}}} for r in series_runs()]
    rows.append(
        _row("fp32", 0.9, 1, 99.0, run_id="fp-0.9-1-long", config={"train": {"epochs": 40}})
    )
    r = _skew(rows)
    assert (r["n"], r["cells"], r["per_seed"]) == (3, 2, {"1": 4.0, "2": 3.0, "3": 5.0})
    (left,) = r["cells_left_out"]
    assert left["cell"][-1] == "40" and left["why"] == "no pair (unpaired)"
