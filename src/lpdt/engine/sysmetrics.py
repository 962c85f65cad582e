"""System metrics of a training process: CPU share, peak resident memory, threads, images/s.

``SystemSampler`` is started when training starts; the trainer calls ``epoch`` at the end of every
epoch (its values go into that epoch's history row) and ``summary`` once at the end (the record's
``system`` section, ``lpdt.record.SystemMetrics``). It measures the process it runs in: CPU time
is ``time.process_time`` (user + system, all threads), peak memory ``getrusage``'s
``ru_maxrss``, threads the kernel's count for the process (``/proc/self/status``; Python's own
count elsewhere, which misses native threads such as PyTorch's pools).

CPU share is the CPU time over the wall time times the host's logical cores, in %: 100 % is
every core busy, ``100 / cpu_count`` % one core.
"""

from __future__ import annotations

import os
import platform
import resource
import sys
import threading
import time
from pathlib import Path

from lpdt.record import SystemMetrics


def cpu_model() -> str | None:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else the platform's), or None."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model", "Hardware") and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or None


def threads() -> int:
    """OS threads of this process."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Threads:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return threading.active_count()


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, MiB (``ru_maxrss``: KiB on Linux, bytes on
    macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10


class SystemSampler:
    """Per-epoch and whole-session system metrics of this process (see the module docstring)."""

    def __init__(self, images: float = 0.0, train_s: float = 0.0) -> None:
        """Start measuring; ``images`` and ``train_s`` are the training images and time already
        counted when training starts (a resumed run: those of the earlier sessions)."""
        self.cpu_count = os.cpu_count()
        self.t0 = self.t_last = time.perf_counter()
        self.cpu0 = self.cpu_last = time.process_time()
        self.images_last, self.train_s_last = images, train_s
        self.threads_max = threads()

    def _share(self, cpu_s: float, wall_s: float) -> float | None:
        if wall_s <= 0 or not self.cpu_count:
            return None
        return 100.0 * cpu_s / (wall_s * self.cpu_count)

    def epoch(self, images: float, train_s: float) -> dict[str, float | int | None]:
        """The history-row fields of the epoch that just ended: ``images`` is the number of
        training images processed so far (all nodes), ``train_s`` the time spent in training
        epochs so far (both counted as at construction)."""
        now, cpu = time.perf_counter(), time.process_time()
        share = self._share(cpu - self.cpu_last, now - self.t_last)
        n_threads = threads()
        self.threads_max = max(self.threads_max, n_threads)
        ips = None
        if train_s > self.train_s_last:
            ips = (images - self.images_last) / (train_s - self.train_s_last)
        self.t_last, self.cpu_last = now, cpu
        self.images_last, self.train_s_last = images, train_s
        return {
            "cpu_share": share,
            "peak_rss_mb": peak_rss_mb(),
            "threads": n_threads,
            "images_per_s": ips,
        }

    def summary(self) -> SystemMetrics:
        """The whole session so far, for the record's ``system`` section."""
        cpu_s = time.process_time() - self.cpu0
        self.threads_max = max(self.threads_max, threads())
        return SystemMetrics(
            cpu_model=cpu_model(),
            cpu_count=self.cpu_count,
            cpu_s=cpu_s,
            cpu_share=self._share(cpu_s, time.perf_counter() - self.t0),
            peak_rss_mb=peak_rss_mb(),
            threads_max=self.threads_max,
        )
