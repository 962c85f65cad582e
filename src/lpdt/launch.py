"""``engine: distributed``: one process per node over ``torch.distributed``.

``lpdt train --set engine=distributed`` (``train_distributed``) either

- is itself one worker, when the environment names its rank (``RANK`` / ``WORLD_SIZE``, as set
  by ``torchrun`` on one or several machines, or by this module): it joins the process group
  from the environment (``MASTER_ADDR`` / ``MASTER_PORT``) and trains the node of its rank; or
- starts the n workers on this machine itself (``launch_local``): ``python -m lpdt.launch`` with
  a rendezvous on 127.0.0.1 at a free port, waits for them and returns the run's record.

Faults: a worker that dies, or fails, makes the others fail too (its connections close, or a
wait runs past ``LPDT_DIST_TIMEOUT_S``); a worker whose failure is a lost peer exits with
``PEER_LOST``. The launcher watches all of them: when one has ended with an error it gives the
rest ``LPDT_DIST_GRACE_S`` seconds (default 10) to stop, kills the ones left by pid, and raises
one ``DistributedError`` that names the rank that failed first. Nothing writes ``metrics.json``
unless every rank completed; each rank's last epoch checkpoint stays for ``--resume``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from lpdt import provenance, record
from lpdt.config import RunConfig, dump_config, load_config

PEER_LOST = 75  # a worker's exit code when it stopped because another rank failed
REFUSED = 2  # a worker's exit code for a one-line error on its stderr (the CLI's code for those)
POLL_S = 0.1
DEFAULT_GRACE_S = 10.0


class DistributedError(RuntimeError):
    """A worker of a distributed run failed (the message names its rank)."""


def _env_rank() -> tuple[int, int] | None:
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    return None


def train_distributed(
    cfg: RunConfig, out_dir: str | Path, resume: bool = False, force: bool = False, log=print
) -> dict:
    """Run ``cfg`` with one process per node (see the module docstring)."""
    env = _env_rank()
    if env is not None:
        return run_worker(cfg, out_dir, env[0], env[1], resume=resume, force=force, log=log)
    return launch_local(cfg, out_dir, resume=resume, force=force, log=log)


# ----------------------------------------------------------------------------------------------
# A worker
# ----------------------------------------------------------------------------------------------


def run_worker(
    cfg: RunConfig, out_dir: str | Path, rank: int, world: int, resume: bool, force: bool, log
) -> dict:
    """Train node ``rank`` of ``cfg`` in this process; every rank returns the run's record."""
    import torch.distributed as dist

    from lpdt.decentral.peer import TorchGroup, init_process_group
    from lpdt.train import resolve_device, train

    if world != cfg.topology.nodes:
        raise ValueError(
            f"engine: distributed runs one process per node: {world} processes "
            f"for topology.nodes = {cfg.topology.nodes}"
        )
    if cfg.threads is None:  # share the cores (all, or OMP_NUM_THREADS) between the workers
        cores = int(os.environ.get("OMP_NUM_THREADS") or os.cpu_count() or 1)
        local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
        torch.set_num_threads(max(1, cores // local))
    device = resolve_device(cfg.device)
    if device.type == "cuda" and device.index is None:
        device = torch.device(
            "cuda", int(os.environ.get("LOCAL_RANK", 0)) % max(1, torch.cuda.device_count())
        )
        cfg = _with_device(cfg, str(device))
    out = Path(out_dir)
    if force and rank == 0:  # every rank's checkpoints (and the previous ones), before any saves
        for f in [out / record.METRICS_FILE, *out.glob("checkpoint*.pt")]:
            f.unlink(missing_ok=True)
    if device.type == "cuda":  # NCCL's own communicators and barriers use the current device
        torch.cuda.set_device(device)
    init_process_group(rank, world, device)
    try:
        if force:
            dist.barrier()
        group = TorchGroup(rank, world, device)
        return train(
            cfg, out, resume=resume, force=force, log=log if rank == 0 else _quiet, group=group
        )
    finally:
        with contextlib.suppress(Exception):
            dist.destroy_process_group()


def _with_device(cfg: RunConfig, device: str) -> RunConfig:
    import dataclasses

    return dataclasses.replace(cfg, device=device)


def _quiet(msg: str) -> None:
    pass


def worker_main(argv: list[str] | None = None) -> int:
    """``python -m lpdt.launch --config C --out D [--resume]``: one worker started by
    ``launch_local`` (rank and rendezvous from the environment). Exit codes: 0 done,
    ``PEER_LOST`` another rank failed, 1 this rank failed (traceback on stderr)."""
    import torch.distributed as dist

    p = argparse.ArgumentParser(prog="python -m lpdt.launch")
    p.add_argument("--config", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--force", action="store_true")
    args = p.parse_args(argv)
    env = _env_rank()
    if env is None:
        print("lpdt.launch: RANK and WORLD_SIZE must be set", file=sys.stderr)
        return 2
    rank, world = env
    _die_with_launcher()
    cfg = load_config(args.config)
    try:
        run_worker(cfg, args.out, rank, world, resume=args.resume, force=args.force, log=_print)
    except ValueError as e:  # a refused run directory or checkpoint, a bad record: one line
        print(f"lpdt rank {rank}: error: {e}", file=sys.stderr, flush=True)
        return REFUSED
    except dist.DistError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        print(
            f"lpdt rank {rank}: stopped: lost contact with another rank ({first})",
            file=sys.stderr,
            flush=True,
        )
        return PEER_LOST
    return 0


def _die_with_launcher() -> None:
    """Linux: have the kernel kill this worker if the launcher dies (even by SIGKILL), so that
    no worker outlives it."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    launcher = os.environ.get("LPDT_LAUNCHER_PID")
    if launcher is not None and os.getppid() != int(launcher):  # it died before prctl
        sys.exit(PEER_LOST)


def _print(msg: str) -> None:
    print(msg, flush=True)


# ----------------------------------------------------------------------------------------------
# The launcher
# ----------------------------------------------------------------------------------------------


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
    cfg: RunConfig, out_dir: str | Path, resume: bool = False, force: bool = False, log=print
) -> dict:
    """Start one worker per node on this machine, wait for all, return the run's record."""
    from lpdt.train import _check_run_dir, _load_checkpoint

    out = Path(out_dir)
    metrics = out / record.METRICS_FILE
    if force:
        for f in [metrics, *out.glob("checkpoint*.pt")]:
            f.unlink(missing_ok=True)
    else:
        _check_run_dir(cfg, out)
        if metrics.exists():
            log(f"{out}: already complete (use --force to run it again)")
            return record.read(metrics).to_dict()
        checkpoints = sorted(out.glob("checkpoint.rank*.pt"))  # any rank's, current or .prev
        if resume and checkpoints:  # another config's is refused here, in one line
            _load_checkpoint(cfg, checkpoints[0], torch.device("cpu"))
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
            "LPDT_LAUNCHER_PID": str(os.getpid()),
            provenance.COMMAND_ENV: shlex.join(sys.argv),
        }
        cmd = [sys.executable, "-m", "lpdt.launch", "--config", str(cfg_path), "--out", str(out)]
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
    return record.read(metrics).to_dict()


def _wait_all(procs: list[subprocess.Popen], grace: float) -> None:
    """Return when every worker exited 0; else stop the rest and raise ``DistributedError``."""
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
    # The cause: the first rank that failed on its own (not because it lost a peer).
    own = [f for f in failed if f[2] != PEER_LOST]
    _, rank, code = min(own or failed)
    others = len(procs) - 1
    raise DistributedError(
        f"distributed run stopped: rank {rank} {_describe(code)}; "
        f"the other {others} ranks were stopped"
    )


if __name__ == "__main__":
    sys.exit(worker_main())
