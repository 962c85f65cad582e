"""The plan's speed probe: how fast this machine runs the quick scale's training steps, against
the reference machine the plan's costs (``lpdt.cost.runtime``) were measured on.

What it times: one node's eager training step (forward, loss, backward, SGD step) of the claims'
problem, the runs that fill most of the quick scale's hour (ResNet-8, 12 px, 8 images per node,
Range-EvoNorm with 2 chunks in 8-bit), one torch thread, as each training job runs.

- **Wall time, as the jobs are measured.** An earlier probe timed the process's CPU time, so
  that other processes would not count. On a virtual machine that leaves out the time the
  hypervisor gives to other guests (steal time): on one VM that probe read 1.85x faster than
  the reference while the jobs ran at the reference's costs. The probe reports the steal share
  it saw (``/proc/stat``), so such a machine says so.
- **As many copies at once as the plan has job slots**, started together: two jobs on two
  cores share caches, memory bandwidth and (on a VM) host cores, and a process already
  running on the machine slows two copies as it will slow two jobs.
- **Eager, not compiled**: compiling the steps would take 5-10 s with inductor's cache warm and
  a minute or more cold. At these shapes an eager step is, like a compiled one, mostly
  per-operator overhead: the same kind of work for the CPU.

``probe_speed`` returns ms per step per precision (the mean over the copies); ``speed_factors``
divides them by the reference machine's (``PROBE_REF_MS``), and ``runtime.run_seconds(...,
speed=...)`` scales the fitted costs by them. ``measure`` does both and writes the plan's line.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import statistics
import time
from collections.abc import Mapping
from pathlib import Path
from queue import Empty

PROBE_MODEL = "resnet8"
PROBE_BATCH = 8
PROBE_PX = 12
PROBE_WARMUP = 5
# Each precision is timed for at least this long per copy (and PROBE_MIN_STEPS steps), so that
# copies started a fraction of a second apart still overlap for most of it.
PROBE_SECONDS = 5.0
PROBE_MIN_STEPS = 10
# ms per probe step (fp32, 8-bit) on the reference machine (``runtime.REFERENCE``), two copies at
# once, the machine idle but for the probe: the median of ``benchmarks/bench_runtime.py --probe 5
# --jobs 2`` on 2026-11-26 (fp32 3.66-3.90, 8-bit 8.02-8.30), with the eager 8-bit quantiser
# kernel (lpdt.layers.quant.kernel; before it, 8-bit 12.78-13.16, recorded as 13.0), on the
# machine whose fresh-clone runs the quick scale's costs were fitted and checked on.
# Refit the costs and record the probe together.
PROBE_REF_MS: dict[str, float] = {"fp32": 3.8, "int8": 8.2}
PRECISION_NAMES = {"fp32": "fp32", "int8": "8-bit"}
_TIMEOUT_S = 300.0  # a copy that has not reported by then has hung


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


def probe_step_ms(
    precision: str,
    seconds: float = PROBE_SECONDS,
    warmup: int = PROBE_WARMUP,
    min_steps: int = PROBE_MIN_STEPS,
    barrier: object | None = None,
) -> float:
    """Wall ms per step of the probe's timed steps in ``precision`` (after ``warmup`` untimed
    ones; at least ``min_steps``, for at least ``seconds``), one torch thread.

    Their total time over their number, not a median: a process sharing a core loses whole time
    slices, which the median of short steps does not see. The caller's thread count and random
    state are restored. ``barrier`` (a multiprocessing Barrier): wait there after the warm-up,
    so that copies in other processes time their steps together."""
    if precision not in PROBE_REF_MS:
        raise ValueError(f"precision {precision!r}: allowed {', '.join(PROBE_REF_MS)}")
    if min_steps < 1 or warmup < 0 or seconds < 0:
        raise ValueError(f"min_steps {min_steps} (>= 1), warmup {warmup}, seconds {seconds} (>= 0)")
    import torch

    from lpdt.config import load_config
    from lpdt.engine.steps import Steps
    from lpdt.models import build_model

    overrides = [f"model.name={PROBE_MODEL}", f"precision.mode={precision}", "model.range_chunks=2"]
    if precision == "int8":
        overrides.append("model.norm=rangeen")
    cfg = load_config(None, overrides)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
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
            if barrier is not None:
                barrier.wait(_TIMEOUT_S)  # type: ignore[attr-defined]
            steps, start = 0, time.perf_counter()
            while steps < min_steps or time.perf_counter() - start < seconds:
                step()
                steps += 1
            elapsed = time.perf_counter() - start
    finally:
        torch.set_num_threads(threads)
    return elapsed / steps * 1e3


def _copy(seconds: float, warmup: int, min_steps: int, barrier, queue) -> None:
    """One probe copy in its own process: puts {precision: ms}, or the error's text."""
    try:
        queue.put({p: probe_step_ms(p, seconds, warmup, min_steps, barrier) for p in PROBE_REF_MS})
    except BaseException as e:  # reported to the parent, which raises it
        queue.put(f"{type(e).__name__}: {e}")


def probe_speed(
    slots: int = 1,
    seconds: float = PROBE_SECONDS,
    warmup: int = PROBE_WARMUP,
    min_steps: int = PROBE_MIN_STEPS,
) -> dict[str, float]:
    """ms per probe step on this machine, per precision of ``PROBE_REF_MS``: ``slots`` copies
    at once (each in its own process when ``slots`` > 1), the mean over the copies."""
    if slots < 1:
        raise ValueError(f"slots {slots}: must be at least 1")
    if slots == 1:
        return {p: probe_step_ms(p, seconds, warmup, min_steps) for p in PROBE_REF_MS}
    ctx = mp.get_context("spawn")  # a fresh interpreter: no fork of a threaded parent
    barrier, queue = ctx.Barrier(slots), ctx.Queue()
    procs = [
        ctx.Process(target=_copy, args=(seconds, warmup, min_steps, barrier, queue))
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
    return {p: statistics.fmean(g[p] for g in got) for p in PROBE_REF_MS}


def speed_factors(
    measured: Mapping[str, float], reference: Mapping[str, float] = PROBE_REF_MS
) -> dict[str, float]:
    """precision -> measured / reference ms per probe step (2.0: this machine is twice as slow)."""
    if set(measured) != set(reference):
        raise ValueError(
            f"probe timings for {sorted(measured)}, reference for {sorted(reference)}: "
            "they must name the same precisions"
        )
    for p, ms in [*measured.items(), *reference.items()]:
        if not (math.isfinite(ms) and ms > 0):
            raise ValueError(f"probe time {ms!r} ms ({p}): must be a positive number")
    return {p: measured[p] / reference[p] for p in reference}


def probe_line(
    measured: Mapping[str, float],
    slots: int,
    steal: float = 0.0,
    reference: Mapping[str, float] = PROBE_REF_MS,
) -> str:
    """The plan's one line on the probe: ms per step here (``slots`` copies at once), the
    reference's, the factor, and the hypervisor's steal share if it took any."""
    factors = speed_factors(measured, reference)
    parts = [
        f"{PRECISION_NAMES.get(p, p)} {measured[p]:.1f} ms/step "
        f"(reference {reference[p]:.1f}, ×{factors[p]:.2f})"
        for p in reference
    ]
    stolen = f"; the hypervisor took {steal:.0%} of the CPU" if steal >= 0.01 else ""
    return f"speed probe ({slots} at once): {', '.join(parts)}{stolen}: estimates scaled"


def measure(slots: int) -> tuple[dict[str, float], str]:
    """Run the probe with ``slots`` copies at once: (ms per step per precision, the plan's line)."""
    before = _cpu_times()
    measured = probe_speed(slots)
    return measured, probe_line(measured, slots, steal_share(before, _cpu_times()))
