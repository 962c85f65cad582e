"""The 8-bit conversion swaps modules one for one, so tracing the converted model must give the
same layers as the full-precision one (the cost model prices the fp32 trace at int8)."""

import pytest

from lpdt.cost.comm import gossiped_numels
from lpdt.cost.model import build
from lpdt.cost.trace import trace_model
from lpdt.decentral.compression import kept_total


@pytest.mark.parametrize("norm", ["rangeen", "rangebn"])
def test_converted_model_traces_like_the_fp32_model(norm):
    fp = build("resnet20", norm)
    lp = build("resnet20", norm, precision="int8")

    def key(r):
        return (r.kind, r.norm, r.act, r.macs, r.out_numel)

    assert [key(r) for r in trace_model(lp, (3, 32, 32))] == [
        key(r) for r in trace_model(fp, (3, 32, 32))
    ]


def test_8bit_resnet20_gossips_the_reference_tensor_count():
    """Reference §4.5: the LP ResNet-20 gossips P = 273,380 (122 range scalars) and K = 2,889."""
    numels = gossiped_numels(build("resnet20", "rangeen", precision="int8"))
    assert sum(numels) == 273_380
    assert kept_total(numels, "topk", 0.99) == 2_889
