"""The paper's Table 10 (acceptance numbers) and the files of ``lpdt cost all``."""

import csv
import json

import pytest

from lpdt.cost import published
from lpdt.cost.cost_tables import compute_costs, op_table, table3_rows, table10_rows, write_all

# Reference §11.6: the memory model reproduces every Table 10 training entry within 0.5 MiB;
# the one entry that is off by more than 1 % is ResNet-20 8-bit with Range-BN, whose paper
# RBN - REN gap (10.72 MiB) is not a quarter of the fp32 gap (46.0 MiB) as it is for the others.
NOT_WITHIN_1PCT = {("resnet20", "rangebn", "training", "int8")}


@pytest.fixture(scope="module")
def costs():
    return compute_costs()


@pytest.fixture(scope="module")
def t10(costs):
    return table10_rows(costs)


def test_table10_memory_matches_the_paper(t10):
    assert len(t10) == 12
    for r in t10:
        for prec in ("fp32", "int8"):
            ours, theirs = r[f"memory_{prec}_mib"], r[f"memory_{prec}_paper"]
            if (r["model"], r["norm"], r["phase"], prec) in NOT_WITHIN_1PCT:
                assert abs(ours - theirs) < 0.5, r
            else:
                assert abs(ours / theirs - 1) <= 0.01, (r["model"], r["norm"], r["phase"], prec)


def test_table10_efficiency_ratios(t10):
    for r in t10:
        assert 19.5 <= r["energy_efficiency"] <= 20.1, r
        if r["phase"] == "inference":
            assert r["memory_efficiency"] == pytest.approx(4.0)
        elif r["model"] == "vgg11":
            assert 1.25 < r["memory_efficiency"] < 1.45  # paper: ~1.3x for VGG
        else:
            assert 3.4 < r["memory_efficiency"] < 3.75  # paper: ~3.5x for ResNets


@pytest.mark.parametrize(
    "model, convs, norms, adds, maxpools, linears, mmacs",
    [
        # conv (+ linear) multiply-accumulates per sample as enumerated in reference §11.5
        ("resnet20", 21, 21, 9, 0, 1, 40.81),
        ("resnet54", 51, 51, 24, 0, 1, 111.59),
        ("vgg11", 8, 8, 0, 5, 2, 153.03),
    ],
)
def test_real_models_are_traced_layer_by_layer(
    costs, model, convs, norms, adds, maxpools, linears, mmacs
):
    recs = costs[(model, "rangeen", "fp32")].records
    kinds = [r.kind for r in recs]
    assert kinds.count("conv") == convs and kinds.count("norm") == norms
    assert kinds.count("add") == adds and kinds.count("maxpool") == maxpools
    assert kinds.count("linear") == linears
    macs = sum(r.macs for r in recs)
    if model != "vgg11":
        macs -= sum(
            r.macs for r in recs if r.kind == "linear"
        )  # reference §11.5 lists conv MACs only
    assert macs / 1e6 == pytest.approx(mmacs, abs=0.005)


def test_norm_rows_make_the_rbn_ren_energy_difference(costs):
    """REN - RBN (Table 7): -3 adds and +4 mults per normalised element, -2 mults per channel."""
    rbn, ren = costs[("resnet20", "rangebn", "fp32")], costs[("resnet20", "rangeen", "fp32")]
    norms = [r for r in ren.records if r.kind == "norm"]
    elems = sum(r.c_in * r.in_hw for r in norms)
    assert elems == 200_704  # sum of C L^2 over the 21 norms of ResNet-20 (reference §11.4)
    chans = sum(r.c_in for r in norms)
    pj = 32 * elems * (-3 * 0.9 + 4 * 3.7) - 2 * chans * 3.7
    assert ren.energy_mj("training") - rbn.energy_mj("training") == pytest.approx(pj * 1e-9)


def test_absolute_energy_is_below_the_paper_and_the_ratio_is_reported(t10):
    # The paper's absolute energies cannot come from the Table 7/9 formulas (reference §11.5):
    # ours is 2.5x-8x lower; we report the ratio rather than fitting constants.
    for r in t10:
        assert 0.1 < r["energy_fp32_ratio"] < 0.45


def test_table7_has_the_quantization_rows_only_for_8_bit(costs):
    rows = op_table(costs, "training")
    types: dict[tuple[str, str], set[str]] = {}
    for r in rows:
        types.setdefault((r["norm"], r["precision"]), set()).add(r["layer_type"])
    assert (
        "quant_act" in types[("rangeen", "int8")] and "quant_act" not in types[("rangeen", "fp32")]
    )
    assert "norm_rbn" in types[("rangebn", "fp32")] and "norm_ren" not in types[("rangebn", "fp32")]
    inference = op_table(costs, "inference")
    assert not any(r["layer_type"] == "quant_act" for r in inference)


def test_table3_rows():
    rows = table3_rows()
    paper_cfg = [r for r in rows if r["reading"] == "paper configuration"]
    assert len(paper_cfg) == len(published.table3_data()) == 6
    assert all(r["agrees_printed"] for r in paper_cfg if r["model"] != "vgg11")
    vgg_code = [r for r in rows if r["model"] == "vgg11" and r["reading"].startswith("reference")]
    dense = [r for r in vgg_code if r["compression"] == 0][0]
    assert dense["gb_fp32_printed"] == "744.5"


@pytest.mark.slow
def test_write_all(tmp_path):
    files = write_all(tmp_path)
    for name in ("table7", "table9", "table10", "fig7_memory", "fig7_compute", "table3_data"):
        with files[name].open() as f:
            assert list(csv.DictReader(f)), name
    s = json.loads(files["summary"].read_text())
    assert s["memory_all_within_1pct_except_noted"] is True
    assert 19.5 <= s["energy_efficiency_range"][0] <= s["energy_efficiency_range"][1] <= 20.1


def test_packaged_table10_agrees_with_config_paper_results():
    """Both records of the paper's Table 10 hold the same numbers (the tests run in a checkout,
    which has config/paper_results.csv)."""
    path = published.config_results_path()
    rows = published.table10_from_config(path) if path else None
    assert rows is not None, "config/paper_results.csv with Table 10 is missing from the checkout"
    packaged = {
        (r["model"], r["norm"], r["phase"]): r for r in published.read_rows(published.TABLE10_CSV)
    }
    assert len(rows) == len(packaged) == 12
    for r in rows:
        p = packaged[(r["model"], r["norm"], r["phase"])]
        for col in published.TABLE10_COLUMNS:
            assert float(r[col]) == float(p[col]), (r["model"], r["norm"], r["phase"], col)


def test_incomplete_config_table10_is_not_used(tmp_path):
    f = tmp_path / "paper_results.csv"
    f.write_text(
        "# comment\ntable,model,norm,precision,phase,metric,value\n"
        "10,resnet20,rangebn,fp32,training,memory_mib,170.6\n"
    )
    assert published.table10_from_config(f) is None
    assert len(published.table10()) == 12  # the packaged copy (or a complete config file)
