"""Model conversion: a full-precision network -> its simulated 8-bit version (one module per slot)."""

from __future__ import annotations

import copy
from typing import Any, Protocol, runtime_checkable

import torch
from torch import nn

from lpdt.layers import Add
from lpdt.layers.norms import NORM_MODULES
from lpdt.layers.quant.modules import QAdd, QConv2d, QLinear, QRangeBatchNormAct2d, QRangeEvoNorm
from lpdt.layers.quant.spec import QuantSpec


def _is_norm(m: nn.Module) -> bool:
    return isinstance(m, (*NORM_MODULES, nn.BatchNorm2d, nn.GroupNorm))


def has_norm(model: nn.Module) -> bool:
    """Whether ``model`` has a norm slot, full precision or 8-bit: a layer that ``model.norm``
    chooses (``tiny_cnn`` and the transformers have none)."""
    return any(
        _is_norm(m) or isinstance(m, (QRangeEvoNorm, QRangeBatchNormAct2d)) for m in model.modules()
    )


def _channels(m: nn.Module) -> int:
    for attr in ("channels", "num_features", "num_channels"):
        if hasattr(m, attr):
            return int(getattr(m, attr))
    raise ValueError(f"cannot read the channel count of norm module {type(m).__name__}")


@torch.no_grad()
def _copy_affine(src: nn.Module, dst: nn.Module) -> None:
    """Carry gamma / beta / v over (shapes differ between BN-style [C] and EvoNorm [1,C,1,1])."""
    for name in ("weight", "bias", "v"):
        a, b = getattr(src, name, None), getattr(dst, name, None)
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
            b.copy_(a.reshape(b.shape))


def int8_norm(norm: str) -> str:
    """The norm an 8-bit model trains for ``model.norm``: 8-bit Range-BN for ``rangebn``,
    8-bit Range-EvoNorm (``rangeen``) for every other (the paper's 8-bit norms, Table 10)."""
    return "rangebn" if norm == "rangebn" else "rangeen"


def _convert_norm(m: nn.Module, spec: QuantSpec, model_cfg: Any) -> nn.Module:
    c = _channels(m)
    if int8_norm(model_cfg.norm) == "rangebn":
        act = getattr(m, "act_kind", "relu") != "none"
        q: nn.Module = QRangeBatchNormAct2d(c, act=act, spec=spec)
    else:
        q = QRangeEvoNorm(
            c,
            groups=model_cfg.groups,
            estimator=model_cfg.range_estimator,
            spec=spec,
            chunks=model_cfg.range_chunks,
        )
    _copy_affine(m, q)
    return q


@torch.no_grad()
def _convert_conv(m: nn.Conv2d, spec: QuantSpec) -> QConv2d:
    q = QConv2d(
        m.in_channels,
        m.out_channels,
        m.kernel_size,
        m.stride,
        m.padding,
        m.dilation,
        m.groups,
        m.bias is not None,
        spec=spec,
    )
    q.weight.copy_(m.weight)
    if m.bias is not None and q.bias is not None:  # (both or neither: built with m's bias flag)
        q.bias.copy_(m.bias)
    return q.to(m.weight.device)


@torch.no_grad()
def _convert_linear(m: nn.Linear, spec: QuantSpec) -> QLinear:
    q = QLinear(m.in_features, m.out_features, m.bias is not None, spec=spec)
    q.weight.copy_(m.weight)
    if m.bias is not None and q.bias is not None:  # (both or neither: built with m's bias flag)
        q.bias.copy_(m.bias)
    return q.to(m.weight.device)


def _swap(module: nn.Module, spec: QuantSpec, model_cfg: Any, linear_only: bool) -> None:
    gated = model_cfg is not None and model_cfg.norm != "rangebn"
    for name, child in list(module.named_children()):
        new: nn.Module | None = None
        if isinstance(child, nn.Linear) and not isinstance(child, QLinear):
            new = _convert_linear(child, spec)
        elif linear_only:
            pass
        elif isinstance(child, nn.Conv2d) and not isinstance(child, QConv2d):
            new = _convert_conv(child, spec)
        elif _is_norm(child) and not isinstance(child, (QRangeEvoNorm, QRangeBatchNormAct2d)):
            new = _convert_norm(child, spec, model_cfg)
        elif isinstance(child, Add):
            new = QAdd(spec)
        if new is not None:
            setattr(module, name, new)
        else:
            _swap(child, spec, model_cfg, linear_only)
    # Range-EvoNorm carries its gate: a block's ReLU after the residual add (BN-style nets) goes,
    # as in the reference's LP ResNets (no activation after the add).
    has_qadd = isinstance(getattr(module, "add", None), QAdd)
    if not linear_only and gated and has_qadd and isinstance(getattr(module, "act", None), nn.ReLU):
        module.act = nn.Identity()


def convert_to_int8(
    model: nn.Module, precision_cfg: Any, model_cfg: Any = None, linear_only: bool = False
) -> nn.Module:
    """The 8-bit (simulated) version of a full-precision model; the input model is not modified.

    Swaps every ``nn.Conv2d`` -> ``QConv2d``, ``nn.Linear`` -> ``QLinear``, norm slot -> 8-bit
    Range-EvoNorm (or 8-bit Range-BN + ReLU for ``model_cfg.norm == 'rangebn'``) and
    ``lpdt.layers.Add`` -> ``QAdd``; copies the weights; then applies the model's low-precision
    init (``init_lp_``: zero gamma in each block's last norm, a small classifier)
    unless ``precision_cfg.lp_init`` is false (then the full-precision weights stay as they are).
    ``linear_only=True`` swaps only ``nn.Linear`` (transformers) and keeps the weights (no LP init).
    """
    spec = QuantSpec.from_config(precision_cfg)
    if model_cfg is None and not linear_only:
        raise ValueError("convert_to_int8 needs model_cfg (norm, groups) unless linear_only=True")
    model = copy.deepcopy(model)
    _swap(model, spec, model_cfg, linear_only)
    if not linear_only and precision_cfg.lp_init:
        init_lp_(model)
    number_noise_sites(model)
    return model


def number_noise_sites(model: nn.Module) -> None:
    """Give every stochastic-rounding module its index in ``model.modules()`` as ``noise_salt``,
    so that the call sites of one step draw independent noise from the step's one seed."""
    for i, m in enumerate(model.modules()):
        if isinstance(m, _NoiseSite):
            m.noise_salt = i


def draws_noise(model: nn.Module) -> bool:
    """Whether ``model`` has a module that hashes the step's noise seed (a ``noise_salt``: the
    8-bit layers' stochastic rounding, ``lpdt.layers.dropout.HashDropout``), so that every step
    must draw one (``lpdt.engine.steps``)."""
    return any(isinstance(m, _NoiseSite) for m in model.modules())


@runtime_checkable
class _NoiseSite(Protocol):
    """A module that draws noise from the step's seed: it has a ``noise_salt``."""

    noise_salt: int


def gossip_buffer_names(model: nn.Module) -> list[str]:
    """Fully qualified names of the buffers the engine gossips (for tests and the cost model)."""
    out = []
    for mod_name, mod in model.named_modules():
        for b in getattr(mod, "gossip_buffers", ()):
            out.append(f"{mod_name}.{b}" if mod_name else b)
    return out


def init_lp_(model: nn.Module) -> nn.Module:
    """The reference's low-precision init variant (reference §7.1), in place; returns ``model``.

    Call it on the full-precision model (before or after 8-bit conversion: it only touches
    parameters by name). Models without an ``init_lp_`` method are left unchanged.
    """
    fn = getattr(model, "init_lp_", None)
    if callable(fn):
        with torch.no_grad():
            fn()
    return model
