"""GPU accounting of training jobs: the resources `gpu` and `gpu_slot` of rule train, and the slot
allocator that puts each job on one GPU of a machine with several (docs/workflow.md, "GPUs").

Read without importing torch, so that building the DAG stays fast: the GPUs a machine shows are
those ``CUDA_VISIBLE_DEVICES`` lists when it is set, else the NVIDIA driver's entries.

k jobs per GPU. Each GPU is cut into ``units`` slots (the least common multiple of the k of the
grid's GPU jobs), and a one-process job with k jobs per GPU asks for ``units // k`` of them
(Snakemake resource ``gpu_slot``; the workflow sets its total, GPUs x units). Snakemake counts
slots but does not say which ones a job got, so ``python -m lpdt.gpus slot ... -- CMD`` picks
them: it takes file locks (``flock``) on that many slot files of one GPU, the GPU with the most
free slots first (so jobs spread round-robin over the GPUs), sets ``CUDA_VISIBLE_DEVICES`` to
that GPU and execs CMD, which keeps the locks open until it exits (the kernel drops them then,
however it ends: no stale slots).
"""

from __future__ import annotations

import argparse
import fcntl
import math
import os
import random
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from lpdt.models import MODELS

NVIDIA_GPUS = Path("/proc/driver/nvidia/gpus")  # one entry per GPU the driver sees

SLOT_WAIT_S = 3600.0  # how long a job waits for free slots on one GPU (then: least busy GPU)


def visible_gpu_ids(env: Mapping[str, str] = os.environ, driver: Path = NVIDIA_GPUS) -> list[str]:
    """The GPUs a training job started here could use, as ``CUDA_VISIBLE_DEVICES`` names them
    (its entries when it is set, else 0 .. n-1 for the driver's n GPUs; none without one)."""
    listed = env.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [d.strip() for d in listed.split(",") if d.strip() not in ("", "-1")]
    return [str(i) for i in range(len(list(driver.iterdir())))] if driver.is_dir() else []


def visible_gpus(env: Mapping[str, str] = os.environ, driver: Path = NVIDIA_GPUS) -> int:
    """How many GPUs a training job started here could use (0 without one)."""
    return len(visible_gpu_ids(env, driver))


def job_gpus(setting: int | str, device: str, gpus: int, processes: int = 1) -> int:
    """The `gpu` resource of one training job: ``setting`` (config train_gpus) when it is a
    number; with "auto", 0 if the machine has no GPU or the run may not use it (device cpu),
    else one per process the job starts (``processes``: 1 for the simulator, ``topology.nodes``
    for the distributed engine), at most the machine's GPUs (fewer than the processes: they
    share them, over gloo; docs/engine.md)."""
    if setting != "auto":
        return int(setting)
    return min(max(1, processes), gpus) if gpus > 0 and device != "cpu" else 0


def jobs_per_gpu(setting: int | str, model: str) -> int:
    """k, the training jobs of ``model`` that share one GPU: ``setting`` (config
    gpu_jobs_per_gpu) when it is a number, else the model's ``ModelSpec.jobs_per_gpu`` (1 for a
    model not registered in this process)."""
    if setting != "auto":
        return max(1, int(setting))
    spec = MODELS.find(model)
    return spec.jobs_per_gpu if spec else 1


def slot_units(ks: Iterable[int]) -> int:
    """Slots per GPU: the least common multiple of the jobs' k (1 for none), so that a job with
    k jobs per GPU takes a whole number of them, ``units // k``."""
    return math.lcm(1, *ks)


def job_slots(gpus_used: int, processes: int, k: int, units: int, machine_gpus: int) -> int:
    """The `gpu_slot` resource of one training job: 0 when it uses no GPU or the machine has
    none (nothing to share here: a cluster's jobs get theirs from SLURM); ``units // k`` for a
    one-process job on one GPU (its share of it); whole GPUs (``units`` each, at most the
    machine's) for a job on several GPUs or with several processes."""
    if gpus_used <= 0 or machine_gpus <= 0:
        return 0
    if gpus_used == 1 and processes == 1:
        return units // k
    return units * min(gpus_used, machine_gpus)


def slot_command(python: str, lock_dir: str, gpu_ids: Sequence[str], slots: int, units: int) -> str:
    """The shell words that run a training command on ``slots`` slots of the machine's GPUs
    (``gpu_ids``, ``units`` slots each), or "" for a job without slots. More slots than one GPU
    has: whole GPUs."""
    if slots <= 0 or not gpu_ids:
        return ""
    count, per = (1, slots) if slots <= units else (slots // units, units)
    return (
        f"{python} -m lpdt.gpus slot --dir {lock_dir} --gpus {','.join(gpu_ids)} "
        f"--per-gpu {units} --units {per} --count {count} -- "
    )


def slurm_gres(shards_per_gpu: int, k: int) -> str | None:
    """A SLURM job's share of a GPU as shards (``sbatch --gres=shard:N``) on a cluster whose GPUs
    have ``shards_per_gpu`` shards each (gres.conf ``Name=shard``): 1/k of them rounded up, so
    that at most k jobs share a GPU (6 shards, k = 4: 2 shards a job, 3 jobs a GPU; rounding
    down gave 1 shard, 6 jobs); None when shards are off (0: a whole GPU, ``--gpus``)."""
    return f"shard:{-(-shards_per_gpu // max(1, k))}" if shards_per_gpu > 0 else None


def _try_lock(path: Path) -> int | None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def acquire(
    lock_dir: Path,
    gpu_ids: Sequence[str],
    per_gpu: int,
    units: int,
    count: int = 1,
    timeout: float = SLOT_WAIT_S,
    poll: float = 0.5,
) -> tuple[list[str], list[int], bool]:
    """Lock ``units`` of the ``per_gpu`` slot files of each of ``count`` GPUs of ``gpu_ids``,
    the GPUs with the most free slots first (ties: the first listed). Returns the GPUs, the
    open descriptors that hold the locks (closing them, or the process's end, frees the slots)
    and whether it got them: after ``timeout`` seconds without enough free slots (jobs of
    different k can leave every GPU a few slots short) it returns the least busy GPUs with
    whatever slots were free there, so a job is never held back for good."""
    lock_dir.mkdir(parents=True, exist_ok=True)
    count = max(1, min(count, len(gpu_ids)))
    deadline = time.monotonic() + timeout
    while True:
        held: dict[str, list[int]] = {}
        for g in gpu_ids:  # probe: lock every free slot, keep what the choice needs
            name = g.replace("/", "_")
            tries = [_try_lock(lock_dir / f"gpu-{name}.{j}") for j in range(per_gpu)]
            held[g] = [fd for fd in tries if fd is not None]
        order = sorted(gpu_ids, key=lambda g: -len(held[g]))  # stable: ties keep list order
        chosen = [g for g in order if len(held[g]) >= units][:count]
        timed_out = time.monotonic() >= deadline
        if len(chosen) < count and timed_out:
            chosen = order[:count]
        if len(chosen) == count:
            keep = [fd for g in chosen for fd in held[g][:units]]
            for fd in (fd for fds in held.values() for fd in fds if fd not in keep):
                os.close(fd)
            return chosen, keep, not timed_out or len(keep) == units * count
        for fds in held.values():
            for fd in fds:
                os.close(fd)
        time.sleep(poll * (0.5 + random.random()))  # jitter: concurrent probes fall apart


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m lpdt.gpus slot --dir D --gpus 0,1 --per-gpu U --units u [--count n] -- CMD``:
    take slots, then exec CMD with CUDA_VISIBLE_DEVICES set to their GPUs."""
    p = argparse.ArgumentParser(prog="python -m lpdt.gpus")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("slot", help="run CMD on free slots of one GPU (or `--count` whole GPUs)")
    s.add_argument("--dir", type=Path, required=True, help="the slot lock files' folder")
    s.add_argument("--gpus", required=True, help="the machine's GPUs, CUDA_VISIBLE_DEVICES style")
    s.add_argument("--per-gpu", type=int, required=True, help="slots per GPU")
    s.add_argument("--units", type=int, required=True, help="slots the job takes on each GPU")
    s.add_argument("--count", type=int, default=1, help="GPUs the job takes (default 1)")
    s.add_argument("--timeout", type=float, default=SLOT_WAIT_S, help="seconds to wait for slots")
    s.add_argument("cmd", nargs=argparse.REMAINDER, help="-- the command to run")
    a = p.parse_args(argv)
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    if not cmd:
        p.error("no command after --")
    ids = [g for g in a.gpus.split(",") if g]
    start = time.monotonic()
    chosen, fds, ok = acquire(a.dir, ids, a.per_gpu, a.units, a.count, a.timeout)
    waited = time.monotonic() - start
    for fd in fds:
        os.set_inheritable(fd, True)  # CMD holds the locks until it exits
    visible = ",".join(chosen)
    print(
        f"lpdt.gpus: CUDA_VISIBLE_DEVICES={visible} ({a.units} of {a.per_gpu} slots per GPU, "
        f"of GPUs {a.gpus}; waited {waited:.0f} s; since {time.time():.3f})",
        file=sys.stderr,
        flush=True,
    )
    if not ok:
        print(
            f"lpdt.gpus: warning: no GPU had {a.units} free slots within {a.timeout:.0f} s; "
            f"sharing GPU {visible} beyond its slots",
            file=sys.stderr,
            flush=True,
        )
    os.environ["CUDA_VISIBLE_DEVICES"] = visible
    os.execvp(cmd[0], cmd)


if __name__ == "__main__":
    main()
