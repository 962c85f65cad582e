"""``lpdt.layers.formulas``: a layer's formula follows the tensor's device unless ``as_device``
says otherwise, and the two formulas of EvoNorm's group variance give the same value."""

from __future__ import annotations

import torch

from lpdt.layers.formulas import as_device, formula_device
from lpdt.layers.norms import group_variance


def test_the_tensors_device_unless_as_device_says_otherwise():
    t = torch.zeros(2)
    assert formula_device(t) == "cpu"
    with as_device("cuda"):
        assert formula_device(t) == "cuda"
        with as_device("cpu"):
            assert formula_device(t) == "cpu"
        assert formula_device(t) == "cuda"
    assert formula_device(t) == "cpu"


def test_group_variance_is_the_same_value_by_either_formula():
    x = torch.randn(4, 8, 5, 5, dtype=torch.float64)
    cpu = group_variance(x, 2)
    with as_device("cuda"):
        gpu = group_variance(x, 2)
    torch.testing.assert_close(gpu, cpu, rtol=1e-12, atol=0)
    torch.testing.assert_close(cpu, x.reshape(4, 2, -1).var(-1, unbiased=False))
