import pytest
import torch
from torch import nn

from lpdt.cost.trace import count_params, priced_modules, trace_model
from tests.cost.nets import TINY_SHAPE, Tiny


def test_trace_records_every_call_once_in_order(tiny):
    recs = trace_model(tiny, TINY_SHAPE)
    assert [r.kind for r in recs] == [
        "conv",
        "norm",
        "conv",
        "conv",
        "add",
        "relu",
        "relu",
        "avgpool",
        "linear",
    ]
    # The shared ReLU is recorded once per call, with distinct names.
    assert [r.name for r in recs if r.kind == "relu"] == ["relu", "relu#1"]
    conv1, norm, conv2, short, add = recs[:5]
    assert (conv1.c_in, conv1.c_out, conv1.k, conv1.in_hw, conv1.out_hw) == (2, 4, 9, 64, 64)
    assert conv1.macs == 4 * 2 * 9 * 64
    assert (conv2.k, conv2.in_hw, conv2.out_hw, conv2.macs) == (9, 64, 16, 4 * 4 * 9 * 16)
    assert (short.k, short.out_hw, short.macs) == (1, 16, 4 * 4 * 16)
    assert (norm.norm, norm.c_in, norm.in_hw, norm.act) == ("rangeen", 4, 64, None)
    assert add.in_numel == 2 * 64 and add.out_numel == 64
    assert recs[-1].macs == 12 and not recs[-1].spatial


def test_norm_children_are_not_visited_and_fused_relu_is_seen():
    net = Tiny("rangebn")
    recs = trace_model(net, TINY_SHAPE)
    norm = [r for r in recs if r.kind == "norm"][0]
    assert norm.norm == "rangebn" and norm.act == "relu"
    assert len(recs) == 9


def test_grouped_conv_macs():
    net = nn.Sequential(nn.Conv2d(4, 8, 3, padding=1, groups=2, bias=False))
    (rec,) = trace_model(net, (4, 5, 5))
    assert rec.macs == 8 * 2 * 9 * 25


def test_unknown_layer_with_parameters_is_an_error():
    class Weird(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.scale = nn.Parameter(torch.ones(1))

        def forward(self, x):
            return x * self.scale

    with pytest.raises(ValueError, match="Weird"):
        priced_modules(nn.Sequential(nn.Conv2d(1, 1, 1), Weird()))


def test_trace_restores_training_mode_and_counts_params(tiny):
    tiny.train()
    trace_model(tiny, TINY_SHAPE)
    assert tiny.training
    assert count_params(tiny) == 72 + 144 + 16 + 3 * 4 + 4 * 3 + 3


def test_linear_on_a_sequence_counts_every_position():
    (rec,) = trace_model(nn.Sequential(nn.Linear(6, 5)), (7, 6))
    assert (rec.in_hw, rec.out_hw, rec.macs) == (7, 7, 7 * 6 * 5)
