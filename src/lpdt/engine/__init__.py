"""The training engine: ``lpdt.engine.train`` runs one experiment, whichever engine its config
names.

Modules (imports go one way, top to bottom; nothing imports a module above it, and no module
imports ``lpdt.engine`` itself):

- ``launch``: the distributed engine's launcher (one worker process per node, the rendezvous,
  the run directory's checks before any worker starts);
- ``worker``: one rank of a distributed run (``python -m lpdt.engine.worker``);
- ``loop``: one process's part of a run: the per-run object ``Run`` and the epoch loop
  (``loop.train``; the simulated engine runs all n nodes in it);
- ``rundir``: the rules of a run directory (one ``lpdt train`` in it at a time, refuse another
  config's files, already complete, load a checkpoint), shared by both engines;
- ``checkpoint``: the typed checkpoint a process saves after each epoch;
- ``steps``: one node's training step and evaluation forward, eager or compiled;
- ``device``, ``sysmetrics``: the device a run uses (and ``print_line``, where progress lines
  go by default); CPU / memory samples of a run.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from lpdt.config import RunConfig
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
    (``lpdt.engine.loop.train``), ``engine: distributed`` with one process per node
    (``lpdt.engine.launch.train_distributed``). ``log``: where progress lines go (default:
    stdout)."""
    # Imported here, not at the top: ``python -m lpdt.engine.worker`` imports this package first,
    # and a worker module imported by the package before runpy runs it would load twice.
    from lpdt.engine import loop
    from lpdt.engine.device import print_line
    from lpdt.engine.launch import train_distributed
    from lpdt.engine.rundir import locked

    log = log or print_line
    if "WORLD_SIZE" in os.environ:  # started by torchrun
        # A rank of a distributed run takes no lock (rundir.locked): its other ranks, which
        # share the folder, would be refused.
        if cfg.engine == "distributed":
            return train_distributed(cfg, out_dir, resume=resume, force=force, log=log)
        from lpdt.engine.worker import env_rank

        env = env_rank()
        if env is not None and env[1] > 1:  # every process would train the run
            raise ValueError(
                f"RANK={env[0]} WORLD_SIZE={env[1]} (torchrun) with engine simulated: each of "
                f"the {env[1]} processes would train the whole run into {out_dir}; set "
                "engine=distributed, or start one process"
            )
    with locked(Path(out_dir)):  # one lpdt train at a time in a run folder
        if cfg.engine == "distributed":
            return train_distributed(cfg, out_dir, resume=resume, force=force, log=log)
        return loop.train(cfg, out_dir, resume=resume, force=force, log=log)
