"""Energy per operation, and energy of an operation count.

The default table is the paper's source: Horowitz, "Computing's energy problem", ISSCC 2014,
45 nm (pJ per operation). Full-precision models are priced at fp32, 8-bit models at int8 (the
quantization overhead rows included), as in the paper's Section 5.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass

from lpdt.cost.ops import PRECISIONS, Ops, check_choice


@dataclass(frozen=True)
class EnergyTable:
    """Energy per operation in picojoules."""

    fp32_add: float = 0.9
    fp32_mult: float = 3.7
    int8_add: float = 0.03
    int8_mult: float = 0.2
    source: str = "Horowitz, ISSCC 2014, 45 nm"

    def per_op(self, precision: str) -> tuple[float, float]:
        """(pJ per add, pJ per multiply) at ``precision``."""
        check_choice(precision, PRECISIONS, "precision")
        return getattr(self, f"{precision}_add"), getattr(self, f"{precision}_mult")

    def with_overrides(self, values: Mapping[str, float]) -> EnergyTable:
        """A copy with some entries replaced (keys as the field names, values in pJ)."""
        keys = [f.name for f in dataclasses.fields(self) if f.name != "source"]
        for k, v in values.items():
            if k not in keys:
                raise ValueError(f"unknown energy table key {k!r}; allowed: {', '.join(keys)}")
            if not 0 <= v < math.inf:  # (inf: every energy NaN, and JSON has no Infinity)
                raise ValueError(f"energy table value {k}={v!r} must be a finite number >= 0 (pJ)")
        source = self.source if not values else f"{self.source} (overridden: {', '.join(values)})"
        return dataclasses.replace(self, **{k: float(v) for k, v in values.items()}, source=source)


HOROWITZ_45NM = EnergyTable()


def energy_pj(ops: Ops, precision: str, table: EnergyTable = HOROWITZ_45NM) -> float:
    """Energy of ``ops`` in picojoules at ``precision``."""
    e_add, e_mult = table.per_op(precision)
    return ops.adds * e_add + ops.mults * e_mult


def pj_to_mj(pj: float) -> float:
    return pj * 1e-9
