"""The batched local optimizers against torch.optim, node by node."""

import pytest
import torch

from lpdt.config import OptimConfig
from lpdt.decentral.optim import QGM, make_optimizer


def _run_torch(opt_cls, z0, grads, lr, **kw):
    rows = []
    for i in range(z0.shape[0]):
        p = torch.nn.Parameter(z0[i].clone())
        opt = opt_cls([p], lr=lr, **kw)
        for g in grads:
            p.grad = g[i].clone()
            opt.step()
        rows.append(p.detach())
    return torch.stack(rows)


@pytest.mark.parametrize("nesterov", [True, False])
def test_sgd_matches_torch(nesterov):
    torch.manual_seed(0)
    z0, grads = torch.randn(4, 50), [torch.randn(4, 50) for _ in range(10)]
    z = z0.clone()
    opt = make_optimizer(OptimConfig(momentum=0.9, nesterov=nesterov, weight_decay=1e-4), z)
    for g in grads:
        opt.step(z, g.clone(), 0.1)  # step() consumes g (scratch)
    ref = _run_torch(
        torch.optim.SGD, z0, grads, 0.1, momentum=0.9, nesterov=nesterov, weight_decay=1e-4
    )
    assert torch.allclose(z, ref, atol=1e-6)


def test_adam_matches_torch():
    torch.manual_seed(1)
    z0, grads = torch.randn(3, 40), [torch.randn(3, 40) for _ in range(10)]
    z = z0.clone()
    opt = make_optimizer(OptimConfig(name="adam", betas=(0.9, 0.9), weight_decay=1e-4), z)
    for g in grads:
        opt.step(z, g.clone(), 3e-3)
    ref = _run_torch(torch.optim.Adam, z0, grads, 3e-3, betas=(0.9, 0.9), weight_decay=1e-4)
    assert torch.allclose(z, ref, atol=1e-6)


def test_qgm_buffer_is_ema_of_displacement():
    """m tracks EMA_beta((z_t - z_{t+1}) / lr) including the gossip correction (reference §8.3)."""
    torch.manual_seed(2)
    z = torch.randn(2, 30)
    opt = QGM(z, momentum=0.9, weight_decay=0.0)
    lr, ema = 0.1, torch.zeros_like(z)
    for _ in range(20):
        before = z.clone()
        opt.step(z, torch.randn_like(z), lr)
        delta = 0.01 * torch.randn_like(z)  # a gossip correction
        z.add_(delta)
        opt.after_gossip(delta, lr)  # push-sum weights 1: the de-biased correction is delta
        ema = 0.9 * ema + 0.1 * (before - z) / lr
    assert torch.allclose(opt.m, ema, atol=1e-5)
