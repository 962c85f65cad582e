"""``lpdt.engine.train``: the entry point of one run, whichever engine the config names.

Imports go one way: ``engine`` -> ``launch`` (the distributed engine's launcher) -> ``worker``
(one rank) -> ``train`` (one process's part of a run) -> ``rundir`` / ``device``; nothing
below imports anything above it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import lpdt.train
from lpdt.config import RunConfig
from lpdt.launch import train_distributed
from lpdt.record import RunRecord


def train(
    cfg: RunConfig,
    out_dir: str | Path,
    resume: bool = False,
    force: bool = False,
    log: Callable[[str], None] | None = None,
) -> RunRecord:
    """Run (or resume, or skip if complete) ``cfg`` in ``out_dir``; returns the run's record
    (``lpdt.record.RunRecord``, whose ``to_dict()`` is its ``metrics.json``; a run complete
    already: the record read from that file). ``engine: simulated`` runs in this process
    (``lpdt.train.train``), ``engine: distributed`` with one process per node
    (``lpdt.launch.train_distributed``). ``log``: where progress lines go (default: stdout)."""
    log = log or _print
    if cfg.engine == "distributed":
        return train_distributed(cfg, out_dir, resume=resume, force=force, log=log)
    return lpdt.train.train(cfg, out_dir, resume=resume, force=force, log=log)


def _print(msg: str) -> None:
    print(msg, flush=True)
