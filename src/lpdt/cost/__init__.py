"""Analytic cost model (paper Section 5): operation counts (Tables 7/9), energy, memory (Table 10,
Figure 7) and communication volume (Table 3 "Data"), computed from the real model definitions.

See docs/cost.md for the formulas, assumptions and the comparison with the paper.
"""

from __future__ import annotations

from lpdt.cost.comm import CommVolume, comm_volume, gossiped_numels, iterations_per_epoch
from lpdt.cost.energy import HOROWITZ_45NM, EnergyTable, energy_pj
from lpdt.cost.memory import inference_memory, training_memory
from lpdt.cost.model import ModelCost, build, cost_of, model_cost
from lpdt.cost.ops import LAYER_TYPES, Ops, count_ops, layer_ops
from lpdt.cost.trace import LayerRecord, trace_model

__all__ = [
    "HOROWITZ_45NM",
    "LAYER_TYPES",
    "CommVolume",
    "EnergyTable",
    "LayerRecord",
    "ModelCost",
    "Ops",
    "build",
    "comm_volume",
    "cost_of",
    "count_ops",
    "energy_pj",
    "gossiped_numels",
    "inference_memory",
    "iterations_per_epoch",
    "layer_ops",
    "model_cost",
    "trace_model",
    "training_memory",
]
