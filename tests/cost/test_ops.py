"""Operation counts of the hand-checked tiny network against the paper's Table 7 / Table 9."""

import pytest

from lpdt.cost.ops import NORM_ROW, Ops, count_ops, layer_ops
from lpdt.cost.trace import trace_model
from tests.cost.nets import TINY_SHAPE, Tiny

B = 2
CONV_MACS = 4 * 2 * 9 * 64 + 4 * 4 * 9 * 16 + 4 * 4 * 1 * 16  # conv1 + conv2 + shortcut
FC_MACS = 4 * 3
CL2_NORM = 4 * 64  # C * L^2 at the norm
CL2_ADD = 4 * 16
WEIGHTS = 2 * 4 * 9 + 4 * 4 * 9 + 4 * 4 + 4 * 3  # conv/linear weight elements
ACT_IN = 2 * 64 + 4 * 64 + 4 * 64 + 4  # inputs of conv1, conv2, shortcut, fc


def expected(mode: str, precision: str, norm: str) -> dict[str, Ops]:
    t = mode == "training"
    f = 3 if t else 1
    if norm == "rangeen":
        a, m, mc = (6, 10, 5) if t else (2, 4, 2)
    else:
        a, m, mc = (9, 6, 7) if t else (3, 2, 3)
    out = {
        "conv": Ops(f * B * CONV_MACS, f * B * CONV_MACS),
        "linear": Ops(f * B * FC_MACS, f * B * FC_MACS),
        "quant_act": Ops(),
        "quant_weight": Ops(),
        "norm_rbn": Ops(),
        "norm_ren": Ops(),
        "skip": Ops(2 * B * CL2_ADD, 0),
        "avgpool": Ops(B * 4 * 16, (2 if t else 1) * B * 4),
    }
    out["norm_ren" if norm == "rangeen" else "norm_rbn"] = Ops(
        a * B * CL2_NORM, m * B * CL2_NORM + mc * 4
    )
    if precision == "int8":
        out["quant_weight"] = Ops(2 * WEIGHTS, 4 * WEIGHTS)
        if t:
            out["quant_act"] = Ops(2 * B * ACT_IN, 4 * B * ACT_IN)
    return out


@pytest.mark.parametrize("norm", ["rangeen", "rangebn"])
@pytest.mark.parametrize("precision", ["fp32", "int8"])
@pytest.mark.parametrize("mode", ["training", "inference"])
def test_tiny_network_counts_match_hand_computation(norm, precision, mode):
    recs = trace_model(Tiny(norm), TINY_SHAPE)
    assert count_ops(recs, B, mode, precision) == expected(mode, precision, norm)


def test_counts_scale_linearly_with_batch_except_per_channel_terms(tiny):
    recs = trace_model(tiny, TINY_SHAPE)
    one, four = count_ops(recs, 1, "training", "fp32"), count_ops(recs, 4, "training", "fp32")
    assert four["conv"] == Ops(4 * one["conv"].adds, 4 * one["conv"].mults)
    # Range EvoNorm: 10 b C L^2 + 5 C multiplications: the 5 C term does not scale with b.
    assert four["norm_ren"].mults - 4 * one["norm_ren"].mults == -3 * 5 * 4


def test_norm_kinds_map_to_the_two_table_rows():
    assert {k for k, v in NORM_ROW.items() if v == "norm_rbn"} == {
        "rangebn",
        "batchnorm",
        "groupnorm",
    }
    assert {k for k, v in NORM_ROW.items() if v == "norm_ren"} == {"rangeen", "evonorm"}


def test_bad_mode_or_precision_is_a_clear_error(tiny):
    rec = trace_model(tiny, TINY_SHAPE)[0]
    with pytest.raises(ValueError, match="precision"):
        layer_ops(rec, 1, "training", "int4")
    with pytest.raises(ValueError, match="mode"):
        layer_ops(rec, 1, "backward", "fp32")
