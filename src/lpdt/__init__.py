"""lpdt: Low Precision Decentralized Distributed Training (a reproduction pipeline)."""

import os as _os
from pathlib import Path as _Path

__version__ = "0.1.0"


def default_inductor_cache_dir() -> _Path:
    """Where torch.compile's on-disk caches go unless ``TORCHINDUCTOR_CACHE_DIR`` is set
    (``lpdt.engine.steps``): ``$XDG_CACHE_HOME/lpdt/torchinductor``, else ``~/.cache/lpdt/torchinductor``,
    which survives reboots, unlike torch's ``/tmp/torchinductor_$USER``."""
    base = _os.environ.get("XDG_CACHE_HOME") or _Path.home() / ".cache"
    return _Path(base) / "lpdt" / "torchinductor"


# Set here, before anything imports torch._dynamo: that import writes torch's own default into
# the environment, after which a later default would never apply.
_os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(default_inductor_cache_dir()))
