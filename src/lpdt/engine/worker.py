"""One worker of an ``engine: distributed`` run: the process that holds one node.

A worker knows its rank from the environment (``RANK`` / ``WORLD_SIZE``, as set by ``torchrun``
on one or several machines, or by ``lpdt.engine.launch.launch_local``), joins the process group from the
environment (``MASTER_ADDR`` / ``MASTER_PORT``) and trains the node of its rank with
``lpdt.engine.loop.train``. ``python -m lpdt.engine.worker`` is the command ``launch_local`` starts.

Exit codes of ``python -m lpdt.engine.worker``: 0 done; ``REFUSED`` a one-line error on its stderr (a
refused run directory or checkpoint); ``PEER_LOST`` it stopped because another rank failed (one
line on its stderr: a ``torch.distributed`` error, or gloo's for a connection closed, reset or
timed out, ``lost_contact``); ``READER_GONE`` (141, SIGPIPE's status) it stopped quietly because
the reader of its standard output went away (``lpdt train ... | head``), or lost its peers while
that reader was gone (they stopped for that reason); 1 this rank failed (traceback on stderr).
Under a launcher that sets ``LPDT_LAUNCHER_PID`` the
kernel kills the worker when the launcher dies (Linux).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import re
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import torch

from lpdt.config import ConfigError, RunConfig, load_config
from lpdt.engine.device import print_line, resolve_device
from lpdt.engine.loop import train
from lpdt.io import output_reader_gone, reader_gone
from lpdt.record import RunRecord

PEER_LOST = 75  # a worker's exit code when it stopped because another rank failed
REFUSED = 2  # a worker's exit code for a one-line error on its stderr (the CLI's code for those)
LAUNCHER_PID_ENV = "LPDT_LAUNCHER_PID"  # set by the launcher: its pid

# gloo's errors (its IoException: a plain RuntimeError in Python, not a torch.distributed
# DistError) for a connection to another rank that closed, was reset or stopped answering, as
# its tcp (and uv) transport words them: "[<path>/gloo/transport/tcp/pair.cc:561] Connection
# closed by peer [127.0.0.1]:19875. ...", "Read error [...]: Connection reset by peer",
# "writev [...]: Broken pipe", "Socket closed", "Timed out waiting 60000ms for recv operation to
# complete" (a hung peer, after LPDT_DIST_TIMEOUT_S). GLOO_ERROR_MSG starts each with the
# bracketed source file; a failed GLOO_ENFORCE ("[enforce fail at ...]", e.g. a collective
# called with mismatched sizes) is a bug and does not match.
_GLOO_LOST = re.compile(
    r"\[[^\]]*gloo/transport/[^\]]*\] "
    r"(Connection closed by peer|Read error|writev|Socket closed|Socket unexpectedly closed"
    r"|Read timeout|Write timeout|Timed out waiting)"
)


def env_rank() -> tuple[int, int] | None:
    """``(rank, world size)`` when the environment names this process's rank, else ``None``. A
    value that is no whole number, a world size under 1 or a rank outside ``[0, WORLD_SIZE)`` is
    a ``ValueError`` naming the variable (a rank of 5 in a world of 2 waited for its peers until
    the rendezvous timed out, 30 minutes by default)."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return None
    found = {}
    for name in ("RANK", "WORLD_SIZE"):
        text = os.environ[name]
        try:
            found[name] = int(text)
        except ValueError:
            raise ValueError(f"{name}={text!r} is not a whole number") from None
    rank, world = found["RANK"], found["WORLD_SIZE"]
    if world < 1:
        raise ValueError(f"WORLD_SIZE={world}: at least one process")
    if not 0 <= rank < world:
        raise ValueError(f"RANK={rank} is outside 0..{world - 1} (WORLD_SIZE={world})")
    return rank, world


def run_worker(
    cfg: RunConfig,
    out_dir: str | Path,
    rank: int,
    world: int,
    resume: bool,
    force: bool,
    log: Callable[[str], None],
) -> RunRecord:
    """Train node ``rank`` of ``cfg`` in this process; every rank returns the run's record."""
    import torch.distributed as dist

    from lpdt.decentral.peer import TorchGroup, init_process_group

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
    out = Path(out_dir)  # (--force: loop.train discards the old run once every rank's started)
    if device.type == "cuda":  # NCCL's own communicators and barriers use the current device
        torch.cuda.set_device(device)
    init_process_group(rank, world, device)
    try:
        group = TorchGroup(rank, world, device)
        return train(
            cfg, out, resume=resume, force=force, log=log if rank == 0 else _quiet, group=group
        )
    finally:
        with contextlib.suppress(Exception):
            dist.destroy_process_group()


def _with_device(cfg: RunConfig, device: str) -> RunConfig:
    return dataclasses.replace(cfg, device=device)


def _quiet(msg: str) -> None:
    pass


def lost_contact(e: BaseException) -> bool:
    """Whether ``e`` says that this rank lost contact with another: a ``torch.distributed``
    error (``DistError``: NCCL, the store, a closed connection), or gloo's ``RuntimeError``
    for a connection that a peer closed, reset or stopped answering (``_GLOO_LOST``). Any
    other ``RuntimeError`` is a bug of this rank, not a lost peer."""
    import torch.distributed as dist

    if isinstance(e, dist.DistError):
        return True
    return isinstance(e, RuntimeError) and _GLOO_LOST.match(str(e).lstrip()) is not None


def _what(e: BaseException) -> str:
    """A lost contact's error in a few words: its first line; of gloo's, the words after its
    source file, up to its advice ("This is typically caused by a remote worker crashing...")."""
    text = str(e).strip()
    if not text:
        return type(e).__name__
    first = text.splitlines()[0]
    if _GLOO_LOST.match(first):
        first = first.split("] ", 1)[1].split(". ", 1)[0]
    return first


def worker_main(argv: list[str] | None = None) -> int:
    """``python -m lpdt.engine.worker --config C --out D [--resume] [--force]``: one worker started
    by ``lpdt.engine.launch.launch_local`` (rank and rendezvous from the environment). Exit codes: 0 done,
    ``PEER_LOST`` another rank failed, ``READER_GONE`` its output's reader went away, 1 this
    rank failed (traceback on stderr)."""
    p = argparse.ArgumentParser(prog="python -m lpdt.engine.worker")
    p.add_argument("--config", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--force", action="store_true")
    args = p.parse_args(argv)
    try:
        env = env_rank()
    except ValueError as e:
        print_line(f"lpdt.engine.worker: {e}", sys.stderr)
        return 2
    if env is None:
        print_line("lpdt.engine.worker: RANK and WORLD_SIZE must be set", sys.stderr)
        return 2
    rank, world = env
    _die_with_launcher()
    try:  # its plugins (the config's key, $LPDT_PLUGINS, the installed ones) imported here
        cfg = load_config(args.config)
    except ConfigError as e:
        print_line(f"lpdt rank {rank}: config error: {e}", sys.stderr)
        return REFUSED
    try:
        run_worker(cfg, args.out, rank, world, resume=args.resume, force=args.force, log=print_line)
    except ValueError as e:  # a refused run directory or checkpoint, a bad record: one line
        if os.environ.get("LPDT_DEBUG"):  # the launcher's "(LPDT_DEBUG=1 for a traceback)"
            raise
        print_line(f"lpdt rank {rank}: error: {e}", sys.stderr)
        return REFUSED
    except BrokenPipeError:
        # Rank 0's log met a closed stdout (`lpdt train ... | head`): stop quietly, as the `lpdt`
        # command does (lpdt.cli.entry); the launcher, whose stdout this is too, then ends
        # quietly as well. A broken pipe elsewhere, stdout still read, is a bug: its traceback.
        if not output_reader_gone():
            raise
        return reader_gone()
    except RuntimeError as e:
        if not lost_contact(e):
            raise
        if output_reader_gone():  # the peer stopped because the output's reader went away
            return reader_gone()
        print_line(
            f"lpdt rank {rank}: stopped: lost contact with another rank ({_what(e)})", sys.stderr
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
    launcher = os.environ.get(LAUNCHER_PID_ENV)
    if launcher is not None and os.getppid() != int(launcher):  # it died before prctl
        sys.exit(PEER_LOST)


if __name__ == "__main__":
    sys.exit(worker_main())
