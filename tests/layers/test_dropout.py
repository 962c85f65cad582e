"""Hashed dropout (``lpdt.layers.dropout``): a Bernoulli mask from the step's noise seed, the same
bits eagerly, on the tensor path a GPU runs and compiled, scaled as ``nn.Dropout`` scales."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from lpdt.layers.dropout import HashDropout, hash_dropout_
from lpdt.layers.quant import kernel
from lpdt.layers.quant.quantizers import noise_seed


def _dropped(d: nn.Module, x: torch.Tensor, seed: int) -> torch.Tensor:
    with noise_seed(torch.tensor([seed])):
        return d(x)


@pytest.mark.parametrize("p", [0.5, 0.2])
def test_keeps_one_minus_p_and_scales_what_it_keeps(p):
    d = HashDropout(p).train()
    x = torch.ones(64, 512)
    y = _dropped(d, x, 3)
    kept = y != 0
    assert y.unique().tolist() == [0.0, pytest.approx(1 / (1 - p))]
    # 32,768 elements: the binomial's standard deviation is at most 0.003
    assert abs(kept.float().mean().item() - (1 - p)) < 0.015
    assert torch.equal(_dropped(d, x, 3), y)  # the seed decides the mask ...
    assert not torch.equal(_dropped(d, x, 4) != 0, kept)  # ... another seed another one
    d.noise_salt = 1
    assert not torch.equal(_dropped(d, x, 3) != 0, kept)  # and so does the call site
    assert torch.equal(_dropped(d.eval(), x, 3), x)  # evaluation: the identity


def test_the_gradient_is_the_scaled_mask():
    d = HashDropout(0.5).train()
    x = torch.randn(8, 32, requires_grad=True)
    y = _dropped(d, x, 11)
    y.sum().backward()
    assert x.grad is not None
    torch.testing.assert_close(x.grad, 2.0 * (y != 0).float(), rtol=0, atol=0)


def test_the_same_mask_eagerly_on_the_gpus_tensor_path_and_compiled(monkeypatch):
    """The CPU's fast path (the key in Python integers), the tensor operations a GPU runs
    (``LPDT_QUANT_KERNEL=0``) and a compiled graph (the ``lpdt::dither_hash`` operator) give
    one mask."""
    d = HashDropout(0.5).train()
    d.noise_salt = 5
    x = torch.randn(16, 40)
    fast = _dropped(d, x, 9)
    monkeypatch.setenv(kernel.ENV, "0")
    tensor_path = _dropped(d, x, 9)
    compiled = torch.compile(d, fullgraph=True, backend="inductor")
    with noise_seed(torch.tensor([9])):
        out = compiled(x)
    assert torch.equal(tensor_path, fast) and torch.equal(out, fast)


def test_hash_dropout_replaces_every_dropout_and_numbers_the_call_sites():
    model = nn.Sequential(nn.Dropout(0.5), nn.Linear(4, 4), nn.Sequential(nn.Dropout(0.1)))
    hash_dropout_(model)
    drops = [m for m in model.modules() if isinstance(m, HashDropout)]
    assert [d.p for d in drops] == [0.5, 0.1]
    assert not any(isinstance(m, nn.Dropout) for m in model.modules())
    assert len({d.noise_salt for d in drops}) == 2  # independent masks
    with pytest.raises(ValueError, match=r"in \[0, 1\)"):
        HashDropout(1.0)


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_a_run_config_with_hashed_dropout_builds_vgg11_with_it(precision):
    """``model.dropout_noise: hash`` reaches the model through ``build_model``; in 8 bits the
    mask's call site is numbered apart from every rounding site; the default keeps nn.Dropout."""
    from lpdt.config import load_config
    from lpdt.engine.batched import not_batchable
    from lpdt.models import build_model

    sets = ["model.name=vgg11", f"precision.mode={precision}"]
    model = build_model(load_config(None, [*sets, "model.dropout_noise=hash"]), 10, (3, 32, 32))
    drops = [m for m in model.modules() if isinstance(m, HashDropout)]
    assert len(drops) == 1 and not_batchable(model) is None
    salts = [m.noise_salt for m in model.modules() if hasattr(m, "noise_salt")]
    assert len(salts) == len(set(salts)) and (len(salts) == 1) == (precision == "fp32")
    plain = build_model(load_config(None, sets), 10, (3, 32, 32))
    assert any(isinstance(m, nn.Dropout) for m in plain.modules())
    assert "Dropout" in (not_batchable(plain) or "")
