"""Compiled training steps (``lpdt.engine.steps``, ``train.compile``): same numbers as eager, one graph
for all nodes. Tiny models, so that the compiles stay a few seconds each."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from lpdt.config import ModelConfig, PrecisionConfig
from lpdt.decentral.state import NodeState
from lpdt.engine.opcount import count_compiled_ops, count_ops, counter_sees_compiled_code
from lpdt.engine.steps import MIN_TORCH_COMPILED_INT8, Steps, torch_version
from lpdt.layers import Add
from lpdt.layers.norms import EvoNormS0
from lpdt.layers.quant import convert_to_int8, kernel


class TinyRes(nn.Module):
    """conv -> norm -> residual add -> pool -> linear: every kind of 8-bit slot, 16 px."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1, bias=False)
        self.norm1 = EvoNormS0(16, groups=8)
        self.conv2 = nn.Conv2d(16, 16, 3, padding=1, bias=False)
        self.norm2 = EvoNormS0(16, groups=8)
        self.add = Add()
        self.fc = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm1(self.conv1(x))
        h = self.add(h, self.norm2(self.conv2(h)))
        return self.fc(h.mean((2, 3)))


def tiny_model(precision: str, deterministic: bool = True) -> nn.Module:
    """fp32, or 8-bit; ``deterministic``: nearest activation rounding and fp32 gradients (the
    8-bit gradient quantiser always rounds stochastically)."""
    torch.manual_seed(0)
    model = TinyRes()
    if precision == "int8":
        mcfg = ModelConfig(norm="rangeen", range_chunks=4)
        pcfg = (
            PrecisionConfig(act_rounding="nearest", grad_bits=32)
            if deterministic
            else PrecisionConfig()
        )
        model = convert_to_int8(model, pcfg, mcfg)
    return model


def relative_difference(grads: list[torch.Tensor], ref: list[torch.Tensor]) -> float:
    """||grads - ref|| / ||ref|| over all parameters together."""
    diff = sum(float(((a - b) ** 2).sum()) for a, b in zip(grads, ref, strict=True))
    return (diff / sum(float((b**2).sum()) for b in ref)) ** 0.5


def _grads_after_step(steps: Steps, model: nn.Module, x, y) -> tuple[torch.Tensor, list]:
    model.zero_grad()
    loss = steps.train_step(model, x, y)
    return loss, [p.grad.clone() for p in model.parameters()]


def _assert_compiled_and_logged(lines: list[str]) -> None:
    """The log said the step was compiling, then that it compiled, with the time."""
    assert len(lines) == 2 and lines[0].startswith("compiling the training step"), lines
    assert "compiled the training step in" in lines[1]


def _assert_no_host_syncs(monkeypatch, compiled: Steps, eager: Steps, models, x, y) -> None:
    """A further compiled step reads nothing on the host on the GPU's path, counted with the
    step running compiled (``OutsideGraphCounter``: what its graphs leave outside, such as a
    graph break's eager code), so fewer operations than the eager step's
    (tests/engine/test_host_syncs.py has the eager steps and the counter's own checks).
    ``models``: the compiled step's and the eager step's."""
    model, eager_model = models
    model.train(), eager_model.train()
    monkeypatch.setenv(kernel.ENV, "0")  # the quantisers' tensor path, as on a GPU
    assert counter_sees_compiled_code()
    _, counted = count_compiled_ops(compiled.train_step, model, x, y)
    _, eager_counted = count_ops(eager.train_step, eager_model, x, y)
    assert 0 < counted.total < eager_counted.total, (counted.total, eager_counted.total)
    assert counted.host_syncs == 0, counted.counts


def test_compiled_step_equals_eager(monkeypatch):
    """fp32 is deterministic: compiled = eager up to float reassociation (rtol 1e-4), the
    gradients in norm (1e-3). On the same graph: the log lines, and no host syncs. (The 8-bit
    step's compiled = eager is checked on the paper's recipe, in float64, by
    ``test_compiled_8bit_stochastic_step_draws_the_eager_noise``: an 8-bit case with nearest
    rounding here was one more cold compile, 23-26 s of the suite on the 2-core VM.)"""
    x, y = torch.randn(8, 3, 16, 16), torch.randint(0, 10, (8,))
    model = tiny_model("fp32")
    model.train()
    ref_model = tiny_model("fp32")  # the same weights
    ref_model.train()
    eager = Steps(ref_model, compile=False)
    lines: list[str] = []
    compiled = Steps(model, compile=True, log=lines.append)
    for _ in range(2):
        l_e, g_e = _grads_after_step(eager, ref_model, x, y)
        l_c, g_c = _grads_after_step(compiled, model, x, y)
        torch.testing.assert_close(l_c, l_e, rtol=1e-4, atol=1e-5)
        for a, b in zip(g_c, g_e):
            assert (a - b).norm() <= 1e-3 * b.norm() + 1e-6
    _assert_compiled_and_logged(lines)
    model.eval(), ref_model.eval()
    torch.testing.assert_close(compiled.predict(model, x), eager.predict(ref_model, x))
    _assert_no_host_syncs(monkeypatch, compiled, eager, (model, ref_model), x, y)


def test_compiled_8bit_step_runs_eagerly_on_a_torch_older_than_verified(monkeypatch):
    """Below the oldest verified torch (2.11: the compiled 8-bit step equals the eager one on
    2.11.0, 2.12.1, 2.13.0 and 2.14.1) the 8-bit step runs eagerly and says so; fp32 compiles."""
    assert torch_version("2.14.1+cu130") == (2, 14) and torch_version("2.11.0") == (2, 11)
    assert MIN_TORCH_COMPILED_INT8 == (2, 11)  # verified: see its comment in lpdt.engine.steps
    monkeypatch.setattr(torch, "__version__", "2.10.0+cu130")
    lines: list[str] = []
    int8 = Steps(tiny_model("int8"), compile=True, log=lines.append)
    fp32 = Steps(tiny_model("fp32"), compile=True, log=lines.append)
    assert len(lines) == 1 and "needs torch >= 2.11" in lines[0] and "2.10.0" in lines[0]
    assert not int8.compiled and "train" in fp32.compiled
    monkeypatch.setattr(torch, "__version__", "2.11.0+cu130")
    assert "train" in Steps(tiny_model("int8"), compile=True, log=lines.append).compiled
    monkeypatch.undo()
    assert "train" in Steps(tiny_model("int8"), compile=True, log=lines.append).compiled


def _lpdt_autograd_functions() -> list[type]:
    """Every custom autograd.Function defined in lpdt (the 8-bit layers' are imported above)."""
    found, todo = [], list(torch.autograd.Function.__subclasses__())
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if cls.__module__.startswith("lpdt."):
            found.append(cls)
    return found


class _ReturnsInPlaceResult(torch.autograd.Function):
    """The pattern torch 2.11 compiles wrong: forward returns a tensor it changed in place."""

    @staticmethod
    def forward(ctx, x):
        return (x * 1).mul_(2)

    @staticmethod
    def backward(ctx, g):
        return 2 * g


def test_no_8bit_autograd_function_returns_a_tensor_it_changed_in_place(monkeypatch):
    """torch 2.11's dynamo drops the gradient through a custom autograd.Function whose forward
    returns a tensor that it changed in place (``(x * 1).mul_(2)``, an ``out=`` result): compiled,
    every gradient upstream is exactly 0 while the loss is right. That was the zero-gradient
    compiled 8-bit step on torch 2.11 (docs/engine.md, 'On a GPU'): the straight-through
    quantisers were such Functions (``quantize`` ends in ``.add_(lo)``) before they became plain
    arithmetic (``functions.straight_through``). MIN_TORCH_COMPILED_INT8 = (2, 11) holds only
    while no Function of lpdt does it, which this checks on the pinned torch too (where the
    pattern compiles right): one eager step of the 8-bit recipe (stochastic rounding, 8-bit
    gradients: every Function runs) with each Function's forward watched. In float64, so that
    the quantisers run their tensor operations, as in a compiled graph, not the C++ kernel."""
    import functools

    changed: list[str] = []
    calls: list[str] = []

    def watch(cls: type) -> None:
        forward = cls.forward

        @functools.wraps(forward)
        def watched(*args, **kwargs):
            out = forward(*args, **kwargs)
            calls.append(cls.__name__)
            for t in out if isinstance(out, tuple) else (out,):
                # A fresh tensor changed in place has a version above 0; a view (its _base set)
                # shares its base's counter and compiles right on torch 2.11.
                if isinstance(t, torch.Tensor) and t._base is None and t._version > 0:
                    changed.append(cls.__name__)
            return out

        monkeypatch.setattr(cls, "forward", staticmethod(watched))

    functions = _lpdt_autograd_functions()
    assert {"_QuantGrad", "_BiprecConv", "_BiprecLinear"} <= {c.__name__ for c in functions}
    for cls in [*functions, _ReturnsInPlaceResult]:
        watch(cls)
    # The watch itself: it sees the pattern.
    _ReturnsInPlaceResult.apply(torch.ones(3, requires_grad=True)).sum().backward()
    assert changed == ["_ReturnsInPlaceResult"]
    changed.clear()
    model = tiny_model("int8", deterministic=False).double().train()
    x, y = torch.randn(8, 3, 16, 16, dtype=torch.float64), torch.randint(0, 10, (8,))
    Steps(model).train_step(model, x, y)
    assert {c.__name__ for c in functions} <= set(calls)  # every Function of lpdt ran
    assert not changed, f"forward returns a tensor changed in place: {sorted(set(changed))}"


def test_all_nodes_share_one_compiled_graph():
    """n replicas (views into the engine's [n, P] rows) run one graph: no n-fold compile. (An
    8-bit model of one convolution and one linear layer: parameters and running ranges in the
    rows as TinyRes has them, at a fraction of its cold compile, which took 17-37 s of the
    suite on the 2-core VM.)"""
    from torch._dynamo.utils import counters

    torch.manual_seed(0)
    small = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 16 * 16, 10)
    )
    model = convert_to_int8(small, PrecisionConfig(), ModelConfig(norm="rangeen"))
    assert any("running" in name for name, _ in model.named_buffers())  # per node, in the rows
    state = NodeState(model, 4)
    state.train()
    steps = Steps(state.models[0], compile=True, log=lambda m: None)
    x, y = torch.randn(8, 3, 16, 16), torch.randint(0, 10, (8,))
    before = counters["stats"]["unique_graphs"]
    steps.train_step(state.models[0], x, y)
    first = counters["stats"]["unique_graphs"] - before
    for model in state.models[1:]:
        steps.train_step(model, x, y)
    assert first >= 1 and counters["stats"]["unique_graphs"] - before == first
    # Every node's gradient landed in its own row of the engine's gradient matrix.
    assert all(state.grad[i].abs().sum() > 0 for i in range(4))


def test_every_model_of_a_process_compiles():
    """All Steps compile the same function, so their graphs share dynamo's recompile limit: each
    compiled Steps raises it, or the model past the limit (the ninth, by default) would run
    eagerly while the log said it compiled. Here the limit starts at 1 and two models of new
    shapes must each add a graph. (A linear model: what is counted is graphs, not layers, and
    its compiles take about 1 s each instead of TinyRes's 7 s on the 2-core VM.)"""
    from torch._dynamo.utils import counters

    with torch._dynamo.config.patch(recompile_limit=1):  # restored afterwards
        for size in (8, 12):  # other input sizes than the other tests': new graphs
            torch.manual_seed(0)
            model = nn.Sequential(nn.Flatten(), nn.Linear(3 * size * size, 10))
            steps = Steps(model, compile=True, log=lambda m: None)
            before = counters["stats"]["unique_graphs"]
            steps.train_step(model, torch.randn(4, 3, size, size), torch.randint(0, 10, (4,)))
            assert counters["stats"]["unique_graphs"] - before == 1, f"{size} px ran eagerly"


def test_compiled_8bit_stochastic_step_draws_the_eager_noise(monkeypatch):
    """8-bit with stochastic rounding (activations and gradients): under the same seed an eager
    and a compiled step draw the same rounding noise (a hash of the step's seed, the call site
    and the element index), so they compute the same numbers up to float rounding, over three
    steps with the node's generator running on, running ranges included. In float32 the
    rounding of fused kernels (and of multi-threaded reductions, which differ from run to run)
    now and then moves a value that sits on a rounding boundary by one 8-bit level, which moved
    the gradients by up to 7e-3 against 2.5e-2 for another seed: too close to test. In float64
    such a flip is vanishingly rare, so the same noise shows as agreement to 1e-6, and another
    seed as a difference. On the same graph: the log lines, and no host syncs. (Float32 8-bit
    compiled steps: the batched ones in tests/engine/test_batched.py, ResNet-20 trained in the
    slow test below.)"""
    x = torch.randn(8, 3, 16, 16, dtype=torch.float64)
    y = torch.randint(0, 10, (8,))
    model, ref_model = tiny_model("int8", False).double(), tiny_model("int8", False).double()
    model.train(), ref_model.train()
    eager = Steps(ref_model, compile=False)
    lines: list[str] = []
    compiled = Steps(model, compile=True, log=lines.append)
    g_e = g_c = []
    for step in range(3):
        torch.manual_seed(100 + step)
        l_e, g_e = _grads_after_step(eager, ref_model, x, y)
        torch.manual_seed(100 + step)
        l_c, g_c = _grads_after_step(compiled, model, x, y)
        torch.testing.assert_close(l_c, l_e, rtol=1e-9, atol=1e-12)
        assert relative_difference(g_c, g_e) <= 1e-6, step
    for (name, b_c), (_, b_e) in zip(model.named_buffers(), ref_model.named_buffers()):
        torch.testing.assert_close(b_c, b_e, rtol=1e-9, atol=1e-12, msg=name)
    torch.manual_seed(999)
    _, g_other = _grads_after_step(compiled, model, x, y)
    assert relative_difference(g_other, g_c) > 1e-2  # the noise is really drawn
    _assert_compiled_and_logged(lines)
    model.eval(), ref_model.eval()  # stochastic rounding at test time too (the reference's)
    torch.manual_seed(7)
    p_e = eager.predict(ref_model, x)
    torch.manual_seed(7)
    torch.testing.assert_close(compiled.predict(model, x), p_e)
    _assert_no_host_syncs(monkeypatch, compiled, eager, (model, ref_model), x, y)


def test_compiled_dropout_draws_the_eager_masks():
    """Dropout (VGG-11's classifier) in a compiled step takes its masks from torch's generator,
    as the eager step does (inductor's fallback_random): under the same seed the two steps give
    the same loss and gradients, and another seed other ones."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Flatten(), nn.Linear(48, 32), nn.ReLU(), nn.Dropout(0.5), nn.Linear(32, 10)
    )
    ref_model = copy.deepcopy(model)
    x, y = torch.randn(8, 3, 4, 4), torch.randint(0, 10, (8,))
    eager = Steps(ref_model, compile=False)
    compiled = Steps(model, compile=True, log=lambda m: None)
    for step in range(2):
        torch.manual_seed(10 + step)
        l_e, g_e = _grads_after_step(eager, ref_model, x, y)
        torch.manual_seed(10 + step)
        l_c, g_c = _grads_after_step(compiled, model, x, y)
        torch.testing.assert_close(l_c, l_e)
        assert relative_difference(g_c, g_e) <= 1e-5, step
    torch.manual_seed(999)
    _, g_other = _grads_after_step(compiled, model, x, y)
    assert relative_difference(g_other, g_c) > 1e-2  # the masks are really drawn


def test_other_batch_sizes_run_eagerly_without_a_new_graph():
    """An epoch's short last batch goes through the eager function: no second (dynamic) graph,
    and its loss and gradients are those of the eager step."""
    from torch._dynamo.utils import counters

    model, ref_model = tiny_model("fp32"), tiny_model("fp32")
    steps, eager = Steps(model, compile=True, log=lambda m: None), Steps(ref_model)
    x, y = torch.randn(8, 3, 16, 16), torch.randint(0, 10, (8,))
    steps.train_step(model, x, y)
    eager.train_step(ref_model, x, y)
    graphs = counters["stats"]["unique_graphs"]
    short_x, short_y = x[:3], y[:3]
    l_c, g_c = _grads_after_step(steps, model, short_x, short_y)
    l_e, g_e = _grads_after_step(eager, ref_model, short_x, short_y)
    assert counters["stats"]["unique_graphs"] == graphs
    torch.testing.assert_close(l_c, l_e)
    for a, b in zip(g_c, g_e):
        torch.testing.assert_close(a, b)
    model.eval(), ref_model.eval()
    steps.predict(model, x)  # compiles the evaluation graph for batches of 8
    graphs = counters["stats"]["unique_graphs"]
    torch.testing.assert_close(steps.predict(model, x[:3]), eager.predict(ref_model, x[:3]))
    assert counters["stats"]["unique_graphs"] == graphs


def test_compile_eval_false_keeps_the_evaluation_eager():
    from torch._dynamo.utils import counters

    lines: list[str] = []
    model = tiny_model("fp32")
    steps = Steps(model, compile=True, log=lines.append, compile_eval=False)
    x = torch.randn(4, 3, 16, 16)
    model.eval()
    graphs = counters["stats"]["unique_graphs"]
    steps.predict(model, x)
    assert counters["stats"]["unique_graphs"] == graphs and lines == []


# --- slow: ResNet-20 trained compiled vs eager --------------------------------------------------

FMNIST = "/usr/share/datasets/fashion-mnist"


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_resnet20_compiled_trains_to_the_same_accuracy(tmp_path, precision):
    """8-node Choco ResNet-20 on 3,000 Fashion-MNIST images at 16 px for 4 epochs, eager and
    compiled, same seed. Both precisions compute the same arithmetic up to float reassociation
    (8-bit: the same rounding noise, test_compiled_8bit_stochastic_step_draws_the_eager_noise), so
    the two runs differ only by rounding-level drift amplified by training (in 8 bits a value
    within float error of a rounding boundary can land one level apart). Bound: 4 points, about
    3 standard deviations of the difference of two such runs (test-set noise on 2,000 images:
    sqrt(2) x 0.9 = 1.3 points; seed-to-seed spread at the quick scale: docs/quick-scale.md)."""
    import json
    import os

    from lpdt.config import load_config
    from lpdt.engine.loop import train

    if not os.path.isdir(FMNIST):
        pytest.skip("dataset-fashion-mnist not installed (apt install dataset-fashion-mnist)")
    base = [
        "data.dataset=fashion_mnist",
        "data.train_subset=3000",
        "data.test_subset=2000",
        "data.image_size=16",
        "data.augment=false",
        "model.name=resnet20",
        "topology.nodes=8",
        "train.batch_size=128",
        "train.epochs=4",
        "schedule.warmup_epochs=0",
        "schedule.milestones=[3]",
        "train.eval_every=100",
        "train.node_eval=sharded",
        "train.final_gossip_rounds=5",
        f"precision.mode={precision}",
        "threads=2",
        "device=cpu",
    ]
    if precision == "int8":
        base += ["model.norm=rangeen", "model.range_chunks=4"]
    acc = {}
    for compiled in (False, True):
        cfg = load_config(None, [*base, f"train.compile={str(compiled).lower()}"])
        out = tmp_path / f"compile_{compiled}"
        train(cfg, out, log=lambda s: None)
        acc[compiled] = json.loads((out / "metrics.json").read_text())["final"]["acc_node_mean"]
    # Both learned (chance is 10 %; measured: int8 67.2 % eager, 66.5 % compiled at this budget)
    assert acc[False] > 50 and acc[True] > 50, acc
    assert abs(acc[True] - acc[False]) <= 4.0, acc


def test_inductor_cache_defaults_to_lpdt_cache_dir(tmp_path):
    """lpdt's default cache directory wins over the one torch._dynamo's import writes into the
    environment (it did not, before the default moved to ``lpdt/__init__``)."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"}
    env["XDG_CACHE_HOME"] = str(tmp_path)
    code = (
        "import os, lpdt.engine.loop, torch._dynamo; print(os.environ['TORCHINDUCTOR_CACHE_DIR'])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert out.stdout.strip() == str(tmp_path / "lpdt" / "torchinductor")


_CACHE_PROBE = """
import json, sys
import torch
from torch import nn
from torch._dynamo.utils import counters
from lpdt.engine.steps import Steps, torch_version
from tests.engine.test_steps import tiny_model

K = {k}  # the custom backward's factor: the source of the Function changes with it


class _Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return g * K


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = tiny_model("int8", deterministic=False)

    def forward(self, x):
        return _Scale.apply(self.body(x))


torch.manual_seed(0)
net = Net()
x, y = torch.randn(8, 3, 16, 16), torch.randint(0, 10, (8,))
Steps(net, compile=True, log=lambda m: None).train_step(net, x, y)
print(json.dumps({{"grad": float(net.body.fc.weight.grad.norm()),
                   "aot": dict(counters["aot_autograd"])}}))
"""


# slow: 85 s on the reference VM (three processes, two cold compiles); make test-slow runs it
@pytest.mark.slow
def test_aot_cache_serves_8bit_graphs_and_a_changed_backward_misses(tmp_path):
    """8-bit graphs hold custom autograd Functions; lpdt lets AOTAutograd's on-disk cache keep
    them. A second process with the same code hits the cache; a process whose Function's
    backward differs must not be served the old graph (its gradient scales with the factor)."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache"),
        "PYTHONPATH": str(root),
    }

    def run(k: int) -> dict:
        script = tmp_path / f"probe_{k}.py"
        script.write_text(_CACHE_PROBE.format(k=k))
        out = subprocess.run(
            [sys.executable, str(script)],
            env=env,
            cwd=root,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert out.returncode == 0, out.stderr[-2000:]
        return json.loads(out.stdout.strip().splitlines()[-1])

    first, again, changed = run(2), run(2), run(3)
    assert first["aot"].get("autograd_cache_saved") == 1, first
    assert again["aot"].get("autograd_cache_hit") == 1, again
    assert again["grad"] == pytest.approx(first["grad"], rel=1e-6)
    assert changed["aot"].get("autograd_cache_hit") is None, changed
    assert changed["grad"] == pytest.approx(1.5 * first["grad"], rel=1e-5)


def test_on_cuda_the_8bit_step_compiles_batched_and_node_by_node_only_when_told(monkeypatch):
    """The CUDA guard (``compile_allowed``), exercised without a GPU: on CUDA the node-by-node
    8-bit step runs eagerly unless ``CUDA_INT8_ENV`` is set, and says so in one line; the
    batched one compiles (verified on an H200: tests/test_cuda.py); fp32 always compiles."""
    import lpdt.engine.steps as steps_module

    if torch_version() < MIN_TORCH_COMPILED_INT8:
        pytest.skip(f"torch {torch.__version__} runs every 8-bit step eagerly")
    monkeypatch.setattr(steps_module, "_on_cuda", lambda model: True)
    monkeypatch.delenv(steps_module.CUDA_INT8_ENV, raising=False)
    int8, fp32 = tiny_model("int8", False), tiny_model("fp32", True)
    lines: list[str] = []
    assert not steps_module.compile_allowed(int8, lines.append)
    assert len(lines) == 1 and "node-by-node 8-bit step" in lines[0]
    assert steps_module.compile_allowed(int8, lines.append, batched=True)
    assert steps_module.compile_allowed(fp32, lines.append) and len(lines) == 1
    monkeypatch.setenv(steps_module.CUDA_INT8_ENV, "1")
    assert steps_module.compile_allowed(int8, lines.append) and len(lines) == 1


def test_more_inductor_options_join_the_compile_call():
    """``prepare_compile(..., options)`` (a benchmark's experiment, e.g. combo kernels): merged
    with the 8-bit model's own, and refused with a mode other than the default (torch.compile
    takes one or the other)."""
    from lpdt.engine.steps import prepare_compile

    assert prepare_compile("default", False) == {}
    assert prepare_compile("default", True, {"combo_kernels": True}) == {
        "options": {"layout_optimization": False, "combo_kernels": True}
    }
    assert prepare_compile("default", False, {"combo_kernels": True}) == {
        "options": {"combo_kernels": True}
    }
    with pytest.raises(ValueError, match="need the default mode"):
        prepare_compile("reduce-overhead", False, {"combo_kernels": True})


def test_a_cpu_compile_drops_torchs_gpu_only_warnings(caplog):
    """Without a GPU, a first compile logged "triton not found" and "No CUDA runtime is found"
    (torch's CUDA build): they go, and the loggers' other warnings stay."""
    import logging

    from lpdt.engine.steps import CPU_ONLY_WARNINGS, quiet_cpu_only_warnings

    quiet_cpu_only_warnings()
    quiet_cpu_only_warnings()  # once per process: one filter each
    for name, start in CPU_ONLY_WARNINGS.items():
        logger = logging.getLogger(name)
        assert len(logger.filters) == (0 if torch.cuda.is_available() else 1)
        if torch.cuda.is_available():  # a GPU's machine keeps them (neither is logged there)
            continue
        with caplog.at_level(logging.WARNING, logger=name):
            caplog.clear()
            logger.warning(f"{start}; the rest of torch's line %s", "x")
            logger.warning("another warning")
        assert [r.getMessage() for r in caplog.records] == ["another warning"]
