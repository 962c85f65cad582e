"""The checkpoint a training process saves after each epoch (``checkpoint.pt``; in the distributed
engine ``checkpoint.rank<R>.pt``, and the epoch before as ``.prev.pt``): everything ``--resume``
needs to continue the run bit for bit.

On disk it is a plain dict of tensors, state dicts and JSON-like values (``to_dict``), written
with ``torch.save``; ``from_dict`` reads it back and names a missing key in one line. Older
checkpoints (saved before this type existed) are the same dict and load the same way.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import torch

from lpdt.errors import LpdtError
from lpdt.record import HistoryRow
from lpdt.typed import Reader


class CheckpointError(LpdtError, ValueError):
    """A checkpoint file that is not a checkpoint of this version (a missing key)."""


@dataclass
class Checkpoint:
    """One process's state after epoch ``epoch`` (counted from 1: the epochs done)."""

    epoch: int
    x: torch.Tensor  # push-sum numerators z, one row per node held ([nodes, params])
    w: torch.Tensor  # push-sum weights, one per node held
    local_buffers: list[dict[str, torch.Tensor]]  # per node: buffers that are not gossiped
    opt: dict[str, Any]  # the optimizer's state dict
    algo: dict[str, Any]  # the gossip algorithm's state (e.g. CHOCO's x_hat)
    samplers: list[dict[str, Any]]  # per node: the data order's state
    streams: dict[str, Any]  # the per-node random streams (compression, 8-bit noise)
    torch_rng: torch.Tensor  # the process's CPU generator
    cuda_rng: torch.Tensor | None  # the device's generator (None on the CPU)
    counters: dict[str, float]  # bytes_train, train_s, samples, iterations so far
    history: list[HistoryRow]  # the rows of the epochs done
    nodes: list[int] | None = None  # the node ids this process holds (None: not recorded)
    run_config: dict[str, Any] = field(default_factory=dict)  # RunConfig.to_dict() of the run
    wall_s: float | None = None  # the run's wall time at the save (across resumes)
    provenance: dict[str, Any] | None = None  # of the session that started the run

    def to_dict(self) -> dict[str, Any]:
        """The dict ``torch.save`` writes (history rows as their JSON dicts). One level only, not
        ``lpdt.typed.to_json``: tensors and state dicts are saved as they are (``to_json`` would
        turn the tuples of an optimizer's state, e.g. Adam's ``betas``, into lists)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["history"] = [row.to_dict() for row in self.history]
        return out

    @classmethod
    def from_dict(cls, data: Any, source: str = "checkpoint") -> Checkpoint:
        """The checkpoint in ``data`` (what ``torch.load`` returned); ``CheckpointError`` names
        the first missing key."""
        reader = Reader(
            error=CheckpointError,
            source=source,
            strict=False,  # a key this version does not know is left alone
            not_object="not a checkpoint (a {kind})",
            missing="no {key!r}; not a checkpoint of this version",
            coerce=_as_saved,
        )
        ck = reader.build(cls, data)
        ck.history = [
            row if isinstance(row, HistoryRow) else HistoryRow.from_dict(row, source)
            for row in ck.history
        ]
        return ck


def _as_saved(value: Any, tp: Any, where: str, field: Any) -> Any:
    """A checkpoint's values are taken as ``torch.load`` returned them (tensors, state dicts);
    only the history rows are read (``Checkpoint.from_dict``)."""
    return value
