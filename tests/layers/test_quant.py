"""Tests of the simulated 8-bit scheme (reference §5, §6.3, §6.5)."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from lpdt.config import ModelConfig, PrecisionConfig
from lpdt.layers import Add
from lpdt.layers.norms import NORM_MODULES, chunked_mean_range, range_constant_chunked
from lpdt.layers.quant import (
    QAdd,
    QConv2d,
    QLinear,
    QRangeBatchNormAct2d,
    QRangeEvoNorm,
    QuantSpec,
    convert_to_int8,
    gossip_buffer_names,
    quantize,
)
from lpdt.models import make_model


def _t(v: float) -> torch.Tensor:
    return torch.tensor([v])


def test_quantizer_levels_and_nearest_error():
    x = torch.linspace(-1.3, 2.1, 10001)
    lo, hi = _t(-1.3), _t(2.1)
    for bits in (4, 8):
        q = quantize(x, lo, hi, bits, stochastic=False)
        assert q.unique().numel() == 2**bits
        step = 3.4 / (2**bits - 1)
        assert (q - x).abs().max() <= step / 2 + 1e-5
        assert q.min() >= -1.3 - 1e-6 and q.max() <= 2.1 + 1e-6


def test_quantizer_stochastic_unbiased_and_identity_at_32():
    torch.manual_seed(0)
    x = torch.rand(50) * 2 - 1
    draws = torch.stack([quantize(x, _t(-1.0), _t(1.0), 4, True) for _ in range(4000)])
    step = 2 / 15
    # std of one draw <= step/2: the mean over 4000 draws is within ~5 sigma
    assert (draws.mean(0) - x).abs().max() < 5 * (step / 2) / 4000**0.5
    assert torch.equal(quantize(x, _t(-1.0), _t(1.0), 32, True), x)


def _spec(**kw) -> QuantSpec:
    return QuantSpec(**kw)


def test_conv_input_grad_quantised_weight_grad_fp32():
    torch.manual_seed(0)
    conv = QConv2d(3, 4, 3, padding=1, bias=False, spec=_spec(act_stochastic=False))
    conv.eval()
    conv.quantize_input.running_min.fill_(-4.0)
    conv.quantize_input.running_max.fill_(4.0)
    x = torch.randn(2, 3, 6, 6, requires_grad=True)
    y = conv(x)
    g = torch.randn_like(y)
    y.backward(g)
    xq = quantize(x.detach(), _t(-4.0), _t(4.0), 8, False)
    wq = quantize(conv.weight.detach(), conv.weight.min(), conv.weight.max(), 8, False)
    gw = torch.nn.grad.conv2d_weight(xq, conv.weight.shape, g, padding=1)
    assert torch.allclose(conv.weight.grad, gw, atol=1e-4)  # fp32 g, quantised input
    gx_fp = torch.nn.grad.conv2d_input(x.shape, wq, g, padding=1)
    assert not torch.allclose(x.grad, gx_fp, atol=1e-6)  # input grad used a quantised g
    assert torch.allclose(x.grad, gx_fp, atol=0.05 * g.abs().max().item())


def test_linear_grad_levels_and_fp32_weight_grad():
    torch.manual_seed(0)
    lin = QLinear(64, 300, bias=True, spec=_spec(act_stochastic=False))
    lin.eval()  # fixed running range -> deterministic input quantisation
    lin.quantize_input.running_min.fill_(-3.0)
    lin.quantize_input.running_max.fill_(3.0)
    eye = QLinear(300, 300, bias=False, spec=_spec(act_stochastic=False, weight_bits=32))
    eye.weight.data.copy_(torch.eye(300))
    eye.eval()
    eye.quantize_input.running_min.fill_(-100.0)
    eye.quantize_input.running_max.fill_(100.0)
    x = torch.randn(16, 64)
    h = lin(x)
    h.retain_grad()
    out = eye(h)
    g = torch.randn_like(out)
    out.backward(g)
    # gradient reaching the previous layer (through an identity weight) takes <= 256 values
    assert h.grad.unique().numel() <= 256
    assert h.grad.unique().numel() > 16
    # weight gradient is the fp32 gradient from the quantised forward input: g^T x_q
    xq = quantize(x, _t(-3.0), _t(3.0), 8, False)
    assert torch.allclose(lin.weight.grad, h.grad.t() @ xq, atol=1e-5)
    assert torch.allclose(lin.bias.grad, h.grad.sum(0), atol=1e-5)
    # and the weight grad of the identity layer uses the fp32 g (not quantised)
    assert torch.allclose(eye.weight.grad, g.t() @ eye.quantize_input(h.detach()), atol=1e-4)


def test_conv_matches_fp32_conv_at_32_bits():
    torch.manual_seed(0)
    spec = _spec(weight_bits=32, act_bits=32, grad_bits=32)
    q = QConv2d(3, 5, 3, stride=2, padding=1, bias=True, spec=spec)
    ref = nn.Conv2d(3, 5, 3, stride=2, padding=1, bias=True)
    ref.load_state_dict({k: v for k, v in q.state_dict().items() if k in ("weight", "bias")})
    x1 = torch.randn(2, 3, 9, 9, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_(True)
    q(x1).square().sum().backward()
    ref(x2).square().sum().backward()
    assert torch.allclose(x1.grad, x2.grad, atol=1e-5)
    assert torch.allclose(q.weight.grad, ref.weight.grad, atol=1e-4)
    assert torch.allclose(q.bias.grad, ref.bias.grad, atol=1e-4)


def test_running_range_update_rule_in_place():
    q = QLinear(4, 2, spec=_spec())
    buf = q.quantize_input.running_min
    x = torch.tensor([[0.0, 1.0, 2.0, 3.0], [-2.0, 0.0, 1.0, 5.0]])
    q.quantize_input.running_min.fill_(1.0)
    q.quantize_input.running_max.fill_(1.0)
    q(x)
    assert q.quantize_input.running_min is buf  # updated in place
    assert torch.allclose(buf, _t(0.1 * 1.0 + 0.9 * (-1.0)))
    assert torch.allclose(q.quantize_input.running_max, _t(0.1 * 1.0 + 0.9 * 4.0))


def test_range_evonorm_formula_at_32_bits():
    torch.manual_seed(0)
    spec = _spec(weight_bits=32, act_bits=32, grad_bits=32)
    m = QRangeEvoNorm(16, groups=4, spec=spec)
    with torch.no_grad():
        m.weight.uniform_(0.5, 1.5)
        m.bias.normal_()
        m.v.uniform_(0.5, 1.5)
    x = torch.randn(3, 16, 8, 8)
    # direct evaluation: S = (16/4)*64/16 = 16 elements per chunk
    xg = x.reshape(3, 4, 16, 16)
    rbar = (xg.amax(-1) - xg.amin(-1)).mean(-1)
    kappa = 0.5 * 0.35 * (1 + (torch.pi * torch.log(torch.tensor(4.0))) ** 0.5)
    kappa = kappa / (2 * torch.log(torch.tensor(16.0))) ** 0.5
    s = 1 / (rbar * kappa + 1e-5)
    h = torch.clamp(x * m.v / 6 + 0.5, 0, 1)
    ref = (x * h) * s.repeat_interleave(4, 1)[:, :, None, None] * m.weight + m.bias
    assert torch.allclose(m(x), ref, atol=1e-5)


def test_range_evonorm_8bit_quantises_scale_and_params():
    torch.manual_seed(0)
    m = QRangeEvoNorm(16, groups=4, spec=_spec(act_stochastic=False))
    m.eval()
    m.quantize_input.running_min.fill_(-4.0)
    m.quantize_input.running_max.fill_(4.0)
    with torch.no_grad():
        m.weight.uniform_(0.5, 1.5)
        m.v.uniform_(0.5, 1.5)
    x = torch.randn(3, 16, 8, 8)

    def q(t):  # independent per-tensor nearest quantiser
        lo, hi = t.min(), t.max()
        d = (hi - lo) / 255
        return torch.round((t - lo) / d) * d + lo

    xq = torch.round((x.clamp(-4, 4) + 4) / (8 / 255)) * (8 / 255) - 4
    rbar, s_ = chunked_mean_range(xq.reshape(3, 4, -1), 16)
    s = q(1 / (rbar * range_constant_chunked(s_) + 1e-5))
    n = xq * torch.clamp(xq * q(m.v) / 6 + 0.5, 0, 1)
    ref = n * s.repeat_interleave(4, 1)[:, :, None, None] * q(m.weight) + m.bias
    assert torch.allclose(m(x), ref, atol=1e-4)


def test_range_batchnorm_formula_and_running_rule():
    torch.manual_seed(0)
    spec = _spec(weight_bits=32, act_bits=32, grad_bits=32)
    m = QRangeBatchNormAct2d(4, act=True, spec=spec)
    x = torch.randn(8, 4, 4, 4) * 3 + 1
    y = m(x)
    xc = x.transpose(0, 1).reshape(4, 16, 8)
    rbar = (xc.amax(-1) - xc.amin(-1)).mean(-1)
    s = 1 / (rbar * range_constant_chunked(8) + 1e-5)
    mu = x.mean((0, 2, 3))
    ref = F.relu((x - mu[:, None, None]) * s[:, None, None])
    assert torch.allclose(y, ref, atol=1e-5)
    assert torch.allclose(m.running_mean, 0.9 * mu, atol=1e-6)
    assert torch.allclose(m.running_scale, 0.1 + 0.9 * s, atol=1e-4)


def test_qadd_quantises_operands_and_gradient():
    a = torch.randn(4, 3, 5, 5, requires_grad=True)
    b = torch.randn(4, 3, 5, 5, requires_grad=True)
    add = QAdd(_spec(act_stochastic=False))
    out = add(a, b)
    assert out.detach().unique().numel() <= 256 * 256
    out.backward(torch.randn_like(out))
    assert a.grad.unique().numel() <= 256 and torch.equal(a.grad, b.grad)


def _count(model: nn.Module, types) -> int:
    return sum(isinstance(m, types) for m in model.modules())


@pytest.mark.parametrize(
    "name",
    [
        "resnet20",
        pytest.param("resnet54", marks=pytest.mark.slow),
        pytest.param("resnet18", marks=pytest.mark.slow),
        pytest.param("vgg11", marks=pytest.mark.slow),
    ],
)
@pytest.mark.parametrize("norm", ["evonorm", "batchnorm", "rangebn"])
def test_convert_replaces_everything(name: str, norm: str):
    mcfg = ModelConfig(name=name, norm=norm)
    shape = (3, 64, 64) if name == "resnet18" else (3, 32, 32)
    fp = make_model(name, mcfg, 10, shape)
    q = convert_to_int8(fp, PrecisionConfig(mode="int8"), mcfg)
    assert _count(q, QConv2d) == _count(fp, nn.Conv2d) > 0
    assert _count(q, QLinear) == _count(fp, nn.Linear) > 0
    assert _count(q, QAdd) == _count(fp, Add)
    qnorm = QRangeBatchNormAct2d if norm == "rangebn" else QRangeEvoNorm
    assert _count(q, qnorm) == _count(fp, NORM_MODULES) > 0
    assert _count(q, NORM_MODULES) == 0
    assert not any(type(m) in (nn.Conv2d, nn.Linear) for m in q.modules())
    relus = _count(q, nn.ReLU)
    if norm == "rangebn" or name == "vgg11":
        assert relus == _count(fp, nn.ReLU)  # VGG classifier ReLU; RangeBN nets keep theirs
    else:
        assert relus == 0  # Range-EvoNorm carries its gate: no ReLU after the adds
    y = q(torch.randn(2, *shape))
    assert y.shape == (2, 10) and torch.isfinite(y).all()


def test_convert_linear_only_and_gossip_switch():
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.Flatten(), nn.Linear(8, 4), nn.Linear(4, 2))
    q = convert_to_int8(model, PrecisionConfig(mode="int8"), None, linear_only=True)
    assert _count(q, QLinear) == 2 and _count(q, QConv2d) == 0 and _count(q, nn.Conv2d) == 1
    assert len(gossip_buffer_names(q)) == 4
    q2 = convert_to_int8(
        model, PrecisionConfig(mode="int8", gossip_ranges=False), None, linear_only=True
    )
    assert gossip_buffer_names(q2) == []
    with pytest.raises(ValueError, match="allowed"):
        convert_to_int8(model, PrecisionConfig(weight_bits=3), None, linear_only=True)


def test_convert_passes_range_evonorm_switches():
    mcfg = ModelConfig(name="resnet20", norm="evonorm", range_chunks=4, range_estimator="paper")
    model = make_model("resnet20", ModelConfig(name="resnet20", norm="evonorm"), 10, (3, 8, 8))
    q = convert_to_int8(model, PrecisionConfig(mode="int8"), mcfg)
    norms = [m for m in q.modules() if isinstance(m, QRangeEvoNorm)]
    assert norms and all((m.chunks, m.estimator) == (4, "paper") for m in norms)


def test_deepcopy_and_flat_views_train_and_eval():
    mcfg = ModelConfig(name="resnet20", norm="evonorm")
    q = convert_to_int8(make_model("resnet20", mcfg, 10, (3, 32, 32)), PrecisionConfig(), mcfg)
    q = copy.deepcopy(q)
    names = gossip_buffer_names(q)
    # reference §7.1: 273,258 trainable parameters + 122 range scalars for LP ResNet-20
    assert sum(p.numel() for p in q.parameters()) == 273_258
    assert sum(q.get_buffer(n).numel() for n in names) == 122
    tensors = [p for p in q.parameters()] + [q.get_buffer(n) for n in names]
    flat = torch.cat([t.detach().flatten() for t in tensors])
    off = 0
    for p in q.parameters():
        p.data = flat[off : off + p.numel()].view_as(p)
        off += p.numel()
    for n in names:
        mod_name, b = n.rsplit(".", 1)
        mod = q.get_submodule(mod_name)
        buf = getattr(mod, b)
        setattr(mod, b, flat[off : off + buf.numel()].view_as(buf))
        off += buf.numel()
    before = flat[-len(names) :].clone()
    x = torch.randn(4, 3, 32, 32)
    q.train()
    q(x).sum().backward()
    assert not torch.equal(flat[-len(names) :], before)  # running ranges updated inside flat
    q.eval()
    with torch.no_grad():
        assert torch.isfinite(q(x)).all()


def test_lp_init_switch():
    mcfg = ModelConfig(name="resnet20", norm="evonorm")
    fp = make_model("resnet20", mcfg, 10, (3, 32, 32))
    ref = convert_to_int8(fp, PrecisionConfig(), mcfg)  # reference §7.1: zero gamma, small fc
    kept = convert_to_int8(fp, PrecisionConfig(lp_init=False), mcfg)
    last_norms = [b.norm2.weight for b in ref.blocks()]
    assert all(torch.all(w == 0) for w in last_norms)
    assert all(torch.all(b.norm2.weight == 1) for b in kept.blocks())
    assert torch.equal(kept.fc.weight, fp.fc.weight)
    assert not torch.equal(ref.fc.weight, fp.fc.weight)


def test_compiled_stochastic_rounding_is_unbiased():
    """The compiled quantiser draws its noise in the kernel (a hash of index and a seed from
    torch's generator): still unbiased, and independent between calls."""
    torch.manual_seed(0)
    x = torch.rand(50) * 2 - 1
    q = torch.compile(lambda t: quantize(t, _t(-1.0), _t(1.0), 4, True), dynamic=False)
    draws = torch.stack([q(x) for _ in range(4000)])
    step = 2 / 15
    assert (draws.mean(0) - x).abs().max() < 5 * (step / 2) / 4000**0.5
    assert not torch.equal(draws[0], draws[1])
    on_grid = (draws + 1.0) / step
    assert (on_grid - on_grid.round()).abs().max() < 1e-4  # values stay on the 4-bit grid


def test_dither_is_uniform_on_the_16_bit_grid_and_independent_across_keys():
    """The rounding noise is the old one's distribution, U(-1/2, 1/2) on 2^16 levels: every
    value on the grid, the 256 coarse bins equally filled (chi-square), mean 0, variance 1/12;
    streams of other seeds, salts and neighbouring elements are uncorrelated."""
    from lpdt.layers.quant.quantizers import dither

    n = 2**20
    xi = dither(torch.zeros(n), torch.tensor([1234]), salt=5)
    levels = (xi + 0.5) * 2**16 - 0.5
    assert torch.equal(levels, levels.round()) and levels.min() >= 0 and levels.max() < 2**16
    counts = torch.bincount((levels // 256).long(), minlength=256).double()
    chi2 = ((counts - n / 256) ** 2 / (n / 256)).sum()
    assert chi2 < 255 + 5 * (2 * 255) ** 0.5  # 255 degrees of freedom, 5 sigma
    assert abs(xi.mean()) < 5 * (1 / 12 / n) ** 0.5
    assert abs(xi.var() - 1 / 12) < 1e-3
    others = [
        dither(torch.zeros(n), torch.tensor([1235]), salt=5),
        dither(torch.zeros(n), torch.tensor([1234]), salt=6),
        torch.roll(xi, 1),
    ]
    for other in others:
        corr = torch.corrcoef(torch.stack([xi, other]))[0, 1]
        assert abs(corr) < 5 / n**0.5


@pytest.mark.parametrize("path", ["cpu-fast-path", "tensor-ops", "step-key-table"])
def test_dither_is_recipe_v2s_hash_bit_for_bit(path, monkeypatch):
    """The noise bits are 8-bit recipe version 2's (docs/int8.md), checked against the hash
    written in Python integers: a rewrite for speed (the in-place int32 eager path) cannot
    change the recipe silently. Each eager path: the key in Python integers (the CPU), in
    tensor operations (a GPU's path), and read from the step's table of keys inside a
    ``noise_seed`` block (salt 97 grows the table past its first 64). The seed tensor is left
    as it was."""
    import contextlib

    from lpdt.layers.quant import kernel
    from lpdt.layers.quant.quantizers import dither, noise_seed

    if path != "cpu-fast-path":
        monkeypatch.setenv(kernel.ENV, "0")

    def mix(h: int) -> int:  # Wellons' lowbias32, 32-bit unsigned arithmetic
        h = ((h ^ (h >> 16)) * 0x21F0AAAD) % 2**32
        h = ((h ^ (h >> 15)) * 0x735A2D97) % 2**32
        return h ^ (h >> 15)

    for seed, salt in ((0, 0), (1234, 5), (2**31 - 1, 97)):
        key = mix((seed + salt * 0x632BE5AB) % 2**32)
        want = [
            ((mix(((i + key) % 2**32) * 0x61C88647 % 2**32) >> 16) + 0.5) / 2**16 - 0.5
            for i in range(300)
        ]
        seed_t = torch.tensor([seed])
        step = noise_seed(seed_t) if path == "step-key-table" else contextlib.nullcontext()
        with step:
            got = dither(torch.zeros(3, 100), seed_t, salt)
        assert got.flatten().tolist() == want
        assert seed_t.item() == seed


def test_the_step_key_table_serves_its_own_seed_only(monkeypatch):
    """Inside a ``noise_seed`` block a call with the block's seed, or another tensor on its
    storage (a seed saved for a backward comes back as a new object), reads its key from the
    table in one operation instead of about 13; another seed computes its own. Both give the
    bits computed outside any block."""
    from lpdt.engine.opcount import count_ops
    from lpdt.layers.quant import kernel
    from lpdt.layers.quant.quantizers import dither, noise_seed

    monkeypatch.setenv(kernel.ENV, "0")  # the tensor path a GPU takes
    x, seed, other = torch.zeros(50), torch.tensor([7]), torch.tensor([8])
    outside = {s: dither(x, s, 3) for s in (seed, other)}
    _, plain = count_ops(dither, x, seed, 3)
    with noise_seed(seed):
        dither(x, seed, 0)  # the table is built by the first call
        for s, same_storage in ((seed, True), (seed.view(1), True), (other, False)):
            got, ops = count_ops(dither, x, s, 3)
            assert torch.equal(got, outside[other if s is other else seed])
            assert (ops.total < plain.total - 10) == same_storage, (ops.total, plain.total)


def test_dither_eager_equals_compiled_and_fuses_into_the_rounding_kernel():
    """The same (seed, salt) gives the same noise bits eager and compiled, for any size (vector
    tails included); a compiled per-tensor quantiser is one kernel (range reduction and
    rounding with the in-kernel hash), with no random-number op in the generated code."""
    from torch._inductor.utils import run_and_get_code

    from lpdt.layers.quant.quantizers import dither, quantize_minmax

    seed = torch.tensor([987654])
    compiled_dither = torch.compile(lambda t, s: dither(t, s, 3), dynamic=False)
    for n in (1, 15, 17, 1000):
        x = torch.zeros(n)
        assert torch.equal(compiled_dither(x, seed), dither(x, seed, 3))
    assert not torch.equal(dither(torch.zeros(64), seed, 3), dither(torch.zeros(64), seed, 4))
    g = torch.randn(4, 8, 6, 6)
    f = torch.compile(lambda t, s: quantize_minmax(t, 8, True, s, 7), dynamic=False)
    out, (code,) = run_and_get_code(f, g, seed)
    assert torch.equal(out, quantize_minmax(g, 8, True, seed, 7))
    assert code.count("async_compile.cpp") == 1, "range and rounding in one fused kernel"
    assert "aminmax" in code and "round" in code  # the range (torch.aminmax) and the rounding
    assert not any(op in code for op in ("randint", "rand_like", "inductor_lookup_seed", "philox"))


def check_lowered_quantisers(device: torch.device) -> None:
    """Compiled on ``device``, the noise and the rounding are the operators ``lpdt::dither_hash``
    and ``lpdt::quantize_levels``, lowered by inductor into the kernels that read them (the
    generated code never calls them) and equal to the eager bits in the batched step's two
    forms: under ``torch.func.vmap`` (the activations, per-node ranges; the operators' vmap
    rules, the node axis leading or not) and by rows (the node-stacked gradients). Eagerly the
    tensor path a GPU takes (on the CPU the caller sets ``LPDT_QUANT_KERNEL=0``). Also
    ``tests/test_cuda.py``'s, on CUDA."""
    import re

    from torch._inductor.utils import run_and_get_code

    from lpdt.layers.quant.quantizers import dither, quantize_minmax_nodes, vmapped

    gen = torch.Generator().manual_seed(0)
    x = (
        torch.randn(3, 4, 5, 6, generator=gen) * torch.tensor([1.0, 10.0, 0.1])[:, None, None, None]
    ).to(device)
    seeds = torch.tensor([11, 2**31 - 1, 0], device=device)

    def noise(a: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        return dither(a, s, 9)

    def rounding(a: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        lo, hi = a.amin().reshape(1), a.amax().reshape(1)
        return quantize(a, lo, hi, 8, True, s, 9) + quantize(a, lo, hi, 4, False)

    def per_node(fn, t: torch.Tensor, s: torch.Tensor, dim: int) -> torch.Tensor:
        with vmapped():
            return torch.func.vmap(fn, in_dims=(dim, 0))(t, s)

    for fn in (noise, rounding):
        own = torch.stack([fn(x[k], seeds[k : k + 1]) for k in range(3)])
        for dim, t in ((0, x), (1, x.movedim(0, 1).contiguous())):
            assert torch.equal(per_node(fn, t, seeds, dim), own)
            compiled = torch.compile(per_node, dynamic=False, fullgraph=True)
            # Code generated now, not read from a cache (which keeps a lowering's code after
            # the lowering is gone).
            with torch._inductor.config.patch(force_disable_caches=True):
                out, codes = run_and_get_code(compiled, fn, t, seeds, dim)
            assert torch.equal(out, own), (fn.__name__, dim)
            code = "\n".join(codes)
            assert "ops.lpdt." not in code, "an operator called, not lowered"
            # the fused kernel is named after the operators in it
            assert ("dither_hash" if fn is noise else "quantize_levels") in code
            if fn is noise:
                kernels = re.findall(r"= async_compile\.(?:cpp_pybinding|cpp|triton)\(", code)
                assert len(kernels) == 1, kernels
    by_rows = torch.compile(lambda t, s: dither(t, s, 9, rows=True), dynamic=False)
    assert torch.equal(
        by_rows(x, seeds), torch.stack([noise(x[k], seeds[k : k + 1]) for k in range(3)])
    )
    nodes = torch.compile(lambda t, s: quantize_minmax_nodes(t, 8, s, 9), dynamic=False)
    assert torch.equal(nodes(x, seeds), quantize_minmax_nodes(x, 8, seeds, 9))


@pytest.mark.filterwarnings("ignore:dynamo_pgo force disabled")
def test_compiled_quantisers_are_lowered_operators_per_node_and_by_rows(monkeypatch):
    """``check_lowered_quantisers`` on the CPU; ``opcheck`` checks the operators' schemas, fake
    and AOT registrations."""
    from lpdt.layers.quant import kernel
    from lpdt.layers.quant.operators import dither_hash, quantize_levels

    monkeypatch.setenv(kernel.ENV, "0")
    check_lowered_quantisers(torch.device("cpu"))
    seeds = torch.tensor([11, 2**31 - 1, 0])
    x = torch.randn(3, 2, 3)
    lo, hi = x.amin().expand(x.shape), x.amax().expand(x.shape)
    cases = [
        (dither_hash, (seeds, [2, 3], 5)),
        (dither_hash, (seeds[0].reshape(()), [2, 3], 5)),
        (quantize_levels, (x, lo, hi, seeds, 255.0, 5)),
        (quantize_levels, (x, lo, hi, seeds[0].reshape(()), 15.0, 5)),
        (quantize_levels, (x, lo, hi, None, 255.0, 0)),
    ]
    for op, args in cases:
        result = torch.library.opcheck(op, args)
        assert set(result.values()) == {"SUCCESS"}, result


def test_compiled_activation_quantiser_is_computed_once_per_element():
    """A quantised activation is stored once in the compiled graph (``functions.stored``): the
    noise hash appears once in Range-EvoNorm's compiled forward instead of again inside its
    chunk-range reduction (where inductor could not vectorise it), and the output matches the
    eager one."""
    from torch._inductor.utils import run_and_get_code

    from lpdt.layers.quant.modules import QRangeEvoNorm
    from lpdt.layers.quant.quantizers import noise_seed

    torch.manual_seed(0)
    m = QRangeEvoNorm(16, 8, chunks=2)
    x = torch.randn(8, 16, 12, 12, requires_grad=True)
    seed = torch.tensor([5])

    def forward(m: nn.Module, x: torch.Tensor, seed: torch.Tensor) -> torch.Tensor:
        with noise_seed(seed):
            return m(x)

    out, (code,) = run_and_get_code(torch.compile(forward, dynamic=False), m, x, seed)
    golden = str(0x61C88647)  # the hash's first multiplier (quantizers.dither), in decimal
    assert code.count(golden) == 1, "the stochastic rounding's hash, computed once"
    torch.testing.assert_close(out, forward(m, x, seed), rtol=1e-6, atol=1e-6)


def test_compiled_dither_keeps_large_constants_out_of_index_arithmetic():
    """On a GPU inductor computes kernel indices in int32 and Triton refuses a constant of 2^31
    or more there: the hash once multiplied the element index by a 32-bit constant, which
    inductor folded into the index (``13439234269184*x0`` for a per-sample quantiser) and the
    8-bit compiled step failed to compile on an H100. The CPU code shows the same folding, so
    this checks, without a GPU, that no index variable is multiplied by such a constant."""
    import re

    from torch._inductor.utils import run_and_get_code

    def per_sample(x: torch.Tensor, seed: torch.Tensor) -> torch.Tensor:
        lo, hi = x.amin(dim=(1, 2, 3), keepdim=True), x.amax(dim=(1, 2, 3), keepdim=True)
        return quantize(x, lo, hi, 8, True, seed=seed, salt=3)

    x, seed = torch.randn(16, 8, 32, 32), torch.tensor([12345])
    out, (code,) = run_and_get_code(torch.compile(per_sample, dynamic=False), x, seed)
    assert torch.equal(out, per_sample(x, seed))
    products = re.findall(r"\b(\d+)L?\s*\*\s*[xr]\d", code)
    assert all(int(c) < 2**31 for c in products), products


def test_straight_through_is_q_exactly_with_the_identity_gradient():
    """``(x - x.detach()) + q``: the forward value is q to the bit (also where x is large against
    q) and the gradient reaching x is the incoming one, unscaled; without a gradient to route it
    is q itself."""
    from lpdt.layers.quant.functions import straight_through

    torch.manual_seed(0)
    x = (torch.randn(1000) * torch.logspace(-30, 30, 1000)).requires_grad_()
    q = torch.randn(1000)
    out = straight_through(x, q)
    assert torch.equal(out, q)
    g = torch.randn(1000)
    out.backward(g)
    assert torch.equal(x.grad, g)
    with torch.no_grad():
        assert straight_through(x, q) is q


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_parameters_quantised_together_are_each_quantised_alone(device):
    """``ste_minmax_each``: compiled for a GPU (the tensors stacked and quantised by rows, one
    kernel) or for the CPU (one by one), each tensor gets its own range: the values and the
    gradients equal eager ``ste_minmax`` of each, bit for bit, node by node under vmap too. The
    three ranges differ by orders of magnitude and one tensor is constant (a zero range)."""
    from lpdt.layers.formulas import as_device
    from lpdt.layers.quant.functions import ste_minmax, ste_minmax_each
    from lpdt.layers.quant.quantizers import vmapped

    torch.manual_seed(0)
    xs = [torch.randn(4, 1, 16, 1, 1) * scale for scale in (1e-3, 1.0, 50.0)]
    xs[0][2] = 0.7  # one node's tensor is constant
    gs = [torch.randn(4, 1, 16, 1, 1) for _ in xs]

    def each(*ts):
        return ste_minmax_each(list(ts), 4)

    def alone(*ts):
        return [ste_minmax(t, 4) for t in ts]

    compiled = torch.compile(torch.vmap(each), dynamic=False, fullgraph=True)
    outs = []
    for fn, formulas in ((torch.vmap(alone), "cpu"), (compiled, device)):
        leaves = [x.clone().requires_grad_(True) for x in xs]
        with as_device(formulas), vmapped():
            qs = fn(*leaves)
        torch.autograd.backward(qs, gs)
        outs.append(([q.detach() for q in qs], [t.grad for t in leaves]))
    (q_eager, g_eager), (q_compiled, g_compiled) = outs
    for a, b in zip(q_eager + g_eager, q_compiled + g_compiled, strict=True):
        assert torch.equal(a, b)
    assert len(q_eager[1].unique()) > 2 and torch.equal(g_eager[2], gs[2])


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_compiled_ranges_of_long_rows_are_aminmaxs_values(device):
    """The ranges the quantisers take, compiled for a GPU (rows longer than ``SPLIT_ROW``
    reduced in two stages, ``quantizers._split_ranges``, whether or not a multiple of it) or for
    the CPU (one ``aminmax``): the values of eager ``aminmax``, row by row and over a whole
    tensor, with infinities, a NaN and ties of signed zeros."""
    from lpdt.layers.formulas import as_device
    from lpdt.layers.quant.quantizers import SPLIT_ROW, quantize_minmax, row_ranges

    torch.manual_seed(0)
    x = torch.randn(6, 4 * SPLIT_ROW)
    x[1, 5], x[2, 3 * SPLIT_ROW + 7] = float("inf"), -float("inf")
    x[3, SPLIT_ROW + 1] = float("nan")
    x[4] = 0.0
    x[4, ::3] = -0.0  # a row of signed zeros only
    rows = torch.compile(lambda t: row_ranges(t, 1, keepdim=True), dynamic=False)
    whole = torch.compile(lambda t: quantize_minmax(t, 8), dynamic=False)
    # Rows of 4 x SPLIT_ROW (pieces of SPLIT_ROW) and of 4.5 x SPLIT_ROW (6 pieces of 6,144).
    for t in (x, x[:, : 9 * SPLIT_ROW // 2]):
        with as_device(device):
            lo, hi = rows(t)
            q = whole(t[0])
        ref_lo, ref_hi = torch.aminmax(t, dim=1, keepdim=True)
        assert lo.isnan()[3] and hi.isnan()[3]  # torch.equal is False for NaNs: row 3 apart
        lo, hi, ref_lo, ref_hi = (r[[0, 1, 2, 4, 5]] for r in (lo, hi, ref_lo, ref_hi))
        assert torch.equal(lo, ref_lo) and torch.equal(hi, ref_hi)
        assert torch.equal(q, quantize_minmax(t[0], 8))


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_compiled_batch_range_is_the_batch_means(device):
    """``batch_range`` compiled for a GPU (each mean a masked sum over the stacked minima and
    maxima) or for the CPU: the eager batch means of the per-sample min and max, up to the order
    of summation; rows short and long (split in two reductions for a GPU)."""
    from lpdt.layers.formulas import as_device
    from lpdt.layers.quant.quantizers import batch_range

    torch.manual_seed(0)
    for x in (torch.randn(32, 16, 8, 8) * 3 + 1, torch.randn(16, 32, 32, 32)):
        compiled = torch.compile(batch_range, dynamic=False, fullgraph=True)
        with as_device(device):
            lo, hi = compiled(x)
        per_sample = x.reshape(x.shape[0], -1)
        torch.testing.assert_close(lo, per_sample.amin(1).mean().reshape(1))
        torch.testing.assert_close(hi, per_sample.amax(1).mean().reshape(1))


def test_node_stacked_noise_and_rounding_are_each_nodes_own(monkeypatch):
    """``dither(rows=True)`` and ``quantize_minmax_nodes`` (the batched step's gradient
    quantiser, one pass over all nodes) give each node the bits of its own call: its own range,
    its own seed, its elements counted from 0. On the tensor path a GPU runs (no C++ kernel)."""
    from lpdt.layers.quant import kernel
    from lpdt.layers.quant.quantizers import dither, quantize_minmax, quantize_minmax_nodes

    monkeypatch.setenv(kernel.ENV, "0")
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(3, 4, 5, generator=gen) * torch.tensor([1.0, 10.0, 0.1])[:, None, None]
    seeds = torch.tensor([11, 12, 13])
    noise = dither(x, seeds, salt=4, rows=True)
    q = quantize_minmax_nodes(x, 8, seeds, salt=4)
    for k in range(3):
        assert torch.equal(noise[k], dither(x[k], seeds[k : k + 1], 4))
        assert torch.equal(q[k], quantize_minmax(x[k], 8, True, seeds[k : k + 1], 4))
    assert not torch.equal(noise[0], noise[1])  # the seeds differ, so does the noise
