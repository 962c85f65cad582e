"""Layer-wise compression of the node state and the reference's byte counter.

"Layer" means parameter tensor (reference §4.1): every weight, bias, norm gamma/beta/v and every
gossiped 8-bit range scalar is compressed on its own, keeping ``max(1, int(numel * (1 - ratio)))``
entries. ``ratio`` is the fraction *dropped* (0.99 keeps 1 %).

Two families, both usable by both engines (``make_compressor``):

- sparsifiers (``LayerwiseCompressor``): ``none``, ``topk``, ``randomk``; and ``topk_int8``
  (``SparseInt8Compressor``): top-k whose kept values are sent as 8-bit codes (as ``int8`` below,
  on the ``[min, max]`` of each tensor's kept values) with their indices, the 8-bit message of a
  compressed run;
- quantizers (``QuantizingCompressor``), every value sent as a small integer code plus one or two
  fp32 numbers per tensor: ``qsgd`` (the reference's QSGD, ``QuantizationCompressor.get_qsgd``:
  ``sign(x) ||x|| floor(s |x| / ||x|| + xi) / s`` with ``s = 2^levels - 1`` and ``xi ~ U[0, 1)``,
  unbiased) and ``int8`` (8-bit messages: ``uint8`` codes of ``x`` rounded to nearest on 255
  steps of the tensor's ``[min, max]``, sent with that range).

Each compressor also defines its wire format (``wire_fields`` / ``wire_pack`` / ``wire_unpack``),
used by the distributed engine (``lpdt.decentral.peer.WireCodec``).

All functions work on a batch of nodes at once: ``x`` is ``[m, P]`` (all n nodes in the
simulator, one in a distributed process) and the tensor boundaries are
given as ``segments`` (offset, numel) into P.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import torch

from lpdt.decentral.catalog import COMPRESSORS
from lpdt.transfer import to_device

# LayerwiseCompressor's compressions (and the names the reference's byte counter knows)
SPARSIFIERS = ("none", "topk", "randomk")
QUANTIZERS = ("qsgd", "int8")
SPARSE_INT8 = "topk_int8"  # top-k with 8-bit values (SparseInt8Compressor)
INDEX_LIMIT_16 = 2**16  # tensors up to this many entries send uint16 indices, larger int32

WireFields = list[tuple[torch.dtype, int]]  # the fields of a message after the weight
Generators = torch.Generator | Sequence[torch.Generator] | None
Segments = Sequence[tuple[int, int]]  # (offset, size) of each tensor in the flat vector


@runtime_checkable
class Compressor(Protocol):
    """What the engines, the wire codec and the cost model use of a compressor: the contract a
    plugin's compressor is checked against (mypy), whether it subclasses this class (then it
    inherits ``__call__`` and ``message_bytes``) or only has these members. ``x`` is ``[m, P]``
    (m held nodes' rows of the flat state)."""

    @property
    def compression(self) -> str:
        """Its config name (``algorithm.compression.name``)."""
        ...

    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, Any]:
        """``(C(x) [m, P], payload)``: the dense result (maybe a buffer it reuses) and what
        ``wire_pack`` sends (None: the dense row itself)."""
        ...

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """``C(x)`` alone."""
        return self.encode(x)[0]

    def message_bytes(self) -> int:
        """Bytes of one message (what the record counts): by default its wire size, the fp32
        push-sum weight and the fields."""
        return 4 + sum(dtype.itemsize * count for dtype, count in self.wire_fields())

    def wire_fields(self) -> WireFields:
        """``[(dtype, count), ...]``: a message's fields after the fp32 push-sum weight."""
        ...

    def wire_pack(self, dense: torch.Tensor, payload: Any, out: list[torch.Tensor]) -> None:
        """Write row 0 of ``encode``'s result into the field views ``out``."""
        ...

    def wire_unpack(self, fields: list[torch.Tensor], copy: torch.Tensor, accumulate: bool) -> None:
        """Replace ``copy`` (``[P]``) by a received message, or add it (``accumulate``)."""
        ...


@runtime_checkable
class SparseCompressor(Compressor, Protocol):
    """A compressor that drops entries (its spec's ``sparse``): the wire measurement
    (``lpdt.cost.wire``) also reads how many entries it keeps and the type of their indices."""

    @property
    def total_kept(self) -> int:
        """Entries kept per row (over all tensors)."""
        ...

    @property
    def index_dtype(self) -> torch.dtype:
        """The type of the kept entries' indices on the wire."""
        ...


class CompressorFactory(Protocol):
    """What a compressor's spec names (``CompressorSpec.impl``): a class or a function, called
    as ``impl(segments, ratio=, levels=, generator=)``."""

    def __call__(
        self, segments: Segments, ratio: float, levels: int, generator: Generators
    ) -> Compressor: ...


def kept_per_tensor(numel: int, ratio: float) -> int:
    """Entries kept from one tensor of ``numel`` entries (the reference's formula)."""
    return max(1, int(numel * (1.0 - ratio)))


def kept_total(numels: Sequence[int], compression: str, ratio: float) -> int:
    if compression == "none":
        return int(sum(numels))
    return sum(kept_per_tensor(m, ratio) for m in numels)


def message_bytes(numels: Sequence[int], compression: str, ratio: float) -> int:
    """Bytes of one gossip message, counted as the reference code counts them (reference §4.4).

    Dense: ``4 * (P + 1)`` (fp32 values plus the push-sum weight). Sparse: ``6 * K + 3``
    (4 bytes per value, effectively 2 per index, plus 3), with K the total kept entries.
    """
    if compression not in SPARSIFIERS:
        raise ValueError(f"unknown compression {compression!r}; choose one of {SPARSIFIERS}")
    if compression == "none":
        return 4 * (int(sum(numels)) + 1)
    return 6 * kept_total(numels, compression, ratio) + 3


class OnDevice:
    """A tensor built on the host once (an index) and its copy on each device it is used on,
    copied the first time: a copy every iteration would make a GPU's host wait for the device
    each time (``lpdt.transfer``)."""

    def __init__(self, host: torch.Tensor) -> None:
        self.host = host
        self._copies: dict[str, torch.Tensor] = {}

    def on(self, device: torch.device) -> torch.Tensor:
        copy = self._copies.get(str(device))
        if copy is None:
            copy = self._copies[str(device)] = to_device(self.host, device)
        return copy


class LayerwiseCompressor:
    """Row-wise (per node) layer-wise top-k / random-k over a flat ``[m, P]`` state.

    Tensors with the same number of entries are compressed together in one batched call, so the
    cost is a handful of kernel launches per distinct tensor size rather than one per tensor.

    ``encode`` gives both forms of the result: the dense ``C(x)`` (zeros where nothing is kept)
    and the kept entries themselves, ``(positions [m, K], values [m, K])`` in a fixed order
    (tensor by tensor, grouped by tensor size), which is what a node puts on the wire
    (``lpdt.decentral.peer``). ``kept_base[k]`` is the offset of the tensor that kept entry k
    belongs to, so ``positions - kept_base`` are indices within each tensor.

    ``generator`` draws random-k's choices: one generator for all rows, or one per row (each node
    its own stream, so that a node draws the same choices in every engine).
    """

    def __init__(
        self,
        segments: Sequence[tuple[int, int]],
        compression: str,
        ratio: float,
        generator: torch.Generator | Sequence[torch.Generator] | None = None,
    ) -> None:
        if compression not in SPARSIFIERS:
            raise ValueError(f"unknown compression {compression!r}; choose one of {SPARSIFIERS}")
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
        self.kept_base = (
            torch.cat([offs.repeat_interleave(k) for _, k, offs in self.groups])
            if self.groups
            else torch.zeros(0, dtype=torch.long)
        )
        self.max_numel = max(self.numels, default=0)
        self._index_cache: dict[tuple[int, str], torch.Tensor] = {}
        self._out: torch.Tensor | None = None  # reused output buffer (no per-call allocation)

    def message_bytes(self) -> int:
        return message_bytes(self.numels, self.compression, self.ratio)

    def _gather_index(self, m: int, offs: torch.Tensor, device: torch.device) -> torch.Tensor:
        """``[T, m]`` flat column indices of the T tensors of size m."""
        key = (m, str(device))
        idx = self._index_cache.get(key)
        if idx is None or idx.shape[0] != len(offs):
            idx = to_device(offs[:, None] + torch.arange(m)[None, :], device)
            self._index_cache[key] = idx
        return idx

    def _scores(self, shape: torch.Size, device: torch.device) -> torch.Tensor:
        """Uniform scores ``[m, T, numel]`` for random-k: one draw per row from its generator."""
        gens = self.generator
        if isinstance(gens, torch.Generator) or gens is None:
            return to_device(torch.rand(shape, generator=gens, device="cpu"), device)
        if len(gens) != shape[0]:
            raise ValueError(f"random-k: {len(gens)} generators for {shape[0]} rows")
        return to_device(torch.stack([torch.rand(shape[1:], generator=g) for g in gens]), device)

    def select(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The kept entries of every row: ``(positions [m, K] int64, values [m, K])``."""
        n = x.shape[0]
        cols_out, vals_out = [], []
        for m, k, offs in self.groups:
            cols = self._gather_index(m, offs, x.device)  # [T, m]
            block = x[:, cols]  # [n, T, m]
            if self.compression != "randomk" and k == m:
                cols_out.append(cols.expand(n, -1, -1).reshape(n, -1))
                vals_out.append(block.reshape(n, -1))
                continue
            if self.compression != "randomk":  # topk, topk_int8
                sel = block.abs().topk(k, dim=-1, sorted=False).indices  # [n, T, k], int64: exact
            else:  # randomk: k distinct random entries per (node, tensor)
                sel = self._scores(block.shape, x.device).topk(k, dim=-1, sorted=False).indices
            cols_out.append(cols.unsqueeze(0).expand(n, -1, -1).gather(-1, sel).reshape(n, -1))
            vals_out.append(block.gather(-1, sel).reshape(n, -1))
        return torch.cat(cols_out, 1), torch.cat(vals_out, 1)

    def encode(
        self, x: torch.Tensor
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor] | None]:
        """``(C(x), kept)``: the dense result and, when compressing, the kept entries
        (``select``); without compression ``(x, None)``. The dense result is a buffer this
        compressor owns and overwrites at its next call."""
        if self.compression == "none":
            return x, None
        out = self._out
        if out is None or out.shape != x.shape or out.device != x.device or out.dtype != x.dtype:
            out = self._out = torch.empty_like(x)
        out.zero_()
        cols, vals = self.select(x)
        out.scatter_(1, cols, vals)
        return out, (cols, vals)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """Return C(x): a tensor like ``x`` holding only the kept entries (zeros elsewhere).

        Without compression this is ``x`` itself; otherwise a buffer this compressor owns and
        overwrites at its next call.
        """
        return self.encode(x)[0]

    # -- wire format: dense fp32 values, or fp32 values and their indices within their tensor --
    @property
    def index_dtype(self) -> torch.dtype:
        return torch.uint16 if self.max_numel <= INDEX_LIMIT_16 else torch.int32

    def wire_fields(self) -> WireFields:
        if self.compression == "none":
            return [(torch.float32, sum(self.numels))]
        return [(torch.float32, self.total_kept), (self.index_dtype, self.total_kept)]

    def wire_pack(self, dense: torch.Tensor, payload: Any, out: list[torch.Tensor]) -> None:
        """Write row 0 of a message (``encode``'s result) into the field views ``out``."""
        if payload is None:
            out[0].copy_(dense[0])
            return
        cols, vals = payload
        out[0].copy_(vals[0])
        out[1].copy_((cols[0].cpu() - self.kept_base).to(self.index_dtype))

    def wire_unpack(self, fields: list[torch.Tensor], copy: torch.Tensor, accumulate: bool) -> None:
        """Bring ``copy`` (``[P]``) up to date from a received message's fields."""
        vals = fields[0].to(copy.device)
        if self.compression == "none":
            if accumulate:
                copy.add_(vals)
            else:
                copy.copy_(vals)
            return
        cols = (fields[1].cpu().to(torch.int64) + self.kept_base).to(copy.device)
        if accumulate:
            copy.scatter_add_(0, cols, vals)
        else:
            copy.zero_().scatter_(0, cols, vals)


class QuantizingCompressor:
    """Per-tensor quantization of every row (``qsgd`` or ``int8``, see the module docstring).

    The payload of a message is ``(stats [m, T, k], codes [m, P])``: per tensor its norm
    (``qsgd``, k = 1) or its ``[min, max]`` (``int8``, k = 2), and one integer code per value;
    ``decode`` turns them into values, on the sender (for its own dense result) and on the
    receiver alike.
    """

    def __init__(
        self,
        segments: Sequence[tuple[int, int]],
        compression: str,
        levels: int = 8,
        generator: torch.Generator | Sequence[torch.Generator] | None = None,
    ) -> None:
        if compression not in QUANTIZERS:
            raise ValueError(f"unknown quantizer {compression!r}; choose one of {QUANTIZERS}")
        self.compression = compression
        self.numels = [m for _, m in segments]
        self.p_total = sum(self.numels)
        self.generator = generator
        seg = torch.empty(self.p_total, dtype=torch.long)
        for t, (off, m) in enumerate(segments):
            seg[off : off + m] = t
        self.seg = OnDevice(seg)  # [P]: the tensor of each position
        self.tensors = len(segments)
        if compression == "qsgd":
            if not 1 <= levels <= 8:
                raise ValueError(f"qsgd: levels (bits) must be in 1..8, got {levels}")
            self.s = 2**levels - 1
            self.code_dtype = torch.int8 if self.s <= 127 else torch.int16
            self.stats = 1
        else:
            self.s = 255
            self.code_dtype = torch.uint8
            self.stats = 2

    def message_bytes(self) -> int:
        """Exactly what goes on the wire: the weight, the per-tensor numbers and the codes."""
        return 4 + 4 * self.stats * self.tensors + self.code_dtype.itemsize * self.p_total

    def _per_tensor(self, x: torch.Tensor, reduce: str) -> torch.Tensor:
        """``[m, T]``: ``reduce`` ("amax" / "amin" / "sum") of every tensor of every row."""
        idx = self.seg.on(x.device).expand(x.shape[0], -1)
        init = {"amax": -math.inf, "amin": math.inf, "sum": 0.0}[reduce]
        out = torch.full((x.shape[0], self.tensors), init, dtype=x.dtype, device=x.device)
        return out.scatter_reduce_(1, idx, x, reduce)

    def _uniform(self, x: torch.Tensor) -> torch.Tensor:
        gens = self.generator
        if isinstance(gens, torch.Generator) or gens is None:
            return to_device(torch.rand(x.shape, generator=gens), x.device)
        return to_device(
            torch.stack([torch.rand(x.shape[1:], generator=g) for g in gens]), x.device
        )

    def decode(self, stats: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
        """Values ``[m, P]`` of the codes ``[m, P]`` with per-tensor ``stats [m, T, k]``."""
        seg = self.seg.on(codes.device)
        c = codes.to(torch.float32)
        if self.compression == "qsgd":
            return c.mul_(stats[:, :, 0][:, seg]).div_(self.s)
        lo, hi = stats[:, :, 0][:, seg], stats[:, :, 1][:, seg]
        return c.mul_((hi - lo) / self.s).add_(lo)

    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        seg = self.seg.on(x.device)
        if self.compression == "qsgd":
            norm = self._per_tensor(x * x, "sum").sqrt_()  # [m, T]
            full = norm[:, seg]
            level = x.abs() * self.s / torch.where(full > 0, full, 1.0) + self._uniform(x)
            codes = (level.floor_().clamp_(max=self.s) * x.sign()).to(self.code_dtype)
            stats = norm[:, :, None]
        else:
            lo, hi = self._per_tensor(x, "amin"), self._per_tensor(x, "amax")
            step = ((hi - lo) / self.s)[:, seg]
            q = (x - lo[:, seg]) / torch.where(step > 0, step, 1.0)
            codes = q.round_().clamp_(0, self.s).to(self.code_dtype)
            stats = torch.stack([lo, hi], dim=-1)
        return self.decode(stats, codes), (stats, codes)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.encode(x)[0]

    # -- wire format: per-tensor fp32 numbers, then the codes ----------------------------------
    def wire_fields(self) -> WireFields:
        return [(torch.float32, self.stats * self.tensors), (self.code_dtype, self.p_total)]

    def wire_pack(self, dense: torch.Tensor, payload: Any, out: list[torch.Tensor]) -> None:
        stats, codes = payload
        out[0].copy_(stats[0].reshape(-1))
        out[1].copy_(codes[0])

    def wire_unpack(self, fields: list[torch.Tensor], copy: torch.Tensor, accumulate: bool) -> None:
        stats = fields[0].to(copy.device).view(1, self.tensors, self.stats)
        values = self.decode(stats, fields[1].to(copy.device)[None])[0]
        if accumulate:
            copy.add_(values)
        else:
            copy.copy_(values)


class SparseInt8Compressor(LayerwiseCompressor):
    """Layer-wise top-k whose kept values travel as 8-bit codes (``topk_int8``).

    The kept entries are ``LayerwiseCompressor.select``'s; each tensor's kept values are rounded
    to nearest on 255 steps of their own ``[min, max]`` (the ``int8`` quantizer's rule applied to
    the kept values), and ``C(x)`` holds the decoded values, so sender and receivers agree. The
    payload is ``(positions [m, K], stats [m, T, 2], codes [m, K] uint8)``; on the wire: the
    per-tensor ``[min, max]`` (fp32), the codes, and the indices within each tensor (uint16 or
    int32, as for ``topk``). Per kept entry that is 1 + 2 (or 4) bytes against top-k's 4 + 2
    (or 4): 8-bit values shrink a sparse message about 2x (1.6x with int32 indices), not 4x.
    """

    def __init__(
        self,
        segments: Sequence[tuple[int, int]],
        ratio: float,
        generator: torch.Generator | Sequence[torch.Generator] | None = None,
    ) -> None:
        super().__init__(segments, "topk", ratio, generator)
        self.compression = SPARSE_INT8
        self.tensors = len(segments)
        # The tensor of every kept entry, in select()'s order (kept_base holds its offset).
        offsets = torch.tensor([off for off, _ in segments], dtype=torch.long)
        order = torch.argsort(offsets)
        self.kept_seg = OnDevice(order[torch.searchsorted(offsets[order], self.kept_base)])

    def message_bytes(self) -> int:
        """Exactly what goes on the wire (alignment padding aside): the weight, ``[min, max]``
        per tensor, one code and one index per kept entry."""
        return 4 + 8 * self.tensors + (1 + self.index_dtype.itemsize) * self.total_kept

    def _range(self, vals: torch.Tensor, reduce: str) -> torch.Tensor:
        idx = self.kept_seg.on(vals.device).expand(vals.shape[0], -1)
        init = math.inf if reduce == "amin" else -math.inf
        out = torch.full((vals.shape[0], self.tensors), init, dtype=vals.dtype, device=vals.device)
        return out.scatter_reduce_(1, idx, vals, reduce)

    def decode(self, stats: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
        """Kept values ``[m, K]`` of the codes with per-tensor ``stats [m, T, 2]``."""
        seg = self.kept_seg.on(codes.device)
        lo, hi = stats[:, :, 0][:, seg], stats[:, :, 1][:, seg]
        return codes.to(torch.float32).mul_((hi - lo) / 255).add_(lo)

    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, Any]:
        out = self._out
        if out is None or out.shape != x.shape or out.device != x.device or out.dtype != x.dtype:
            out = self._out = torch.empty_like(x)
        out.zero_()
        cols, vals = self.select(x)
        seg = self.kept_seg.on(x.device)
        lo, hi = self._range(vals, "amin"), self._range(vals, "amax")
        step = ((hi - lo) / 255)[:, seg]
        q = (vals - lo[:, seg]) / torch.where(step > 0, step, 1.0)
        codes = q.round_().clamp_(0, 255).to(torch.uint8)
        stats = torch.stack([lo, hi], dim=-1)
        out.scatter_(1, cols, self.decode(stats, codes))
        return out, (cols, stats, codes)

    def wire_fields(self) -> WireFields:
        return [
            (torch.float32, 2 * self.tensors),
            (torch.uint8, self.total_kept),
            (self.index_dtype, self.total_kept),
        ]

    def wire_pack(self, dense: torch.Tensor, payload: Any, out: list[torch.Tensor]) -> None:
        cols, stats, codes = payload
        out[0].copy_(stats[0].reshape(-1))
        out[1].copy_(codes[0])
        out[2].copy_((cols[0].cpu() - self.kept_base).to(self.index_dtype))

    def wire_unpack(self, fields: list[torch.Tensor], copy: torch.Tensor, accumulate: bool) -> None:
        stats = fields[0].to(copy.device).view(1, self.tensors, 2)
        vals = self.decode(stats, fields[1].to(copy.device)[None])[0]
        cols = (fields[2].cpu().to(torch.int64) + self.kept_base).to(copy.device)
        if accumulate:
            copy.scatter_add_(0, cols, vals)
        else:
            copy.zero_().scatter_(0, cols, vals)


def make_compressor(
    segments: Sequence[tuple[int, int]],
    compression: str,
    ratio: float = 0.0,
    levels: int = 8,
    generator: Generators = None,
) -> Compressor:
    """The compressor registered as ``compression`` (``lpdt.decentral.catalog.COMPRESSORS``)."""
    build: CompressorFactory = COMPRESSORS.get(compression).load()
    return build(segments, ratio=ratio, levels=levels, generator=generator)


# The built-ins' factories, as the catalog calls them: (segments, ratio, levels, generator).
def dense(segments: Segments, ratio: float, levels: int, generator: Generators) -> Compressor:
    return LayerwiseCompressor(segments, "none", ratio, generator)


def topk(segments: Segments, ratio: float, levels: int, generator: Generators) -> Compressor:
    return LayerwiseCompressor(segments, "topk", ratio, generator)


def randomk(segments: Segments, ratio: float, levels: int, generator: Generators) -> Compressor:
    return LayerwiseCompressor(segments, "randomk", ratio, generator)


def qsgd(segments: Segments, ratio: float, levels: int, generator: Generators) -> Compressor:
    return QuantizingCompressor(segments, "qsgd", levels, generator)


def int8(segments: Segments, ratio: float, levels: int, generator: Generators) -> Compressor:
    return QuantizingCompressor(segments, "int8", levels, generator)


def topk_int8(segments: Segments, ratio: float, levels: int, generator: Generators) -> Compressor:
    return SparseInt8Compressor(segments, ratio, generator)
