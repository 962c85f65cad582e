"""Local optimizers acting on all nodes at once (rows of the flat ``[n, P_train]`` numerator).

As in the reference (reference §8), the gradient is taken at the de-biased model z/w but the step is applied
to the push-sum numerator z, and weight decay acts on z.

- ``SGD``: torch's SGD semantics (dampening 0): d = g + wd*z; buf = mu*buf + d (buf = d on the
  first step); step = d + mu*buf (Nesterov) or buf.
- ``QGM``: Quasi-Global Momentum (Lin et al. 2021, reference §8.3). The step uses a Nesterov-form
  direction built from the QGM buffer m; after gossip, ``after_gossip`` folds the consensus
  correction, de-biased by the node state (``NodeState.debias``: delta / w), into m so that m
  tracks EMA_mu((z_t - z_{t+1}) / lr).
- ``Adam``: torch's Adam (L2 weight decay added to the gradient), used for the NLP runs.
"""

from __future__ import annotations

import torch

from lpdt.config import OptimConfig
from lpdt.decentral.catalog import OPTIMIZERS


class LocalOptimizer:
    folds_gossip = False  # whether ``after_gossip`` uses the gossip correction (QGM only)

    def step(self, z: torch.Tensor, g: torch.Tensor, lr: float) -> None:
        """One local step on all nodes: ``z`` is updated in place.

        ``g`` is consumed: it serves as scratch space (it is zeroed before the next backward
        anyway), so that a step allocates no ``[n, P]`` temporaries.
        """
        raise NotImplementedError

    def after_gossip(self, debiased_delta: torch.Tensor, lr: float) -> None:
        """Called, when ``folds_gossip``, with the consensus correction just added to z divided
        by the push-sum weights (``NodeState.debias``); the caller may reuse the tensor after."""

    def state_dict(self) -> dict:
        return {k: v for k, v in vars(self).items() if isinstance(v, torch.Tensor | int | float)}

    def load_state_dict(self, d: dict) -> None:
        for k, v in d.items():
            cur = getattr(self, k)
            if isinstance(cur, torch.Tensor):
                cur.copy_(v)
            else:
                setattr(self, k, v)


class SGD(LocalOptimizer):
    def __init__(
        self, z: torch.Tensor, momentum: float, nesterov: bool, weight_decay: float
    ) -> None:
        self.mu, self.nesterov, self.wd = momentum, nesterov, weight_decay
        self.buf = torch.zeros_like(z)
        self.steps = 0

    def step(self, z: torch.Tensor, g: torch.Tensor, lr: float) -> None:
        d = g.add_(z, alpha=self.wd) if self.wd else g
        if self.mu:
            if self.steps == 0:
                self.buf.copy_(d)
            else:
                self.buf.mul_(self.mu).add_(d)
            d = d.add_(self.buf, alpha=self.mu) if self.nesterov else self.buf
        z.add_(d, alpha=-lr)
        self.steps += 1


class QGM(LocalOptimizer):
    folds_gossip = True

    def __init__(self, z: torch.Tensor, momentum: float, weight_decay: float) -> None:
        self.mu, self.wd = momentum, weight_decay
        self.m = torch.zeros_like(z)

    def step(self, z: torch.Tensor, g: torch.Tensor, lr: float) -> None:
        # g~ = g + wd z; b = mu m + g~; d = g~ + mu b = (1 + mu) g~ + mu^2 m  (Nesterov form)
        d = g.add_(z, alpha=self.wd).mul_(1 + self.mu).add_(self.m, alpha=self.mu * self.mu)
        self.m.mul_(self.mu).add_(d, alpha=1 - self.mu)
        z.add_(d, alpha=-lr)

    def after_gossip(self, debiased_delta: torch.Tensor, lr: float) -> None:
        # m <- m + (mu - 1) * (delta / w) / lr: the gossip displacement joins the momentum. Where
        # w = 1 exactly (every registered topology but `complete` on 10+ nodes), this is bit for
        # bit the former ((mu - 1) * delta) / (lr * w).
        lr_t = torch.full((), lr, dtype=self.m.dtype, device=self.m.device)
        self.m.addcdiv_(debiased_delta, lr_t, value=self.mu - 1)


class Adam(LocalOptimizer):
    def __init__(
        self, z: torch.Tensor, betas: tuple[float, float], eps: float, weight_decay: float
    ) -> None:
        self.b1, self.b2 = betas
        self.eps, self.wd = eps, weight_decay
        self.m = torch.zeros_like(z)
        self.v = torch.zeros_like(z)
        self.steps = 0

    def step(self, z: torch.Tensor, g: torch.Tensor, lr: float) -> None:
        self.steps += 1
        if self.wd:
            g.add_(z, alpha=self.wd)
        self.m.mul_(self.b1).add_(g, alpha=1 - self.b1)
        self.v.mul_(self.b2).addcmul_(g, g, value=1 - self.b2)
        c1 = 1 - self.b1**self.steps
        c2 = 1 - self.b2**self.steps
        denom = torch.div(self.v, c2, out=g).sqrt_().add_(self.eps)  # g is free now
        z.addcdiv_(self.m, denom, value=-lr / c1)


def make_optimizer(cfg: OptimConfig, z: torch.Tensor) -> LocalOptimizer:
    """The optimizer registered as ``cfg.name`` (``lpdt.decentral.catalog.OPTIMIZERS``)."""
    return OPTIMIZERS.get(cfg.name).load()(cfg, z)


# The built-ins' factories, as the catalog calls them: (cfg, z).
def sgd(cfg: OptimConfig, z: torch.Tensor) -> LocalOptimizer:
    """SGD with (Nesterov) momentum, or quasi-global momentum with ``optim.qgm``."""
    if cfg.qgm:
        return QGM(z, cfg.momentum, cfg.weight_decay)
    return SGD(z, cfg.momentum, cfg.nesterov, cfg.weight_decay)


def adam(cfg: OptimConfig, z: torch.Tensor) -> LocalOptimizer:
    return Adam(z, cfg.betas, cfg.eps, cfg.weight_decay)
