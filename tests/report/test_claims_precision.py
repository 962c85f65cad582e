"""The precision of each claim (n, half-width, minimum detectable effect), the normalisation
claims of Figure 1 (claims version 5) and Figure 1's band over seeds, on constructed inputs whose
answers are known."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from matplotlib.collections import PolyCollection
from scipy import stats as sps

from lpdt.report.aggregate import KEYS, aggregate
from lpdt.report.claim_accuracy import accuracy_claims
from lpdt.report.claim_text import claims_md, paper_effect_text, precision_text
from lpdt.report.claims import BY_ID, EQUIV_MARGIN, check_claims
from lpdt.report.figures import fig1, fig1_spread_text
from lpdt.report.paper import load_paper
from lpdt.report.stats import HELD, INCONCLUSIVE, NO_DATA, NOT_HELD, detectable, half_width
from tests.report.conftest import PAPER_CSV

NORM_CLAIMS = ("evonorm_beats_batchnorm", "evonorm_beats_groupnorm", "rangeen_equiv_evonorm")


def _by_hand(diffs: list[float]) -> tuple[float, float]:
    """Half-width and minimum detectable effect (80 % power) of a paired t design, straight from
    scipy.stats.t: t(0.975, n-1) * sd / sqrt(n) and (t(0.975, n-1) + t(0.80, n-1)) * sd / sqrt(n)."""
    n = len(diffs)
    sd = float(pd.Series(diffs).std(ddof=1))
    se = sd / math.sqrt(n)
    t975, t80 = sps.t.ppf(0.975, n - 1), sps.t.ppf(0.80, n - 1)
    return t975 * se, (t975 + t80) * se


# --- half-width and detectable -------------------------------------------------------------------


@pytest.mark.parametrize("diffs", [[0.7, 0.5, 0.3], [1.0, -2.0], [0.3, 1.1, -0.4, 2.2, 0.9]])
def test_half_width_and_detectable_match_scipy(diffs: list[float]) -> None:
    sd = float(pd.Series(diffs).std(ddof=1))
    hw, det = _by_hand(diffs)
    assert half_width(sd, len(diffs)) == pytest.approx(hw, rel=1e-12)
    assert detectable(sd, len(diffs)) == pytest.approx(det, rel=1e-12)
    assert det > hw > 0  # 80 % power needs more than the interval's own half-width


def test_half_width_and_detectable_need_two_seeds() -> None:
    assert half_width(0.3, 1) is None and detectable(0.3, 1) is None
    assert half_width(None, 3) is None and detectable(None, 3) is None


def test_a_claim_record_carries_n_half_width_and_detectable() -> None:
    # FP - LP per seed 0.7, 0.5, 0.3 (seeds 70 / 80 / 90 points apart: pairing by seed)
    rows = [
        {"precision": p, "seed": s, "acc": a}
        for s, fp, lp in ((1, 70.7, 70.0), (2, 80.5, 80.0), (3, 90.3, 90.0))
        for p, a in (("fp32", fp), ("int8", lp))
    ]
    r = accuracy_claims(_cells(rows, study="table3"))["lp_close_to_fp_dense"]
    hw, det = _by_hand([0.7, 0.5, 0.3])
    assert r["n"] == 3
    assert r["half_width"] == pytest.approx(hw, abs=1e-4)
    assert r["detectable"] == pytest.approx(det, abs=1e-4)
    assert r["ci"] == pytest.approx([0.5 - hw, 0.5 + hw], abs=1e-4)
    one = accuracy_claims(_cells(rows[:2], study="table3"))["lp_close_to_fp_dense"]
    assert (one["n"], one["half_width"], one["detectable"]) == (1, None, None)


# --- the normalisation claims (Figure 1) -----------------------------------------------------------


def _cells(rows: list[dict], study: str = "fig1") -> pd.DataFrame:
    """Figure 1's cell (ResNet-20, ring 8, Choco, skew 0.8, 0 %) with ``rows`` over it."""
    base = {k: None for k in KEYS} | {
        "study": study,
        "dataset": "cifar10",
        "model": "resnet20",
        "topology": "directed_ring",
        "nodes": 8,
        "qgm": False,
        "compression": 0,
        "skew": 0.8,
        "algorithm": "choco",
        "precision": "fp32",
    }
    return pd.DataFrame([base | r for r in rows])


def _norms(acc: dict[str, list[float]], **coords: object) -> list[dict]:
    """One FP row per (norm, seed 1, 2, ...) with the given accuracies."""
    return [
        {"norm": norm, "seed": i + 1, "acc": a, **coords}
        for norm, accs in acc.items()
        for i, a in enumerate(accs)
    ]


def test_the_norm_claims_are_defined_as_the_brief_says() -> None:
    """Each field as version 5 defined it, written out here; that the file's content belongs to
    its version is tests/report/test_claims_version.py's (the definitions' fingerprint)."""
    for cid, (a, b) in zip(
        NORM_CLAIMS,
        [("evonorm", "batchnorm"), ("evonorm", "groupnorm"), ("rangeen", "evonorm")],
        strict=True,
    ):
        c = BY_ID[cid]
        assert (c.vary, c.a, c.b, c.studies) == ("norm", a, b, ("fig1",))
        assert c.where == {"precision": "fp32"} and c.paper_note == "figure only"
    assert BY_ID["evonorm_beats_batchnorm"].direction == ">"
    assert BY_ID["evonorm_beats_batchnorm"].threshold == 0.0
    eq = BY_ID["rangeen_equiv_evonorm"]
    assert (eq.direction, eq.threshold) == ("within", (-1.0, 1.0)) and EQUIV_MARGIN == 1.0


@pytest.mark.parametrize(
    ("evonorm", "batchnorm", "want"),
    [
        ([80.0, 81.0, 82.0], [75.0, 77.0, 76.0], HELD),  # +5, +4, +6
        ([75.0, 77.0, 76.0], [78.0, 79.0, 80.0], NOT_HELD),  # -3, -2, -4
        ([80.0, 79.0, 80.5], [79.0, 80.0, 80.0], INCONCLUSIVE),  # +1, -1, +0.5
        ([80.0], [75.0], NO_DATA),  # one seed: no interval
    ],
)
def test_evonorm_beats_batchnorm(evonorm: list, batchnorm: list, want: str) -> None:
    r = accuracy_claims(_cells(_norms({"evonorm": evonorm, "batchnorm": batchnorm})))
    assert r["evonorm_beats_batchnorm"]["verdict"] == want
    diffs = [e - b for e, b in zip(evonorm, batchnorm, strict=True)]
    assert r["evonorm_beats_batchnorm"]["mean"] == pytest.approx(sum(diffs) / len(diffs), abs=1e-4)
    assert r["evonorm_beats_groupnorm"]["verdict"] == NO_DATA  # no GroupNorm run


def test_evonorm_beats_groupnorm_pairs_by_seed() -> None:
    # Seeds 10 points apart, EvoNorm +2, +3, +4 on each: held only when paired by seed.
    r = accuracy_claims(
        _cells(_norms({"evonorm": [72.0, 83.0, 94.0], "groupnorm": [70.0, 80.0, 90.0]}))
    )["evonorm_beats_groupnorm"]
    assert r["per_seed"] == {"1": 2.0, "2": 3.0, "3": 4.0}
    assert r["verdict"] == HELD  # 3 +- 4.303 / sqrt(3) = [0.52, 5.48] > 0


@pytest.mark.parametrize(
    ("rangeen", "want"),
    [
        ([80.1, 79.9, 80.0], HELD),  # within 0.1 of EvoNorm: [-0.25, 0.25] inside +-1
        ([80.2, 80.9, 79.6], INCONCLUSIVE),  # mean +0.23 inside the margin, interval leaves it
        ([82.0, 82.2, 81.8], NOT_HELD),  # +2 +- 0.5: entirely above +1
        ([78.0, 77.8, 78.2], NOT_HELD),  # -2 +- 0.5: entirely below -1
    ],
)
def test_rangeen_equivalent_to_evonorm(rangeen: list, want: str) -> None:
    rows = _norms({"rangeen": rangeen, "evonorm": [80.0, 80.0, 80.0]})
    r = accuracy_claims(_cells(rows))["rangeen_equiv_evonorm"]
    assert r["verdict"] == want
    lo, hi = r["ci"]
    if want == INCONCLUSIVE:  # the mean alone would pass: the interval is what fails
        assert -EQUIV_MARGIN < r["mean"] < EQUIV_MARGIN and (lo < -EQUIV_MARGIN or hi > 1.0)
    hw, det = _by_hand([x - 80.0 for x in rangeen])
    assert r["half_width"] == pytest.approx(hw, abs=1e-4)
    assert r["detectable"] == pytest.approx(det, abs=1e-4)


def test_norm_claims_use_only_the_fp_runs_of_fig1() -> None:
    """Figure 1's 8-bit Range-EvoNorm run and other studies' FP runs (no norm coordinate) stay
    out of the norm pairs."""
    rows = _norms({"rangeen": [80.1, 79.9, 80.0], "evonorm": [80.0, 80.0, 80.0]})
    rows += _norms({"rangeen": [60.0, 61.0, 59.0]}, precision="int8")  # LP, same study
    fp_other = _cells(_norms({"evonorm": [50.0, 50.0, 50.0]}), study="table3")
    r = accuracy_claims(pd.concat([_cells(rows), fp_other], ignore_index=True))
    eq = r["rangeen_equiv_evonorm"]
    assert (eq["pairs"], eq["cells"], eq["verdict"]) == (3, 1, HELD)


def test_norm_claims_in_claims_json(seeded_tree: dict) -> None:
    """The fake tree's fig1 runs (BatchNorm 70, EvoNorm 76, seeds 1-3) through check_claims: the
    precision fields, and the paper's column says the paper has a figure, not a number."""
    df, _ = aggregate(seeded_tree["manifest"])
    out = {c.id: c for c in check_claims(df, load_paper(PAPER_CSV), seeded_tree["cost"])}
    bn = out["evonorm_beats_batchnorm"]
    assert (bn.n, bn.mean, bn.verdict) == (3, 6.0, HELD)
    assert bn.half_width == 0.0 and bn.detectable == 0.0  # the same +6 in every seed
    assert bn.paper_effect is None and bn.paper_note == "figure only"
    assert paper_effect_text(bn) == "figure only"
    assert out["evonorm_beats_groupnorm"].verdict == NO_DATA  # the tree has no GroupNorm run
    assert out["evonorm_beats_groupnorm"].half_width is None
    dense = out["lp_close_to_fp_dense"]
    hw, det = _by_hand([0.7, 0.5, 0.3])  # FP - LP per seed in the seeded tree
    assert (dense.half_width, dense.detectable) == (
        pytest.approx(hw, abs=1e-4),
        pytest.approx(det, abs=1e-4),
    )
    assert precision_text(dense) == f"±{hw:.2f} / {det:.2f}"
    assert dense.paper_note is None and paper_effect_text(dense) != "figure only"
    comm = out["comm_4x"]
    assert comm.half_width is None and comm.detectable is None
    assert precision_text(comm) == "-"
    md = claims_md(list(out.values()))
    assert "| figure only |" in md and f"±{hw:.2f} / {det:.2f}" in md


# --- Figure 1 with seeds -----------------------------------------------------------------------------


def _fig1_runs(seeds: int) -> pd.DataFrame:
    """Figure 1's FP runs (BatchNorm, EvoNorm) with ``seeds`` seeds: error per epoch varies by
    seed, so that each epoch has a band of known width."""
    rows = []
    for norm, base in (("batchnorm", 60.0), ("evonorm", 70.0)):
        for s in range(seeds):
            hist = [{"epoch": e, "acc_avg_model": base + 5 * e + (s - 1) * (e + 1)} for e in (0, 1)]
            hist.append({"epoch": "final", "acc_avg_model": base + 12 + s})
            hist[-2]["acc_avg_model"] = None  # the last epoch is the final evaluation
            rows.append(
                {k: None for k in KEYS}
                | {
                    "study": "fig1",
                    "status": "ok",
                    "run_id": f"{norm}{s}",
                    "seed": s,
                    "norm": norm,
                    "precision": "fp32",
                    "model": "resnet20",
                    "skew": 0.8,
                    "history": hist,
                    "stand_in": "",
                }
            )
    return pd.DataFrame(rows)


def test_fig1_with_three_seeds_draws_the_mean_and_its_t_band() -> None:
    df = _fig1_runs(3)
    fig = fig1(df)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert len(labels) == 2 and all("n=3" in t and "95 % CI" in t for t in labels)
    bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(bands) == 2
    for norm, band, line in zip(("batchnorm", "evonorm"), bands, ax.get_lines(), strict=True):
        runs = df[df["norm"] == norm]
        errs = {1: [], 2: []}
        for h in runs["history"]:
            errs[1].append(100 - h[0]["acc_avg_model"])
            errs[2].append(100 - h[-1]["acc_avg_model"])  # the final evaluation
        ys = band.get_paths()[0].vertices
        for epoch, v in errs.items():
            hw, _ = _by_hand(v)
            mean = sum(v) / 3
            at = ys[ys[:, 0] == epoch][:, 1]
            assert min(at) == pytest.approx(mean - hw) and max(at) == pytest.approx(mean + hw)
        assert list(line.get_ydata()) == pytest.approx([sum(errs[e]) / 3 for e in (1, 2)])
    assert "95 % Student t-interval" in fig1_spread_text(df) and "3 runs" in fig1_spread_text(df)


def test_fig1_with_one_seed_draws_single_curves() -> None:
    df = _fig1_runs(1)
    ax = fig1(df).axes[0]
    assert not [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert all("n=" not in t.get_text() for t in ax.get_legend().get_texts())
    assert len(ax.get_lines()) == 2
    assert fig1_spread_text(df) == "One run per curve, so no interval."
