"""An lpdt plugin (docs/extending.md, *A plugin*): a compressor and an algorithm defined outside
the package, registered when this module is imported. ``tests/test_extending.py`` copies it into
a folder of its own and names it to ``lpdt`` (the config key ``plugins``, ``$LPDT_PLUGINS`` or
an entry point), so every process of a run imports it, as a newcomer's plugin would be.

Each ``encode`` adds one to a count file beside this module (``counts/<kind>.<pid>``), so a test
can see that the plugin's code ran, and in which processes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from lpdt.decentral.algorithms import Exchange, Gossip, Message
from lpdt.decentral.catalog import ALGORITHMS, COMPRESSORS, AlgorithmSpec, CompressorSpec
from lpdt.decentral.compression import Compressor, Generators, Segments, WireFields

COUNTS = Path(__file__).resolve().parent / "counts"


def count(kind: str) -> None:
    """One more call of ``kind`` in this process (a file per process: no two writers)."""
    COUNTS.mkdir(exist_ok=True)
    path = COUNTS / f"{kind}.{os.getpid()}"
    path.write_text(str(int(path.read_text()) + 1 if path.exists() else 1))


class HalfPrecision(Compressor):
    """Every value sent as a 16-bit float (dense). It subclasses the ``Compressor`` Protocol, so
    mypy checks its members against the contract and it inherits ``__call__`` and
    ``message_bytes`` (its wire size: the fp32 push-sum weight, then P 16-bit values)."""

    compression = "fp16"

    def __init__(
        self, segments: Segments, ratio: float, levels: int, generator: Generators
    ) -> None:
        self.p_total = sum(m for _, m in segments)

    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, Any]:
        count("encode")
        dense = x.to(torch.float16).to(x.dtype)
        return dense, None

    def wire_fields(self) -> WireFields:
        return [(torch.float16, self.p_total)]

    def wire_pack(self, dense: torch.Tensor, payload: Any, out: list[torch.Tensor]) -> None:
        out[0].copy_(dense[0])

    def wire_unpack(self, fields: list[torch.Tensor], copy: torch.Tensor, accumulate: bool) -> None:
        values = fields[0].to(copy.device, torch.float32)
        if accumulate:
            copy.add_(values)
        else:
            copy.copy_(values)


class HalfStep(Gossip):
    """Y = C = comp(Z + E / 2), E = Z + E / 2 - C: Deep-Squeeze's shape with the error fed back
    at half weight (one model-sized buffer)."""

    def __init__(
        self, exchange: Exchange, compressor: Compressor, eta: float, z0: torch.Tensor
    ) -> None:
        super().__init__(exchange, compressor, eta, z0)
        self.error = torch.zeros_like(z0)

    def encode(self, z: torch.Tensor) -> tuple[torch.Tensor, Message]:
        count("halfstep")
        v = torch.add(z, self.error, alpha=0.5, out=self.scratch)
        c, payload = self.compress.encode(v)
        torch.sub(v, c, out=self.error)
        return c, Message(c, payload, accumulate=False)

    def buffers(self) -> dict[str, torch.Tensor]:
        return {"error": self.error}


# The report's coordinate ("half" + the percentage dropped) differs from the name "fp16", so a
# process that read the spec ("half0") is told from one that did not (the name).
COMPRESSORS.add(
    "fp16",
    CompressorSpec(
        HalfPrecision, label="16-bit", sparse=False, token="dense-msg16", coordinate="half{pct}"
    ),
)
ALGORITHMS.add(
    "halfstep",
    AlgorithmSpec(HalfStep, label="Half-Step", short="HS", title="Half-Step SGD", state_buffers=1),
)
