"""Walk a real model with forward hooks and record every layer the cost model prices.

Why hooks rather than a hard-coded layer list: the counts must follow the model definitions in
``lpdt.models`` exactly (a block added or removed there changes the counts here), and a module
that is called twice (a shared ReLU) must be counted twice. One forward pass on a dummy batch
gives every layer's input and output shape.

What is recorded (one ``LayerRecord`` per *call*):

- ``conv``: ``nn.Conv2d`` (and subclasses, e.g. quantized convs);
- ``linear``: ``nn.Linear``;
- ``norm``: every module with a ``norm_kind`` attribute in ``NORM_KINDS`` (the norm slots of
  ``lpdt.layers.norms``, which may carry a ReLU inside: ``act_kind == "relu"``), plus plain
  ``nn.BatchNorm2d`` / ``nn.GroupNorm``; its children are not visited;
- ``add``: ``lpdt.layers.Add`` and the 8-bit ``lpdt.layers.quant.QAdd`` (residual additions);
- ``avgpool`` / ``maxpool``: average and max pooling;
- ``relu``: ReLU (no operations of its own; its output is stored for the backward pass).

Parameter-free modules the cost model does not price (Flatten, Dropout, Identity, activation
functions inside a norm) are ignored. A leaf module *with parameters* that is none of the above
raises ``ValueError``: silently skipping a layer would under-count.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import nn

from lpdt.layers import Add
from lpdt.layers.norms import NORM_KINDS

KINDS = ("conv", "linear", "norm", "add", "avgpool", "maxpool", "relu")


@dataclass(frozen=True)
class LayerRecord:
    """One call of one priced module; all sizes are per sample (batch dimension removed).

    ``c_in``/``c_out`` are channels (features for Linear), ``k`` the kernel area K^2 (1 for
    Linear), ``in_hw``/``out_hw`` the input/output spatial size L^2 (for Linear: the number of
    positions it is applied at, 1 for a feature vector), ``out_numel``
    the elements of the output, ``weight_numel`` the elements of the weight tensor (0 if none).
    ``act`` is the activation a norm applies inside itself (``"relu"`` for a fused BN+ReLU slot,
    ``None`` otherwise); ``spatial`` says whether the output is a feature map (C, H, W) rather than
    a feature vector (the classifier head).
    """

    name: str
    kind: str
    norm: str | None
    c_in: int
    c_out: int
    k: int
    groups: int
    in_hw: int
    out_hw: int
    in_numel: int
    out_numel: int
    weight_numel: int
    act: str | None = None
    spatial: bool = True

    @property
    def macs(self) -> int:
        """Multiply-accumulates per sample of a conv/linear layer (0 for the others)."""
        if self.kind not in ("conv", "linear"):
            return 0
        return self.c_out * (self.c_in // self.groups) * self.k * self.out_hw


def norm_kind(module: nn.Module) -> str | None:
    """The normalisation kind of ``module`` (``None`` if it is not a normalisation layer)."""
    for attr in ("norm_kind", "kind"):
        kind = getattr(module, attr, None)
        if isinstance(kind, str) and kind in NORM_KINDS:
            return kind
    if isinstance(module, nn.modules.batchnorm._BatchNorm):
        return "batchnorm"
    if isinstance(module, nn.GroupNorm):
        return "groupnorm"
    return None


def _add_types() -> tuple[type, ...]:
    """Residual-add modules: ``lpdt.layers.Add`` and the 8-bit ``QAdd`` (not an ``Add`` subclass)."""
    try:
        from lpdt.layers.quant import QAdd
    except ImportError:
        return (Add,)
    return (Add, QAdd)


def module_kind(module: nn.Module) -> str | None:
    """The priced kind of ``module`` or ``None`` (then its children are visited instead)."""
    if isinstance(module, nn.Conv2d):
        return "conv"
    if isinstance(module, nn.Linear):
        return "linear"
    if norm_kind(module) is not None:
        return "norm"
    if isinstance(module, _add_types()):
        return "add"
    if isinstance(module, nn.AvgPool2d | nn.AdaptiveAvgPool2d):
        return "avgpool"
    if isinstance(module, nn.MaxPool2d | nn.AdaptiveMaxPool2d):
        return "maxpool"
    if isinstance(module, nn.ReLU | nn.ReLU6):
        return "relu"
    return None


def _spatial(shape: Sequence[int]) -> int:
    """H*W of a per-sample shape (C, H, W); 1 for a feature vector (C,)."""
    n = 1
    for s in shape[1:]:
        n *= int(s)
    return n


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def _record(name: str, kind: str, module: nn.Module, inputs: tuple, output: Any) -> LayerRecord:
    x = inputs[0]
    in_shape = tuple(x.shape[1:])
    out_shape = tuple(output.shape[1:])
    weight = getattr(module, "weight", None)
    weight_numel = (
        weight.numel() if isinstance(weight, torch.Tensor) and kind in ("conv", "linear") else 0
    )
    c_in: int
    if kind == "conv":
        conv = cast(nn.Conv2d, module)  # kind "conv": a convolution (module_kind)
        c_in, c_out = conv.in_channels, conv.out_channels
        k = _numel(conv.kernel_size)
        groups = conv.groups
    elif kind == "linear":
        linear = cast(nn.Linear, module)  # kind "linear": a Linear (module_kind)
        c_in, c_out, k, groups = linear.in_features, linear.out_features, 1, 1
    else:
        c_in, c_out, k, groups = int(in_shape[0]), int(out_shape[0]), 1, 1
    if kind == "linear":
        # Positions the Linear is applied at: 1 for a feature vector, L for a [L, C] sequence.
        in_hw, out_hw = _numel(in_shape[:-1]), _numel(out_shape[:-1])
    else:
        in_hw, out_hw = _spatial(in_shape), _spatial(out_shape)
    # Add has two operands: count both in in_numel (they are both quantized / stored).
    in_numel = sum(_numel(t.shape[1:]) for t in inputs if isinstance(t, torch.Tensor))
    act = getattr(module, "act_kind", None) if kind == "norm" else None
    return LayerRecord(
        name=name,
        kind=kind,
        norm=norm_kind(module) if kind == "norm" else None,
        c_in=int(c_in),
        c_out=int(c_out),
        k=int(k),
        groups=int(groups),
        in_hw=int(in_hw),
        out_hw=int(out_hw),
        in_numel=int(in_numel),
        out_numel=_numel(out_shape),
        weight_numel=int(weight_numel),
        act=act if act == "relu" else None,
        spatial=len(out_shape) >= 3,
    )


def priced_modules(model: nn.Module) -> list[tuple[str, str, nn.Module]]:
    """(name, kind, module) of every priced module, outermost first; raises on unknown layers."""
    out: list[tuple[str, str, nn.Module]] = []

    def visit(prefix: str, module: nn.Module) -> None:
        kind = module_kind(module)
        if kind is not None:
            out.append((prefix or type(module).__name__, kind, module))
            return
        children = list(module.named_children())
        if not children:
            own = [n for n, p in module.named_parameters(recurse=False) if p.requires_grad]
            if own:
                raise ValueError(
                    f"cost model: layer {prefix!r} ({type(module).__name__}) has parameters "
                    f"{own} but is not a priced kind ({', '.join(KINDS)}); teach lpdt.cost.trace "
                    "about it instead of skipping it"
                )
            return
        for child_name, child in children:
            visit(f"{prefix}.{child_name}" if prefix else child_name, child)

    visit("", model)
    return out


@torch.no_grad()
def trace_model(model: nn.Module, input_shape: Sequence[int]) -> list[LayerRecord]:
    """Run one dummy batch through ``model`` (eval mode) and record every priced call in order."""
    records: list[LayerRecord] = []
    calls: dict[str, int] = {}
    handles = []
    for name, kind, module in priced_modules(model):

        def hook(
            mod: nn.Module, inputs: tuple, output: Any, name: str = name, kind: str = kind
        ) -> None:
            i = calls.get(name, 0)
            calls[name] = i + 1
            records.append(_record(name if i == 0 else f"{name}#{i}", kind, mod, inputs, output))

        handles.append(module.register_forward_hook(hook))
    was_training = model.training
    try:
        model.eval()
        param = next(model.parameters(), None)
        device = param.device if param is not None else torch.device("cpu")
        model(torch.randn(1, *input_shape, device=device))
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    return records


def count_params(model: nn.Module) -> int:
    """Trainable parameters (the model-sized fp32 buffers of the memory model have this size)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
