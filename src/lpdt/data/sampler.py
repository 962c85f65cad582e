"""Per-node mini-batch sampling over a node's partition (reshuffled every pass, last batch short).

This mirrors the reference's per-node ``DataLoader(partition, batch_size=256 // n, shuffle=True)``
without ``drop_last``. The sampler is an endless stream: a node whose partition is exhausted
before the epoch ends (unequal partitions, e.g. Dirichlet) starts its next pass. Its full state
is a few tensors, so runs can be checkpointed and resumed bit-for-bit.
"""

from __future__ import annotations

import numpy as np
import torch


class NodeSampler:
    def __init__(self, indices: np.ndarray, batch_size: int, seed: int) -> None:
        if len(indices) == 0:
            raise ValueError("a node received no training samples; use fewer nodes or less skew")
        self.indices = torch.as_tensor(np.asarray(indices), dtype=torch.long)
        self.batch_size = batch_size
        self.generator = torch.Generator().manual_seed(seed)
        self.order = self.indices[torch.randperm(len(self.indices), generator=self.generator)]
        self.pos = 0

    @property
    def batches_per_pass(self) -> int:
        return -(-len(self.indices) // self.batch_size)

    def next(self) -> torch.Tensor:
        if self.pos >= len(self.order):
            self.order = self.indices[torch.randperm(len(self.indices), generator=self.generator)]
            self.pos = 0
        idx = self.order[self.pos : self.pos + self.batch_size]
        self.pos += self.batch_size
        return idx

    def state_dict(self) -> dict:
        return {"rng": self.generator.get_state(), "order": self.order, "pos": self.pos}

    def load_state_dict(self, d: dict) -> None:
        self.generator.set_state(d["rng"])
        self.order = d["order"]
        self.pos = d["pos"]
