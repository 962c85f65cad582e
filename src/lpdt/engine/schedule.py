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


def schedule_note(cfg: RunConfig) -> str | None:
    """A line saying which milestones of a step schedule the run never reaches (at or past
    ``train.epochs``: the defaults, 100 and 150, under a short ``--set train.epochs=5``), so
    that a learning rate that never decays is not a surprise; None where every one is reached."""
    s = cfg.schedule
    late = [m for m in s.milestones if m >= cfg.train.epochs]
    if s.decay != "step" or not late:
        return None
    never = "never decays" if len(late) == len(s.milestones) else "skips those decays"
    return (
        f"note: schedule.milestones {', '.join(map(str, late))} lie at or past train.epochs="
        f"{cfg.train.epochs}: the learning rate {never} (set schedule.milestones, or "
        "schedule.decay=linear)"
    )
