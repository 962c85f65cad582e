"""The flat node state: n model replicas whose gossiped tensors are views into one ``[n, P]`` tensor.

"Nodes are rows" (design principle 1). Each node keeps its own ``nn.Module`` (so forward passes,
BatchNorm statistics and 8-bit range observers work unchanged), but every trainable parameter and
every gossiped buffer of replica i is a *view* into row i of ``x``, and every parameter gradient
is a view into row i of ``grad``. The optimizer step, compression and gossip are then a few
batched tensor operations over ``[n, P]`` with no Python loop over parameters.

Layout of a row: all trainable parameters first (``x[:, :p_train]``, aligned with ``grad``), then
the gossiped buffers (e.g. the 8-bit activation ranges, reference §5.5). Buffers that are not
gossiped (BatchNorm running statistics) stay local to each replica.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch import nn


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


class NodeState:
    """n replicas of ``model`` (identical initial weights) sharing flat ``x [n, P]`` and ``grad``."""

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
        self.x = torch.zeros(nodes, self.p_total, device=device)
        self.grad = torch.zeros(nodes, self.p_train, device=device)
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

    # -- helpers ---------------------------------------------------------------------------
    @property
    def numels(self) -> list[int]:
        return [s.numel for s in self.segments]

    def local_buffers(self, i: int) -> dict[str, torch.Tensor]:
        """Node i's buffers that are not gossiped (e.g. BatchNorm running statistics)."""
        gossiped = {s.name for s in self.segments}
        return {k: v for k, v in self.models[i].named_buffers() if k not in gossiped}

    def train(self, mode: bool = True) -> None:
        for m in self.models:
            m.train(mode)

    def consensus_distance(self, w: torch.Tensor) -> float:
        """(1/n) sum_i ||x_i - x_bar||^2 over the de-biased trainable parameters."""
        z = self.x[:, : self.p_train] / w[:, None]
        return float((z - z.mean(0, keepdim=True)).pow(2).sum(1).mean())

    def average_model(self, w: torch.Tensor) -> nn.Module:
        """A standalone replica holding the exact average of the de-biased node models.

        Local float buffers (BatchNorm statistics) are averaged too, so that the average model can
        be evaluated in eval mode (reference §9, recommendation (b)).
        """
        avg = copy.deepcopy(self.template)
        avg.train(self.models[0].training)
        mean = (self.x / w[:, None]).mean(0)
        tensors = _gossiped_tensors(avg, gossip_buffers=True)
        by_name = {name: (mod, attr) for name, mod, attr, _ in tensors}
        with torch.no_grad():
            for seg in self.segments:
                mod, attr = by_name[seg.name]
                value = mean[seg.offset : seg.offset + seg.numel].view(seg.shape).clone()
                if seg.trainable:
                    getattr(mod, attr).data = value
                    getattr(mod, attr).grad = None
                else:
                    mod._buffers[attr] = value
            local = [self.local_buffers(i) for i in range(self.nodes)]
            for name, buf in avg.named_buffers():
                if name in local[0] and buf.is_floating_point():
                    buf.copy_(torch.stack([lb[name] for lb in local]).mean(0))
        return avg
