"""No host synchronisation inside a training step on a GPU's path (``lpdt.engine.opcount``).

A read of a tensor's value on the host (``.item()``, ``int(t)``, a Python branch on a tensor)
makes a GPU's host wait for everything queued before it. On the CPU the same reads are counted
as ``aten._local_scalar_dense`` with the CPU-only fast paths switched off
(``LPDT_QUANT_KERNEL=0``: the 8-bit quantisers then run the tensor operations a GPU runs, and
the noise seed is not read on the host): zero per step, fp32 and 8-bit (the paper's recipe),
node by node and batched, eager here and compiled where the compiled steps are tested.
"""

from __future__ import annotations

import math

import pytest
import torch

from lpdt.decentral.catalog import ALGORITHMS, COMPRESSORS
from lpdt.decentral.streams import NodeStreams
from lpdt.engine.batched import BatchedSteps
from lpdt.engine.opcount import (
    OpCounter,
    TransferCounter,
    count_compiled_ops,
    count_ops,
    counter_sees_compiled_code,
)
from lpdt.engine.steps import Steps
from lpdt.layers.quant import kernel
from lpdt.transfer import to_device
from tests.engine.test_batched import NODES, node_batches, state_pair


@pytest.fixture
def gpu_path(monkeypatch):
    """The quantisers' tensor path, as on a GPU (no C++ kernel, no seed read on the host)."""
    monkeypatch.setenv(kernel.ENV, "0")


def _node_step(steps: Steps, state, x, y) -> None:
    streams = NodeStreams(7, list(range(NODES)), torch.device("cpu"))
    for k, model in enumerate(state.models):
        with streams.node(k):
            steps.train_step(model, x[k], y[k])


def _batched_step(steps: BatchedSteps, x, y) -> None:
    steps.train_step(
        x, y, steps.seeds(NodeStreams(7, list(range(NODES)), torch.device("cpu")).node)
    )


# Eager steps, every precision, node by node and batched. The compiled steps are counted where
# their graphs are compiled anyway, so that the suite compiles each graph once (a compile of
# these tiny models takes 6-16 s on the 2-core VM, empty cache): node by node in
# tests/engine/test_steps.py, fp32 (test_compiled_step_equals_eager) and the paper's 8-bit recipe
# in float64 (test_compiled_8bit_stochastic_step_draws_the_eager_noise); fp32 and the paper's
# 8-bit recipe batched in tests/engine/test_batched.py
# (test_compiled_batched_step_equals_the_sequential_steps).
@pytest.mark.parametrize("batched", [False, True])
@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_a_training_step_reads_nothing_on_the_host(gpu_path, precision, batched):
    # int8: stochastic rounding, 8-bit gradients (the paper's recipe)
    _, state = state_pair(precision, deterministic=False)
    x, y = node_batches()
    if batched:
        steps = BatchedSteps(state, log=lambda m: None)
        _batched_step(steps, x, y)
        _, counted = count_ops(_batched_step, steps, x, y)
    else:
        node_steps = Steps(state.models[0], log=lambda m: None)
        _node_step(node_steps, state, x, y)
        _, counted = count_ops(_node_step, node_steps, state, x, y)
    assert counted.total > 0  # the counter saw the step
    assert counted.host_syncs == 0, counted.counts


def test_the_counter_sees_a_host_read():
    """It can fail: ``.item()``, a Python branch on a tensor and a boolean mask each count one."""
    t = torch.ones(3)
    with OpCounter() as counted:
        t.sum().item()
        if t.sum() > 0:
            pass
        t[t > 0]  # its size depends on the values: nonzero
    assert counted.host_syncs == 3, counted.counts


def test_the_compiled_code_counter_runs_graphs_compiled_and_sees_a_graph_breaks_host_read():
    """``count_compiled_ops``, which the compiled steps' checks use: a compiled function runs
    compiled under it (its graph's operations are not counted, where eagerly they are), a host
    read at a graph break counts, and the function still compiles for a new shape afterwards (on
    torch 2.11 a plain ``OpCounter`` made dynamo skip the function for the rest of the process)."""
    from torch._dynamo.utils import counters

    def clean(t: torch.Tensor) -> torch.Tensor:
        return (t * 2).sin() + 1

    def breaks(t: torch.Tensor) -> torch.Tensor:
        return t * t.sum().item()  # a graph break: the read runs eagerly between two graphs

    assert counter_sees_compiled_code()
    fn, fn_breaks = torch.compile(clean, dynamic=False), torch.compile(breaks, dynamic=False)
    t = torch.ones(5)
    fn(t), fn_breaks(t)
    _, eager = count_ops(clean, t)
    _, compiled = count_compiled_ops(fn, t)
    assert eager.total == 3 and compiled.total == 0, (eager.counts, compiled.counts)
    _, counted = count_compiled_ops(fn_breaks, t)
    assert counted.host_syncs == 1, counted.counts
    before = counters["stats"]["unique_graphs"]
    fn(torch.ones(7))
    assert counters["stats"]["unique_graphs"] == before + 1


def test_the_cpu_fast_path_reads_the_seed_on_the_host(monkeypatch):
    """What ``LPDT_QUANT_KERNEL=0`` switches off: eagerly on the CPU the 8-bit step reads its
    noise seed on the host (free there), so the count above is of the GPU's path."""
    if kernel.unavailable() is not None:
        pytest.skip(f"the quantiser kernel is not available here: {kernel.unavailable()}")
    _, state = state_pair("int8", deterministic=False)
    x, y = node_batches()
    steps = Steps(state.models[0], log=lambda m: None)
    _, counted = count_ops(_node_step, steps, state, x, y)
    assert counted.host_syncs > 0


def _combinations() -> list[tuple[str, str]]:
    """Every algorithm with every compressor it takes (the registries: a plugin's too)."""
    return [
        (a, c)
        for a in ALGORITHMS.names()
        for c in COMPRESSORS.names()
        if ALGORITHMS.get(a).compresses or c == "none"
    ]


def _iteration_config(precision: str, algorithm: str, compressor: str, batched: bool):
    from tests.engine.test_loop import cfg

    extra = [
        f"precision.mode={precision}",
        f"algorithm.name={algorithm}",
        f"algorithm.compression.name={compressor}",
        f"train.batch_nodes={str(batched).lower()}",
    ]
    if COMPRESSORS.get(compressor).sparse:
        extra.append("algorithm.compression.ratio=0.9")
    return cfg(*extra)


@pytest.mark.parametrize("batched", [False, True], ids=["node-by-node", "batched"])
@pytest.mark.parametrize("precision", ["fp32", "int8"])
@pytest.mark.parametrize("algorithm, compressor", _combinations())
def test_an_iteration_waits_for_nothing(gpu_path, precision, algorithm, compressor, batched):
    """A whole iteration (the batches' copies, the steps, the optimiser, compression and
    gossip) neither reads a value on the host nor makes a copy that waits for the device: on a
    GPU the host runs ahead, preparing the next batches while the device works. The divergence
    check reads the epoch's summed loss once, at its end (``Run.train_epoch``)."""
    from lpdt.engine.run import Run

    run = Run(_iteration_config(precision, algorithm, compressor, batched), log=lambda s: None)
    assert (run.batched is not None) == batched
    run.state.train()
    run.iteration(0.1)
    with TransferCounter() as transfers:
        _, counted = count_ops(run.iteration, 0.1)
    assert counted.total > 0  # the counter saw the iteration
    assert counted.host_syncs == 0, counted.counts
    assert transfers.total == 0, transfers.counts


def test_an_epoch_reads_the_host_at_its_end(gpu_path):
    """``train_epoch`` waits for the device twice, after its last iteration: the summed loss
    and whether every node's weights are finite."""
    from lpdt.engine.run import Run

    run = Run(_iteration_config("int8", "choco", "topk", False), log=lambda s: None)
    assert run.iters > 1
    with TransferCounter() as transfers:
        loss, counted = count_ops(run.train_epoch, 0.1)
    assert math.isfinite(loss)
    assert counted.host_syncs == 2, counted.counts
    assert transfers.total == 0, transfers.counts


def test_the_transfer_counter_sees_each_kind_of_wait():
    """It can fail: each call that would wait for a GPU counts, on the CPU too, and
    ``to_device``'s queued copy does not."""
    t = torch.ones(3)
    with TransferCounter() as counted:
        t.tolist()
        t.numpy()
        t.cpu()
        t.to("cpu")
        t.to(torch.device("cpu"), torch.float64)
        t.to(t)
        torch.tensor([1.0], device="cpu")
        t.to(0 if torch.cuda.is_available() else "cpu")  # an index names a GPU
        t.to("cpu", torch.float64, False, True)  # a positional copy=True is not non_blocking
        t.to(t, non_blocking=True, copy=True)  # queued from the host: does not wait
        t.to(torch.float64)  # no device named: not a copy between devices
        t.to(device=None, dtype=torch.float64)
        torch.tensor([1.0], device=None)
        to_device(t, "cpu")
    assert dict(counted.counts) == {
        "tolist": 1,
        "numpy": 1,
        "cpu": 1,
        "to(device)": 5,
        "tensor(device=)": 1,
    }
