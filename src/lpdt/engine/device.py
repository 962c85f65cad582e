"""The torch device a run asks for (``RunConfig.device``), checked against the machine; and
``print_line``, where a run's progress lines go by default (the engine's every module can
import this one: it is the lowest)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TextIO

import torch

# Where an engine module writes its lines: print_line, or a test's list.append.
Log = Callable[[str], None]


def print_line(msg: str, stream: TextIO | None = None) -> None:
    """A line on stdout (or ``stream``) in one write, flushed at once: a worker's or a job's log
    is read live, and the ranks of a distributed run share the launcher's stdout and stderr.
    ``print`` writes the text and its newline apart, so that under ``PYTHONUNBUFFERED`` two
    ranks' lines ran together ("...by peer)lpdt rank 3: stopped: ..."); one write of a line
    (under ``PIPE_BUF``, 4 kB) to a pipe is never split by another process's."""
    out = sys.stdout if stream is None else stream
    out.write(msg + "\n")
    out.flush()


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
