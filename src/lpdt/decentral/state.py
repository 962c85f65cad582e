"""The flat node state: n model replicas whose gossiped tensors are views into one ``[n, P]`` tensor.

"Nodes are rows" (design principle 1). Each node keeps its own ``nn.Module`` (so forward passes,
BatchNorm statistics and 8-bit range observers work unchanged), but every trainable parameter and
every gossiped buffer of replica i is a *view* into row i of ``x``, and every parameter gradient
is a view into row i of ``grad``. The optimizer step, compression and gossip are then a few
batched tensor operations over ``[n, P]`` with no Python loop over parameters.

Layout of a row: all trainable parameters first (``x[:, :p_train]``, aligned with ``grad``), then
the gossiped buffers (e.g. the 8-bit activation ranges, reference §5.5). Buffers that are not
gossiped (BatchNorm running statistics) stay local to each replica.

Push-sum: ``x`` holds the numerators z_i and ``w`` the push-sum weights w_i (reference §2.4); the
model of node i is the de-biased z_i / w_i. The state owns both: the local step acts on z, and
``gossip(algo)`` adds the algorithm's correction to z and replaces w by the mixed weights (no
algorithm changes them itself). Everything that uses the model itself (forward and backward
passes, evaluation, averaging) goes through ``debiased()`` (the replicas, in place, multiplied
back after) or ``debiased_rows()`` (a copy), and QGM's fold of the gossip correction into its
momentum through ``debias(rows)``: the only places that divide by w.

The rows are the nodes *this process holds*: all n in the simulator, one in a process of the
distributed engine (``lpdt.decentral.group``).

The state is the one owner of these tensors: the trainer (``lpdt.engine.run.Run``) asks it for
whole tasks (``zero_grad``, ``step``, ``gossip``, ``finite_rows``, ``average``, ``preserved``,
``state_dict`` / ``load_state_dict``) and never reads or writes ``x``, ``w``, ``grad`` or the
replicas' buffers itself.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

import torch
from torch import nn

if TYPE_CHECKING:
    from lpdt.decentral.algorithms import Gossip
    from lpdt.decentral.group import NodeGroup
    from lpdt.decentral.optim import LocalOptimizer


@dataclass(frozen=True)
class Segment:
    """One gossiped tensor: its name, where it lives in a row, and whether it is trained."""

    name: str
    offset: int
    numel: int
    shape: tuple[int, ...]
    trainable: bool


def _gossiped_tensors(
    model: nn.Module, gossip_buffers: bool
) -> list[tuple[str, nn.Module, str, bool]]:
    """(qualified name, owning module, attribute name, trainable) in a fixed order.

    Trainable parameters come first in ``model.named_parameters()`` order (the reference's order),
    then the buffers that modules list in their ``gossip_buffers`` attribute.
    """
    out: list[tuple[str, nn.Module, str, bool]] = []
    for mod_name, mod in model.named_modules():
        for p_name, p in mod.named_parameters(recurse=False):
            if p.requires_grad:
                out.append((f"{mod_name}.{p_name}".lstrip("."), mod, p_name, True))
    if gossip_buffers:
        for mod_name, mod in model.named_modules():
            for b_name in getattr(mod, "gossip_buffers", ()):
                out.append((f"{mod_name}.{b_name}".lstrip("."), mod, b_name, False))
    return out


# On a GPU, rows start on 16-byte boundaries (4 float32 entries). torch.compile's GPU code is
# generated for the alignment of the first call's parameters (inductor's example inputs) and, for
# parameters and module buffers ("static inputs"), never checked again: with rows of any length,
# a tensor aligned in node 0's row could be misaligned in node 1's, and the compiled step failed
# with "CUDA error: misaligned address" (found on an H100, docs/engine.md "On a GPU"). With an
# aligned row stride every replica (and every average model, ``model_from``) has each tensor at
# the same offset modulo 16 bytes, so the first call's alignment holds for all. On the CPU
# inductor assumes no alignment, so rows stay contiguous there (same layout, same numbers).
GPU_ROW_ALIGN = 4


class NodeStateDict(TypedDict):
    """What ``NodeState.state_dict`` gives and ``load_state_dict`` takes (the names are those of
    ``lpdt.engine.checkpoint.Checkpoint``'s fields, so that checkpoints keep their keys)."""

    x: torch.Tensor  # the push-sum numerators z, one row per node held
    w: torch.Tensor  # the push-sum weights
    local_buffers: list[dict[str, torch.Tensor]]  # per node: the buffers that are not gossiped


def row_stride(p_total: int, device: torch.device) -> int:
    """Entries from the start of one row of ``x`` to the next (``p_total`` plus padding)."""
    align = GPU_ROW_ALIGN if device.type == "cuda" else 1
    return -(-p_total // align) * align


class NodeState:
    """n replicas of ``model`` (identical initial weights) sharing flat ``x [n, P]`` and ``grad``,
    and their push-sum weights ``w [n]`` (all 1 at the start)."""

    def __init__(
        self,
        model: nn.Module,
        nodes: int,
        device: torch.device | str = "cpu",
        gossip_buffers: bool = True,
    ) -> None:
        device = torch.device(device)
        self.nodes = nodes
        self.device = device
        template = _gossiped_tensors(model, gossip_buffers)
        segments, offset = [], 0
        for name, mod, attr, trainable in template:
            t = getattr(mod, attr)
            segments.append(Segment(name, offset, t.numel(), tuple(t.shape), trainable))
            offset += t.numel()
        self.segments: list[Segment] = segments
        self.p_total = offset
        self.p_train = sum(s.numel for s in segments if s.trainable)
        self.x = torch.zeros(nodes, row_stride(self.p_total, device), device=device)
        self.x = self.x[:, : self.p_total]
        self.grad = torch.zeros(nodes, self.p_train, device=device)
        self.w = torch.ones(nodes, device=device)  # push-sum weights
        # A pristine copy (not bound to x) to build average models from.
        self.template = copy.deepcopy(model).to(device)
        self.models: list[nn.Module] = []
        for i in range(nodes):
            replica = copy.deepcopy(model).to(device)
            self._bind(replica, i, gossip_buffers)
            self.models.append(replica)

    def _bind(self, replica: nn.Module, i: int, gossip_buffers: bool) -> None:
        """Copy the replica's values into row i and make its tensors views of that row."""
        tensors = _gossiped_tensors(replica, gossip_buffers)
        for seg, (_, mod, attr, trainable) in zip(self.segments, tensors, strict=True):
            view = self.x[i, seg.offset : seg.offset + seg.numel].view(seg.shape)
            t = getattr(mod, attr)
            view.copy_(t.detach())
            if trainable:
                t.data = view
                t.grad = self.grad[i, seg.offset : seg.offset + seg.numel].view(seg.shape)
            else:
                mod._buffers[attr] = view  # in-place updates of the buffer now land in x

    # -- push-sum ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def debiased(self) -> Iterator[None]:
        """Within the block the replicas hold the de-biased models z_i / w_i; after it, the
        numerators z_i again (``x /= w`` on entry, ``x *= w`` on exit)."""
        with torch.no_grad():
            self.x.div_(self.w[:, None])
        try:
            yield
        finally:
            with torch.no_grad():
                self.x.mul_(self.w[:, None])

    def debiased_rows(self) -> torch.Tensor:
        """A new ``[n, P]`` tensor of the de-biased models z_i / w_i."""
        return self.debias(self.x)

    def debias(self, rows: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """``rows / w`` (row i divided by w_i), into ``out`` when given."""
        return torch.div(rows, self.w[:, None], out=out)

    def gossip(
        self, algo: Gossip, opt: LocalOptimizer | None = None, lr: float = 1.0
    ) -> torch.Tensor:
        """One gossip round of the held rows: ``z += delta`` and ``w`` becomes the mixed weights.
        An ``opt`` that folds the gossip correction into its momentum (QGM) then gets the trained
        part of ``delta / w`` (``after_gossip(.., lr)``), computed into ``grad``, which is free
        until the next backward. Returns ``delta`` (the algorithm's buffer, overwritten at its
        next round)."""
        delta, w = algo.delta(self.x, self.w)
        self.x.add_(delta)
        self.w.copy_(w)
        if opt is not None and opt.folds_gossip:
            opt.after_gossip(self.debias(delta[:, : self.p_train], out=self.grad), lr)
        return delta

    # -- the local step ----------------------------------------------------------------------
    def numerators(self, trainable: bool = False) -> torch.Tensor:
        """The rows z (``x``; with ``trainable`` its trained part ``[n, p_train]``), for the gossip
        algorithm and the local optimizer to size their buffers from when they are built."""
        return self.x[:, : self.p_train] if trainable else self.x

    def zero_grad(self) -> None:
        """Zero every replica's parameter gradients (the rows of ``grad``) before a backward."""
        self.grad.zero_()

    def step(self, opt: LocalOptimizer, lr: float) -> None:
        """The local optimizer step on the trained part of z with the gradients in ``grad``
        (which the step consumes as scratch space)."""
        opt.step(self.x[:, : self.p_train], self.grad, lr)

    def finite_rows(self) -> torch.Tensor:
        """``[n]`` float32: 1 for a node whose row is finite everywhere, else 0."""
        return torch.isfinite(self.x).all(1).to(torch.float32)

    # -- evaluation --------------------------------------------------------------------------
    def average(self, group: NodeGroup) -> tuple[nn.Module, float]:
        """The exact average model over all nodes of ``group`` (the mean of the de-biased rows
        z_i / w_i, and of the local float buffers) and the consensus distance
        (1/n) sum_i ||z_i / w_i - mean||^2 over the trained parameters. In the distributed engine
        this takes three ``group.mean`` collectives, in this order, on every process."""
        with torch.no_grad():
            z = self.debiased_rows()
            z_mean = group.mean(z)  # the one all-reduce of whole models (distributed engine)
            avg_model = self.model_from(z_mean, group.mean(self.local_float_buffers()))
            zt = z[:, : self.p_train]
            consensus = float(group.mean((zt - z_mean[: self.p_train]).pow(2).sum(1)))
        return avg_model, consensus

    @contextlib.contextmanager
    def preserved(self) -> Iterator[None]:
        """After the block the rows ``x`` are bit for bit what they were before it: de-biasing
        and multiplying back (``x / w * w``, ``debiased``) may change the last bit, which a
        block that must change nothing of the run (the accuracy curve) cannot allow."""
        saved = self.x.clone()
        try:
            yield
        finally:
            with torch.no_grad():
                self.x.copy_(saved)

    # -- checkpoints -------------------------------------------------------------------------
    def state_dict(self) -> NodeStateDict:
        """The rows ``x``, the weights ``w`` and each node's local buffers: the tensors
        themselves, not copies (as ``nn.Module.state_dict``); save them before the state
        changes."""
        return NodeStateDict(
            x=self.x,
            w=self.w,
            local_buffers=[self.local_buffers(i) for i in range(self.nodes)],
        )

    def load_state_dict(self, d: NodeStateDict) -> None:
        """Copy a ``state_dict`` (e.g. a checkpoint's) into this state, in place (the replicas'
        views stay bound)."""
        with torch.no_grad():
            self.x.copy_(d["x"])
            self.w.copy_(d["w"])
            for i, bufs in enumerate(d["local_buffers"]):
                mine = self.local_buffers(i)
                for k, v in bufs.items():
                    mine[k].copy_(v)

    # -- helpers ---------------------------------------------------------------------------
    @property
    def numels(self) -> list[int]:
        return [s.numel for s in self.segments]

    def local_buffers(self, i: int) -> dict[str, torch.Tensor]:
        """Node i's buffers that are not gossiped (e.g. BatchNorm running statistics)."""
        gossiped = {s.name for s in self.segments}
        return {k: v for k, v in self.models[i].named_buffers() if k not in gossiped}

    def stack_local_buffers(self) -> dict[str, torch.Tensor]:
        """Each local buffer (not gossiped) of the n replicas becomes row i of one ``[n, ...]``
        tensor per buffer name, which replica i then holds as a view (the batched step,
        ``lpdt.engine.batched``, reads and updates all nodes' buffers at once). Returns
        name -> stacked tensor; the values are unchanged. Idempotent."""
        stacked: dict[str, torch.Tensor] = {}
        for name in self.local_buffers(0):
            owner, _, attr = name.rpartition(".")
            rows = [m.get_buffer(name) for m in self.models]
            base = rows[0]._base
            if (
                base is not None
                and all(r._base is base for r in rows)
                and base.shape[0] == self.nodes
            ):
                stacked[name] = base  # stacked already
                continue
            stacked[name] = torch.stack(rows)
            for i, m in enumerate(self.models):
                m.get_submodule(owner)._buffers[attr] = stacked[name][i]
        return stacked

    def train(self, mode: bool = True) -> None:
        for m in self.models:
            m.train(mode)

    def local_float_buffers(self) -> torch.Tensor:
        """``[n, B]``: every node's local float buffers (BatchNorm statistics), flattened in
        ``named_buffers()`` order (what the average model averages)."""
        rows = []
        for i in range(self.nodes):
            bufs = [b.reshape(-1) for b in self.local_buffers(i).values() if b.is_floating_point()]
            rows.append(torch.cat(bufs) if bufs else torch.zeros(0, device=self.device))
        return torch.stack(rows)

    def model_from(self, mean: torch.Tensor, local_mean: torch.Tensor) -> nn.Module:
        """A standalone replica with gossiped tensors ``mean [P]`` and local float buffers
        ``local_mean`` (laid out as ``local_float_buffers``)."""
        avg = copy.deepcopy(self.template)
        avg.train(self.models[0].training)
        tensors = _gossiped_tensors(avg, gossip_buffers=True)
        by_name = {name: (mod, attr) for name, mod, attr, _ in tensors}
        # One fresh row laid out like the nodes' rows (same offsets, same alignment: see
        # GPU_ROW_ALIGN), so that a compiled evaluation serves the average model and the nodes.
        row = torch.empty(row_stride(self.p_total, self.device), device=self.device)
        row = row[: self.p_total].copy_(mean)
        with torch.no_grad():
            for seg in self.segments:
                mod, attr = by_name[seg.name]
                value = row[seg.offset : seg.offset + seg.numel].view(seg.shape)
                if seg.trainable:
                    getattr(mod, attr).data = value
                    getattr(mod, attr).grad = None
                else:
                    mod._buffers[attr] = value
            avg_buffers, at = dict(avg.named_buffers()), 0
            for name, b in self.local_buffers(0).items():
                if b.is_floating_point():
                    avg_buffers[name].copy_(local_mean[at : at + b.numel()].view_as(b))
                    at += b.numel()
        return avg
