"""Helpers for tests that start an HTTP server (MLflow) on 127.0.0.1."""

from __future__ import annotations

import subprocess
import time
import urllib.request
from collections.abc import Callable


def wait_until_healthy(
    base_url: str, proc: subprocess.Popen, output: Callable[[], str], timeout_s: float = 120
) -> None:
    """Poll ``base_url/health`` until it answers; fail with the server's output if the process
    exits first, or with a timeout message after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        assert proc.poll() is None, output()[-2000:]
        try:
            urllib.request.urlopen(f"{base_url}/health", timeout=2)
            return
        except OSError:
            assert time.monotonic() < deadline, f"{base_url} did not answer in {timeout_s:.0f} s"
            time.sleep(0.5)
