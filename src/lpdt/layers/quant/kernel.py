"""The one-pass quantiser of the eager CPU path: a C++ kernel (``kernel.cpp``) built on first use.

Eagerly, ``quantizers.quantize`` with stochastic rounding is about twenty tensor operations, each
a pass over the tensor (the step, subtract, divide, the hash's shifts, multiplies and xors,
clamp, round, rescale), and ``quantize_minmax`` adds ``amin`` and ``amax``. This kernel does the
same float32 arithmetic in the same order in one vectorised loop (and the range first, for
``quantize_minmax``), so it gives the same bits (``tests/layers/test_quant_kernel.py``).
Measured on the 2-core reference CPU, one thread (docs/notebook/2026-11-23-int8-measurements.md):
eager 8-bit training steps 14-35 % faster (the small tensors of the quick scale gain most), the
8-bit ResNet-8 evaluation forward at batch 500 about 1.8x faster.

Compiled graphs keep the tensor operations: inductor fuses them into its own kernels, and this
kernel as a custom operator inside the compiled 8-bit step measured slower (4.1 against 3.2 ms
per node step at the quick scale's claim shape): an opaque call breaks inductor's fusion.

Built with ``torch.utils.cpp_extension`` (g++ and ninja; ``make setup`` installs Debian's
``ninja-build``) into ``build_dir()``: one directory per (torch version, Python, machine,
compiler and flags, torch installation, source text), so that two virtual environments never
share a binary or a lock. The first build takes about 15 s; later processes load it in
milliseconds. Waits on a build are bounded (``BUILD_WAIT_S``, ``LPDT_QUANT_BUILD_WAIT``): a
process that cannot have the build directory in time, or cannot build the kernel at all, warns
once and runs the tensor operations (the same values, slower). ``LPDT_QUANT_KERNEL=0`` turns the kernel off.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import sys
import warnings
from pathlib import Path
from types import ModuleType

from lpdt.errors import LpdtError

ENV = "LPDT_QUANT_KERNEL"  # "0": tensor operations only
WAIT_ENV = "LPDT_QUANT_BUILD_WAIT"  # seconds a process waits for another's build (BUILD_WAIT_S)
NAME = "lpdt_quant"
SOURCE = Path(__file__).with_name("kernel.cpp")
CFLAGS = ["-O3", "-ffp-contract=off", "-fno-math-errno"]
# A build takes about 15 s alone, up to a minute beside a cold torch.compile: three minutes is a
# build that is not coming (a hung or stopped process holding the lock). Waiting longer costs
# more than the tensor operations do (an 8-bit job about 1.6x slower for its eager steps).
BUILD_WAIT_S = 180.0
LOCK = "lpdt.lock"  # our OS lock in the build directory (torch's own is ``lock``)

_loaded: ModuleType | None = None
_failed: str | None = None  # why the kernel is not available (set once)


class BuildWaitTimeout(LpdtError, RuntimeError):
    """Another process held the kernel's build directory for longer than the wait allowed."""


def build_key() -> str:
    """What the built binary depends on, as a directory name: torch's version, the Python ABI,
    the machine, and a hash of the compiler, the flags (``$CXX``, ``CFLAGS``), the torch
    installation it compiles against and links to (its directory: each virtual environment
    has its own) and the source's text. With the text rather than the path of the source
    (``_build`` compiles a copy kept in the build directory), checkouts that share a virtual
    environment share one build; with the torch directory, two environments (a fresh clone's
    own ``.venv`` beside another) each keep theirs: keyed by neither, each rebuilt the kernel
    over the other's (17-33 s each time, 2026-11-28)."""
    import torch

    digest = hashlib.sha256(" ".join([os.environ.get("CXX", "c++"), *CFLAGS]).encode())
    digest.update(str(Path(torch.__file__).resolve().parent).encode())
    digest.update(SOURCE.read_bytes())
    return (
        f"torch{torch.__version__}-{sys.implementation.cache_tag}-{platform.machine()}-"
        f"{digest.hexdigest()[:8]}"
    )


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


def load(stacklevel: int = 3) -> ModuleType | None:
    """The built kernel module (``quantize``, ``quantize_minmax``: ``kernel.cpp``), or None where
    it is turned off or cannot be built (then a warning, once per process, says why)."""
    global _loaded, _failed
    if not enabled() or _failed is not None:
        return None
    if _loaded is None:
        try:
            _loaded = _build()
        except Exception as e:  # noqa: BLE001 - any build failure: the tensor operations still work
            lines = str(e).strip().splitlines()
            _failed = f"{type(e).__name__}: {lines[-1] if lines else ''}"
            warnings.warn(
                f"lpdt: the eager quantiser kernel could not be built ({_failed}); the 8-bit "
                "layers use tensor operations instead (the same values, slower). It needs g++ "
                f"and ninja (`make setup` installs ninja-build); set {ENV}=0 to silence this.",
                RuntimeWarning,
                stacklevel=stacklevel,
            )
            return None
    return _loaded


def _build() -> ModuleType:
    if shutil.which("ninja") is None:
        raise RuntimeError("ninja is not on PATH")
    from filelock import FileLock, Timeout  # torch's own dependency
    from torch.utils.cpp_extension import load as load_extension

    where = build_dir()
    where.mkdir(parents=True, exist_ok=True)
    wait_s = build_wait_s()
    # Two jobs starting at once build the kernel once: our OS lock (released by the kernel when
    # its holder dies, so it is never stale), held for a bounded time. torch's own lock in the
    # same directory may wait without end: some torch versions block while a file named `lock`
    # merely exists, and a build killed halfway leaves one. Holding our lock, no other lpdt
    # process builds here (the directory is keyed to this torch), so such a file is stale.
    try:
        with FileLock(where / LOCK, timeout=wait_s):
            (where / "lock").unlink(missing_ok=True)
            # The copy is written once (its text is in the directory's key), so its time stamp,
            # which ninja compares with the binary's, stays that of the first build.
            source = where / SOURCE.name
            if not source.exists() or source.read_bytes() != SOURCE.read_bytes():
                shutil.copyfile(SOURCE, source)
            return load_extension(
                NAME, [str(source)], extra_cflags=CFLAGS, build_directory=str(where), verbose=False
            )
    except Timeout:
        raise BuildWaitTimeout(
            f"{where / LOCK} was held by another process for {wait_s:g} s ({WAIT_ENV} sets the "
            "wait)"
        ) from None
