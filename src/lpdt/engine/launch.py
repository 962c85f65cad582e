"""``engine: distributed``: one process per node over ``torch.distributed``.

``lpdt train --set engine=distributed`` (``train_distributed``) either

- is itself one worker (``lpdt.engine.worker``), when the environment names its rank (``RANK`` /
  ``WORLD_SIZE``, as set by ``torchrun`` on one or several machines, or by this module): it
  joins the process group from the environment (``MASTER_ADDR`` / ``MASTER_PORT``) and trains
  the node of its rank; or
- starts the n workers on this machine itself (``launch_local``): ``python -m lpdt.engine.worker`` with
  a rendezvous on 127.0.0.1 at a free port, waits for them and returns the run's record.

Faults: a worker that dies, or fails, makes the others fail too (its connections close, or a
wait runs past ``LPDT_DIST_TIMEOUT_S``); a worker whose failure is a lost peer exits with
``PEER_LOST``. The launcher watches all of them: when one has ended with an error it gives the
rest ``LPDT_DIST_GRACE_S`` seconds (default 10) to stop, kills the ones left by pid, and raises
one ``DistributedError`` that names the rank that failed first. Nothing writes ``metrics.json``
unless every rank completed; each rank's last epoch checkpoint stays for ``--resume``.

The workers write to this process's standard output. When its reader goes away (``lpdt train
... | head``), rank 0 stops quietly with ``READER_GONE`` (and the others, which lose it, too);
that is no failure of the run, so the launcher raises ``BrokenPipeError``, which ``lpdt``
(``lpdt.cli.entry``) ends quietly with the same status, as for the simulator.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from lpdt import provenance, record
from lpdt.config import RunConfig, dump_config
from lpdt.engine.rundir import ENGINE_CHECKPOINTS, load_checkpoint, open_run_dir
from lpdt.engine.worker import LAUNCHER_PID_ENV, PEER_LOST, REFUSED, env_rank, run_worker
from lpdt.errors import LpdtError
from lpdt.io import READER_GONE
from lpdt.record import RunRecord

POLL_S = 0.1
DEFAULT_GRACE_S = 10.0


class DistributedError(LpdtError, RuntimeError):
    """A worker of a distributed run failed (the message names its rank)."""


def train_distributed(
    cfg: RunConfig,
    out_dir: str | Path,
    resume: bool = False,
    force: bool = False,
    log: Callable[[str], None] = print,
) -> RunRecord:
    """Run ``cfg`` with one process per node (see the module docstring)."""
    env = env_rank()
    if env is not None:
        return run_worker(cfg, out_dir, env[0], env[1], resume=resume, force=force, log=log)
    return launch_local(cfg, out_dir, resume=resume, force=force, log=log)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _describe(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-code).name}"
        return f"was killed by signal {-code}"
    if code == PEER_LOST:
        return "lost contact with the other ranks"
    if code == REFUSED:
        return "stopped with the error printed above"
    return f"failed with exit code {code}"


def launch_local(
    cfg: RunConfig,
    out_dir: str | Path,
    resume: bool = False,
    force: bool = False,
    log: Callable[[str], None] = print,
) -> RunRecord:
    """Start one worker per node on this machine, wait for all, return the run's record."""
    out = Path(out_dir)
    metrics = out / record.METRICS_FILE
    # any rank's, current or .prev
    checkpoints = sorted(c for p in ENGINE_CHECKPOINTS["distributed"] for c in out.glob(p))
    done = open_run_dir(cfg, out, force, checkpoints, log, resume)
    if done is not None:
        return done
    if resume and checkpoints:  # another config's is refused here, in one line
        load_checkpoint(cfg, checkpoints[0])
    n = cfg.topology.nodes
    grace = float(os.environ.get("LPDT_DIST_GRACE_S", DEFAULT_GRACE_S))
    with tempfile.TemporaryDirectory(prefix="lpdt-launch-") as tmp:
        cfg_path = Path(tmp) / "config.yaml"
        cfg_path.write_text(dump_config(cfg))
        env = {
            **os.environ,
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(free_port()),
            "WORLD_SIZE": str(n),
            "LOCAL_WORLD_SIZE": str(n),
            LAUNCHER_PID_ENV: str(os.getpid()),
            provenance.COMMAND_ENV: shlex.join(sys.argv),
        }
        cmd = [
            sys.executable,
            "-m",
            "lpdt.engine.worker",
            "--config",
            str(cfg_path),
            "--out",
            str(out),
        ]
        if resume:
            cmd.append("--resume")
        if force:
            cmd.append("--force")
        log(f"engine distributed: starting {n} processes (gloo on 127.0.0.1:{env['MASTER_PORT']})")
        procs: list[subprocess.Popen] = []
        try:
            for r in range(n):
                procs.append(
                    subprocess.Popen(cmd, env={**env, "RANK": str(r), "LOCAL_RANK": str(r)})
                )
            _wait_all(procs, grace)
        finally:
            for pr in procs:  # nothing is left behind, whatever happened
                if pr.poll() is None:
                    pr.kill()
                    pr.wait()
    return record.read(metrics)


def _wait_all(procs: list[subprocess.Popen], grace: float) -> None:
    """Return when every worker exited 0; else stop the rest and raise ``DistributedError``
    (``BrokenPipeError`` when the workers stopped because the output's reader went away)."""
    failed: list[tuple[float, int, int]] = []  # (time, rank, exit code)
    deadline: float | None = None
    while True:
        now = time.monotonic()
        for r, pr in enumerate(procs):
            code = pr.poll()
            if code not in (None, 0) and all(f[1] != r for f in failed):
                failed.append((now, r, code))
        running = [pr for pr in procs if pr.poll() is None]
        if not running:
            break
        if failed and deadline is None:
            deadline = now + grace
        if deadline is not None and now >= deadline:
            for pr in running:
                pr.kill()
            for pr in running:
                pr.wait()
            break
        time.sleep(POLL_S)
    if not failed:
        return
    # The cause: the first rank that failed on its own (not because it lost a peer, nor because
    # the reader of the output went away).
    own = [f for f in failed if f[2] not in (PEER_LOST, READER_GONE)]
    if not own and any(f[2] == READER_GONE for f in failed):
        # The workers' stdout is this process's: its reader has gone for this process too. Not a
        # failure of the run (its checkpoints stay, as for any stop): lpdt.cli.entry ends
        # quietly on this, with READER_GONE, as when the simulator's log meets a closed pipe.
        raise BrokenPipeError(errno.EPIPE, "the reader of the run's output has gone")
    _, rank, code = min(own or failed)
    others = len(procs) - 1
    raise DistributedError(
        f"distributed run stopped: rank {rank} {_describe(code)}; "
        f"the other {others} ranks were stopped"
    )
