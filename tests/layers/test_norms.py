"""Norm layers against direct (float64, loop-based) evaluations of their formulas."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

from lpdt.config import ModelConfig
from lpdt.layers.norms import (
    BatchNormAct2d,
    EvoNormS0,
    GroupNormAct,
    RangeBatchNormAct2d,
    RangeEvoNorm,
    batch_statistic_sizes,
    chunk_count,
    group_variance,
    norm_layer,
    range_constant_chunked,
    range_constant_paper,
)

EPS = 1e-5


def _randomise(module: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Give gamma, beta, v non-trivial values so that the test exercises them."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5 + (1.0 if p.ndim else 0.0))
    return module


def _x(shape=(4, 16, 6, 8), seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g) * 2.0 + 0.3


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().double().numpy()


def _sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def _hardsigmoid(z):
    return np.maximum(0.0, np.minimum(1.0, (z + 3.0) / 6.0))


def _kappa(s: int) -> float:
    return 0.5 * 0.35 * (1.0 + math.sqrt(math.pi * math.log(4.0))) / math.sqrt(2.0 * math.log(s))


def _per_channel(p: torch.Tensor) -> np.ndarray:
    return _np(p).reshape(-1)


# ---------------------------------------------------------------------------------------------
# Constants
# ---------------------------------------------------------------------------------------------


def test_range_constants_match_reference_values():
    # Reference §6.3: kappa = 0.54021 / sqrt(2 ln S); kappa(128) = 0.1734; the paper's C(2) = 0.849.
    assert range_constant_chunked(128) == pytest.approx(
        0.54021 / math.sqrt(2 * math.log(128)), rel=1e-4
    )
    assert range_constant_chunked(128) == pytest.approx(0.1734, abs=5e-4)
    assert range_constant_paper(2) == pytest.approx(0.849, abs=5e-4)


def test_range_constants_reject_log_of_one():
    with pytest.raises(ValueError, match="S=1"):
        range_constant_chunked(1)
    with pytest.raises(ValueError, match="channels per group"):
        range_constant_paper(1)


def test_paper_estimator_with_one_channel_per_group_fails_at_build_time():
    with pytest.raises(ValueError, match="c/g = 1"):
        RangeEvoNorm(8, groups=8, estimator="paper")
    RangeEvoNorm(8, groups=8, estimator="chunked")  # fine: its constant depends on S, not c/g


def test_chunk_count_prefers_16_then_falls_back_to_a_divisor():
    assert chunk_count(128) == 16
    assert chunk_count(392) == 14  # 8 channels x 7x7: not divisible by 16
    assert chunk_count(13) == 1  # prime: one chunk of 13
    assert chunk_count(8) == 4  # never fewer than 2 elements per chunk
    assert chunk_count(17) == 1


def test_group_variance_equals_biased_torch_var():
    x = _x((3, 16, 5, 7))
    ref = x.reshape(3, 4, -1).var(-1, unbiased=False)
    torch.testing.assert_close(group_variance(x, 4), ref, rtol=1e-5, atol=1e-6)


def test_bad_arguments_raise_clear_errors():
    with pytest.raises(ValueError, match="not divisible"):
        EvoNormS0(12, groups=8)
    with pytest.raises(ValueError, match="not divisible"):
        GroupNormAct(5, groups=2)
    with pytest.raises(ValueError, match="estimator"):
        RangeEvoNorm(16, estimator="median")
    with pytest.raises(ValueError, match="activation"):
        RangeEvoNorm(16, act="relu")
    with pytest.raises(ValueError, match="unknown norm"):
        norm_layer(ModelConfig(norm="layernorm"), 16)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# Formulas
# ---------------------------------------------------------------------------------------------


def test_evonorm_s0_matches_paper_eq4():
    m = _randomise(EvoNormS0(16, groups=8))
    x = _x()
    out = _np(m(x))
    xn = _np(x)
    gamma, beta, v = (_per_channel(p) for p in (m.weight, m.bias, m.v))
    b, c, h, w = xn.shape
    cpg = c // 8
    ref = np.empty_like(xn)
    for i in range(b):
        for g in range(8):
            chans = slice(g * cpg, (g + 1) * cpg)
            var = xn[i, chans].var()  # biased variance of x over (c/g) * h * w elements
            for ch in range(g * cpg, (g + 1) * cpg):
                num = xn[i, ch] * _sigmoid(v[ch] * xn[i, ch])
                ref[i, ch] = num / np.sqrt(var + EPS) * gamma[ch] + beta[ch]
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("act", ["hardsigmoid", "sigmoid"])
@pytest.mark.parametrize("estimator", ["chunked", "paper"])
@pytest.mark.parametrize("groups", [8, 4])
def test_range_evonorm_matches_formula(act, estimator, groups):
    m = _randomise(RangeEvoNorm(16, groups=groups, estimator=estimator, act=act))
    x = _x()
    out = _np(m(x))
    xn = _np(x)
    gamma, beta, v = (_per_channel(p) for p in (m.weight, m.bias, m.v))
    gate = _hardsigmoid if act == "hardsigmoid" else _sigmoid
    b, c, h, w = xn.shape
    cpg = c // groups
    ref = np.empty_like(xn)
    for i in range(b):
        for g in range(groups):
            chans = slice(g * cpg, (g + 1) * cpg)
            flat = xn[i, chans].reshape(-1)  # channel-major order, as the reference's view
            if estimator == "paper":
                denom = (flat.max() - flat.min()) / math.sqrt(2.0 * math.log(cpg))
            else:
                s = flat.size // 16
                chunk_ranges = [
                    flat[k * s : (k + 1) * s].max() - flat[k * s : (k + 1) * s].min()
                    for k in range(16)
                ]
                denom = np.mean(chunk_ranges) * _kappa(s)
            for ch in range(g * cpg, (g + 1) * cpg):
                num = xn[i, ch] * gate(v[ch] * xn[i, ch])
                ref[i, ch] = num / (denom + EPS) * gamma[ch] + beta[ch]
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("act", [True, False])
def test_range_batchnorm_matches_eq3_with_chunked_estimator(act):
    m = _randomise(RangeBatchNormAct2d(6, act=act))
    x = _x((8, 6, 4, 4))  # B*H*W = 128 values per channel -> 16 chunks of 8
    out = _np(m(x))
    xn = _np(x)
    gamma, beta = _per_channel(m.weight), _per_channel(m.bias)
    ref = np.empty_like(xn)
    means, scales = [], []
    for ch in range(6):
        vals = xn[:, ch].reshape(-1)  # sample-major (b, h, w)
        mu = vals.mean()
        s = vals.size // 16
        r = np.mean(
            [vals[k * s : (k + 1) * s].max() - vals[k * s : (k + 1) * s].min() for k in range(16)]
        )
        scale = 1.0 / (r * _kappa(s) + EPS)
        ref[:, ch] = (xn[:, ch] - mu) * scale * gamma[ch] + beta[ch]
        means.append(mu)
        scales.append(scale)
    if act:
        ref = np.maximum(ref, 0.0)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)
    # Running statistics: PyTorch BN convention with momentum 0.1, starting from mean 0, scale 1.
    np.testing.assert_allclose(_np(m.running_mean), 0.1 * np.array(means), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_np(m.running_scale), 0.9 + 0.1 * np.array(scales), rtol=1e-5)
    # Eval uses the running values, not the batch.
    m.eval()
    out_eval = _np(m(x))
    rm, rs = _np(m.running_mean), _np(m.running_scale)
    ref_eval = (xn - rm[None, :, None, None]) * (rs * gamma)[None, :, None, None] + beta[
        None, :, None, None
    ]
    if act:
        ref_eval = np.maximum(ref_eval, 0.0)
    np.testing.assert_allclose(out_eval, ref_eval, rtol=1e-4, atol=1e-5)


def test_batchnorm_and_groupnorm_slots_apply_relu_only_when_asked():
    x = _x()
    for cls, kw in ((BatchNormAct2d, {}), (GroupNormAct, {"groups": 2})):
        with_act, without = cls(16, act=True, **kw), cls(16, act=False, **kw)
        y, z = with_act(x), without(x)
        assert (z < 0).any()
        torch.testing.assert_close(y, torch.relu(z))


# ---------------------------------------------------------------------------------------------
# Sample statistics, attributes, state
# ---------------------------------------------------------------------------------------------

SAMPLE_NORMS = {
    "evonorm": lambda: EvoNormS0(16, groups=8),
    "rangeen_chunked": lambda: RangeEvoNorm(16, groups=8, estimator="chunked"),
    "rangeen_paper": lambda: RangeEvoNorm(16, groups=4, estimator="paper", act="sigmoid"),
    "groupnorm": lambda: GroupNormAct(16, groups=2),
}


@pytest.mark.parametrize("name", sorted(SAMPLE_NORMS))
def test_sample_statistics_norms_ignore_the_rest_of_the_batch(name):
    m = _randomise(SAMPLE_NORMS[name]())
    a, b = _x((5, 16, 4, 4), seed=2), _x((5, 16, 4, 4), seed=3) * 10.0
    b[2] = a[2]
    alone = m(a[2:3])
    torch.testing.assert_close(m(a)[2:3], alone, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(m(b)[2:3], alone, rtol=1e-5, atol=1e-5)
    m.eval()
    torch.testing.assert_close(m(a)[2:3], alone, rtol=1e-5, atol=1e-5)  # no running statistics


def test_batch_norms_do_depend_on_the_batch():
    """Sanity check that the independence test above can fail."""
    for m in (BatchNormAct2d(16, act=False), RangeBatchNormAct2d(16, act=False)):
        a = _x((16, 16, 4, 4), seed=2)
        b = a.clone()
        b[1:] *= 10.0
        assert not torch.allclose(m(a)[0], m(b)[0], atol=1e-3)


def test_batch_statistic_sizes_are_each_batch_norms_feature_map_and_touch_nothing():
    """(name, kind, H*W) of the batch-statistics norms only (BN, Range-BN; full precision and
    8-bit), as one example meets them; the model's buffers and the random streams as they were
    (the 8-bit model rounds stochastically in eval mode too)."""
    from lpdt.config import PrecisionConfig
    from lpdt.layers.quant import convert_to_int8

    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3),
        BatchNormAct2d(4),
        GroupNormAct(4),
        torch.nn.AdaptiveAvgPool2d(1),
        RangeBatchNormAct2d(4),
    )
    assert batch_statistic_sizes(net, (3, 8, 8)) == [("1", "batchnorm", 36), ("4", "rangebn", 1)]
    q = convert_to_int8(copy.deepcopy(net), PrecisionConfig(), ModelConfig(norm="rangebn"))
    buffers = {k: v.clone() for k, v in q.state_dict().items()}
    rng = torch.get_rng_state()
    # every norm slot is 8-bit Range-BN at model.norm=rangebn (the GroupNorm's too)
    assert [(k, hw) for _, k, hw in batch_statistic_sizes(q, (3, 8, 8))] == [
        ("rangebn", 36),
        ("rangebn", 36),
        ("rangebn", 1),
    ]
    assert torch.equal(torch.get_rng_state(), rng)
    assert all(torch.equal(v, buffers[k]) for k, v in q.state_dict().items())
    assert q.training  # the caller's mode
    assert batch_statistic_sizes(torch.nn.Sequential(EvoNormS0(8)), (8, 4, 4)) == []


@pytest.mark.parametrize(
    "norm, cls, kind, act",
    [
        ("batchnorm", BatchNormAct2d, "batchnorm", "relu"),
        ("groupnorm", GroupNormAct, "groupnorm", "relu"),
        ("evonorm", EvoNormS0, "evonorm", "sigmoid"),
        ("rangeen", RangeEvoNorm, "rangeen", "hardsigmoid"),
        ("rangebn", RangeBatchNormAct2d, "rangebn", "relu"),
    ],
)
def test_norm_layer_factory_and_kind_attributes(norm, cls, kind, act):
    m = norm_layer(ModelConfig(norm=norm), 32, act=True)
    assert isinstance(m, cls)
    assert m.norm_kind == kind and m.act_kind == act and m.has_act
    n = norm_layer(ModelConfig(norm=norm), 32, act=False)
    # Gated norms always carry their gate (reference); BN-style norms drop the ReLU.
    assert n.has_act == (norm in ("evonorm", "rangeen"))


def test_norm_layer_passes_config_switches():
    cfg = ModelConfig(norm="rangeen", groups=4, range_estimator="paper", range_act="sigmoid")
    m = norm_layer(cfg, 32)
    assert (m.groups, m.estimator, m.act_kind) == (4, "paper", "sigmoid")
    assert norm_layer(ModelConfig(norm="rangeen"), 32).chunks == 16  # the reference's
    assert norm_layer(ModelConfig(norm="rangeen", range_chunks=4), 32).chunks == 4
    assert norm_layer(ModelConfig(norm="groupnorm", gn_groups=4), 32).num_groups == 4
    assert norm_layer(ModelConfig(norm="evonorm", groups=2), 32).groups == 2


def test_parameters_init_and_buffers():
    for m in (EvoNormS0(16), RangeEvoNorm(16)):
        assert {n for n, _ in m.named_parameters()} == {"weight", "bias", "v"}
        assert (m.weight == 1).all() and (m.bias == 0).all() and (m.v == 1).all()
        assert list(m.buffers()) == []  # nothing that would need gossiping
    rbn = RangeBatchNormAct2d(16)
    assert {n for n, _ in rbn.named_buffers()} == {"running_mean", "running_scale"}
    assert {n for n, _ in rbn.named_parameters()} == {"weight", "bias"}


@pytest.mark.parametrize("make", [*SAMPLE_NORMS.values(), lambda: RangeBatchNormAct2d(16)])
def test_gradients_flow_and_deepcopy(make):
    m = make()
    x = _x().requires_grad_(True)
    m(x).square().sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
    for p in m.parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all()
    c = copy.deepcopy(m)
    torch.testing.assert_close(c(x), m(x))


def test_value_range_is_the_same_with_and_without_a_gradient_to_route():
    """Evaluation takes amax / amin (no indices), training max / min with indices (the gradient
    goes to one arg-max / arg-min element even with ties): the same values either way."""
    from lpdt.layers.norms import value_range

    x = torch.randint(-3, 4, (6, 5, 32)).float()  # many ties, as in 8-bit inputs
    with torch.no_grad():
        r_eval = value_range(x)
    xg = x.clone().requires_grad_(True)
    r_train = value_range(xg)
    assert torch.equal(r_eval, r_train.detach())
    r_train.sum().backward()
    # one +1 (arg-max) and one -1 (arg-min) per row, not split over the ties
    assert torch.equal((xg.grad == 1).sum(-1), torch.ones(6, 5, dtype=torch.long))
    assert torch.equal((xg.grad == -1).sum(-1), torch.ones(6, 5, dtype=torch.long))


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_compiled_value_range_routes_the_same_gradient_bits(device):
    """Compiled for a GPU, the range takes each row's arg-max / arg-min element by a select (its
    backward fuses; ``max(-1)``'s is a scatter), for the CPU by ``max`` / ``min``: the same values
    and gradients, bit for bit, as the eager ``max`` / ``min``, ties and signed zeros included.
    (A GPU's formula is traced on the CPU under ``as_device``, as ``lpdt.engine.cudacount``
    does.)"""
    from lpdt.layers.formulas import as_device
    from lpdt.layers.norms import value_range

    x = torch.randint(-3, 4, (6, 5, 32)).float()  # many ties, as in 8-bit inputs
    x[0, 0, :3] = torch.tensor([0.0, -0.0, 0.0])
    x[0, 1] = -0.0  # a row of negative zeros: max = min = -0.0
    g = torch.randn(6, 5)
    outs = []
    compiled = torch.compile(value_range, dynamic=False, fullgraph=True)
    for fn, formulas in ((value_range, "cpu"), (compiled, device)):
        xg = x.clone().requires_grad_(True)
        with as_device(formulas):
            r = fn(xg)
        r.backward(g)
        outs.append((r.detach(), xg.grad))
    (r_eager, g_eager), (r_compiled, g_compiled) = outs
    assert torch.equal(r_compiled, r_eager)
    assert torch.equal(g_compiled, g_eager)
    # the eager gradient is Banner et al.'s: +g at one arg-max, -g at one arg-min per row
    assert torch.equal((g_eager != 0).sum(-1)[1:], torch.full((5, 5), 2))
