"""Operation counts per layer: the paper's Table 7 (training) and Table 9 (inference).

Notation of the paper's Table 8: b batch, C_in/C_out channels, K kernel size, L input
height/width, L_o = floor((L + 2P - K)/S) + 1 the output height/width (we read L_o^2 and L^2 off
the traced shapes, so non-square inputs also work).

| layer type                    | training adds         | training mults             | inference adds | inference mults       |
|-------------------------------|-----------------------|----------------------------|----------------|-----------------------|
| Conv                          | 3 b Cout Cin K^2 Lo^2 | 3 b Cout Cin K^2 Lo^2      | b Cout Cin K^2 Lo^2 | same             |
| Linear                        | 3 b Cout Cin          | 3 b Cout Cin               | b Cout Cin     | b Cout Cin            |
| Quantization (activation)     | 2 b Cin L^2           | 4 b Cin L^2                | (none)         | (none)                |
| Quantization (weight)         | 2 Cout Cin K^2        | 4 Cout Cin K^2             | same           | same                  |
| Range batch-norm + ReLU       | 9 b C L^2             | 6 b C L^2 + 7 C            | 3 b C L^2      | 2 b C L^2 + 3 C       |
| Range EvoNorm                 | 6 b C L^2             | 10 b C L^2 + 5 C           | 2 b C L^2      | 4 b C L^2 + 2 C       |
| Skip connection               | 2 b C L^2             | -                          | 2 b C L^2      | -                     |
| Average pool                  | b C L^2               | 2 b C                      | b C L^2        | b C                   |

Which layers count where (decisions, see docs/cost.md):
- The quantization rows apply to 8-bit models only, at every conv and linear layer (their input
  activation and their weight), as the rows' C_in/C_out/K notation says. Table 9 has no
  activation-quantization row, so inference has none.
- Norm kinds map to the two norm rows: ``rangebn``, ``batchnorm``, ``groupnorm`` -> "Range
  batch-norm + ReLU" (a statistics norm followed by ReLU); ``rangeen``, ``evonorm`` -> "Range
  EvoNorm" (normalisation with a built-in activation). The ReLU after a batch-norm is part of
  the row, so ReLU modules have no operations of their own.
- Max pooling, ReLU, Flatten and Dropout are comparisons/copies: no adds or multiplies.
- Grouped convolutions use C_in/groups (a plain conv has groups = 1). Conv/Linear biases are not
  counted (the paper's formulas have no bias term).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from lpdt.cost.trace import LayerRecord

PRECISIONS = ("fp32", "int8")
MODES = ("training", "inference")

# Layer types in the order of the paper's tables, with their printed names.
LAYER_TYPES: dict[str, str] = {
    "conv": "Conv",
    "linear": "Linear",
    "quant_act": "Quantization (activation)",
    "quant_weight": "Quantization (weight)",
    "norm_rbn": "Range batch-norm + ReLU",
    "norm_ren": "Range EvoNorm",
    "skip": "Skip connection",
    "avgpool": "Average pool",
}

NORM_ROW = {
    "rangebn": "norm_rbn",
    "batchnorm": "norm_rbn",
    "groupnorm": "norm_rbn",
    "rangeen": "norm_ren",
    "evonorm": "norm_ren",
}

# Norm rows: (adds per element, mults per element, mults per channel) for training / inference.
_NORM_COEF = {
    ("norm_rbn", "training"): (9, 6, 7),
    ("norm_rbn", "inference"): (3, 2, 3),
    ("norm_ren", "training"): (6, 10, 5),
    ("norm_ren", "inference"): (2, 4, 2),
}


@dataclass(frozen=True)
class Ops:
    """Additions and multiplications of one layer type (or one layer)."""

    adds: int = 0
    mults: int = 0

    def __add__(self, other: Ops) -> Ops:
        return Ops(self.adds + other.adds, self.mults + other.mults)


def check_choice(value: str, allowed: Iterable[str], what: str) -> None:
    allowed = tuple(allowed)
    if value not in allowed:
        raise ValueError(f"unknown {what} {value!r}; choose one of: {', '.join(allowed)}")


def layer_ops(rec: LayerRecord, batch: int, mode: str, precision: str) -> dict[str, Ops]:
    """The operations of one traced layer call, by layer type (empty for unpriced kinds)."""
    check_choice(mode, MODES, "mode")
    check_choice(precision, PRECISIONS, "precision")
    train = mode == "training"
    b = batch
    out: dict[str, Ops] = {}
    if rec.kind in ("conv", "linear"):
        n = (3 if train else 1) * b * rec.macs
        out[rec.kind] = Ops(n, n)
        if precision == "int8":
            # Weight: 2 adds + 4 mults per weight element (C_out C_in K^2), training and inference.
            w = rec.c_out * (rec.c_in // rec.groups) * rec.k
            out["quant_weight"] = Ops(2 * w, 4 * w)
            if train:
                a = b * rec.c_in * rec.in_hw  # the layer's input activation, b C_in L^2
                out["quant_act"] = Ops(2 * a, 4 * a)
    elif rec.kind == "norm":
        row = NORM_ROW[rec.norm or ""]
        add_e, mul_e, mul_c = _NORM_COEF[(row, mode)]
        elems = b * rec.c_in * rec.in_hw
        out[row] = Ops(add_e * elems, mul_e * elems + mul_c * rec.c_in)
    elif rec.kind == "add":
        out["skip"] = Ops(2 * b * rec.c_out * rec.out_hw, 0)
    elif rec.kind == "avgpool":
        out["avgpool"] = Ops(b * rec.c_in * rec.in_hw, (2 if train else 1) * b * rec.c_in)
    return out


def count_ops(
    records: Iterable[LayerRecord], batch: int, mode: str, precision: str
) -> dict[str, Ops]:
    """Total operations by layer type (every type of ``LAYER_TYPES`` present, zeros included)."""
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    totals = {t: Ops() for t in LAYER_TYPES}
    for rec in records:
        for t, ops in layer_ops(rec, batch, mode, precision).items():
            totals[t] = totals[t] + ops
    return totals


def layers_per_type(records: Iterable[LayerRecord], precision: str) -> dict[str, int]:
    """How many layer calls contribute to each layer type (for the tables' "count" column)."""
    n = {t: 0 for t in LAYER_TYPES}
    for rec in records:
        for t in layer_ops(rec, 1, "training", precision):
            n[t] += 1
    return n
