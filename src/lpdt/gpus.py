"""GPU accounting of training jobs: the resources `gpu` and `gpu_slot` of rule train, and the slot
allocator that puts each job on one GPU of a machine with several (docs/compute.md, "GPUs").

Read without importing torch, so that building the DAG stays fast: the GPUs a machine shows are
those ``CUDA_VISIBLE_DEVICES`` lists when it is set, else the NVIDIA driver's entries.

k jobs per GPU. Each GPU is cut into ``units`` slots (the least common multiple of the k of the
grid's GPU jobs), and a one-process job with k jobs per GPU asks for ``units // k`` of them
(Snakemake resource ``gpu_slot``; the workflow sets its total, GPUs x units). Snakemake counts
slots but does not say which ones a job got, so ``python -m lpdt.gpus slot ... -- CMD`` picks
them: it records its share of one GPU (``units / per_gpu``) in the machine's slot folder
(``slot_dir``, keyed by the GPU, under a ``flock``), the GPU with the most free share first (so
jobs spread round-robin over the GPUs), sets ``CUDA_VISIBLE_DEVICES`` to that GPU and execs CMD
in the same process: the share is held while that process lives (a share whose process has
ended is dropped by the next reader, however the job ended: no stale slots). One folder for the
machine, so that two Snakemake invocations (other results folders, other k) arbitrate too; a job
past its planned time is reported by name (``overdue``, ``python -m lpdt.gpus status``).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import math
import os
import random
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
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
    share them, over gloo; docs/distributed.md)."""
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


def slot_command(
    python: str,
    lock_dir: str,
    gpu_ids: Sequence[str],
    slots: int,
    units: int,
    name: str = "",
    planned_s: float | None = None,
) -> str:
    """The shell words that run a training command on ``slots`` slots of the machine's GPUs
    (``gpu_ids``, ``units`` slots each), or "" for a job without slots. More slots than one GPU
    has: whole GPUs. ``name`` and ``planned_s`` (the plan's estimate) name a job that hangs."""
    if slots <= 0 or not gpu_ids:
        return ""
    count, per = (1, slots) if slots <= units else (slots // units, units)
    job = f"--name {name} " if name else ""
    job += f"--planned-s {planned_s:.0f} " if planned_s else ""
    return (
        f"{python} -m lpdt.gpus slot --dir {lock_dir} --gpus {','.join(gpu_ids)} "
        f"--per-gpu {units} --units {per} --count {count} {job}-- "
    )


def slurm_gres(shards_per_gpu: float, k: int) -> str | None:
    """A SLURM job's share of a GPU as shards (``sbatch --gres=shard:N``) on a cluster whose GPUs
    have ``shards_per_gpu`` shards each (gres.conf ``Name=shard``): 1/k of them rounded up, so
    that at most k jobs share a GPU (6 shards, k = 4: 2 shards a job, 3 jobs a GPU; rounding
    down gave 1 shard, 6 jobs); None when shards are off (0: a whole GPU, ``--gpus``)."""
    shards = int(shards_per_gpu)  # (6.0 from a config: SLURM wants 2, not 2.0)
    return f"shard:{-(-shards // max(1, k))}" if shards > 0 else None


# A job that holds a GPU share past HANG_FACTOR x its planned seconds + HANG_MARGIN_S is
# reported by name (by the jobs that wait for that GPU, and by ``python -m lpdt.gpus status``).
HANG_FACTOR = 1.5
HANG_MARGIN_S = 600.0
SLOTS_ENV = "LPDT_GPU_SLOTS"  # the machine's slot folder (default: DEFAULT_SLOT_DIR)
DEFAULT_SLOT_DIR = Path("/tmp/lpdt-gpu-slots")


def slot_dir(env: Mapping[str, str] = os.environ) -> Path:
    """The folder of this machine's GPU shares: one for every Snakemake invocation and every
    results folder on the machine, so that they arbitrate (``$LPDT_GPU_SLOTS``, else
    ``DEFAULT_SLOT_DIR``)."""
    return Path(env.get(SLOTS_ENV) or DEFAULT_SLOT_DIR)


def gpu_key(gpu: str, driver: Path = NVIDIA_GPUS) -> str:
    """What a GPU is called in the slot folder: its PCI bus id for an index the driver lists (the
    same GPU whatever ``CUDA_VISIBLE_DEVICES`` a job started with), else the name as given (a
    UUID, or a faked GPU)."""
    if gpu.isdigit() and driver.is_dir():
        entries = sorted(p.name for p in driver.iterdir())
        if int(gpu) < len(entries):
            return entries[int(gpu)]
    return gpu.replace("/", "_")


def _start_ticks(pid: int) -> str | None:
    """The process's start time (``/proc/<pid>/stat``, field 22), None when it is gone; "" where
    there is no /proc (then a live pid is trusted)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return ""
    return stat.rsplit(")", 1)[1].split()[19]


def _alive(holder: Mapping[str, object]) -> bool:
    ticks = _start_ticks(int(str(holder["pid"])))
    return ticks is not None and (ticks == "" or ticks == holder.get("start"))


@contextlib.contextmanager
def _state(folder: Path) -> Iterator[dict[str, list[dict[str, object]]]]:
    """The machine's shares, GPU key -> holders, under an exclusive lock; holders whose process
    has ended are dropped (however a job ended, its share is free), and the state is written
    back when the block ends."""
    folder.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(PermissionError):
        folder.chmod(0o1777)  # every user's jobs on the machine share it
    with open(folder / "slots.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        path = folder / "slots.json"
        try:
            state = json.loads(path.read_text()) if path.exists() else {}
        except (OSError, ValueError):
            state = {}
        state = {g: [h for h in hs if _alive(h)] for g, hs in state.items()}
        yield state
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({g: hs for g, hs in state.items() if hs}, indent=1))
        tmp.replace(path)


def overdue(holder: Mapping[str, object], now: float | None = None) -> float | None:
    """Seconds a holder has held its share when that is past its planned time with the margin
    (``HANG_FACTOR``, ``HANG_MARGIN_S``); None otherwise or without a planned time."""
    planned = holder.get("planned_s")
    if planned is None:
        return None
    held = (time.time() if now is None else now) - float(str(holder["since"]))
    return held if held > HANG_FACTOR * float(str(planned)) + HANG_MARGIN_S else None


def hung_line(gpu: str, holder: Mapping[str, object], held: float) -> str:
    planned = float(str(holder["planned_s"]))
    return (
        f"lpdt.gpus: {holder.get('name') or 'a job'} (pid {holder['pid']}) has held "
        f"{float(str(holder['share'])):.3g} of GPU {gpu} for {held / 3600:.2f} h, planned "
        f"{planned / 3600:.2f} h: hung? (kill it by its pid to free the GPU)"
    )


def acquire(
    lock_dir: Path,
    gpu_ids: Sequence[str],
    per_gpu: int,
    units: int,
    count: int = 1,
    timeout: float = SLOT_WAIT_S,
    poll: float = 0.5,
    *,
    name: str = "",
    planned_s: float | None = None,
    pid: int | None = None,
    log: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
) -> tuple[list[str], list[tuple[str, int]], bool]:
    """Take ``units / per_gpu`` of each of ``count`` GPUs of ``gpu_ids`` for process ``pid``
    (default: this one, which then execs the job), the GPUs with the most free share first (ties:
    the first listed). The shares live in ``lock_dir`` (``slot_dir``: one folder for the
    machine), keyed by the GPU (``gpu_key``), so jobs of any invocation, results folder or k
    share a GPU within its capacity. Returns the GPUs, (GPU key, pid) of the shares taken (free
    them with ``release``, or by ending the process) and whether they fitted: after ``timeout``
    seconds without room it takes the least busy GPUs anyway, so a job is never held back for
    good. While it waits it reports, once each, the holders past their planned time
    (``overdue``), by name."""
    if not gpu_ids:  # nothing could ever be chosen: the wait would never end
        raise ValueError("no GPU to take a slot on")
    share = units / per_gpu
    pid = os.getpid() if pid is None else pid
    count = max(1, min(count, len(gpu_ids)))
    keys = {g: gpu_key(g) for g in gpu_ids}
    deadline = time.monotonic() + timeout
    reported: set[tuple[str, int]] = set()
    while True:
        with _state(lock_dir) as state:
            used = {g: sum(float(str(h["share"])) for h in state.get(keys[g], [])) for g in gpu_ids}
            order = sorted(gpu_ids, key=lambda g: used[g])  # stable: ties keep list order
            chosen = [g for g in order if used[g] + share <= 1.0 + 1e-9][:count]
            timed_out = time.monotonic() >= deadline
            if len(chosen) < count and timed_out:
                chosen = order[:count]
            if len(chosen) == count:
                fits = all(used[g] + share <= 1.0 + 1e-9 for g in chosen)
                for g in chosen:
                    state.setdefault(keys[g], []).append(
                        {
                            "pid": pid,
                            "start": _start_ticks(pid) or "",
                            "share": share,
                            "name": name,
                            "planned_s": planned_s,
                            "since": time.time(),
                        }
                    )
                return chosen, [(keys[g], pid) for g in chosen], fits
            for g in gpu_ids:
                for h in state.get(keys[g], []):
                    held = overdue(h)
                    if held is not None and (keys[g], int(str(h["pid"]))) not in reported:
                        reported.add((keys[g], int(str(h["pid"]))))
                        log(hung_line(g, h, held))
        time.sleep(poll * (0.5 + random.random()))  # jitter: concurrent waiters fall apart


def release(lock_dir: Path, held: Iterable[tuple[str, int]]) -> None:
    """Free shares that ``acquire`` took for a process that goes on running."""
    held = list(held)
    with _state(lock_dir) as state:
        for key, pid in held:
            hs = state.get(key, [])
            for i, h in enumerate(hs):
                if int(str(h["pid"])) == pid:
                    del hs[i]
                    break


def holders(lock_dir: Path) -> dict[str, list[dict[str, object]]]:
    """The machine's live shares: GPU key -> holders (pid, share, name, planned_s, since)."""
    with _state(lock_dir) as state:
        return {g: list(hs) for g, hs in state.items()}


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m lpdt.gpus slot [--dir D] --gpus 0,1 --per-gpu U --units u [--count n] [--name
    N --planned-s S] -- CMD``: take a share, then exec CMD with CUDA_VISIBLE_DEVICES set to its
    GPUs. ``python -m lpdt.gpus status [--dir D]``: the machine's shares, the hung ones named."""
    p = argparse.ArgumentParser(prog="python -m lpdt.gpus")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("slot", help="run CMD on a share of one GPU (or `--count` whole GPUs)")
    s.add_argument("--dir", type=Path, default=None, help="the machine's slot folder")
    s.add_argument("--gpus", required=True, help="the machine's GPUs, CUDA_VISIBLE_DEVICES style")
    s.add_argument("--per-gpu", type=int, required=True, help="slots per GPU")
    s.add_argument("--units", type=int, required=True, help="slots the job takes on each GPU")
    s.add_argument("--count", type=int, default=1, help="GPUs the job takes (default 1)")
    s.add_argument("--timeout", type=float, default=SLOT_WAIT_S, help="seconds to wait for slots")
    s.add_argument("--name", default="", help="the job's name (reports of hung jobs)")
    s.add_argument("--planned-s", type=float, default=None, help="the job's planned seconds")
    s.add_argument("cmd", nargs=argparse.REMAINDER, help="-- the command to run")
    st = sub.add_parser("status", help="the machine's GPU shares and the jobs past their plan")
    st.add_argument("--dir", type=Path, default=None, help="the machine's slot folder")
    a = p.parse_args(argv)
    folder = a.dir or slot_dir()
    if folder.exists() and not folder.is_dir():
        source = "--dir" if a.dir else f"${SLOTS_ENV}" if os.environ.get(SLOTS_ENV) else "default"
        p.error(f"the slot folder {folder} ({source}) is a file")
    if a.command == "status":
        held_any = holders(folder)
        for key, hs in sorted(held_any.items()):
            for h in hs:
                held = overdue(h)
                print(hung_line(key, h, held) if held is not None else f"GPU {key}: {h}")
        if not held_any:
            print(f"no GPU shares held (slot folder {folder})")
        return
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    if not cmd:
        p.error("no command after --")
    ids = [g.strip() for g in a.gpus.split(",") if g.strip()]
    for bad in _slot_argument_errors(a, ids):
        p.error(bad)
    start = time.monotonic()
    chosen, _, ok = acquire(
        folder, ids, a.per_gpu, a.units, a.count, a.timeout, name=a.name, planned_s=a.planned_s
    )
    waited = time.monotonic() - start
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
    try:
        os.execvp(cmd[0], cmd)  # the same process: its share lasts until CMD ends
    except OSError as e:  # its share ends with this process
        print(f"lpdt.gpus: cannot run {cmd[0]}: {e.strerror}", file=sys.stderr, flush=True)
        sys.exit(127 if isinstance(e, FileNotFoundError) else 126)  # the shell's statuses


def _slot_argument_errors(a: argparse.Namespace, ids: list[str]) -> list[str]:
    """What is wrong with ``slot``'s arguments (``ids``: the GPUs of ``--gpus``), each a line;
    none for arguments ``acquire`` can honour. A job taking more slots than a GPU has would
    wait the whole ``--timeout`` and then overfill it; no GPUs made it wait for ever."""
    errors = []
    if not ids:
        errors.append("--gpus: name at least one GPU, CUDA_VISIBLE_DEVICES style (0,1)")
    if len(set(ids)) < len(ids):
        errors.append(f"--gpus {a.gpus}: a GPU is named twice")
    if a.per_gpu < 1:
        errors.append(f"--per-gpu {a.per_gpu}: must be at least 1")
    elif not 1 <= a.units <= a.per_gpu:
        errors.append(f"--units {a.units}: must be 1 to --per-gpu ({a.per_gpu})")
    if ids and not 1 <= a.count <= len(ids):
        errors.append(f"--count {a.count}: must be 1 to the GPUs listed ({len(ids)})")
    if not (math.isfinite(a.timeout) and a.timeout >= 0):
        errors.append(f"--timeout {a.timeout}: must be a finite number of seconds >= 0")
    if a.planned_s is not None and not (math.isfinite(a.planned_s) and a.planned_s >= 0):
        errors.append(f"--planned-s {a.planned_s}: must be a finite number of seconds >= 0")
    return errors


if __name__ == "__main__":
    main()
