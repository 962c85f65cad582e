"""Running statistics of the 8-bit layers (activation ranges, Range-BN's mean and scale): each
training forward moves them towards the batch's, ``r <- lerp(r, batch, momentum)``.

Updated where the layer runs, each update is its own small operation: two per activation
quantiser, on a GPU a kernel launch each, and inside a compiled graph a kernel and a write into
a graph input each (about 50 of an 8-bit ResNet-8 step's 394 kernels at the claims' shape,
docs/notebook/2026-11-28-8bit-kernels-by-kind.md). The training steps instead collect a step's
updates (``collecting``) and apply them after its backward, together (``apply``): one
``_foreach_lerp_`` per momentum, the same arithmetic as the layers' ``lerp_``, so the same values.
Nothing reads a running statistic in a training forward (training uses the batch's), so when
within the step they are written changes nothing. Outside a collecting block (the final gossip
rounds' forwards, a layer called on its own) ``update_running`` updates at once.

Under ``torch.func.vmap`` (the batched step) a node's batch value cannot leave the vmapped
function except as its output: ``lpdt.engine.batched`` collects inside it and returns them.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from lpdt.layers.quant.quantizers import is_vmapped
from lpdt.layers.quant.spec import RANGE_MOMENTUM

# One collected update: (the layer, its buffer's name, the batch value, the momentum).
Update = tuple[nn.Module, str, torch.Tensor, float]

# The enclosing collecting block's list (None: update at once). A plain list swapped in and out
# by ``collecting`` / ``collected`` (not a context manager): dynamo traces the swap and replays
# the appends of a compiled step as it replays any side effect of a compiled function.
_collected: list[Update] | None = None


def collecting() -> list[Update] | None:
    """Start collecting the updates; returns what to hand back to ``collected``."""
    global _collected
    saved, _collected = _collected, []
    return saved


def collected(saved: list[Update] | None) -> list[Update]:
    """Stop collecting (``saved``: ``collecting``'s value); returns the updates, in call order."""
    global _collected
    updates, _collected = _collected, saved
    assert updates is not None, "collected() without collecting()"
    return updates


def update_running(
    module: nn.Module, name: str, batch: torch.Tensor, momentum: float = RANGE_MOMENTUM
) -> None:
    """``module.<name> <- lerp(module.<name>, batch, momentum)``: collected inside a collecting
    block, else now, in place (the buffer may be a view of the engine's flat tensor). Under vmap
    out of place and copied back: vmap has no batching rule for an in-place lerp."""
    if _collected is not None:
        _collected.append((module, name, batch.detach(), momentum))
        return
    running = getattr(module, name)
    with torch.no_grad():
        if is_vmapped():
            running.copy_(torch.lerp(running, batch, momentum))
        else:
            running.lerp_(batch, momentum)


@torch.no_grad()
def apply(updates: Sequence[tuple[torch.Tensor, torch.Tensor, float]]) -> None:
    """``running <- lerp(running, batch, momentum)`` for each ``(running, batch, momentum)``, in
    order: one ``_foreach_lerp_`` per momentum (a fused kernel on a GPU), or one by one where a
    buffer appears twice (a layer called twice in a step: the order then matters)."""
    if len({r.data_ptr() for r, _, _ in updates}) < len(updates):
        for running, batch, momentum in updates:
            running.lerp_(batch, momentum)
        return
    groups: dict[float, tuple[list[torch.Tensor], list[torch.Tensor]]] = {}
    for running, batch, momentum in updates:
        runs, batches = groups.setdefault(momentum, ([], []))
        runs.append(running)
        batches.append(batch)
    for momentum, (runs, batches) in groups.items():
        torch._foreach_lerp_(runs, batches, momentum)
