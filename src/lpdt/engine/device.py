"""The torch device a run asks for (``RunConfig.device``), checked against the machine; and
``print_line``, where a run's progress lines go by default (the engine's every module can
import this one: it is the lowest)."""

from __future__ import annotations

from collections.abc import Callable

import torch

# Where an engine module writes its lines: print_line, or a test's list.append.
Log = Callable[[str], None]


def print_line(msg: str) -> None:
    """A progress line on stdout, flushed at once (a worker's or a job's log is read live)."""
    print(msg, flush=True)


def resolve_device(name: str) -> torch.device:
    """``auto`` (CUDA when there is one), ``cpu``, ``cuda`` or ``cuda:N``."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError(f"device: {name} was requested but CUDA is not available")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise RuntimeError(
                f"device: {name} was requested but there are {torch.cuda.device_count()} GPUs"
            )
    return device
