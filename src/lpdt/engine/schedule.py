"""The learning-rate schedule of a run (``schedule`` in the run config): a linear warm-up, then
step decay at the milestones (or linear decay)."""

from __future__ import annotations

from lpdt.config import RunConfig


def lr_at(cfg: RunConfig, epoch: int) -> float:
    """Warm-up epochs at ``lr * warmup_factor``, then multi-step decay (reference §8.4), or a
    linear decay per epoch that ends at ``lr / (epochs after the warm-up)`` (``decay: linear``)."""
    s = cfg.schedule
    if epoch < s.warmup_epochs:
        return cfg.optim.lr * s.warmup_factor
    if s.decay == "linear":
        left = cfg.train.epochs - s.warmup_epochs
        return cfg.optim.lr * (cfg.train.epochs - epoch) / max(left, 1)
    return cfg.optim.lr * s.gamma ** sum(epoch >= m for m in s.milestones)
