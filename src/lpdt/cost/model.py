"""Operation counts, energy and memory of one model at one precision: the per-model cost summary.

``model_cost`` works on any ``nn.Module`` (traced once); ``cost_of`` builds a registered model
(``lpdt.models.MODELS``) with a given norm and prices it. The architecture is traced in full
precision; ``precision`` decides the pricing (fp32 vs int8 energy, 4- vs 1-byte activations) and
adds the 8-bit quantization rows. The 8-bit conversion swaps modules one for one, so the traced
layers are the same either way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from torch import nn

from lpdt.cost.energy import HOROWITZ_45NM, EnergyTable, energy_pj, pj_to_mj
from lpdt.cost.memory import (
    inference_memory,
    mib,
    stored_elements,
    training_memory,
)
from lpdt.cost.ops import (
    LAYER_TYPES,
    MODES,
    PRECISIONS,
    Ops,
    check_choice,
    count_ops,
    layers_per_type,
)
from lpdt.cost.trace import LayerRecord, count_params, trace_model
from lpdt.decentral.catalog import ALGORITHMS

CIFAR_SHAPE = (3, 32, 32)


@dataclass
class ModelCost:
    """Cost of one model per node per iteration at batch ``batch`` (see docs/cost.md)."""

    model: str
    norm: str | None
    precision: str
    batch: int
    params: int
    input_shape: tuple[int, ...]
    energy_table: EnergyTable
    records: list[LayerRecord] = field(repr=False)
    ops: dict[str, dict[str, Ops]]  # mode -> layer type -> ops
    layer_counts: dict[str, int]  # layer type -> number of layer calls
    memory_training: dict[str, int]  # memory kind -> bytes
    memory_inference: int  # bytes
    stored_per_sample: dict[str, int]  # elements stored for backward, by source

    def energy_by_type_mj(self, mode: str) -> dict[str, float]:
        return {
            t: pj_to_mj(energy_pj(o, self.precision, self.energy_table))
            for t, o in self.ops[mode].items()
        }

    def energy_mj(self, mode: str) -> float:
        return sum(self.energy_by_type_mj(mode).values())

    def total_ops(self, mode: str) -> Ops:
        total = Ops()
        for o in self.ops[mode].values():
            total = total + o
        return total

    @property
    def memory_training_mib(self) -> float:
        return mib(sum(self.memory_training.values()))

    @property
    def memory_inference_mib(self) -> float:
        return mib(self.memory_inference)

    def to_dict(self) -> dict:
        """JSON-friendly summary (what ``lpdt cost model --json`` writes)."""
        out: dict = {
            "model": self.model,
            "norm": self.norm,
            "precision": self.precision,
            "batch": self.batch,
            "params": self.params,
            "input_shape": list(self.input_shape),
            "energy_table_pj": {
                "fp32_add": self.energy_table.fp32_add,
                "fp32_mult": self.energy_table.fp32_mult,
                "int8_add": self.energy_table.int8_add,
                "int8_mult": self.energy_table.int8_mult,
                "source": self.energy_table.source,
            },
            "layer_counts": dict(self.layer_counts),
            "stored_elements_per_sample": dict(self.stored_per_sample),
        }
        for mode in MODES:
            e = self.energy_by_type_mj(mode)
            tot = self.total_ops(mode)
            out[mode] = {
                "additions": tot.adds,
                "multiplications": tot.mults,
                "energy_mj": sum(e.values()),
                "by_layer_type": {
                    t: {
                        "label": LAYER_TYPES[t],
                        "additions": o.adds,
                        "multiplications": o.mults,
                        "energy_mj": e[t],
                    }
                    for t, o in self.ops[mode].items()
                },
            }
        out["training"]["memory_mib"] = self.memory_training_mib
        out["training"]["memory_by_kind_mib"] = {k: mib(v) for k, v in self.memory_training.items()}
        out["inference"]["memory_mib"] = self.memory_inference_mib
        return out


def model_cost(
    model: nn.Module,
    input_shape: Sequence[int] = CIFAR_SHAPE,
    *,
    batch: int = 32,
    precision: str = "fp32",
    energy: EnergyTable = HOROWITZ_45NM,
    algorithm: str = "choco",
    name: str = "model",
    norm: str | None = None,
    records: list[LayerRecord] | None = None,
) -> ModelCost:
    """Trace ``model`` once and price it (training and inference) at ``precision``.

    ``records`` (from ``trace_model``) skips the trace when one model is priced several times.
    """
    check_choice(precision, PRECISIONS, "precision")
    check_choice(algorithm, ALGORITHMS.names(), "algorithm")
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    if records is None:
        records = trace_model(model, input_shape)
    params = count_params(model)
    input_numel = 1
    for s in input_shape:
        input_numel *= int(s)
    return ModelCost(
        model=name,
        norm=norm,
        precision=precision,
        batch=batch,
        params=params,
        input_shape=tuple(int(s) for s in input_shape),
        energy_table=energy,
        records=records,
        ops={mode: count_ops(records, batch, mode, precision) for mode in MODES},
        layer_counts=layers_per_type(records, precision),
        memory_training=training_memory(records, params, input_numel, batch, precision, algorithm),
        memory_inference=inference_memory(params, precision),
        stored_per_sample=stored_elements(records, input_numel),
    )


def build(
    name: str,
    norm: str | None = None,
    num_classes: int = 10,
    input_shape: Sequence[int] = CIFAR_SHAPE,
    precision: str = "fp32",
) -> nn.Module:
    """A registered model with the given norm (``None``: the config default).

    ``precision="int8"`` applies the 8-bit conversion (as ``lpdt train`` does); the cost model
    only needs that for the communication count, whose gossiped tensors then include the 8-bit
    activation ranges.
    """
    from lpdt.config import ModelConfig, PrecisionConfig
    from lpdt.layers.norms import NORM_KINDS
    from lpdt.models import MODELS, make_model

    check_choice(precision, PRECISIONS, "precision")
    if num_classes < 1:
        raise ValueError(f"--classes {num_classes}: a model needs at least one class")
    spec = MODELS.find(name)
    if spec is not None and spec.inputs == "image" and len(input_shape) != 3:
        shape = ",".join(map(str, input_shape))
        raise ValueError(f"--input-shape {shape}: {name} takes images, channels,height,width")
    cfg = ModelConfig(name=name)
    if norm is not None:
        check_choice(norm, NORM_KINDS, "norm")
        cfg.norm = norm  # type: ignore[assignment]  # a NORM_KINDS name, checked above
    model = make_model(name, cfg, num_classes, tuple(input_shape))
    if precision == "int8":
        from lpdt.layers.quant import convert_to_int8

        model = convert_to_int8(model, PrecisionConfig(mode="int8"), cfg)
    return model


def cost_of(
    name: str,
    norm: str | None = None,
    *,
    precision: str = "fp32",
    batch: int = 32,
    num_classes: int = 10,
    input_shape: Sequence[int] = CIFAR_SHAPE,
    energy: EnergyTable = HOROWITZ_45NM,
    algorithm: str = "choco",
) -> ModelCost:
    """``model_cost`` of the registered model ``name`` with norm ``norm``; a text model is a
    ``ValueError`` saying so (the trace prices convolutions, linear layers and norms, not
    embeddings or attention: it failed naming an Embedding layer and asking to teach it)."""
    from lpdt.models import MODELS

    spec = MODELS.find(name)
    if spec is not None and spec.inputs == "text":
        images = ", ".join(m for m in MODELS.names() if MODELS.get(m).inputs == "image")
        raise ValueError(
            f"{name} is a text model: the operation counts price image models ({images}); "
            "`lpdt cost comm` counts a text model's messages"
        )
    model = build(name, norm, num_classes, input_shape)
    records = trace_model(model, input_shape)
    if norm is None:  # label with what the model actually contains (None: no norm layers)
        norm = ",".join(sorted({r.norm for r in records if r.norm})) or None
    return model_cost(
        model,
        input_shape,
        batch=batch,
        precision=precision,
        energy=energy,
        algorithm=algorithm,
        name=name,
        norm=norm,
        records=records,
    )
