import pytest
import torch

from lpdt.decentral.compression import LayerwiseCompressor, kept_per_tensor, message_bytes


def segments(sizes):
    out, off = [], 0
    for m in sizes:
        out.append((off, m))
        off += m
    return out, off


@pytest.mark.parametrize("ratio", [0.5, 0.9, 0.99])
def test_topk_keeps_exact_count_per_tensor_and_largest_entries(ratio):
    sizes = [1, 7, 300, 300, 1000, 5]
    segs, p = segments(sizes)
    x = torch.randn(4, p)
    c = LayerwiseCompressor(segs, "topk", ratio)(x)
    for off, m in segs:
        block, kept = x[:, off : off + m], c[:, off : off + m]
        k = kept_per_tensor(m, ratio)
        assert ((kept != 0).sum(1) == k).all()
        # kept values are the signed originals and the largest in magnitude
        mask = kept != 0
        assert torch.equal(kept[mask], block[mask])
        kth = block.abs().topk(k, dim=1).values[:, -1:]
        assert (block.abs()[mask.logical_not()].view(4, -1) <= kth).all()


def test_randomk_count_and_none_identity():
    segs, p = segments([10, 100])
    x = torch.randn(3, p) + 5  # no zeros
    r = LayerwiseCompressor(segs, "randomk", 0.9, torch.Generator().manual_seed(0))(x)
    # int(100 * (1 - 0.9)) == 9: the reference's float truncation
    assert ((r[:, :10] != 0).sum(1) == 1).all() and ((r[:, 10:] != 0).sum(1) == 9).all()
    assert torch.equal(LayerwiseCompressor(segs, "none", 0.0)(x), x)


def test_topk_indices_exact_beyond_2_pow_24():
    # a single tensor larger than 2^24 entries: the kept index must be exact (int64)
    m = 2**24 + 9
    x = torch.zeros(1, m)
    x[0, m - 2] = 3.0  # not representable as an fp32 index (2^24 + 7)
    c = LayerwiseCompressor([(0, m)], "topk", 1 - 1 / m)(x)
    assert c[0, m - 2] == 3.0 and (c != 0).sum() == 1


def test_reference_byte_counts():
    # ResNet-20 EvoNorm: P = 273,258 -> 4 (P + 1) bytes per dense message (reference §4.4)
    assert message_bytes([273_258], "none", 0.0) == 4 * 273_259
    assert message_bytes([1000, 10], "topk", 0.99) == 6 * (10 + 1) + 3
    with pytest.raises(ValueError):
        message_bytes([1], "qsgd", 0.5)
