"""What a converted model quantises: bit widths and rounding (from ``PrecisionConfig``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ALLOWED_BITS = (4, 8, 16, 32)  # 32 means "not quantised"
MIN_STEP = 1e-8  # the reference's lower bound on the quantisation step
RANGE_MOMENTUM = 0.9  # weight of the batch value in the running range (reference: r <- 0.1r + 0.9b)


@dataclass(frozen=True)
class QuantSpec:
    """Bit widths and rounding of one converted model."""

    weight_bits: int = 8
    act_bits: int = 8
    grad_bits: int = 8
    act_stochastic: bool = True
    gossip_ranges: bool = True

    @classmethod
    def from_config(cls, cfg: Any) -> QuantSpec:
        for key in ("weight_bits", "act_bits", "grad_bits"):
            bits = getattr(cfg, key)
            if bits not in ALLOWED_BITS:
                raise ValueError(
                    f"precision.{key}={bits} is not supported; allowed: 4, 8, 16, 32 (no quantisation)"
                )
        if cfg.act_rounding not in ("stochastic", "nearest"):
            raise ValueError(
                f"precision.act_rounding={cfg.act_rounding!r}; allowed: stochastic, nearest"
            )
        return cls(
            weight_bits=cfg.weight_bits,
            act_bits=cfg.act_bits,
            grad_bits=cfg.grad_bits,
            act_stochastic=cfg.act_rounding == "stochastic",
            gossip_ranges=bool(cfg.gossip_ranges),
        )


# 8-bit weights, activations and gradients, stochastic activation rounding.
DEFAULT_SPEC = QuantSpec()
