"""A key for the compiler's on-disk caches from the quantisers' sources, which a traced graph
does not show.

Why: inductor's and AOTAutograd's caches key a compiled step by its traced graph, in which the
8-bit layers' operators (``operators``, ``vmap_ops``) appear by name only. Their vmap rules,
fake implementations and inductor lowerings (``lowering``) are not in the key, so a process
running a changed rule or lowering was handed the code compiled before the change: when an
experiment gave the batched convolution's operator one more operand, the cached code called it
with the old ones (a crash; a changed arithmetic would have run silently;
docs/notebook/2026-11-30-fused-gradient-quantiser-copy.md). ``SourceKey`` is a post-grad pass
that changes nothing; inductor puts its ``uuid``, a hash of this package's sources, in the key.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from torch._inductor.custom_graph_pass import CustomGraphPass

PACKAGE = Path(__file__).parent


class SourceKey(CustomGraphPass):
    """A pass that does nothing, keyed by the sources (``*.py``, ``*.cpp``) in ``folder``."""

    def __init__(self, folder: Path = PACKAGE) -> None:
        self.folder = folder

    def __call__(self, graph: Any) -> None:  # noqa: D102
        return None

    def uuid(self) -> bytes:
        """A hash of the folder's sources, read now: an edit in a running process counts too."""
        digest = hashlib.sha256()
        for path in sorted(p for p in self.folder.iterdir() if p.suffix in (".py", ".cpp")):
            data = path.read_bytes()
            digest.update(f"{path.name}\0{len(data)}\0".encode() + data)
        return digest.digest()
