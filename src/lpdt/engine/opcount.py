"""Counting what a step dispatches, on any device: aten operations and host synchronisations.

On a GPU an eager step's time is mostly its number of kernel launches (docs/engine.md, "On a
GPU"), and a step that reads a tensor's value on the host (``.item()``, ``int(t)``, a Python
``if`` on a tensor) waits there for the device to finish everything queued before. Both can be
counted on the CPU: every aten operation passes a Python dispatch mode, and each of those reads
is one ``aten._local_scalar_dense`` (an operation whose output is sized by the values, such as
a boolean mask, makes the host wait too, and counts with them). So the tests pin the step's host
synchronisations at zero (``tests/engine/test_host_syncs.py``, eager; the compiled steps'
equality tests) and ``benchmarks/bench_compile.py`` records its operations, with no GPU.

Some waits dispatch nothing on the CPU: ``.tolist()`` and ``.numpy()`` of a CPU tensor read its
memory directly, and ``t.to(device)`` on a CPU run copies nothing, where on a GPU it is a copy
that waits for the device (``lpdt.transfer``). ``TransferCounter`` sees them one level up, as
the Python calls they are. Together the two count the waits of the calls lpdt's training
iteration makes, on any device (``tests/engine/test_host_syncs.py``); they are not a list of
every torch call that waits (``torch.equal`` and ``bincount`` count; ``np.asarray(t)`` or
``t.new_tensor(...)`` would not).

A compiled graph runs its kernels without passing the dispatch mode; what it cannot hold (a
host read) is a graph break, which ``fullgraph=True`` and ``torch._dynamo.explain`` catch.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
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
# Indexing operations, which with a boolean mask (``t[t > 0]``) find the kept positions first.
_INDEXING = frozenset(("aten.index.Tensor", "aten.index_put.default", "aten.index_put_.default"))
# Operations that make a GPU's host wait for the values (on the CPU they dispatch no host read
# of their own): those whose output's size depends on them, and ``equal`` (a Python bool).
WAITS_FOR_VALUES = frozenset(
    f"aten.{name}"
    for name in (
        "nonzero.default",
        "masked_select.default",
        "_unique2.default",
        "unique_consecutive.default",
        "unique_dim.default",
        "repeat_interleave.Tensor",
        "bincount.default",
        "equal.default",
    )
)


class OpCounter(TorchDispatchMode):
    """Counts the aten operations dispatched inside the block, by name.

    ``with OpCounter() as c: step()``, then ``c.total`` and ``c.host_syncs``."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter[str] = Counter()
        self.bool_masks = 0  # indexing operations with a boolean mask, among ``counts``

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        name = str(func)
        self.counts[name] += 1
        if name in _INDEXING and any(
            i is not None and i.dtype == torch.bool for i in args[1]
        ):  # the kept positions are found first (nonzero): sized by the values
            self.bool_masks += 1
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
        """The reads of a tensor's value on the host, and the operations sized by values (each
        a device synchronisation on a GPU)."""
        waits = (HOST_SYNC, *WAITS_FOR_VALUES)
        return sum(self.counts[name] for name in waits) + self.bool_masks


# Reads of a tensor's memory on the host that dispatch no aten operation for a CPU tensor.
_HOST_READS = {torch.Tensor.tolist: "tolist", torch.Tensor.numpy: "numpy"}
# Copies to the host, each a wait for the device on a GPU.
_TO_HOST = {torch.Tensor.cpu: "cpu"}


class TransferCounter(TorchFunctionMode):
    """Counts the Python calls inside the block that make a GPU's host wait for the device
    whatever device the tensors are on now: reads of a tensor's memory (``tolist``, ``numpy``),
    copies to the host (``cpu()``), and copies that name a device (``to(device)``, ``cuda()``,
    ``torch.tensor(..., device=...)``) other than ``lpdt.transfer.to_device``'s queued ones
    (``non_blocking=True`` from the host). ``counts`` by kind; ``total``."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter[str] = Counter()

    def __torch_function__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        kind = _HOST_READS.get(func) or _TO_HOST.get(func)
        if kind is None and func is torch.Tensor.cuda:
            kind = "cuda"
        elif kind is None and func is torch.Tensor.to and _waits(args, kwargs):
            kind = "to(device)"
        elif kind is None and func in (torch.tensor, torch.as_tensor) and kwargs.get("device"):
            kind = f"{func.__name__}(device=)"
        if kind is not None:
            self.counts[kind] += 1
        return func(*args, **kwargs)

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def _waits(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether ``Tensor.to(*args, **kwargs)`` names a device and is not a queued copy from the
    host (``non_blocking=True`` on a host tensor). The arguments are read as ``Tensor.to`` reads
    them (``torch._C._nn._parse_to``: a device, a string, an index, another tensor), without
    ``copy``, which it refuses (a keyword, or the last positional argument)."""
    rest = list(args[1:])
    kw = {k: v for k, v in kwargs.items() if k != "copy"}
    try:
        device, _, non_blocking, _ = torch._C._nn._parse_to(*rest, **kw)
    except RuntimeError:  # a positional ``copy``
        device, _, non_blocking, _ = torch._C._nn._parse_to(*rest[:-1], **kw)
    return device is not None and not (non_blocking and args[0].device.type == "cpu")


class OutsideGraphCounter(OpCounter):
    """``OpCounter`` under which compiled code runs compiled: it counts only the operations
    dispatched outside the compiled graphs, which is where a compiled step can read the host
    (the eager code between two graphs at a graph break) and what its wrappers dispatch (extern
    kernels such as convolutions, autograd's own operations).

    Under a plain ``OpCounter`` dynamo runs a compiled function's frame eagerly, so what is
    counted is the eager step's operations; and torch 2.11 (the GPU machines') then never
    compiles that function again in the process: a later ``Steps`` of another shape ran eagerly
    while its log said it compiled (tests/engine/test_steps.py failed on 2.11 after the count,
    2026-11-30)."""

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        return True


def count_ops(fn: Any, *args: Any, **kwargs: Any) -> tuple[Any, OpCounter]:
    """``fn(*args, **kwargs)`` and what it dispatched, run eagerly (a compiled ``fn`` too)."""
    with OpCounter() as counter:
        out = fn(*args, **kwargs)
    return out, counter


def count_compiled_ops(fn: Any, *args: Any, **kwargs: Any) -> tuple[Any, OpCounter]:
    """``fn(*args, **kwargs)`` with its compiled parts running compiled, and what it
    dispatched outside their graphs (``OutsideGraphCounter``)."""
    with OutsideGraphCounter() as counter:
        out = fn(*args, **kwargs)
    return out, counter


_COUNTS_COMPILED: bool | None = None


def counter_sees_compiled_code() -> bool:
    """Whether compiled code runs compiled under ``OutsideGraphCounter`` on this torch (checked
    once with a backend whose graph dispatches nothing: under the counter the compiled function
    then counts 0 operations, its eager run 1). True on torch 2.11 and 2.14.1."""
    global _COUNTS_COMPILED
    if _COUNTS_COMPILED is None:
        marker = torch.zeros(1)

        def backend(gm: Any, example_inputs: Any) -> Any:
            return lambda *args: (marker,)

        def probe(t: torch.Tensor) -> torch.Tensor:
            return t + 1

        fn = torch.compile(probe, backend=backend, dynamic=False)
        t = torch.ones(1)
        try:
            fn(t)
            with OutsideGraphCounter() as counter:
                out = fn(t)
            _COUNTS_COMPILED = counter.total == 0 and out is marker
        except Exception:  # an older torch without the hook or the custom backend's calling form
            _COUNTS_COMPILED = False
    return _COUNTS_COMPILED


def inductor_kernels() -> int:
    """Kernels inductor has generated in this process so far (``torch._inductor.metrics``)."""
    from torch._inductor import metrics

    return int(metrics.generated_kernel_count)
