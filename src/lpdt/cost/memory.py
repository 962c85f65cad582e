"""Memory per node per iteration (the paper's Table 10 memory columns and Figure 7).

Training (reference §11.6, the model that reproduces Table 10):

    M_train = b * X * (B_act + B_grad) + n_buf * 4 * P   bytes, reported in MiB (2^20 bytes)

- X: elements stored per sample for the backward pass: the input image plus the outputs of every
  conv, every norm, every ReLU, every residual add and every max pool. A norm slot with a fused
  ReLU (``act_kind == "relu"``: BN, GN, Range-BN + ReLU) stores two tensors, the norm output
  and the ReLU output. Only feature maps count: the classifier head's vectors (average-pool,
  Linear and their ReLU/Dropout outputs) are a few hundred elements per sample and are left out,
  as in the reference's fit.
- B_act = B_grad = 4 bytes (fp32) or 1 byte (int8): 8-bit training stores 8-bit activations and
  8-bit layer gradients.
- P: trainable parameters. The model-sized buffers stay fp32 during 8-bit training (paper:
  "weights are stored in full precision during training"): weights, weight gradients, momentum,
  and the algorithm's own buffers (CHOCO: x-hat and the neighbour sum s, i.e. 5 buffers in all).

Inference: the weights only, P * 4 bytes (fp32) or P * 1 byte (int8).
"""

from __future__ import annotations

from collections.abc import Iterable

from lpdt.cost.ops import PRECISIONS, check_choice
from lpdt.cost.trace import LayerRecord
from lpdt.decentral.catalog import ALGORITHMS

MIB = 2**20
ACT_BYTES = {"fp32": 4, "int8": 1}
STORED_KINDS = ("conv", "norm", "relu", "add", "maxpool")
# Order of the memory kinds (Figure 7's legend).
MEMORY_KINDS = (
    "activations",
    "activation_gradients",
    "weights",
    "weight_gradients",
    "momentum",
    "algorithm_buffers",
)


def stored_elements(records: Iterable[LayerRecord], input_numel: int) -> dict[str, int]:
    """Elements stored per sample for the backward pass, by source (``input`` and layer kind)."""
    out = {"input": int(input_numel)} | {k: 0 for k in STORED_KINDS}
    for rec in records:
        if rec.kind in STORED_KINDS and rec.spatial:
            out[rec.kind] += rec.out_numel
            if rec.kind == "norm" and rec.act == "relu":
                out["relu"] += rec.out_numel
    return out


def training_memory(
    records: Iterable[LayerRecord],
    params: int,
    input_numel: int,
    batch: int,
    precision: str,
    algorithm: str = "choco",
) -> dict[str, int]:
    """Training memory per node per iteration in bytes, by kind (``MEMORY_KINDS``)."""
    check_choice(precision, PRECISIONS, "precision")
    check_choice(algorithm, ALGORITHMS.names(), "algorithm")
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    x = sum(stored_elements(records, input_numel).values())
    act = batch * x * ACT_BYTES[precision]
    model = 4 * params
    return {
        "activations": act,
        "activation_gradients": act,
        "weights": model,
        "weight_gradients": model,
        "momentum": model,
        # the algorithm's own model-sized fp32 vectors (lpdt.decentral.catalog: CHOCO keeps x-hat
        # and the neighbour sum s, reference §3.3; Deep-Squeeze its error; SGP none)
        "algorithm_buffers": ALGORITHMS.get(algorithm).state_buffers * model,
    }


def inference_memory(params: int, precision: str) -> int:
    """Inference memory in bytes: the weights at the model's precision."""
    check_choice(precision, PRECISIONS, "precision")
    return params * ACT_BYTES[precision]


def mib(n_bytes: float) -> float:
    return n_bytes / MIB
