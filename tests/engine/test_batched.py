"""The batched step (``lpdt.engine.batched``, ``train.batch_nodes``): the n nodes as one vmapped
computation compute what the n sequential steps compute, node by node."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from lpdt.decentral.state import NodeState
from lpdt.decentral.streams import NodeStreams
from lpdt.engine.batched import BatchedSteps, BatchNodesError
from lpdt.engine.opcount import count_compiled_ops, count_ops, counter_sees_compiled_code
from lpdt.engine.steps import Steps
from lpdt.layers.quant import kernel
from tests.engine.test_steps import tiny_model

NODES, BATCH, PX = 3, 8, 16


def _state(model: nn.Module) -> NodeState:
    """n replicas of ``model`` whose rows differ (as after some training)."""
    state = NodeState(model, NODES)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        state.x.add_(0.05 * torch.randn(state.x.shape, generator=gen))
    state.train()
    return state


def _sequential(state: NodeState, streams: NodeStreams, x, y, compile: bool = False):
    steps = Steps(state.models[0], compile=compile, log=lambda m: None)
    state.grad.zero_()
    losses = []
    for k, model in enumerate(state.models):
        with streams.node(k):
            losses.append(steps.train_step(model, x[k], y[k]))
    return torch.stack(losses)


def _batched_step(steps: BatchedSteps, state: NodeState, streams: NodeStreams, x, y):
    """One batched step of ``state``'s nodes from zeroed gradients, each node's seed drawn in its
    own stream."""
    state.grad.zero_()
    return steps.train_step(x, y, steps.seeds(streams.node))


def _batched(state: NodeState, streams: NodeStreams, x, y, compile: bool = False):
    steps = BatchedSteps(state, compile=compile, log=lambda m: None)
    losses = _batched_step(steps, state, streams, x, y)
    assert steps.compiled == compile  # not fallen back to eager
    return losses


def state_pair(
    precision: str, deterministic: bool, dtype: torch.dtype = torch.float32
) -> tuple[NodeState, NodeState]:
    return tuple(_state(tiny_model(precision, deterministic).to(dtype)) for _ in range(2))  # type: ignore[return-value]


def node_batches(seed: int = 0, dtype: torch.dtype = torch.float32):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(NODES, BATCH, 3, PX, PX, generator=gen, dtype=dtype)
    return x, torch.randint(0, 10, (NODES, BATCH), generator=gen)


def _assert_same(seq: NodeState, bat: NodeState, l_s, l_b, grad_tol: float) -> None:
    """Within float rounding: in fp32 elementwise; in 8 bits as compiled = eager is checked
    (tests/engine/test_steps.py): a value within float error of a rounding boundary may land one
    level apart (a grouped convolution sums in another order), so the loss to rtol 1e-4 and the
    gradients in norm."""
    loss_tol = 1e-4 if grad_tol > 1e-5 else max(grad_tol, 1e-12)
    torch.testing.assert_close(l_b, l_s, rtol=loss_tol, atol=loss_tol / 100)
    for k in range(NODES):  # every node's gradient, in norm (8 bits: a level may flip)
        diff = (bat.grad[k] - seq.grad[k]).norm()
        assert diff <= grad_tol * seq.grad[k].norm(), f"node {k}: {diff / seq.grad[k].norm():.2e}"
    atol = 1e-6 if grad_tol > 1e-9 else 1e-14
    torch.testing.assert_close(bat.x, seq.x, rtol=grad_tol, atol=atol)  # the 8-bit running ranges
    torch.testing.assert_close(
        bat.local_float_buffers(), seq.local_float_buffers(), rtol=max(grad_tol, 1e-7), atol=atol
    )


@pytest.mark.parametrize(
    ("precision", "deterministic", "grad_tol", "dtype"),
    [
        ("fp32", True, 1e-5, torch.float32),
        ("int8", True, 1e-3, torch.float32),
        ("int8", False, 1e-3, torch.float32),  # the paper's recipe: 8-bit gradients
        # In float64 a sum in another order moves no value across a rounding boundary, so the
        # batched 8-bit step equals the sequential one to float64 rounding: the float32
        # differences above are whole quantisation levels flipped by float32 rounding.
        ("int8", False, 1e-12, torch.float64),
    ],
)
def test_batched_step_equals_the_sequential_steps(precision, deterministic, grad_tol, dtype):
    """Each node's loss, gradient, running ranges and local statistics, after two steps. 8-bit
    with the paper's stochastic rounding too: each node draws its seed in its own stream."""
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # the engine's flat tensors too
    try:
        _two_steps_equal(precision, deterministic, grad_tol, dtype)
    finally:
        torch.set_default_dtype(default)


def _two_steps_equal(precision: str, deterministic: bool, grad_tol: float, dtype) -> None:
    seq, bat = state_pair(precision, deterministic, dtype)
    s_streams, b_streams = (NodeStreams(7, list(range(NODES)), torch.device("cpu")) for _ in "ab")
    for step in range(2):
        x, y = node_batches(step, dtype)
        l_s = _sequential(seq, s_streams, x, y)
        l_b = _batched(bat, b_streams, x, y)
        _assert_same(seq, bat, l_s, l_b, grad_tol)
    assert all(bat.grad[k].abs().sum() > 0 for k in range(NODES))


def test_batched_step_changes_the_numbers_when_a_node_changes():
    """The comparison above can fail: a node given another batch has another gradient."""
    seq, bat = state_pair("fp32", True)
    streams = NodeStreams(7, list(range(NODES)), torch.device("cpu"))
    x, y = node_batches()
    _sequential(seq, streams, x, y)
    x[1] += 1.0
    _batched(bat, NodeStreams(7, list(range(NODES)), torch.device("cpu")), x, y)
    assert torch.allclose(bat.grad[0], seq.grad[0], rtol=1e-5, atol=1e-7)
    assert not torch.allclose(bat.grad[1], seq.grad[1], rtol=1e-3, atol=1e-5)


def _bn_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 14 * 14, 10)
    )


def test_batched_batchnorm_updates_each_nodes_statistics():
    """torch's own BatchNorm under vmap: each node's running statistics from its own batch."""
    seq, bat = (_state(_bn_model()) for _ in range(2))
    streams = [NodeStreams(7, list(range(NODES)), torch.device("cpu")) for _ in "ab"]
    x, y = node_batches()
    _assert_same(
        seq, bat, _sequential(seq, streams[0], x, y), _batched(bat, streams[1], x, y), 1e-5
    )
    assert not torch.equal(bat.local_float_buffers()[0], bat.local_float_buffers()[1])


def test_replicas_hold_rows_of_the_stacked_buffers():
    """After stacking, a replica's local buffer is a view of its row: updates by the batched
    step are what evaluation, averaging and checkpoints read."""
    state = _state(_bn_model())  # BatchNorm: running statistics, local to each node
    stacked = state.stack_local_buffers()
    assert stacked, "the 8-bit model has local buffers"
    name, rows = next(iter(stacked.items()))
    with torch.no_grad():
        rows[2].fill_(3.0)
    assert bool((state.models[2].get_buffer(name) == 3.0).all())
    assert state.stack_local_buffers()[name] is rows  # idempotent


def test_a_model_with_dropout_is_refused_in_one_line():
    model = nn.Sequential(nn.Flatten(), nn.Dropout(0.5), nn.Linear(3 * PX * PX, 10))
    with pytest.raises(BatchNodesError, match="Dropout.*batch_nodes: false"):
        BatchedSteps(NodeState(model, 2))


def _hashed_dropout_model(precision: str) -> nn.Module:
    from lpdt.config.schema import ModelConfig, PrecisionConfig
    from lpdt.layers.dropout import hash_dropout_
    from lpdt.layers.quant import convert_to_int8

    torch.manual_seed(0)
    model = hash_dropout_(
        nn.Sequential(
            nn.Conv2d(3, 4, 3, padding=1),
            nn.ReLU(),
            nn.Flatten(),
            nn.Dropout(0.5),
            nn.Linear(4 * PX * PX, 10),
        )
    )
    if precision == "int8":  # the paper's recipe
        return convert_to_int8(model, PrecisionConfig(), ModelConfig(norm="rangeen"))
    return model


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_hashed_dropout_runs_batched_as_it_runs_node_by_node(precision):
    """``model.dropout_noise: hash``: each node's mask comes from the seed it draws in its own
    stream, so the batched step equals the sequential steps with dropout on, and auto batches
    such a model on CUDA (nn.Dropout keeps it node by node)."""
    from lpdt.engine.batched import use_batched
    from lpdt.layers.dropout import HashDropout

    def streams() -> NodeStreams:
        return NodeStreams(7, list(range(NODES)), torch.device("cpu"))

    seq, bat, off = (_state(_hashed_dropout_model(precision)) for _ in "abc")
    s_streams, b_streams = streams(), streams()
    losses = []
    for step in range(2):
        x, y = node_batches(step)
        losses.append(_sequential(seq, s_streams, x, y))
        l_b = _batched(bat, b_streams, x, y)
        _assert_same(seq, bat, losses[-1], l_b, 1e-5 if precision == "fp32" else 1e-3)
    assert use_batched("auto", bat.models[0], torch.device("cuda"))
    # The comparison can fail: with the masks off, the first step gives other losses.
    for d in (m for model in off.models for m in model.modules()):
        if isinstance(d, HashDropout):
            d.p = 0.0
    l_off = _sequential(off, streams(), *node_batches(0))
    assert (l_off - losses[0]).abs().min() > 1e-3, (l_off, losses[0])


@pytest.mark.parametrize(
    ("precision", "deterministic"),
    [("fp32", True), ("int8", False)],  # int8: the paper's recipe, 8-bit gradients
)
def test_compiled_batched_step_equals_the_sequential_steps(monkeypatch, precision, deterministic):
    """The compiled batched step (one graph for all nodes, what CUDA graphs replay) computes what
    the sequential steps compute, and really compiled (it did not fall back to eager).
    It caught the 8-bit weights' gradients coming out all zeros when ``straight_through``
    trusted ``requires_grad`` while dynamo traced ``torch.func.grad``.

    Its next step reads nothing on the host, on the GPU's path: the compiled cases of
    tests/engine/test_host_syncs.py, checked here on the graph this test compiled (a compile of
    the same graph there took another 10-16 s of the suite, 2-core VM, empty cache)."""
    seq, bat = state_pair(precision, deterministic)
    streams = [NodeStreams(7, list(range(NODES)), torch.device("cpu")) for _ in "ab"]
    x, y = node_batches()
    l_s = _sequential(seq, streams[0], x, y)
    steps = BatchedSteps(bat, compile=True, log=lambda m: None)
    l_b = _batched_step(steps, bat, streams[1], x, y)
    assert steps.compiled  # not fallen back to eager
    _assert_same(seq, bat, l_s, l_b, 1e-3 if precision == "int8" else 1e-5)
    monkeypatch.setenv(kernel.ENV, "0")  # the quantisers' tensor path, as on a GPU
    # Counted running compiled (what its graph leaves outside, e.g. a graph break's eager code):
    # fewer operations than the same step eagerly. A plain OpCounter would run it eagerly.
    assert counter_sees_compiled_code()
    _, counted = count_compiled_ops(_batched_step, steps, bat, streams[1], x, y)
    eager = BatchedSteps(seq, compile=False, log=lambda m: None)
    _, eager_counted = count_ops(_batched_step, eager, seq, streams[0], x, y)
    assert 0 < counted.total < eager_counted.total, (counted.total, eager_counted.total)
    assert counted.host_syncs == 0, counted.counts
    assert steps.compiled


@pytest.mark.slow
def test_compiled_batched_8bit_step_with_a_gpus_formulas_equals_the_sequential_steps(monkeypatch):
    """The compiled batched 8-bit step traced with a GPU's formulas (``as_device("cuda")``:
    Range-EvoNorm's select, the stacked parameter quantisers, the ranges in two reductions, the
    masked batch means) and a GPU's eager quantiser (the fused one, no C++ kernel) computes what
    the sequential eager steps compute, and really compiled: a GPU's compiled step checked on
    the CPU (about 45 s on the 2-core VM, an empty cache). With the fused quantiser on, it fell
    back to eager on torch 2.11 until ``formulas.tracing`` (the H200 of 2026-11-30)."""
    from lpdt.layers.formulas import as_device
    from lpdt.layers.quant import fused

    seq, bat = state_pair("int8", False)
    streams = [NodeStreams(7, list(range(NODES)), torch.device("cpu")) for _ in "ab"]
    x, y = node_batches()
    l_s = _sequential(seq, streams[0], x, y)
    monkeypatch.setenv(fused.ENV, "1")
    monkeypatch.setenv(kernel.ENV, "0")
    with as_device("cuda"):
        steps = BatchedSteps(bat, compile=True, log=lambda m: None)
        l_b = _batched_step(steps, bat, streams[1], x, y)
    assert steps.compiled
    _assert_same(seq, bat, l_s, l_b, 1e-3)
    torch.testing.assert_close(bat.x, seq.x)  # parameters and running ranges


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_a_run_with_batched_nodes_equals_the_sequential_run(tmp_path, precision):
    """``lpdt train`` end to end (two epochs of the tiny CNN on 8 nodes, gossip and evaluation
    included) with ``train.batch_nodes`` on and off: the same run id, and the same losses and
    accuracies up to float rounding (8 bits: up to a few rounding levels)."""
    from lpdt.engine.loop import train
    from tests.engine.test_loop import cfg

    extra = ["train.epochs=2", f"precision.mode={precision}"]
    seq = train(cfg(*extra), tmp_path / "seq", log=lambda s: None)
    bat_cfg = cfg(*extra, "train.batch_nodes=true")
    assert bat_cfg.run_id() == cfg(*extra).run_id()
    bat = train(bat_cfg, tmp_path / "bat", log=lambda s: None)
    tol = 1e-4 if precision == "fp32" else 2e-2
    for a, b in zip(seq.history, bat.history, strict=True):
        assert b.train_loss == pytest.approx(a.train_loss, rel=tol), (a, b)
        assert b.acc_avg_model == pytest.approx(a.acc_avg_model, abs=100 * tol + 0.01)


def test_auto_batches_on_cuda_only_and_models_without_dropout():
    from lpdt.engine.batched import use_batched

    cnn, drop = tiny_model("fp32"), nn.Sequential(nn.Dropout(0.5))
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert use_batched("auto", cnn, cuda) and not use_batched("auto", cnn, cpu)
    assert not use_batched("auto", drop, cuda)
    assert use_batched(True, cnn, cpu) and not use_batched(False, cnn, cuda)


def test_every_compiled_call_holds_the_steps_inductor_options(monkeypatch):
    """The batched step's inductor options are in inductor's config while each compiled call
    runs, not only the first: dynamo traces the step's Python at any recompile too, and the
    layers read some options there (``split_reductions``: the quantisers' split by hand). Here
    ``torch.compile`` returns a function that records the option at each call, and an eager
    call (another batch size) sees the default."""
    import torch._inductor.config as inductor_config

    seen: list[bool] = []

    def recording_compile(fn, **kw):
        def run(*args):
            seen.append(inductor_config.split_reductions)
            return fn(*args)

        return run

    monkeypatch.setattr(torch, "compile", recording_compile)
    _, state = state_pair("fp32", True)
    steps = BatchedSteps(
        state, compile=True, log=lambda m: None, options={"split_reductions": False}
    )
    streams = NodeStreams(7, list(range(NODES)), torch.device("cpu"))
    x, y = node_batches()
    for _ in range(3):
        _batched_step(steps, state, streams, x, y)
    _batched_step(steps, state, streams, x[:, :5], y[:, :5])  # eager: not recorded
    assert seen == [False, False, False] and inductor_config.split_reductions


@pytest.mark.parametrize("precision", ["int8", "fp32"])
def test_a_step_that_does_not_compile_runs_eagerly_and_says_so(monkeypatch, precision):
    """A torch that cannot trace or compile the batched step (a ``TorchDynamoException``, as
    torch 2.11's dynamo refused the 8-bit step's autograd Functions on an H100) runs it eagerly,
    with the same numbers, and one line says why. The failure here comes after the forward has
    updated the 8-bit running ranges (as a backward that fails to lower would): they are put
    back first, so the eager step starts from the same state. The fp32 model has no buffers at
    all: its fallback raised "Tensor list must have at least one tensor" until 2026-11-30."""
    from torch._dynamo.exc import TorchDynamoException

    from lpdt.engine.batched import batched_losses

    def refusing_compile(fn, **kw):
        def compiled(*args):
            batched_losses(*args)  # updates the running ranges, as a compiled forward would
            raise TorchDynamoException("You tried to vmap over ApplyTemplate\nmore")

        return compiled

    monkeypatch.setattr(torch, "compile", refusing_compile)
    seq, bat = state_pair(precision, False)
    assert bool(BatchedSteps(bat).buffers) == (precision == "int8")
    streams = [NodeStreams(7, list(range(NODES)), torch.device("cpu")) for _ in "ab"]
    x, y = node_batches()
    lines: list[str] = []
    steps = BatchedSteps(bat, compile=True, log=lines.append)
    l_b = steps.train_step(x, y, steps.seeds(streams[1].node))
    tol = 1e-3 if precision == "int8" else 1e-5
    _assert_same(seq, bat, _sequential(seq, streams[0], x, y), l_b, tol)
    assert not steps.compiled
    assert len(lines) == 2 and "did not compile" in lines[1] and "ApplyTemplate" in lines[1]
    assert "more" not in lines[1]  # one line


def test_an_error_while_the_compiled_step_runs_is_an_error(monkeypatch):
    """Only tracing and compile errors fall back to eager: any other error of the first call
    (a kernel failing, a shape mismatch) propagates, and the step is not marked eager."""

    def failing_compile(fn, **kw):
        def compiled(*args):
            raise RuntimeError("CUDA error: an illegal memory access was encountered")

        return compiled

    monkeypatch.setattr(torch, "compile", failing_compile)
    _, bat = state_pair("fp32", True)
    streams = NodeStreams(7, list(range(NODES)), torch.device("cpu"))
    steps = BatchedSteps(bat, compile=True, log=lambda m: None)
    x, y = node_batches()
    with pytest.raises(RuntimeError, match="illegal memory access"):
        steps.train_step(x, y, steps.seeds(streams.node))
    assert steps.compiled


@pytest.mark.parametrize(
    ("precision", "deterministic"),
    [
        ("fp32", True),
        ("int8", True),  # nearest rounding, fp32 gradients
        ("int8", False),  # the paper's recipe: stochastic rounding, 8-bit gradients
    ],
)
def test_steps_trace_to_one_graph_without_breaks(precision, deterministic):
    """What CUDA graphs (``train.compile_mode: reduce-overhead``) need: the node step and the
    batched step each trace to one graph, with no break (a host synchronisation such as
    ``.item()`` or a Python branch on a tensor's value would be one). The noise seed enters as
    a tensor."""
    import torch.nn.functional as F

    from lpdt.engine.batched import batched_losses
    from lpdt.layers.quant.quantizers import noise_seed

    state = _state(tiny_model(precision, deterministic))
    x, y = node_batches()

    def node_step(model, x, y):
        return F.cross_entropy(model(x), y)

    with noise_seed(torch.tensor([12345])):
        node = torch._dynamo.explain(node_step)(state.models[0], x[0], y[0])
    assert node.graph_break_count == 0 and node.graph_count == 1, node.break_reasons
    steps = BatchedSteps(state, compile=False)
    seeds = steps.seeds(NodeStreams(7, list(range(NODES)), torch.device("cpu")).node)
    batched = torch._dynamo.explain(batched_losses)(
        state.models[0], steps.params, steps.buffers, x, y, seeds
    )
    assert batched.graph_break_count == 0 and batched.graph_count == 1, batched.break_reasons


def test_with_batched_nodes_the_node_step_is_not_compiled_for_the_short_batch():
    """With the batched step training, the node step runs only an epoch's short last batch: it
    is not compiled for that one batch (a compile per run for nothing); evaluation still is."""
    from lpdt.engine.run import Run
    from tests.engine.test_loop import cfg

    run = Run(cfg("train.batch_nodes=true", "train.compile=true"), log=lambda s: None)
    assert run.batched is not None and run.batched.compiled
    assert run.steps.compiled == frozenset({"predict"})
    sequential = Run(cfg("train.batch_nodes=false", "train.compile=true"), log=lambda s: None)
    assert sequential.batched is None and sequential.steps.compiled == {"train", "predict"}


def test_a_failed_compile_is_named_by_its_cause():
    """The fallback's one line names what failed: inductor's error starts "backend='inductor'
    raised:" and names the cause on the next line (the first line alone said nothing on the
    H200 of 2026-11-30)."""
    from lpdt.engine.batched import compile_error_text

    class BackendCompilerFailed(Exception):
        pass

    e = BackendCompilerFailed("backend='inductor' raised:\nRuntimeError: no fake impl\n\nmore")
    assert compile_error_text(e) == "BackendCompilerFailed: RuntimeError: no fake impl"
    assert compile_error_text(ValueError("one line"), limit=14) == "ValueError: on"
    assert compile_error_text(ValueError("")) == "ValueError: "
