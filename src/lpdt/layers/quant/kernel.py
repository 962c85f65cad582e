"""The one-pass quantiser of the eager CPU path: a C++ kernel (``kernel.cpp``) built on first use.

Eagerly, ``quantizers.quantize`` with stochastic rounding is about twenty tensor operations, each
a pass over the tensor (the step, subtract, divide, the hash's shifts, multiplies and xors,
clamp, round, rescale), and ``quantize_minmax`` adds ``amin`` and ``amax``. This kernel does the
same float32 arithmetic in the same order in one vectorised loop (and the range first, for
``quantize_minmax``), so it gives the same bits (``tests/layers/test_quant_kernel.py``).
Measured on the 2-core reference CPU, one thread (docs/int8.md, "The eager quantiser kernel"):
eager 8-bit training steps 14-35 % faster (the small tensors of the quick scale gain most), the
8-bit ResNet-8 evaluation forward at batch 500 about 1.8x faster.

Compiled graphs keep the tensor operations: inductor fuses them into its own kernels, and this
kernel as a custom operator inside the compiled 8-bit step measured slower (4.1 against 3.2 ms
per node step at the quick scale's claim shape): an opaque call breaks inductor's fusion.

Built with ``torch.utils.cpp_extension`` (g++ and ninja; ``make setup`` installs Debian's
``ninja-build``) into ``$TORCH_EXTENSIONS_DIR/lpdt_quant`` or ``~/.cache/lpdt/torch_extensions``.
The first build takes about 17 s; later processes load it in milliseconds.
If it cannot be built, one warning, and the tensor operations run (the same values, slower).
``LPDT_QUANT_KERNEL=0`` turns it off.
"""

from __future__ import annotations

import os
import shutil
import warnings
from pathlib import Path
from types import ModuleType

ENV = "LPDT_QUANT_KERNEL"  # "0": tensor operations only
NAME = "lpdt_quant"
SOURCE = Path(__file__).with_name("kernel.cpp")
CFLAGS = ["-O3", "-ffp-contract=off", "-fno-math-errno"]

_loaded: ModuleType | None = None
_failed: str | None = None  # why the kernel is not available (set once)


def build_dir() -> Path:
    """Where the kernel is built: ``$TORCH_EXTENSIONS_DIR/lpdt_quant``, else
    ``$XDG_CACHE_HOME/lpdt/torch_extensions/lpdt_quant`` (default ``~/.cache``)."""
    if os.environ.get("TORCH_EXTENSIONS_DIR"):
        return Path(os.environ["TORCH_EXTENSIONS_DIR"]) / NAME
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "lpdt" / "torch_extensions" / NAME


def enabled() -> bool:
    """Whether the kernel may be used (``LPDT_QUANT_KERNEL`` is not ``0``)."""
    return os.environ.get(ENV, "1") != "0"


def load() -> ModuleType | None:
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
                stacklevel=3,
            )
            return None
    return _loaded


def _build() -> ModuleType:
    if shutil.which("ninja") is None:
        raise RuntimeError("ninja is not on PATH")
    from torch.utils.cpp_extension import load as load_extension

    where = build_dir()
    where.mkdir(parents=True, exist_ok=True)
    # torch serialises builds into one directory with an OS file lock (released when its holder
    # dies): two jobs starting at once build it once.
    return load_extension(
        NAME, [str(SOURCE)], extra_cflags=CFLAGS, build_directory=str(where), verbose=False
    )
