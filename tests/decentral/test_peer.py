"""The wire format of the distributed engine (single process: no transport needed)."""

import pytest
import torch

from lpdt.decentral.algorithms import Message
from lpdt.decentral.compression import (
    LayerwiseCompressor,
    SparseInt8Compressor,
    make_compressor,
    message_bytes,
)
from lpdt.decentral.peer import WireCodec

SEGS = [(0, 12), (12, 300), (312, 300), (612, 5)]
P = 617


def roundtrip(comp, accumulate, copy0):
    x = torch.randn(1, P)
    dense, kept = comp.encode(x)
    codec = WireCodec(comp, P)
    buf = torch.empty(codec.nbytes, dtype=torch.uint8)
    codec.pack(Message(dense, kept, accumulate), torch.tensor([0.75]), buf)
    copy = copy0.clone()
    w = codec.unpack(buf, copy, accumulate)
    return dense, copy, w, codec


@pytest.mark.parametrize("accumulate", [False, True])
def test_dense_message_is_the_row_and_the_weight(accumulate):
    copy0 = torch.randn(P)
    dense, copy, w, codec = roundtrip(LayerwiseCompressor(SEGS, "none", 0.0), accumulate, copy0)
    assert codec.nbytes == 4 * (P + 1) == message_bytes([m for _, m in SEGS], "none", 0.0)
    assert torch.equal(copy, copy0 + dense[0] if accumulate else dense[0])
    assert float(w) == 0.75


@pytest.mark.parametrize("name", ["topk", "randomk"])
@pytest.mark.parametrize("accumulate", [False, True])
def test_sparse_message_decodes_to_the_compressed_row(name, accumulate):
    comp = LayerwiseCompressor(SEGS, name, 0.9, [torch.Generator().manual_seed(1)])
    copy0 = torch.randn(P)
    dense, copy, w, codec = roundtrip(comp, accumulate, copy0)
    k = comp.total_kept
    assert k == 1 + 29 + 29 + 1  # int(300 * (1 - 0.9)) == 29: the reference's truncation
    assert comp.index_dtype == torch.uint16 and codec.nbytes == 4 + 4 * k + 2 * k
    assert torch.equal(copy, copy0 + dense[0] if accumulate else dense[0])
    assert int((dense != 0).sum()) == k and float(w) == 0.75


def test_large_tensors_send_int32_indices():
    comp = LayerwiseCompressor([(0, 70_000)], "topk", 0.99)
    codec = WireCodec(comp, 70_000)
    assert comp.index_dtype == torch.int32 and codec.nbytes == 4 + 8 * 700
    x = torch.randn(1, 70_000)
    dense, kept = comp.encode(x)
    buf = torch.empty(codec.nbytes, dtype=torch.uint8)
    codec.pack(Message(dense, kept, False), torch.ones(1), buf)
    copy = torch.zeros(70_000)
    codec.unpack(buf, copy, False)
    assert torch.equal(copy, dense[0])


@pytest.mark.parametrize("accumulate", [False, True])
def test_topk_int8_message_decodes_to_the_compressed_row(accumulate):
    comp = SparseInt8Compressor(SEGS, 0.9)
    copy0 = torch.randn(P)
    dense, copy, w, codec = roundtrip(comp, accumulate, copy0)
    k, t = comp.total_kept, len(SEGS)
    # weight, [min, max] per tensor, one uint8 code per kept entry, then uint16 indices aligned
    codes_end = 4 + 8 * t + k
    assert codec.nbytes == codes_end + codes_end % 2 + 2 * k
    assert comp.message_bytes() == 4 + 8 * t + 3 * k
    assert torch.equal(copy, copy0 + dense[0] if accumulate else dense[0])
    assert int((dense != 0).sum()) <= k and float(w) == 0.75


def test_topk_int8_keeps_the_topk_entries_within_one_step():
    """The same entries as top-k, each value within half a step of its tensor's kept range."""
    x = torch.randn(2, P)
    top, kept = LayerwiseCompressor(SEGS, "topk", 0.9).encode(x)
    top = top.clone()
    q, (cols, stats, codes) = make_compressor(SEGS, "topk_int8", 0.9).encode(x)
    assert torch.equal(cols, kept[0]) and codes.dtype == torch.uint8
    for off, m in SEGS:
        t, qt = top[:, off : off + m], q[:, off : off + m]
        for row in range(2):
            v = t[row][t[row] != 0]
            half_step = float(v.max() - v.min()) / 255 / 2
            assert float((qt[row] - t[row]).abs().max()) <= half_step + 1e-6
