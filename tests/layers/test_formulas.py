"""``lpdt.layers.formulas``: a layer's formula follows the tensor's device unless ``as_device``
says otherwise, and the two formulas of EvoNorm's group variance give the same value."""

from __future__ import annotations

import torch

from lpdt.layers.formulas import as_device, formula_device, tracing
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


_seen: list[bool] = []


@torch.library.custom_op("lpdt_test::formulas_probe", mutates_args=())
def _probe(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


_probe.register_fake(lambda x: x.clone())


def _probe_backward(ctx: object, g: torch.Tensor) -> torch.Tensor:
    _seen.append(tracing())
    return g


_probe.register_autograd(_probe_backward)


def test_tracing_holds_where_aot_autograd_traces_an_operators_backward():
    """``tracing()`` is true while a compile traces an operator's backward formula (torch 2.11
    says ``is_compiling()`` false there) and false when the same formula runs eagerly."""
    _seen.clear()
    x = torch.randn(3, requires_grad=True)
    # aot_eager: AOT autograd traces the backward at every compile (inductor's caches would
    # load it from an earlier run instead)
    torch.compile(lambda t: _probe(t).sum(), backend="aot_eager", fullgraph=True)(x).backward()
    _probe(x).sum().backward()
    assert _seen[0] and not _seen[-1], _seen
    assert not tracing()


def test_tracing_holds_under_a_compiles_tracing_context():
    """The branch torch 2.11 needs (its ``is_compiling()`` is false in an operator's traced
    backward), checked on any torch: a tracing context alone makes ``tracing()`` true."""
    assert not torch.compiler.is_compiling()
    with torch._guards.tracing(torch._guards.TracingContext(None)):
        assert tracing()
    assert not tracing()
