"""Bytes of one gossip message on the distributed engine's wire: fp32 against 8-bit messages.

Measured, not assumed: for a model and a compression level, the message of an fp32 run (fp32
values: ``none`` dense, ``topk`` sparse, of the fp32 model) and of an 8-bit run (8-bit values:
``int8`` dense, ``topk_int8`` sparse, of the 8-bit model, whose gossiped tensors include its
activation ranges) are encoded from the model's own state by the engine's compressor and packed
by ``lpdt.decentral.peer.WireCodec`` into the buffer the distributed engine hands to the
transport. The buffer's length is what one message costs on the wire: the engine counts exactly
that per message sent (``PeerExchange.bytes_sent``), so a run's ``wire_bytes_per_node`` is it
times the messages sent, and the fp32 / 8-bit ratio of two otherwise equal runs is the ratio of
their buffers (tests/cost/test_wire.py checks it on real two-process runs).

What the paper's "8-bit training reduces communication about 4x" implies for each format: dense
messages carry 4-byte values that become 1-byte values, so about 4x (less a few bytes of
per-tensor ranges); top-k messages carry each kept value *with its index* (``b`` = 2 bytes for
uint16 indices, 4 for int32), so 8-bit values shrink a message ``(4 + b) / (1 + b)``x: 2x with
uint16 indices, 1.6x with int32, not 4x. ``implied_ratio`` is that number for each row.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
from torch import nn

from lpdt.decentral.algorithms import Message
from lpdt.decentral.catalog import COMPRESSORS
from lpdt.decentral.compression import SparseCompressor, make_compressor
from lpdt.decentral.peer import WireCodec

FP32_BYTES, INT8_BYTES = 4, 1
FORMATS = {"dense": ("none", "int8"), "top-k": ("topk", "topk_int8")}  # fp32, 8-bit messages


def gossiped_state(model: nn.Module) -> tuple[list[tuple[int, int]], torch.Tensor]:
    """``(segments, x [1, P])``: the tensors a node gossips (trainable parameters, then every
    ``gossip_buffers`` entry, as ``lpdt.cost.comm.gossiped_numels`` counts them), flattened."""
    tensors = [p.detach() for p in model.parameters() if p.requires_grad]
    for mod in model.modules():
        tensors += [getattr(mod, name).detach() for name in getattr(mod, "gossip_buffers", ())]
    segments, at = [], 0
    for t in tensors:
        segments.append((at, t.numel()))
        at += t.numel()
    x = torch.cat([t.reshape(-1).float() for t in tensors])[None] if tensors else torch.zeros(1, 0)
    return segments, x


def message_nbytes(
    segments: Sequence[tuple[int, int]], x: torch.Tensor, compression: str, ratio: float = 0.0
) -> tuple[int, int, int]:
    """Encode ``x`` (``[1, P]``) with the engine's ``compression`` and pack it with the engine's
    ``WireCodec``: ``(bytes on the wire, entries sent, index bytes)`` (0 index bytes: dense)."""
    comp = make_compressor(segments, compression, ratio)
    codec = WireCodec(comp, x.shape[1])
    dense, payload = comp.encode(x)
    buf = torch.empty(codec.nbytes, dtype=torch.uint8)
    codec.pack(Message(dense, payload, accumulate=False), torch.ones(1), buf)
    if not COMPRESSORS.get(compression).sparse:
        return int(buf.numel()), int(x.shape[1]), 0
    if not isinstance(comp, SparseCompressor):  # its spec says it drops entries
        raise TypeError(
            f"compressor {compression!r} is sparse (its spec) but has no total_kept and"
            " index_dtype (lpdt.decentral.compression.SparseCompressor)"
        )
    return int(buf.numel()), int(comp.total_kept), int(comp.index_dtype.itemsize)


def implied_ratio(index_bytes: int) -> float:
    """fp32 / 8-bit message size that 1-byte values give: 4 dense, (4 + b) / (1 + b) sparse."""
    return (FP32_BYTES + index_bytes) / (INT8_BYTES + index_bytes)


def wire_row(fp32_model: nn.Module, int8_model: nn.Module, compression: float) -> dict:
    """One model at one compression level (fraction dropped; 0 = dense messages)."""
    fmt = "top-k" if compression > 0 else "dense"
    fp_name, lp_name = FORMATS[fmt]
    seg_fp, x_fp = gossiped_state(fp32_model)
    seg_lp, x_lp = gossiped_state(int8_model)
    b_fp, k_fp, _ = message_nbytes(seg_fp, x_fp, fp_name, compression)
    b_lp, k_lp, idx = message_nbytes(seg_lp, x_lp, lp_name, compression)
    ratio, implied = b_fp / b_lp, implied_ratio(idx)
    return {
        "format": fmt,
        "compression": compression,
        "fp32_codec": fp_name,
        "int8_codec": lp_name,
        "params_fp32": x_fp.shape[1],
        "params_int8": x_lp.shape[1],
        "tensors_int8": len(seg_lp),
        "sent_fp32": k_fp,
        "sent_int8": k_lp,
        "index_bytes": idx,
        "bytes_fp32": b_fp,
        "bytes_int8": b_lp,
        "ratio": ratio,
        "implied_ratio": implied,
        "ratio_over_implied": ratio / implied,
    }


def wire_rows(
    cells: Iterable[tuple[str, str | None, float]],
    input_shape: Sequence[int] = (3, 32, 32),
    num_classes: int = 10,
) -> list[dict]:
    """``wire_row`` for every (model, norm, compression) cell; each model built once per norm and
    precision (``lpdt.cost.model.build``, the conversion ``lpdt train`` applies)."""
    from lpdt.cost.model import build

    models: dict[tuple[str, str | None, str], nn.Module] = {}
    rows = []
    for name, norm, compression in cells:
        for prec in ("fp32", "int8"):
            if (name, norm, prec) not in models:
                torch.manual_seed(0)
                models[(name, norm, prec)] = build(name, norm, num_classes, input_shape, prec)
        row = wire_row(models[(name, norm, "fp32")], models[(name, norm, "int8")], compression)
        rows.append({"model": name, "norm": norm, **row})
    return rows
