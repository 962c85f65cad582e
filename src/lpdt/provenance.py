"""Where a run came from, captured while it trains (``metrics.json`` ``provenance``).

The record (``lpdt.record.Provenance``) is written once, by the training process, and never
recomputed: MLflow tags such as ``git_commit`` are read from it (``lpdt.tracking.run_tags``), so
re-logging a run later, from another checkout, does not change them.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import lpdt
from lpdt.record import Provenance, Session

GIT_TIMEOUT_S = 10.0  # per git call; a hung or slow git gives None, never a stuck run


def utc_now() -> str:
    """The current time, ISO 8601 in UTC (``2026-11-24T06:30:00.123456+00:00``)."""
    return dt.datetime.now(dt.UTC).isoformat()


def _git(args: list[str], cwd: Path) -> str | None:
    try:
        out = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=GIT_TIMEOUT_S
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def git_state(path: str | Path | None = None) -> tuple[str | None, bool | None]:
    """(commit, dirty) of the git checkout the code at ``path`` (default: the ``lpdt`` package)
    is tracked in; (None, None) when it is not a git checkout (an installed package), or git is
    missing or slow. Dirty: tracked files differ from the commit (untracked files do not count).
    """
    pkg = Path(path) if path is not None else Path(lpdt.__file__).resolve().parent
    # the package must be tracked here: a package installed into an ignored virtual environment
    # inside some other repository does not come from that repository's commit
    if _git(["ls-files", "--error-unmatch", "--", "."], pkg) is None:
        return None, None
    commit = _git(["rev-parse", "HEAD"], pkg)
    if not commit:
        return None, None
    status = _git(["status", "--porcelain", "--untracked-files=no"], pkg)
    return commit.strip(), (None if status is None else bool(status.strip()))


# The command line a user typed, set by a launcher for the processes it starts (lpdt.engine.launch: the
# distributed engine's workers, whose own argv names a temporary config file).
COMMAND_ENV = "LPDT_COMMAND"


def capture(device: Any = None) -> Provenance:
    """The provenance of this process: lpdt version, git commit and dirty flag, command line,
    host, device, Python / torch / CUDA versions, and ``started`` (now, UTC; ``finished`` is
    set when the run completes)."""
    import torch

    commit, dirty = git_state()
    dev = str(device) if device is not None else None
    gpu = None
    if dev is not None and dev.startswith("cuda") and torch.cuda.is_available():
        gpu = torch.cuda.get_device_name(torch.device(dev))
    return Provenance(
        lpdt_version=lpdt.__version__,
        git_commit=commit,
        git_dirty=dirty,
        command=os.environ.get(COMMAND_ENV) or shlex.join(sys.argv),
        host=platform.node(),
        device=dev,
        gpu=gpu,
        python=platform.python_version(),
        torch=torch.__version__,
        cuda=torch.version.cuda,
        started=utc_now(),
        finished=None,
    )


def resumed(first: Provenance, now: Provenance, epoch: int) -> Provenance:
    """The provenance of a run that ``now``'s process resumes after ``epoch`` epochs: the record
    keeps describing the session that started it (``first``) and lists this one in
    ``resumed``."""
    session = Session(
        epoch=epoch,
        started=now.started,
        git_commit=now.git_commit,
        git_dirty=now.git_dirty,
        host=now.host,
        command=now.command,
    )
    return dataclasses.replace(first, resumed=(*first.resumed, session))
