"""The plan's speed probe: how fast this machine runs the quick scale's training steps, against
the reference machine the plan's costs (``lpdt.plan.runtime``) were measured on.

What it times: one node's eager training step (forward, loss, backward, SGD step) of the claims'
problem, the runs that fill most of the quick scale's hour (ResNet-8, 12 px, 8 images per node,
Range-EvoNorm with 2 chunks in 8-bit), one torch thread, as each training job runs. Three kinds
of step (``KINDS``), one per kind of work the jobs do:

- ``fp32``: the fp32 step. It scales fp32 costs, eager and compiled, and what every job does
  in fp32 (start-up, compiling, gossip).
- ``int8``: the 8-bit step as an eager 8-bit job runs it here: with the C++ quantiser kernel
  (``lpdt.layers.quant.kernel``) where this machine builds it, with the tensor operations where
  it does not (about 1.6x slower; the plan's line then says so and why). It scales eager 8-bit
  costs, which were measured with the kernel.
- ``int8_ops``: the 8-bit step with the kernel off, the tensor operations that a compiled 8-bit
  graph fuses (it never calls the kernel). It scales compiled 8-bit costs, so that they do not
  move with the kernel they never use. Where the kernel is missing, it is the ``int8`` timing.

How:

- **Wall time, as the jobs are measured.** An earlier probe timed the process's CPU time, so
  that other processes would not count. On a virtual machine that leaves out the time the
  hypervisor gives to other guests (steal time): on one VM that probe read 1.85x faster than
  the reference while the jobs ran at the reference's costs. The probe reports the steal share
  it saw (``/proc/stat``), so such a machine says so.
- **As many copies at once as the plan has job slots**, started together at each kind: two jobs
  on two cores share caches, memory bandwidth and (on a VM) host cores, and a process already
  running on the machine slows two copies as it will slow two jobs.
- **Until two windows agree** (``time_windows``): each kind is timed in windows of
  ``PROBE_WINDOW_S``, until two windows in a row agree within ``PROBE_TOLERANCE`` (their mean is
  the result), never on the first two (``PROBE_MIN_WINDOWS``), at most ``PROBE_MAX_WINDOWS``.
  On a fresh VM with cold disk caches a fixed 5 s window read ×2.60 / ×2.41 while the jobs then
  ran at 1.9-2.0x the reference: its first steps still waited on the disk. The first windows
  also absorb the seconds the scheduler may take to spread copies started together over the
  cores. A kind whose windows never agree is named in the plan's line.
- **Eager, not compiled**: compiling the steps would take 5-10 s with inductor's cache warm and
  a minute or more cold. At these shapes an eager step is, like a compiled one, mostly
  per-operator overhead: the same kind of work for the CPU.

``probe_speed`` returns a ``ProbeResult`` (ms per step per kind, the mean over the copies);
``speed_factors`` divides them by the reference machine's (``PROBE_REF_MS``), and
``runtime.run_seconds(..., speed=...)`` scales the fitted costs by them. ``measure`` does both
and writes the plan's line.
"""

from __future__ import annotations

import json
import math
import multiprocessing as mp
import os
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from queue import Empty
from typing import Any

from lpdt.io import write_json_atomic

PROBE_MODEL = "resnet8"
PROBE_BATCH = 8
PROBE_PX = 12
PROBE_WARMUP = 5
# Each kind is timed in windows of at least PROBE_WINDOW_S and PROBE_MIN_STEPS steps, until two
# in a row agree within PROBE_TOLERANCE (relative to the faster), but never before
# PROBE_MIN_WINDOWS windows and at most PROBE_MAX_WINDOWS. The first window is never the answer:
# two copies started together were seen sharing one core for the first seconds before the
# scheduler spread them (2026-11-26: 1.5 s or 3 s per precision read ×2.0-2.2 where 5 s read
# ×1.0), and a cold start waits on the disk. On a warm idle machine three windows (3 s a kind,
# the probe about 12 s with its start-up); on a cold or busy one up to six (6 s a kind).
PROBE_WINDOW_S = 1.0
PROBE_MIN_STEPS = 10
PROBE_TOLERANCE = 0.05
PROBE_MIN_WINDOWS = 3
PROBE_MAX_WINDOWS = 6
# kind -> (precision, the 8-bit quantiser kernel allowed)
KINDS: dict[str, tuple[str, bool]] = {
    "fp32": ("fp32", True),
    "int8": ("int8", True),
    "int8_ops": ("int8", False),
}
# ms per probe step per kind on the reference machine (``runtime.REFERENCE``), two copies at
# once, the machine idle but for the probe: the median of ``benchmarks/bench_runtime.py --probe
# 5 --jobs 2`` on 2026-11-26 (fp32 3.66-3.90, 8-bit 8.02-8.30), with the eager 8-bit quantiser
# kernel; the 8-bit tensor operations (``int8_ops``): the same probe before the kernel existed
# (12.78-13.16), on the machine whose fresh-clone runs the quick scale's costs were fitted and
# checked on. Refit the costs and record the probe together.
PROBE_REF_MS: dict[str, float] = {"fp32": 3.8, "int8": 8.2, "int8_ops": 13.0}
KIND_NAMES = {"fp32": "fp32", "int8": "8-bit", "int8_ops": "8-bit tensor ops (compiled)"}
_TIMEOUT_S = 300.0  # a copy that has not reported by then has hung


@dataclass(frozen=True)
class ProbeResult:
    """What the probe measured: ``ms`` (kind -> ms per step, the mean over the copies);
    ``kernel``: why eager 8-bit steps run without the quantiser kernel here (None: with it);
    ``unsettled``: the kinds whose windows never agreed within the tolerance (in any copy)."""

    ms: dict[str, float]
    kernel: str | None = None
    unsettled: tuple[str, ...] = ()


def _cpu_times() -> tuple[float, float] | None:
    """(steal, total) jiffies of all CPUs from /proc/stat; None where there is none (not Linux)."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()
    except OSError:
        return None
    if fields[0] != "cpu" or len(fields) < 9:
        return None
    values = [float(v) for v in fields[1:]]
    # user nice system idle iowait irq softirq steal [guest guest_nice, already in user / nice]
    return values[7], sum(values[:8])


def steal_share(before: tuple[float, float] | None, after: tuple[float, float] | None) -> float:
    """Share of all CPU time between two ``_cpu_times`` readings that the hypervisor gave to
    other guests (0.0 where unknown)."""
    if before is None or after is None or after[1] <= before[1]:
        return 0.0
    return max(0.0, (after[0] - before[0]) / (after[1] - before[1]))


def time_windows(
    step: Callable[[], None],
    window_s: float = PROBE_WINDOW_S,
    min_steps: int = PROBE_MIN_STEPS,
    tolerance: float = PROBE_TOLERANCE,
    max_windows: int = PROBE_MAX_WINDOWS,
    clock: Callable[[], float] = time.perf_counter,
    min_windows: int = PROBE_MIN_WINDOWS,
) -> tuple[float, bool, list[float]]:
    """Time ``step`` in windows (each at least ``window_s`` seconds and ``min_steps`` steps)
    until two in a row agree within ``tolerance`` (relative to the faster one), not before
    ``min_windows`` windows and at most ``max_windows``: (ms per step, the mean of the last two
    windows; whether they agreed; every window's ms per step).

    A window's ms is its total time over its steps, not a median: a process sharing a core
    loses whole time slices, which the median of short steps does not see."""
    if min_steps < 1 or window_s < 0 or not 2 <= min_windows <= max_windows or not tolerance >= 0:
        raise ValueError(
            f"min_steps {min_steps} (>= 1), window_s {window_s} (>= 0), min_windows "
            f"{min_windows} and max_windows {max_windows} (2 <= min <= max), tolerance "
            f"{tolerance} (>= 0)"
        )
    windows: list[float] = []
    while len(windows) < max_windows:
        steps, start = 0, clock()
        while steps < min_steps or clock() - start < window_s:
            step()
            steps += 1
        windows.append((clock() - start) / steps * 1e3)
        if len(windows) >= min_windows and _agree(windows[-2], windows[-1], tolerance):
            return statistics.fmean(windows[-2:]), True, windows
    return statistics.fmean(windows[-2:]), False, windows


def _agree(a: float, b: float, tolerance: float) -> bool:
    return abs(a - b) <= tolerance * min(a, b)


@dataclass(frozen=True)
class KindTiming:
    """One kind timed in one process: ms per step, whether two windows agreed, and (8-bit with
    the kernel allowed) why the kernel was not used (None: it was, or not asked)."""

    ms: float
    settled: bool
    kernel: str | None = None


def probe_step_ms(
    kind: str,
    window_s: float = PROBE_WINDOW_S,
    warmup: int = PROBE_WARMUP,
    min_steps: int = PROBE_MIN_STEPS,
    barrier: object | None = None,
    tolerance: float = PROBE_TOLERANCE,
    max_windows: int = PROBE_MAX_WINDOWS,
) -> KindTiming:
    """Wall ms per step of the probe's step of ``kind`` (a key of ``KINDS``), after ``warmup``
    untimed steps, timed by ``time_windows``; one torch thread.

    The caller's thread count, random state and ``LPDT_QUANT_KERNEL`` are restored.
    ``barrier`` (a multiprocessing Barrier): wait there after the warm-up, so that copies in
    other processes time their steps together."""
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r}: allowed {', '.join(KINDS)}")
    if warmup < 0:
        raise ValueError(f"warmup {warmup}: must be >= 0")
    import torch

    from lpdt.config import load_config
    from lpdt.engine.steps import Steps
    from lpdt.layers.quant import kernel
    from lpdt.models import build_model

    precision, kernel_allowed = KINDS[kind]
    overrides = [f"model.name={PROBE_MODEL}", f"precision.mode={precision}", "model.range_chunks=2"]
    if precision == "int8":
        overrides.append("model.norm=rangeen")
    cfg = load_config(None, overrides)
    threads = torch.get_num_threads()
    switch = os.environ.get(kernel.ENV)
    torch.set_num_threads(1)
    if not kernel_allowed:
        os.environ[kernel.ENV] = "0"
    try:
        with torch.random.fork_rng(devices=[]):  # 8-bit steps draw noise seeds; leave no trace
            torch.manual_seed(0)
            model = build_model(cfg, 10, (3, PROBE_PX, PROBE_PX))
            model.train()
            node = Steps(model)
            opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
            x = torch.randn(PROBE_BATCH, 3, PROBE_PX, PROBE_PX)
            y = torch.randint(0, 10, (PROBE_BATCH,))

            def step() -> None:
                opt.zero_grad(set_to_none=True)
                node.train_step(model, x, y)
                opt.step()

            for _ in range(warmup):
                step()
            missing = kernel.unavailable() if precision == "int8" and kernel_allowed else None
            if barrier is not None:
                barrier.wait(_TIMEOUT_S)  # type: ignore[attr-defined]  # a Manager's Barrier proxy
            ms, settled, _ = time_windows(
                step,
                window_s,
                min_steps,
                tolerance,
                max_windows,
                min_windows=min(PROBE_MIN_WINDOWS, max_windows),
            )
    finally:
        torch.set_num_threads(threads)
        if switch is None:
            os.environ.pop(kernel.ENV, None)
        else:
            os.environ[kernel.ENV] = switch
    return KindTiming(ms, settled, missing)


def _probe_here(
    window_s: float, warmup: int, min_steps: int, max_windows: int, barrier: object | None
) -> dict[str, KindTiming]:
    return {
        k: probe_step_ms(k, window_s, warmup, min_steps, barrier, max_windows=max_windows)
        for k in KINDS
    }


def _copy(
    window_s: float, warmup: int, min_steps: int, max_windows: int, barrier: Any, queue: Any
) -> None:
    """One probe copy in its own process: puts {kind: KindTiming}, or the error's text."""
    try:
        queue.put(_probe_here(window_s, warmup, min_steps, max_windows, barrier))
    except BaseException as e:  # reported to the parent, which raises it
        queue.put(f"{type(e).__name__}: {e}")


def probe_speed(
    slots: int = 1,
    window_s: float = PROBE_WINDOW_S,
    warmup: int = PROBE_WARMUP,
    min_steps: int = PROBE_MIN_STEPS,
    max_windows: int = PROBE_MAX_WINDOWS,
) -> ProbeResult:
    """ms per probe step on this machine, per kind of ``KINDS``: ``slots`` copies at once (each
    in its own process when ``slots`` > 1), the mean over the copies."""
    if slots < 1:
        raise ValueError(f"slots {slots}: must be at least 1")
    if slots == 1:
        got: list = [_probe_here(window_s, warmup, min_steps, max_windows, None)]
    else:
        got = _run_copies(slots, window_s, warmup, min_steps, max_windows)
    kernel = next((t.kernel for g in got for t in g.values() if t.kernel is not None), None)
    return ProbeResult(
        ms={k: statistics.fmean(g[k].ms for g in got) for k in KINDS},
        kernel=kernel,
        unsettled=tuple(k for k in KINDS if not all(g[k].settled for g in got)),
    )


def _run_copies(
    slots: int, window_s: float, warmup: int, min_steps: int, max_windows: int
) -> list[dict[str, KindTiming]]:
    ctx = mp.get_context("spawn")  # a fresh interpreter: no fork of a threaded parent
    barrier, queue = ctx.Barrier(slots), ctx.Queue()
    procs = [
        ctx.Process(target=_copy, args=(window_s, warmup, min_steps, max_windows, barrier, queue))
        for _ in range(slots)
    ]
    for proc in procs:
        proc.start()
    got: list = []
    deadline = time.monotonic() + _TIMEOUT_S
    try:
        while len(got) < slots:
            try:
                got.append(queue.get(timeout=1.0))
            except Empty:
                dead = [p for p in procs if p.exitcode not in (None, 0)]
                if dead or time.monotonic() > deadline:
                    what = (
                        f"exit code {dead[0].exitcode}"
                        if dead
                        else f"no result in {_TIMEOUT_S:.0f} s"
                    )
                    raise RuntimeError(f"speed probe: a copy failed ({what})") from None
    finally:
        for proc in procs:
            if proc.is_alive() and len(got) < slots:
                proc.terminate()  # a copy left waiting at the barrier for one that died
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
    errors = [g for g in got if isinstance(g, str)]
    if errors:
        raise RuntimeError(f"speed probe failed in a copy: {errors[0]}")
    return got


def speed_factors(
    measured: Mapping[str, float], reference: Mapping[str, float] = PROBE_REF_MS
) -> dict[str, float]:
    """kind -> measured / reference ms per probe step (2.0: this machine is twice as slow at
    that kind of step), each kind by its own reference."""
    if set(measured) != set(reference):
        raise ValueError(
            f"probe timings for {sorted(measured)}, reference for {sorted(reference)}: "
            "they must name the same kinds"
        )
    for k, ms in [*measured.items(), *reference.items()]:
        if not (math.isfinite(ms) and ms > 0):
            raise ValueError(f"probe time {ms!r} ms ({k}): must be a positive number")
    return {k: measured[k] / reference[k] for k in reference}


def probe_line(
    result: ProbeResult,
    slots: int,
    steal: float = 0.0,
    reference: Mapping[str, float] = PROBE_REF_MS,
) -> str:
    """The plan's one line on the probe: ms per step here (``slots`` copies at once), the
    reference's, the factor; then, where they apply, that eager 8-bit steps run without the
    quantiser kernel (and why), the kinds whose windows never agreed, and the hypervisor's
    steal share."""
    factors = speed_factors(result.ms, reference)
    parts = [
        f"{KIND_NAMES.get(k, k)} {result.ms[k]:.1f} ms/step "
        f"(reference {reference[k]:.1f}, ×{factors[k]:.2f})"
        for k in reference
    ]
    notes = []
    if result.kernel is not None:
        notes.append(
            f"no 8-bit quantiser kernel here ({result.kernel}): eager 8-bit jobs run the "
            "slower tensor operations"
        )
    if result.unsettled:
        names = ", ".join(KIND_NAMES.get(k, k) for k in result.unsettled)
        notes.append(f"{names} did not settle in {PROBE_MAX_WINDOWS} windows (a busy machine?)")
    if steal >= 0.01:
        notes.append(f"the hypervisor took {steal:.0%} of the CPU")
    extra = "".join(f"; {n}" for n in notes)
    return f"speed probe ({slots} at once): {', '.join(parts)}{extra}: estimates scaled"


def measure(slots: int) -> tuple[ProbeResult, str]:
    """Run the probe with ``slots`` copies at once: (what it measured, the plan's line)."""
    before = _cpu_times()
    result = probe_speed(slots)
    return result, probe_line(result, slots, steal_share(before, _cpu_times()))


def write_factors(path: Path, speed: Mapping[str, float] | None, line: str | None) -> None:
    """Record the factors a plan scaled its costs by (None: unscaled) and its probe line."""
    write_json_atomic(path, {"factors": dict(speed) if speed else None, "line": line})


def read_factors(path: Path) -> dict[str, float] | None:
    """The factors ``write_factors`` recorded (None: the plan was not scaled). Raises
    ``ValueError`` for a file that is not such a record."""
    try:
        data = json.loads(path.read_text())
        factors = data["factors"]
        return None if factors is None else {str(k): float(v) for k, v in factors.items()}
    except (OSError, KeyError, TypeError, AttributeError, ValueError) as e:
        raise ValueError(f"{path}: not a plan's speed factors ({e})") from None
