"""Host-to-device copies that do not make the host wait for the device.

``tensor.to("cuda")`` of a tensor in ordinary (pageable) host memory copies it and then waits
until the GPU has finished everything queued before the copy: in a training loop that copies
each node's batch, the host cannot prepare the next batch or launch the next kernels while the
GPU works, and host time and GPU time add up instead of overlapping. ``to_device`` stages the
tensor in page-locked memory and copies it with ``non_blocking=True``: the copy is queued like a
kernel, in order on the current stream, so the kernels after it see the data, and PyTorch's
caching host allocator keeps the staging block until the copy has finished.

Every copy the engine makes in a training iteration goes through here (the batches, random-k's
scores); ``lpdt.engine.opcount.TransferCounter`` counts the ones that do not, on any device, so
the tests pin them at zero without a GPU. On the CPU ``to_device`` returns the tensor itself.
"""

from __future__ import annotations

import torch


def to_device(t: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """``t`` on ``device``, copied without waiting for the device where ``t`` is on the host and
    ``device`` is a GPU (the same values as ``t.to(device)``). ``t`` is staged in a fresh pinned
    copy, so the caller may change it at once; a tensor already pinned is copied from itself and
    must stay unchanged until the copy has run."""
    device = torch.device(device)
    if t.device.type != "cpu":  # not a copy from the host: a device's own rules
        return t.to(device)
    if device.type == "cuda":
        t = t.pin_memory()
    return t.to(device, non_blocking=True)  # from the host: queued, the host goes on
