"""Communication volume per node over a whole training run (the paper's Table 3 "Data" column).

Counted as the reference code counts it (reference §4.4):

    bytes_per_node = iterations * out_peers * message_bytes

- ``message_bytes`` is ``lpdt.decentral.compression.message_bytes``: ``4 (P + 1)`` dense,
  ``6 K + 3`` for layer-wise top-k with K kept entries (the same counter the trainer uses).
- iterations = epochs * ceil(floor(train_size / nodes) / per_node_batch), per_node_batch =
  total batch // nodes (the reference's equal partition and its loader without ``drop_last``).
- out_peers = the mean number of out-peers of the topology (``lpdt.decentral.topology``).
- The reference's byte counter returns the *previous* round's count, so it reports (T - 1)
  messages for T iterations. We count T by default (as ``lpdt train`` does); ``off_by_one=True``
  gives the reference's T - 1. Both agree with the paper's printed digits.
- GB = 10^9 bytes. The 8-bit figure is analytic, one quarter of the fp32 figure: the reference
  sends fp32 messages even for 8-bit training, and the paper's 8-bit column is exactly FP / 4.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from torch import nn

from lpdt.decentral.compression import SPARSIFIERS, kept_total, message_bytes


def gossiped_numels(model: nn.Module) -> list[int]:
    """Sizes of the tensors a node gossips: trainable parameters, then ``gossip_buffers``."""
    numels = [p.numel() for p in model.parameters() if p.requires_grad]
    for mod in model.modules():
        for name in getattr(mod, "gossip_buffers", ()):
            numels.append(getattr(mod, name).numel())
    return numels


def iterations_per_epoch(train_size: int, nodes: int, batch_size: int) -> int:
    """ceil(floor(train_size / nodes) / (batch_size // nodes)): 196 for CIFAR-10, n = 8 or 16."""
    if nodes < 1 or train_size < nodes or batch_size < nodes:
        raise ValueError(
            f"need nodes >= 1, train_size >= nodes and batch >= nodes "
            f"(got nodes={nodes}, train_size={train_size}, batch={batch_size})"
        )
    per_node = train_size // nodes
    per_batch = batch_size // nodes
    return math.ceil(per_node / per_batch)


def mean_out_peers(topology: str, nodes: int, rows: int | None = None) -> float:
    """Messages a node sends per gossip round, averaged over nodes (as the trainer counts)."""
    from lpdt.decentral.topology import out_peers

    peers = out_peers(topology, nodes, rows)
    return sum(len(p) for p in peers) / nodes


@dataclass(frozen=True)
class CommVolume:
    topology: str
    nodes: int
    compression: str
    ratio: float
    epochs: int
    iterations_per_epoch: int
    iterations: int
    messages_counted: int  # iterations, or iterations - 1 with off_by_one
    out_peers: float
    params: int  # gossiped entries P
    kept: int  # entries sent per message (P when dense)
    bytes_per_message: int
    bytes_per_node: float
    gb_per_node: float
    gb_per_node_8bit_analytic: float

    def to_dict(self) -> dict:
        return asdict(self)


def comm_volume(
    numels: list[int],
    *,
    topology: str,
    nodes: int,
    compression: str,
    ratio: float,
    epochs: int,
    train_size: int,
    batch_size: int,
    rows: int | None = None,
    off_by_one: bool = False,
) -> CommVolume:
    """Bytes one node sends during training (see the module docstring for the formula)."""
    if compression not in SPARSIFIERS:
        raise ValueError(f"unknown compression {compression!r}; choose one of {SPARSIFIERS}")
    if not 0.0 <= ratio < 1.0:
        raise ValueError(f"compression ratio must be in [0, 1), got {ratio}")
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs}")
    ipe = iterations_per_epoch(train_size, nodes, batch_size)
    iters = epochs * ipe
    counted = iters - 1 if off_by_one else iters
    peers = mean_out_peers(topology, nodes, rows)
    msg = message_bytes(numels, compression, ratio)
    total = counted * peers * msg
    return CommVolume(
        topology=topology,
        nodes=nodes,
        compression=compression,
        ratio=ratio,
        epochs=epochs,
        iterations_per_epoch=ipe,
        iterations=iters,
        messages_counted=counted,
        out_peers=peers,
        params=int(sum(numels)),
        kept=kept_total(numels, compression, ratio),
        bytes_per_message=msg,
        bytes_per_node=total,
        gb_per_node=total / 1e9,
        gb_per_node_8bit_analytic=total / 4e9,
    )
