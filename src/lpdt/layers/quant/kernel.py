"""The one-pass quantiser of the eager CPU path: a C++ loop (``kernel.cpp``) built on first use.

Eagerly, ``quantizers.quantize`` with stochastic rounding is about twenty tensor operations, each
a pass over the tensor (the step, subtract, divide, the hash's shifts, multiplies and xors,
clamp, round, rescale), and ``quantize_minmax`` adds ``amin`` and ``amax``. This kernel does the
same float32 arithmetic in the same order in one vectorised loop, so it gives the same bits
(``tests/layers/test_quant_kernel.py``). Measured on the 2-core reference CPU, one thread
(docs/notebook/2026-11-23-int8-measurements.md): eager 8-bit training steps 14-35 % faster (the
small tensors of the quick scale gain most), the 8-bit ResNet-8 evaluation forward at batch 500
about 1.8x faster. Those were measured with the earlier build against ATen and pybind11; the
``ctypes`` call costs about 2 us more per call (an eager 8-bit step at the claims' shape x1.027,
docs/notebook/2026-11-28-quant-kernel-c-abi.md), and the build 0.13 s instead of 12.6 s.

Compiled graphs keep the tensor operations: inductor fuses them into its own kernels, and this
kernel as a custom operator inside the compiled 8-bit step measured slower (4.1 against 3.2 ms
per node step at the quick scale's claim shape): an opaque call breaks inductor's fusion.

The source is plain C++ with a C entry point and no torch headers, compiled by the C++ compiler
(``$CXX``, else ``c++``) in well under a second, and called through ``ctypes`` with the tensors'
data pointers. It is built into ``build_dir()``: one directory per (machine, compiler and flags,
source text); the binary depends on nothing else (not on torch, not on Python's ABI), so every
environment of a machine shares it. It is compiled under a new name and renamed into place, so
a process never loads half a library. Waits on another process's build are bounded
(``BUILD_WAIT_S``, ``LPDT_QUANT_BUILD_WAIT``): a process that cannot have the build directory in
time, or cannot build the kernel at all (no compiler), warns once and runs the tensor operations
(the same values, slower). ``LPDT_QUANT_KERNEL=0`` turns the kernel off.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shlex
import shutil
import subprocess
import warnings
from pathlib import Path

import torch

from lpdt.errors import LpdtError

ENV = "LPDT_QUANT_KERNEL"  # "0": tensor operations only
WAIT_ENV = "LPDT_QUANT_BUILD_WAIT"  # seconds a process waits for another's build (BUILD_WAIT_S)
NAME = "lpdt_quant"
SOURCE = Path(__file__).with_name("kernel.cpp")
CFLAGS = ["-O3", "-ffp-contract=off", "-fno-math-errno", "-std=c++17", "-shared", "-fPIC"]
# A build takes well under a second alone: three minutes is a build that is not coming (a hung
# or stopped process holding the lock). Waiting longer costs more than the tensor operations do
# (an 8-bit job about 1.6x slower for its eager steps).
BUILD_WAIT_S = 180.0
COMPILE_TIMEOUT_S = 120.0  # one compiler call; a compiler that hangs is a build that failed
LOCK = "lpdt.lock"  # our OS lock in the build directory
LIBRARY = f"{NAME}.so"

_loaded: Kernel | None = None
_failed: str | None = None  # why the kernel is not available (set once)


class BuildWaitTimeout(LpdtError, RuntimeError):
    """Another process held the kernel's build directory for longer than the wait allowed."""


class Kernel:
    """The built library's entry point as the two tensor functions ``quantizers`` calls."""

    def __init__(self, library: ctypes.CDLL) -> None:
        fn = library.lpdt_quantize
        fn.argtypes = [
            ctypes.c_void_p,  # x
            ctypes.c_void_p,  # out
            ctypes.c_int32,  # n
            ctypes.c_void_p,  # lo: one float32
            ctypes.c_void_p,  # hi
            ctypes.c_float,  # levels
            ctypes.c_float,  # min_step
            ctypes.c_bool,  # stochastic
            ctypes.c_uint32,  # key
        ]
        fn.restype = None
        self._fn = fn

    def quantize(
        self,
        x: torch.Tensor,
        lo: torch.Tensor,
        hi: torch.Tensor,
        levels: float,
        min_step: float,
        stochastic: bool,
        key: int,
    ) -> torch.Tensor:
        """``x`` over ``[lo, hi]``: a new contiguous tensor shaped like ``x``. ``x``, ``lo`` and
        ``hi`` are float32 on the CPU, ``lo`` and ``hi`` of one element, ``x`` of fewer than
        2^31 (``quantizers`` checks this before it asks for the kernel, on every call: here it
        would cost as much again as the call)."""
        xc = x.contiguous()
        out = torch.empty_like(xc)
        self._fn(
            xc.data_ptr(),
            out.data_ptr(),
            xc.numel(),
            lo.data_ptr(),
            hi.data_ptr(),
            levels,
            min_step,
            stochastic,
            key & 0xFFFFFFFF,
        )
        return out

    def quantize_minmax(
        self, x: torch.Tensor, levels: float, min_step: float, stochastic: bool, key: int
    ) -> torch.Tensor:
        """The same over ``x``'s own [min, max] (NaN if ``x`` holds a NaN, as amin / amax);
        ``x`` must not be empty."""
        xc = x.contiguous()
        lo, hi = torch.aminmax(xc)
        return self.quantize(xc, lo, hi, levels, min_step, stochastic, key)


def compiler() -> list[str]:
    """The C++ compiler's command: ``$CXX`` (split as a shell would), else ``c++``."""
    return shlex.split(os.environ.get("CXX", "").strip() or "c++")


def build_key() -> str:
    """What the built binary depends on, as a directory name: the machine, and a hash of the
    compiler, the flags and the source's text. With the text rather than the path of the source
    (the build compiles a copy kept in the build directory), checkouts and environments of one
    machine share one build; nothing of torch or Python is compiled in, so they need not key it."""
    digest = hashlib.sha256(" ".join([*compiler(), *CFLAGS]).encode())
    digest.update(SOURCE.read_bytes())
    return f"{platform.machine()}-{digest.hexdigest()[:12]}"


def build_dir() -> Path:
    """Where the kernel is built: ``<base>/lpdt_quant/<build_key()>``, with ``<base>``
    ``$TORCH_EXTENSIONS_DIR``, else ``$XDG_CACHE_HOME/lpdt/torch_extensions`` (default
    ``~/.cache``)."""
    if os.environ.get("TORCH_EXTENSIONS_DIR"):
        base = Path(os.environ["TORCH_EXTENSIONS_DIR"])
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        base = base / "lpdt" / "torch_extensions"
    return base / NAME / build_key()


def build_wait_s() -> float:
    """Seconds to wait for another process's build: ``$LPDT_QUANT_BUILD_WAIT``, else
    ``BUILD_WAIT_S``."""
    text = os.environ.get(WAIT_ENV, "").strip()
    if not text:
        return BUILD_WAIT_S
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:
        raise ValueError(f"{WAIT_ENV}={text!r}: must be a number of seconds >= 0")
    return seconds


def enabled() -> bool:
    """Whether the kernel may be used (``LPDT_QUANT_KERNEL`` is not ``0``)."""
    return os.environ.get(ENV, "1") != "0"


def unavailable() -> str | None:
    """Why this process runs the tensor operations instead of the kernel (None: it has the
    kernel). Builds it if it has not tried yet (a warning if that fails, as ``load``)."""
    if not enabled():
        return f"turned off ({ENV}=0)"
    return None if load(stacklevel=3) is not None else _failed


def load(stacklevel: int = 3) -> Kernel | None:
    """The built kernel (``Kernel.quantize``, ``Kernel.quantize_minmax``), or None where it is
    turned off or cannot be built (then a warning, once per process, says why)."""
    global _loaded, _failed
    if not enabled() or _failed is not None:
        return None
    if _loaded is None:
        try:
            _loaded = Kernel(ctypes.CDLL(str(build())))
        except Exception as e:  # noqa: BLE001 - any build failure: the tensor operations still work
            lines = str(e).strip().splitlines()
            _failed = f"{type(e).__name__}: {lines[-1] if lines else ''}"
            warnings.warn(
                f"lpdt: the eager quantiser kernel could not be built ({_failed}); the 8-bit "
                "layers use tensor operations instead (the same values, slower). It needs a C++ "
                f"compiler (g++; $CXX names another); set {ENV}=0 to silence this.",
                RuntimeWarning,
                stacklevel=stacklevel,
            )
            return None
    return _loaded


def build() -> Path:
    """The built library's path: built here unless a build of the same key is in place."""
    where = build_dir()
    library = where / LIBRARY
    if library.exists():  # renamed into place whole (below): no lock needed to load it
        return library
    command = compiler()
    if shutil.which(command[0]) is None:
        raise RuntimeError(f"no C++ compiler: {command[0]!r} is not on PATH")
    from filelock import FileLock, Timeout  # torch's own dependency

    where.mkdir(parents=True, exist_ok=True)
    wait_s = build_wait_s()
    # Two jobs starting at once build the kernel once: an OS lock (released by the kernel when its
    # holder dies, so it is never stale), held for a bounded time.
    try:
        with FileLock(where / LOCK, timeout=wait_s):
            if library.exists():  # built by the process we waited for
                return library
            # The copy compiled is kept beside its build: the checkout's file may change later.
            source = where / SOURCE.name
            source.write_bytes(SOURCE.read_bytes())
            partial = where / f"{LIBRARY}.{os.getpid()}.partial"
            try:
                done = subprocess.run(
                    [*command, *CFLAGS, str(source), "-o", str(partial)],
                    capture_output=True,
                    text=True,
                    timeout=COMPILE_TIMEOUT_S,
                )
                if done.returncode != 0:
                    raise RuntimeError(f"{command[0]} failed: {done.stderr.strip()[-2000:]}")
                partial.replace(library)
            finally:  # a failed or timed-out compile leaves no partial file behind
                partial.unlink(missing_ok=True)
            return library
    except Timeout:
        raise BuildWaitTimeout(
            f"{where / LOCK} was held by another process for {wait_s:g} s ({WAIT_ENV} sets the "
            "wait)"
        ) from None
