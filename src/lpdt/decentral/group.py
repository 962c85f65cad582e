"""Which nodes a process holds, and how it combines values with the processes holding the others.

The trainer (``lpdt.engine.run.Run``) is written once for "the nodes this process holds" (its rows):

- ``LocalGroup`` (``engine: simulated``): one process holds all n nodes; an exchange is the
  in-process ``Mixer`` and every reduction is a plain reduction over the rows.
- ``lpdt.decentral.peer.TorchGroup`` (``engine: distributed``): process r holds node r only;
  gossip goes point to point along the graph's edges (``PeerExchange``) and the few run-level
  reductions (mean loss, evaluation, counters) are ``torch.distributed`` collectives of small
  tensors, except the average model's evaluation, which reduces the de-biased models onto every
  process (an all-reduce of one model, every ``train.eval_every`` epochs; never part of gossip).
"""

from __future__ import annotations

from typing import Protocol

import torch

from lpdt.decentral.algorithms import Exchange, Mixer
from lpdt.decentral.compression import Compressor
from lpdt.record import Engine


class NodeGroup(Protocol):
    engine: Engine  # "simulated" | "distributed" (recorded in metrics.json)
    nodes: int  # n: all nodes of the run
    ids: list[int]  # the nodes this process holds, in row order
    writer: bool  # this process writes the run directory's files and logs
    checkpoint_name: str  # this process's checkpoint file in the run directory

    def exchange(
        self,
        w_matrix: torch.Tensor,
        compressor: Compressor,
        p_total: int,
        device: torch.device,
    ) -> Exchange:
        """The gossip transport for the held rows."""
        ...

    def mean(self, rows: torch.Tensor) -> torch.Tensor:
        """The mean over all n nodes of per-node values, given the held nodes' ``rows``
        (``[m, ...]`` -> ``[...]``), on every process."""
        ...

    def gather(self, rows: torch.Tensor) -> torch.Tensor:
        """All n nodes' values in node order (``[m]`` -> ``[n]``), on every process."""
        ...

    def total(self, value: float) -> float:
        """The sum over all processes of a per-process number (e.g. images processed)."""
        ...

    def wire_bytes(self) -> float | None:
        """Bytes this process's nodes have handed to the transport, per node (mean over all
        nodes); None when nothing goes over a wire (the simulator)."""
        ...

    def barrier(self) -> None: ...


class LocalGroup:
    """All n nodes in this process (the simulator)."""

    engine: Engine = "simulated"
    writer = True
    checkpoint_name = "checkpoint.pt"

    def __init__(self, nodes: int) -> None:
        self.nodes = nodes
        self.ids = list(range(nodes))

    def exchange(
        self, w_matrix: torch.Tensor, compressor: Compressor, p_total: int, device: torch.device
    ) -> Exchange:
        return Mixer(w_matrix, device)

    def mean(self, rows: torch.Tensor) -> torch.Tensor:
        return rows.mean(0)

    def gather(self, rows: torch.Tensor) -> torch.Tensor:
        return rows

    def total(self, value: float) -> float:
        return value

    def wire_bytes(self) -> float | None:
        return None

    def barrier(self) -> None:
        pass
