"""GPU accounting of training jobs: the resource `gpu` of rule train (docs/workflow.md, "GPUs").

Read without importing torch, so that building the DAG stays fast: the GPUs a machine shows are
those ``CUDA_VISIBLE_DEVICES`` lists when it is set, else the NVIDIA driver's entries.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

NVIDIA_GPUS = Path("/proc/driver/nvidia/gpus")  # one entry per GPU the driver sees


def visible_gpus(env: Mapping[str, str] = os.environ, driver: Path = NVIDIA_GPUS) -> int:
    """How many GPUs a training job started here could use (0 without one)."""
    listed = env.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return len([d for d in listed.split(",") if d.strip() not in ("", "-1")])
    return len(list(driver.iterdir())) if driver.is_dir() else 0


def job_gpus(setting: int | str, device: str, gpus: int, processes: int = 1) -> int:
    """The `gpu` resource of one training job: ``setting`` (config train_gpus) when it is a
    number; with "auto", 0 if the machine has no GPU or the run may not use it (device cpu),
    else one per process the job starts (``processes``: 1 for the simulator, ``topology.nodes``
    for the distributed engine), at most the machine's GPUs (fewer than the processes: they
    share them, over gloo; docs/engine.md)."""
    if setting != "auto":
        return int(setting)
    return min(max(1, processes), gpus) if gpus > 0 and device != "cpu" else 0
