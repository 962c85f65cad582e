"""Dropout whose mask is a hash, so that the nodes' steps can run batched (``model.dropout_noise``).

``nn.Dropout`` draws its mask from torch's generator. Under ``torch.func.vmap`` (the batched step,
``lpdt.engine.batched``) all nodes would draw from one generator instead of each node's own
stream, so a model with dropout (VGG-11's classifier) must train node by node, and on a GPU
that is the difference between a compiled batched round and n eager node steps.

``HashDropout`` keeps an element where the 8-bit recipe's rounding noise
(``lpdt.layers.quant.quantizers.dither``: a counter hash of the step's noise seed, the module's
salt and the element index) is at least ``p - 1/2``, and scales what it keeps by ``1 / (1 - p)``,
as ``nn.Dropout`` does. The step draws that seed from the node's stream
(``lpdt.layers.quant.convert.draws_noise``), so node k's mask is the same node by node, batched,
eager and compiled, and the hash has one implementation for all of them (its vmap rule and
inductor lowering included). The mask keeps each element with probability ``1 - p`` to within 2^-16 (the
noise has 2^16 levels; p = 0.5 exactly). Like ``nn.Dropout``, it is the identity in eval mode.

It draws other masks than ``nn.Dropout``, so it is a result key (``model.dropout_noise: hash``,
in the run id); the default, ``generator``, keeps ``nn.Dropout``.
"""

from __future__ import annotations

import torch
from torch import nn

from lpdt.layers.quant.convert import number_noise_sites
from lpdt.layers.quant.quantizers import dither, step_seed


class HashDropout(nn.Module):
    """Dropout with probability ``p``; the mask hashed from the step's seed and ``noise_salt``."""

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout probability must be in [0, 1), got {p}")
        self.p = p
        self.noise_salt = 0  # its index in model.modules() (number_noise_sites)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        keep = dither(x, step_seed(), self.noise_salt) >= self.p - 0.5
        return x * keep.to(x.dtype) * (1.0 / (1.0 - self.p))

    def extra_repr(self) -> str:
        return f"p={self.p}, noise_salt={self.noise_salt}"


def has_dropout(model: nn.Module) -> bool:
    """Whether ``model`` has a dropout layer (``nn.Dropout`` or ``HashDropout``): what
    ``model.dropout_noise`` draws for."""
    return any(isinstance(m, (nn.Dropout, HashDropout)) for m in model.modules())


def hash_dropout_(model: nn.Module) -> nn.Module:
    """Replace every ``nn.Dropout`` of ``model`` by a ``HashDropout`` of the same probability, in
    place, and number the noise sites; returns ``model``."""
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Dropout):
                setattr(parent, name, HashDropout(child.p))
    number_noise_sites(model)
    return model
