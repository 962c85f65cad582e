"""``lpdt.transfer.to_device``: the same values as ``Tensor.to``, as a queued copy from the host
(its GPU side, the copy that does not wait, is tested in tests/test_cuda.py)."""

from __future__ import annotations

import torch

from lpdt.engine.opcount import TransferCounter
from lpdt.transfer import to_device


def test_on_the_cpu_the_tensor_itself_as_a_queued_copy():
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    with TransferCounter() as counted:
        out = to_device(t, "cpu")
        out2 = to_device(t, torch.device("cpu"))
    assert out is t and out2 is t
    assert counted.total == 0  # non_blocking from the host: nothing that would wait
