"""Each node's own random streams, so that node i draws the same numbers in every engine.

A node draws random numbers for its data augmentation, for random-k's choices and, inside its
forward passes, from torch's global generator (8-bit stochastic rounding, dropout). If all nodes
shared one stream, node i's draws would depend on how many numbers nodes 0..i-1 drew before it,
which a process holding only node i cannot know. So every node owns three streams, seeded from
(run seed, node id, stream) alone:

- ``aug[k]``: a ``torch.Generator`` passed to the data pipeline,
- ``compress[k]``: a ``torch.Generator`` for random-k,
- the node's state of torch's global generator (CPU, and CUDA on a CUDA device), swapped in for
  the duration of ``with streams.node(k):`` around every forward / backward of that node.

The run itself keeps torch's global generator for run-level draws (e.g. evaluating the average
model), which are the same in both engines because nodes never touch it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import numpy as np
import torch

AUG, COMPRESS, GLOBAL = 0, 1, 2  # stream numbers


def stream_seed(*parts: int) -> int:
    """A 63-bit seed drawn from ``parts`` alone (a run's seed, a node, a stream, ...)."""
    return int(np.random.SeedSequence(list(parts)).generate_state(2, np.uint64)[0] >> 1)


def node_seed(seed: int, node: int, stream: int) -> int:
    """A 63-bit seed for ``stream`` of ``node`` in a run seeded with ``seed``."""
    return stream_seed(seed, node, stream)


class GlobalStreams:
    """Per-row states of torch's global generator (CPU, and CUDA on a CUDA device), row k
    seeded with ``seeds[k]``. ``with streams.node(k):`` runs the block in row k's state as its
    previous block left it, and gives the caller's states back afterwards: whatever the block
    draws, no other draw of the run changes, and a row's draws do not depend on how its blocks
    were cut (one block per node, or one per evaluation batch)."""

    def __init__(self, seeds: Sequence[int], device: torch.device) -> None:
        self.device = device
        self.cpu: list[torch.Tensor] = [torch.Generator().manual_seed(s).get_state() for s in seeds]
        self.cuda: list[torch.Tensor | None] = [
            torch.Generator(device).manual_seed(s).get_state() if device.type == "cuda" else None
            for s in seeds
        ]

    @contextlib.contextmanager
    def node(self, k: int) -> Iterator[None]:
        """Run the block with torch's global generator(s) in row k's state; restore after."""
        saved_cpu = torch.get_rng_state()
        saved_cuda = torch.cuda.get_rng_state(self.device) if self.device.type == "cuda" else None
        torch.set_rng_state(self.cpu[k])
        cuda_k = self.cuda[k]
        if saved_cuda is not None and cuda_k is not None:  # (both: the run is on a GPU)
            torch.cuda.set_rng_state(cuda_k, self.device)
        try:
            yield
        finally:
            self.cpu[k] = torch.get_rng_state()
            torch.set_rng_state(saved_cpu)
            if saved_cuda is not None:
                self.cuda[k] = torch.cuda.get_rng_state(self.device)
                torch.cuda.set_rng_state(saved_cuda, self.device)


class NodeStreams(GlobalStreams):
    """The random streams of the nodes ``ids`` that this process holds (row k is node ids[k])."""

    def __init__(self, seed: int, ids: Sequence[int], device: torch.device) -> None:
        super().__init__([node_seed(seed, i, GLOBAL) for i in ids], device)
        self.ids = list(ids)
        self.aug = [torch.Generator().manual_seed(node_seed(seed, i, AUG)) for i in self.ids]
        self.compress = [
            torch.Generator().manual_seed(node_seed(seed, i, COMPRESS)) for i in self.ids
        ]

    def state_dict(self) -> dict:
        return {
            "aug": [g.get_state() for g in self.aug],
            "compress": [g.get_state() for g in self.compress],
            "cpu": list(self.cpu),
            "cuda": list(self.cuda),
        }

    def load_state_dict(self, d: dict) -> None:
        for g, s in zip(self.aug, d["aug"], strict=True):
            g.set_state(s)
        for g, s in zip(self.compress, d["compress"], strict=True):
            g.set_state(s)
        self.cpu = list(d["cpu"])
        if self.device.type == "cuda" and all(s is not None for s in d["cuda"]):
            self.cuda = list(d["cuda"])
