"""No host synchronisation inside a training step on a GPU's path (``lpdt.engine.opcount``).

A read of a tensor's value on the host (``.item()``, ``int(t)``, a Python branch on a tensor)
makes a GPU's host wait for everything queued before it. On the CPU the same reads are counted
as ``aten._local_scalar_dense`` with the CPU-only fast paths switched off
(``LPDT_QUANT_KERNEL=0``: the 8-bit quantisers then run the tensor operations a GPU runs, and
the noise seed is not read on the host): zero per step, fp32 and 8-bit (the paper's recipe),
node by node and batched, eager and compiled.
"""

from __future__ import annotations

import pytest
import torch

from lpdt.decentral.streams import NodeStreams
from lpdt.engine.batched import BatchedSteps
from lpdt.engine.opcount import OpCounter, count_ops
from lpdt.engine.steps import Steps
from lpdt.layers.quant import kernel
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


# Every precision, node by node and batched, eager and compiled, but the compiled 8-bit node
# step: a 60 s compile, whose graph tests/engine/test_batched.py checks has no break (a host read
# would be one), and which the batched case here covers.
CASES = [
    (precision, batched, compile)
    for precision in ("fp32", "int8")
    for batched in (False, True)
    for compile in (False, True)
    if not (compile and not batched and precision == "int8")
]


@pytest.mark.parametrize(("precision", "batched", "compile"), CASES)
def test_a_training_step_reads_nothing_on_the_host(gpu_path, precision, batched, compile):
    # int8: stochastic rounding, 8-bit gradients (the paper's recipe)
    _, state = state_pair(precision, deterministic=False)
    x, y = node_batches()
    if batched:
        steps = BatchedSteps(state, compile=compile, log=lambda m: None)
        _batched_step(steps, x, y)  # the first call compiles (reads shapes, not values)
        assert steps.compiled == compile
        _, counted = count_ops(_batched_step, steps, x, y)
    else:
        node_steps = Steps(state.models[0], compile=compile, log=lambda m: None)
        _node_step(node_steps, state, x, y)
        _, counted = count_ops(_node_step, node_steps, state, x, y)
    assert counted.total > 0  # the counter saw the step
    assert counted.host_syncs == 0, counted.counts


def test_the_counter_sees_a_host_read():
    """It can fail: ``.item()`` and a Python branch on a tensor each count one."""
    t = torch.ones(3)
    with OpCounter() as counted:
        t.sum().item()
        if t.sum() > 0:
            pass
    assert counted.host_syncs == 2


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


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_an_iteration_reads_the_host_once(gpu_path, precision):
    """Around the step, a whole iteration (the steps, the optimiser, compression and gossip)
    reads the host once: the divergence check on the mean loss (``Run.iteration``)."""
    from lpdt.engine.run import Run
    from tests.engine.test_loop import cfg

    run = Run(cfg(f"precision.mode={precision}"), log=lambda s: None)
    run.state.train()
    run.iteration(0.1)
    _, counted = count_ops(run.iteration, 0.1)
    assert counted.host_syncs == 1, counted.counts
