"""Layer-wise compression of the node state and the reference's byte counter.

"Layer" means parameter tensor (reference §4.1): every weight, bias, norm gamma/beta/v and every
gossiped 8-bit range scalar is compressed on its own, keeping ``max(1, int(numel * (1 - ratio)))``
entries. ``ratio`` is the fraction *dropped* (0.99 keeps 1 %).

All functions work on a batch of nodes at once: ``x`` is ``[n, P]`` and the tensor boundaries are
given as ``segments`` (offset, numel) into P.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

COMPRESSORS = ("none", "topk", "randomk")


def kept_per_tensor(numel: int, ratio: float) -> int:
    """Entries kept from one tensor of ``numel`` entries (the reference's formula)."""
    return max(1, int(numel * (1.0 - ratio)))


def kept_total(numels: Sequence[int], compression: str, ratio: float) -> int:
    if compression == "none":
        return int(sum(numels))
    return sum(kept_per_tensor(m, ratio) for m in numels)


def message_bytes(numels: Sequence[int], compression: str, ratio: float) -> int:
    """Bytes of one gossip message, counted as the reference code counts them (§4.4).

    Dense: ``4 * (P + 1)`` (fp32 values plus the push-sum weight). Sparse: ``6 * K + 3``
    (4 bytes per value, effectively 2 per index, plus 3), with K the total kept entries.
    """
    if compression not in COMPRESSORS:
        raise ValueError(f"unknown compression {compression!r}; choose one of {COMPRESSORS}")
    if compression == "none":
        return 4 * (int(sum(numels)) + 1)
    return 6 * kept_total(numels, compression, ratio) + 3


class LayerwiseCompressor:
    """Row-wise (per node) layer-wise top-k / random-k over a flat ``[n, P]`` state.

    Tensors with the same number of entries are compressed together in one batched call, so the
    cost is a handful of kernel launches per distinct tensor size rather than one per tensor.
    """

    def __init__(
        self,
        segments: Sequence[tuple[int, int]],
        compression: str,
        ratio: float,
        generator: torch.Generator | None = None,
    ) -> None:
        if compression not in COMPRESSORS:
            raise ValueError(f"unknown compression {compression!r}; choose one of {COMPRESSORS}")
        self.compression = compression
        self.ratio = ratio
        self.generator = generator
        self.numels = [m for _, m in segments]
        # Group segments by size: each group is (numel, k, offsets tensor).
        groups: dict[int, list[int]] = {}
        for off, m in segments:
            groups.setdefault(m, []).append(off)
        self.groups = [
            (m, kept_per_tensor(m, ratio), torch.tensor(offs, dtype=torch.long))
            for m, offs in sorted(groups.items())
        ]
        self.total_kept = kept_total(self.numels, compression, ratio)
        self._index_cache: dict[tuple[int, str], torch.Tensor] = {}
        self._out: torch.Tensor | None = None  # reused output buffer (no per-call allocation)

    def message_bytes(self) -> int:
        return message_bytes(self.numels, self.compression, self.ratio)

    def _gather_index(self, m: int, offs: torch.Tensor, device: torch.device) -> torch.Tensor:
        """``[T, m]`` flat column indices of the T tensors of size m."""
        key = (m, str(device))
        idx = self._index_cache.get(key)
        if idx is None or idx.shape[0] != len(offs):
            idx = (offs[:, None] + torch.arange(m)[None, :]).to(device)
            self._index_cache[key] = idx
        return idx

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """Return C(x): a tensor like ``x`` holding only the kept entries (zeros elsewhere).

        Without compression this is ``x`` itself; otherwise a buffer this compressor owns and
        overwrites at its next call.
        """
        if self.compression == "none":
            return x
        n = x.shape[0]
        out = self._out
        if out is None or out.shape != x.shape or out.device != x.device or out.dtype != x.dtype:
            out = self._out = torch.empty_like(x)
        out.zero_()
        for m, k, offs in self.groups:
            cols = self._gather_index(m, offs, x.device)  # [T, m]
            block = x[:, cols]  # [n, T, m]
            if self.compression == "topk":
                if k == m:
                    out[:, cols] = block
                    continue
                sel = block.abs().topk(k, dim=-1, sorted=False).indices  # [n, T, k], int64: exact
            else:  # randomk: k distinct random entries per (node, tensor)
                scores = torch.rand(block.shape, generator=self.generator, device="cpu").to(
                    x.device
                )
                sel = scores.topk(k, dim=-1, sorted=False).indices
            flat_cols = cols.unsqueeze(0).expand(n, -1, -1).gather(-1, sel)  # [n, T, k]
            vals = block.gather(-1, sel)
            out.scatter_(1, flat_cols.reshape(n, -1), vals.reshape(n, -1))
        return out
