"""The kernels a compiled step would launch on a CUDA GPU, counted without one
(``lpdt.engine.cudacount``): small functions whose Triton kernels are known by construction, and
a compiled training step that still trains as without the count."""

from __future__ import annotations

import contextlib

import pytest
import torch
from torch import nn

from lpdt.engine import cudacount
from lpdt.engine.steps import Steps
from lpdt.layers.norms import group_variance, value_range


def test_a_pointwise_chain_is_one_kernel_and_the_function_still_runs():
    x = torch.randn(1000)
    with cudacount.counting() as launches:
        out = torch.compile(lambda t: (t.sin() * 2).cos(), dynamic=False, fullgraph=True)(x)
    torch.testing.assert_close(out, (x.sin() * 2).cos())  # float32 rounding of the compiled code
    assert [(g.backward, g.kernels, g.extern) for g in launches.graphs] == [(False, 1, 0)]
    assert launches.graphs[0].cudagraph_blocker is None  # CUDA graphs could capture it


def test_a_matmul_is_a_library_call():
    a, b = torch.randn(64, 32), torch.randn(32, 16)
    with cudacount.counting() as launches:
        out = torch.compile(lambda p, q: p @ q, dynamic=False)(a, b)
    torch.testing.assert_close(out, a @ b)
    assert (launches.kernels, launches.extern) == (0, 1)


def test_the_backward_is_lowered_with_the_forward():
    """One call, no backward run yet: the forward's kernel (sin and its sum, one reduction) and
    the backward's (grad * cos(x), one pointwise kernel) are both counted."""
    x = torch.randn(64, requires_grad=True)
    with cudacount.counting() as launches:
        torch.compile(lambda t: t.sin().sum(), dynamic=False)(x)
    assert [(g.backward, g.kernels) for g in launches.graphs] == [(False, 1), (True, 1)]
    assert launches.kernels == 2


def test_counting_restores_torch_compile_and_refuses_other_modes():
    compile = torch.compile
    with cudacount.counting():
        assert torch.compile is not compile
        with pytest.raises(ValueError, match="default mode"):
            torch.compile(lambda t: t, mode="reduce-overhead")
    assert torch.compile is compile


def test_layers_take_a_gpus_formula_while_counting():
    """EvoNorm's group variance is lowered as a GPU computes it (one ``var``), not as the CPU's
    centred mean, whose two reductions a GPU runs as four kernels on a channels-last input (a
    GPU's convolution output), against two for ``var``."""
    x = torch.randn(8, 16, 32, 32).contiguous(memory_format=torch.channels_last)
    kernels = []
    for fn in (
        lambda t: group_variance(t, 4),
        lambda t: t.reshape(8, 4, -1).var(-1, unbiased=False),
        lambda t: (
            (t.reshape(8, 4, -1) - t.reshape(8, 4, -1).mean(-1, keepdim=True)).square().mean(-1)
        ),
    ):
        torch._dynamo.reset()
        with cudacount.counting() as launches:
            torch.compile(fn, dynamic=False, fullgraph=True)(x)
        kernels.append(launches.kernels)
    assert kernels[0] == kernels[1] < kernels[2], kernels


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.fc = nn.Linear(8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.conv2(torch.relu(self.conv1(x))))
        return self.fc(h.mean((2, 3)))


def test_the_range_gradient_is_one_fused_kernel_not_scatters():
    """Range-EvoNorm's chunk range, compiled: the backward is one pointwise kernel (the select's
    gradient, fused with the mean's); as ``max(-1).values - min(-1).values`` it was a scatter
    into zeros for each, five kernels on torch 2.14.1."""
    x = torch.randn(32, 8, 16, 128, requires_grad=True)
    with cudacount.counting() as launches:
        fn = torch.compile(lambda t: value_range(t).mean(-1), dynamic=False, fullgraph=True)
        fn(x).sum().backward()
    backward = [g for g in launches.graphs if g.backward]
    assert [g.kernels for g in backward] == [1]
    assert "scatter" not in backward[0].source


def test_a_norms_parameters_are_quantised_in_one_kernel():
    """Three parameters of one shape, compiled for a GPU: ``ste_minmax_each`` quantises them in
    one kernel (their ranges and roundings by rows), where one ``ste_minmax`` each is one kernel
    each."""
    from lpdt.layers.quant.functions import ste_minmax, ste_minmax_each

    ps = [torch.randn(8, 1, 64, 1, 1) for _ in range(3)]
    counts = []
    for fn in (
        lambda a, b, c: ste_minmax_each([a, b, c], 8),
        lambda a, b, c: [ste_minmax(t, 8) for t in (a, b, c)],
    ):
        with cudacount.counting() as launches:
            torch.compile(fn, dynamic=False, fullgraph=True)(*ps)
        counts.append(launches.kernels)
    assert counts == [1, 3]


@pytest.mark.parametrize(
    ("shape", "split", "kernels"),
    [
        ((8, 16, 128, 128), True, 3),
        ((8, 16, 128, 128), False, 1),
        ((8, 32, 32, 3, 3), True, 2),
        ((8, 64, 64, 3, 3), True, 3),
    ],
)
def test_a_long_rows_range_is_two_kernels_before_its_rounding(shape, split, kernels):
    """A quantiser's range of each node's values, compiled for a GPU: its pieces' min and max in
    one kernel, their minima and negated maxima stacked in a second; then the rounding, which
    inductor may fuse with the second. Rows: a gradient's 262,144 values (32 pieces of 8,192), a
    convolution's weights of 9,216 (2 of 4,608) and 36,864 (6 of 6,144). As one ``aminmax``
    inductor split each itself and finished the min and the max in a kernel each: four
    kernels. Where inductor is told not to split reductions, the range is not split by hand
    either: one kernel per node's row, the rounding after the reduction in the same kernel (a
    split by hand would make it three)."""
    from lpdt.layers.quant.quantizers import quantize_minmax_nodes

    g, seeds = torch.randn(*shape), torch.arange(8)
    with cudacount.counting({"split_reductions": split}) as launches:
        torch.compile(lambda t, s: quantize_minmax_nodes(t, 8, s), dynamic=False)(g, seeds)
    assert launches.kernels == kernels


def test_an_activation_quantisers_two_batch_means_are_one_kernel():
    """An activation quantiser in training, compiled for a GPU: the per-sample ranges (one
    kernel), both batch means with their running-range updates (one kernel: each mean reads
    the whole stack of minima and maxima), the rounding (one). As two means of two rows they
    were a kernel each: four."""
    from lpdt.layers.quant import QuantMeasure

    m, x = QuantMeasure(8, stochastic=False), torch.randn(32, 16, 16, 16)
    with cudacount.counting() as launches:
        torch.compile(m, dynamic=False, fullgraph=True)(x)
    assert launches.kernels == 3
    assert m.running_min.item() < 0 < m.running_max.item()  # the updates ran


@pytest.mark.slow  # two cold compiles, 12-14 s of the default suite on the 2-core VM
def test_a_compiled_training_step_trains_as_without_the_count():
    """The step's loss and gradients are those of the same compiled step without counting; on a
    GPU inductor lays the convolutions' saved activations out channels-last, and the backward
    is lowered with those strides (restrided), as AOT autograd does with the real forward's."""
    x, y = torch.randn(4, 3, 8, 8), torch.randint(0, 10, (4,))
    losses, grads = [], []
    for count in (False, True):
        torch.manual_seed(0)
        net = Net()
        with cudacount.counting() if count else contextlib.nullcontext() as launches:
            losses.append(Steps(net, compile=True, log=lambda m: None).train_step(net, x, y))
        grads.append([p.grad.clone() for p in net.parameters()])
    assert torch.equal(losses[0], losses[1])
    assert all(torch.equal(a, b) for a, b in zip(*grads, strict=True))
    forward, backward = launches.graphs
    assert (forward.backward, backward.backward) == (False, True)
    assert forward.kernels > 0 and backward.kernels > 0 and launches.extern >= 3
    assert backward.restrided > 0


def test_the_batched_gradient_quantisers_forward_copy_is_fused():
    """Under vmap (the batched step), compiled for a GPU: the gradient quantiser's operator is a
    copy that inductor fuses, so the forward's one library call is the convolution's. As an
    operator's own copy it was a library call of its own (two)."""
    from lpdt.layers.quant import vmap_ops
    from lpdt.layers.quant.quantizers import vmapped

    x = torch.randn(4, 2, 3, 8, 8, requires_grad=True)
    w = torch.randn(4, 5, 3, 3, 3, requires_grad=True)
    seeds = torch.arange(4)

    def node(xk: torch.Tensor, wk: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        y = vmap_ops.biprec_conv2d(xk, wk, None, [1, 1], [1, 1], [1, 1], 1, 8, s, 1)
        return vmap_ops.quant_grad(y, 8, s, 2).sin()

    def round(*operands: torch.Tensor) -> torch.Tensor:
        with vmapped():  # as the batched step traces its nodes
            return torch.func.vmap(node)(*operands).sum()

    with cudacount.counting() as launches:
        out = torch.compile(round, dynamic=False, fullgraph=True)(x, w, seeds)
    out.backward()
    forward = launches.graphs[0]
    assert not forward.backward
    assert forward.extern == 1
    assert "= torch.ops.lpdt.biprec_conv2d_nodes.default(" in forward.source
    assert x.grad is not None and w.grad is not None
    # nothing in the batched 8-bit operators keeps CUDA graphs out (test_bench_gpu.py: the
    # whole batched step)
    assert [g.cudagraph_blocker for g in launches.graphs] == [None, None]


@torch.library.custom_op(
    "lpdt_test::host_step", mutates_args=(), tags=(torch.Tag.cudagraph_unsafe,)
)
def _host_step(x: torch.Tensor) -> torch.Tensor:
    """An operator that says CUDA graphs cannot capture it (as one that reads the host would)."""
    return x * 2


@_host_step.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def test_a_graph_cuda_graphs_cannot_capture_names_its_operator():
    """``Lowered.cudagraph_blocker``: inductor's own reason to leave out CUDA graphs on a GPU,
    found without one (a graph without such an operator has none: the first test)."""
    x = torch.randn(16)
    with cudacount.counting() as launches:
        torch.compile(lambda t: _host_step(t.sin()).cos(), dynamic=False, fullgraph=True)(x)
    (blocked,) = launches.graphs
    assert blocked.cudagraph_blocker is not None
    assert "lpdt_test.host_step" in blocked.cudagraph_blocker
