"""Counting what a step dispatches, on any device: aten operations and host synchronisations.

On a GPU an eager step's time is mostly its number of kernel launches (docs/engine.md, "On a
GPU"), and a step that reads a tensor's value on the host (``.item()``, ``int(t)``, a Python
``if`` on a tensor) waits there for the device to finish everything queued before. Both can be
counted on the CPU: every aten operation passes a Python dispatch mode, and each of those reads
is one ``aten._local_scalar_dense``. So the tests pin the step's host synchronisations at zero
(``tests/engine/test_host_syncs.py``, eager; the compiled steps' equality tests) and
``benchmarks/bench_compile.py`` records its operations, with no GPU. (``.tolist()`` and
``.numpy()`` of a CPU tensor read its memory without dispatching: on the CPU they are invisible
here.)

A compiled graph runs its kernels without passing the dispatch mode; what it cannot hold (a
host read) is a graph break, which ``fullgraph=True`` and ``torch._dynamo.explain`` catch.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from torch.utils._python_dispatch import TorchDispatchMode

# Operations that only make a new view of a tensor's memory (no kernel on a GPU).
VIEWS = frozenset(
    f"aten.{name}"
    for name in (
        "view.default",
        "_unsafe_view.default",
        "detach.default",
        "alias.default",
        "unsqueeze.default",
        "squeeze.dim",
        "squeeze.dims",
        "select.int",
        "slice.Tensor",
        "transpose.int",
        "t.default",
        "permute.default",
        "expand.default",
        "as_strided.default",
        "unbind.int",
        "split.Tensor",
        "view_as.default",
    )
)

# The operation a host read of a tensor's value dispatches (``item``, ``int``, ``float``,
# ``bool``, and a Python branch on a tensor, via ``is_nonzero``).
HOST_SYNC = "aten._local_scalar_dense.default"


class OpCounter(TorchDispatchMode):
    """Counts the aten operations dispatched inside the block, by name.

    ``with OpCounter() as c: step()``, then ``c.total`` and ``c.host_syncs``."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter[str] = Counter()

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        self.counts[str(func)] += 1
        return func(*args, **(kwargs or {}))

    @property
    def total(self) -> int:
        """Every aten operation, views included."""
        return sum(self.counts.values())

    @property
    def launches(self) -> int:
        """The operations that are not views (``VIEWS``): each a kernel launch on a GPU."""
        return sum(n for name, n in self.counts.items() if name not in VIEWS)

    @property
    def host_syncs(self) -> int:
        """The reads of a tensor's value on the host (each a device synchronisation on a GPU)."""
        return self.counts[HOST_SYNC]


def count_ops(fn: Any, *args: Any, **kwargs: Any) -> tuple[Any, OpCounter]:
    """``fn(*args, **kwargs)`` and what it dispatched."""
    with OpCounter() as counter:
        out = fn(*args, **kwargs)
    return out, counter


def inductor_kernels() -> int:
    """Kernels inductor has generated in this process so far (``torch._inductor.metrics``)."""
    from torch._inductor import metrics

    return int(metrics.generated_kernel_count)
