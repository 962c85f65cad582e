"""The quantizing compressors: QSGD (the reference's) and 8-bit messages."""

import pytest
import torch

from lpdt.decentral.algorithms import Message
from lpdt.decentral.compression import QuantizingCompressor, make_compressor
from lpdt.decentral.peer import WireCodec

SEGS = [(0, 50), (50, 200), (250, 1), (251, 30)]
P = 281


def test_int8_codes_are_within_half_a_step_of_the_values():
    x = torch.randn(3, P) * torch.tensor([1.0, 10.0, 0.1])[:, None]
    q = QuantizingCompressor(SEGS, "int8")
    dense, (stats, codes) = q.encode(x)
    assert codes.dtype == torch.uint8 and stats.shape == (3, 4, 2)
    for off, m in SEGS:
        block, got = x[:, off : off + m], dense[:, off : off + m]
        step = (block.amax(1) - block.amin(1)) / 255
        assert ((got - block).abs() <= step[:, None] / 2 * 1.001 + 1e-7).all()
        # the extremes are exact (codes 0 and 255)
        assert torch.allclose(got.amin(1), block.amin(1)) and torch.allclose(
            got.amax(1), block.amax(1)
        )
    assert q.message_bytes() == 4 + 8 * 4 + P


def test_qsgd_is_unbiased_and_keeps_signs():
    torch.manual_seed(0)
    x = torch.randn(1, P)
    q = QuantizingCompressor(SEGS, "qsgd", levels=2, generator=[torch.Generator().manual_seed(3)])
    mean = torch.stack([q(x) for _ in range(4000)]).mean(0)
    # steps are up to ||x|| / 3 = 4.7 (the 200-entry tensor): a biased rounding errs by up to
    # half of that; the mean of 4000 unbiased draws is within 5 sigma = 5 * 4.7 / 2 / 63 = 0.19
    assert torch.allclose(mean, x, atol=0.2)
    one = q(x)
    assert ((one == 0) | (one.sign() == x.sign())).all()
    assert q.code_dtype == torch.int8 and q.message_bytes() == 4 + 4 * 4 + P
    assert QuantizingCompressor(SEGS, "qsgd", levels=8).code_dtype == torch.int16


@pytest.mark.parametrize("name", ["int8", "qsgd"])
@pytest.mark.parametrize("accumulate", [False, True])
def test_quantized_message_decodes_bit_for_bit_on_the_receiver(name, accumulate):
    comp = make_compressor(SEGS, name, levels=4, generator=[torch.Generator().manual_seed(1)])
    x = torch.randn(1, P)
    dense, payload = comp.encode(x)
    codec = WireCodec(comp, P)
    assert codec.nbytes == comp.message_bytes()  # counted = measured for quantizers
    buf = torch.empty(codec.nbytes, dtype=torch.uint8)
    codec.pack(Message(dense, payload, accumulate), torch.tensor([2.0]), buf)
    copy0 = torch.randn(P)
    copy = copy0.clone()
    assert float(codec.unpack(buf, copy, accumulate)) == 2.0
    assert torch.equal(copy, copy0 + dense[0] if accumulate else dense[0])


def test_constant_tensor_is_sent_exactly():
    x = torch.full((1, P), 0.25)
    assert torch.equal(QuantizingCompressor(SEGS, "int8")(x), x)
    assert torch.equal(QuantizingCompressor(SEGS, "qsgd")(torch.zeros(1, P)), torch.zeros(1, P))
