"""The fused quantiser of the eager GPU path (``lpdt.layers.quant.fused``): one compiled kernel a
call, the bits of the tensor operations it replaces, one operation for the counter.

On the CPU the fused path runs with ``LPDT_QUANT_KERNEL=0`` (no C++ kernel) and
``LPDT_QUANT_FUSED=1`` (on the CPU too); ``tests/test_cuda.py`` runs ``check_fused`` on CUDA,
where it is the default.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from unittest import mock

import pytest
import torch

from lpdt.engine.opcount import count_ops
from lpdt.errors import LpdtError
from lpdt.layers.quant import fused, kernel
from lpdt.layers.quant.quantizers import (
    quantize,
    quantize_minmax,
    quantize_minmax_nodes,
    vmapped,
)


def fused_mode(mode: str) -> contextlib.AbstractContextManager[object]:
    """``LPDT_QUANT_FUSED=mode`` and no C++ kernel inside the block (read at each call)."""
    return mock.patch.dict(os.environ, {fused.ENV: mode, kernel.ENV: "0"})


def _cases(device: torch.device) -> list[tuple[str, Callable[[], torch.Tensor]]]:
    """Every form in which the quantisers call the rounding eagerly."""
    gen = torch.Generator().manual_seed(0)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen).to(device)

    act, w, g = rand(8, 16, 12, 12), rand(16, 3, 3, 3), rand(3, 4, 5, 6) * 10
    seed, seeds = torch.tensor([2**31 - 1], device=device), torch.tensor([11, 5, 0], device=device)
    lo, hi = act.amin().reshape(1), act.amax().reshape(1)
    per_row = g.amin((1, 2, 3), keepdim=True), g.amax((1, 2, 3), keepdim=True)

    def per_node(t: torch.Tensor, s: torch.Tensor) -> torch.Tensor:  # the batched step's form
        r = t.amin().reshape(1), t.amax().reshape(1)
        return quantize(t, *r, 8, True, s, 9) + quantize(t, *r, 4, False)

    def vmap_nodes(dim: int) -> torch.Tensor:
        t = g if dim == 0 else g.movedim(0, 1).contiguous()
        with vmapped():
            return torch.func.vmap(per_node, in_dims=(dim, 0))(t, seeds)

    return [
        *(
            (
                f"activation, salt {salt}",
                lambda salt=salt: quantize(act, lo, hi, 8, True, seed, salt),
            )
            for salt in (0, 1, 3, 90)
        ),
        ("activation, 4 bits, nearest", lambda: quantize(act, lo, hi, 4, False)),
        ("weights (own range, nearest)", lambda: quantize_minmax(w, 8)),
        ("a gradient (own range, stochastic)", lambda: quantize_minmax(g, 8, True, seed, 5)),
        ("transposed input", lambda: quantize(act.transpose(1, 3), lo, hi, 8, True, seed, 2)),
        ("one range per row, one seed", lambda: quantize(g, *per_row, 8, True, seed, 7)),
        ("a range per element", lambda: quantize(g, g - 1, g + 1, 8, True, seed, 7)),
        ("node-stacked gradients (rows)", lambda: quantize_minmax_nodes(g, 8, seeds, 4)),
        ("under vmap, node axis first", lambda: vmap_nodes(0)),
        ("under vmap, node axis second", lambda: vmap_nodes(1)),
    ]


def check_fused(device: torch.device) -> None:
    """Each form gives the tensor operations' bits through the fused operator; also
    ``tests/test_cuda.py``'s, on CUDA."""
    for name, case in _cases(device):
        with fused_mode("0"):
            want = case()
        with fused_mode("1"):
            got = case()
        assert got.shape == want.shape and torch.equal(got, want), name


def test_fused_quantiser_has_the_tensor_operations_bits():
    check_fused(torch.device("cpu"))


def test_the_counter_sees_one_operation_per_rounding():
    """Under ``lpdt.engine.opcount`` a fused rounding is the one operation it is on a GPU (the
    compiled kernel runs below the counter's dispatch mode); the tensor path was about forty."""
    x, seed = torch.randn(4, 8, 6, 6), torch.tensor([3])
    counted = {}
    for mode in ("1", "0"):
        with fused_mode(mode):
            quantize_minmax(x, 8, True, seed, 2)  # compiled outside the count
            _, counted[mode] = count_ops(quantize_minmax, x, 8, True, seed, 2)
    names = {n for n in counted["1"].counts if n not in ("aten.view.default",)}
    assert names == {"aten.detach.default", "aten.aminmax.default", "lpdt.quantize_fused.default"}
    assert counted["1"].launches == 2, counted["1"].counts  # the range, and the rounding
    assert counted["0"].launches > 20, counted["0"].counts


def test_an_eager_8bit_step_rounds_through_the_fused_operator(monkeypatch):
    """The paper's 8-bit recipe (stochastic activations, 8-bit gradients), node by node and
    batched: every rounding of the step is one fused operation, none of the noise hash's integer
    operations is left, and the gradients are the tensor path's bit for bit."""
    from lpdt.decentral.streams import NodeStreams
    from lpdt.engine.batched import BatchedSteps
    from lpdt.engine.steps import Steps
    from tests.engine.test_batched import NODES, node_batches, state_pair

    x, y = node_batches()

    def run(batched: bool, mode: str):
        with fused_mode(mode):
            state, _ = state_pair("int8", deterministic=False)
            streams = NodeStreams(7, list(range(NODES)), torch.device("cpu"))
            if batched:
                bat = BatchedSteps(state, log=lambda m: None)

                def step() -> None:
                    bat.train_step(x, y, bat.seeds(streams.node))
            else:
                steps = Steps(state.models[0], log=lambda m: None)

                def step() -> None:
                    for k, model in enumerate(state.models):
                        with streams.node(k):
                            steps.train_step(model, x[k], y[k])

            state.grad.zero_()
            _, counted = count_ops(step)
            return state.grad.clone(), counted

    for batched in (False, True):
        g_fused, fused_ops = run(batched, "1")
        g_tensor, tensor_ops = run(batched, "0")
        assert torch.equal(g_fused, g_tensor), batched
        assert fused_ops.counts["lpdt.quantize_fused.default"] > 0
        hash_ops = [n for n in fused_ops.counts if "bitwise" in n]
        assert not hash_ops, hash_ops
        assert any("bitwise" in n for n in tensor_ops.counts)  # what the count would have seen
        assert fused_ops.launches * 2 < tensor_ops.launches, (
            fused_ops.launches,
            tensor_ops.launches,
        )
        assert fused_ops.host_syncs == 0


_GRAPHS = """
import json, os, torch
from torch._dynamo.utils import counters
from torch._inductor import metrics
from lpdt.layers.quant.quantizers import quantize, quantize_minmax, quantize_minmax_nodes
seed, seeds = torch.tensor([5]), torch.tensor([1, 2, 3])
for i, shape in enumerate([(8, 16, 12, 12), (4, 32, 6, 6), (10,), (3, 7), (64, 10), (2, 3, 5)]):
    x = torch.randn(*shape)
    for salt in (0, 1, 2, 57, 300):
        quantize(x, x.amin().reshape(1), x.amax().reshape(1), 8, True, seed, salt)
    quantize_minmax(x, 8)
    quantize_minmax_nodes(torch.randn(3, *shape), 8, seeds, i)
# per-node ranges, rounded to nearest; their dimension of size 1 comes out of the broadcast
# with stride 1 (a norm's parameters) or 0 (a convolution's weights)
for shape in [(4, 1, 16, 1, 1), (4, 16, 3, 3, 3)]:
    x3 = torch.randn(*shape)
    quantize(x3, x3.amin((1, 2, 3, 4), True), x3.amax((1, 2, 3, 4), True), 8, False, None, 0)
print(json.dumps({"graphs": counters["stats"]["unique_graphs"],
                  "kernels": metrics.generated_kernel_count}))
"""


def test_one_kernel_per_graph_and_one_graph_for_every_shape_and_salt():
    """In a fresh process, with inductor's graph caches off (so that every graph is generated,
    not loaded, and counted): six shapes of four ranks, five salts, the three forms (one seed,
    rows, nearest) compile three graphs of one kernel each, and nearest rounding with a range
    per node a fourth, whether the ranges' dimension of size 1 has stride 1 or 0 (a graph each
    until 2026-11-30: dynamo guards that stride too). The process shares the suite's
    inductor cache (its compiled C++ and the compiler's vector-ISA checks): with an empty cache
    of its own the test took 36-40 s of the suite on the 2-core VM, 22 s of it the ISA checks."""
    env = dict(
        os.environ,
        **{fused.ENV: "1", kernel.ENV: "0"},
        TORCHINDUCTOR_FX_GRAPH_CACHE="0",
        TORCHINDUCTOR_AUTOGRAD_CACHE="0",
    )
    done = subprocess.run(
        [sys.executable, "-c", _GRAPHS], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got == {"graphs": 4, "kernels": 4}, got


def test_a_bad_setting_is_named(monkeypatch):
    monkeypatch.setenv(fused.ENV, "yes")
    with pytest.raises(LpdtError, match="LPDT_QUANT_FUSED='yes': must be one of auto, 1, 0"):
        fused.enabled(torch.device("cpu"))
    for mode, cpu, other in (
        ("auto", False, True),
        ("", False, True),
        ("1", True, True),
        ("0", False, False),
    ):
        monkeypatch.setenv(fused.ENV, mode)
        assert fused.enabled(torch.device("cpu")) == cpu
        assert fused.enabled(torch.device("meta")) == other


def test_a_compiled_backward_does_not_take_the_fused_path():
    """An operator's backward formula is traced by AOT autograd after dynamo, where torch 2.11
    says ``torch.compiler.is_compiling()`` is false: the gradient quantiser's backward took the
    eager GPU path's fused quantiser there, an operator with no fake implementation, and the
    batched 8-bit step did not compile on the H200 (2026-11-30). Compiled, the backward traces
    the quantiser's own operator (``formulas.tracing``) and gives the eager gradient; on torch
    2.11 this test failed before (BackendCompilerFailed)."""
    from lpdt.layers.quant.vmap_ops import quant_grad_nodes

    gen = torch.Generator().manual_seed(3)
    x0 = torch.randn(2, 64, generator=gen)
    w = torch.randn(2, 64, generator=gen)
    seeds = torch.tensor([11, 12])

    def loss(x: torch.Tensor) -> torch.Tensor:
        return (quant_grad_nodes(x, 8, seeds, 5) * w).square().sum()

    grads = []
    with fused_mode("1"):
        for fn in (loss, torch.compile(loss, backend="aot_eager", fullgraph=True)):
            x = x0.clone().requires_grad_()
            fn(x).backward()
            grads.append(x.grad)
    torch.testing.assert_close(grads[1], grads[0])
    assert not torch.equal(grads[0], 2 * w.square() * x0)  # the gradient was quantised
