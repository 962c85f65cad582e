"""Gossip algorithms in matrix form (reference §3.4), all nodes at once.

Rows are nodes. After the local step has produced the numerators ``Z`` (``[n, P]``), each
algorithm returns the consensus correction ``delta`` that the caller adds to ``Z``, and updates
the push-sum weights ``w`` (exchanged uncompressed, reference §2.4). ``eta`` is the consensus
step size (the reference's ``--eta``; the paper's gamma).

- ``sgp`` (SGP / D-PSGD on regular graphs): delta = eta (W Z - Z). No compression.
- ``deepsqueeze`` (Sparse-Push): V = Z + E; C = comp(V); E = V - C; delta = eta (W C - C).
- ``choco`` (Quant-SGP / CHOCO-SGD): Q = comp(Z - X^); X^ += Q; delta = eta (W X^ - X^).

Without compression and with eta = 1 all three give Z <- W Z.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from lpdt.decentral.compression import LayerwiseCompressor
from lpdt.registry import Registry


class Mixer:
    """Computes ``W @ Y`` for a sparse column-stochastic W as a few gathers (one per in-edge slot).

    Each node's in-edges are spread over ``max in-degree`` "slots"; slot k holds at most one
    in-neighbour per node, so W Y = diag(W) * Y + sum_k coef_k * Y[src_k]. The cost is
    O(edges * P) instead of O(n^2 * P) for a dense product.
    """

    def __init__(self, w: torch.Tensor, device: torch.device | str = "cpu") -> None:
        w = w.to(torch.float64)
        n = w.shape[0]
        self.n = n
        self.diag = torch.diagonal(w).to(torch.float32).to(device)
        ins = [[j for j in range(n) if j != i and w[i, j] != 0] for i in range(n)]
        slots = max((len(x) for x in ins), default=0)
        self.src, self.coef = [], []
        for k in range(slots):
            src = torch.arange(n)
            coef = torch.zeros(n)
            for i in range(n):
                if k < len(ins[i]):
                    src[i] = ins[i][k]
                    coef[i] = float(w[i, ins[i][k]])
            self.src.append(src.to(device))
            self.coef.append(coef.to(device))

    def __call__(self, y: torch.Tensor) -> torch.Tensor:
        shape = (-1,) + (1,) * (y.dim() - 1)
        out = y * self.diag.view(shape)
        for src, coef in zip(self.src, self.coef):
            out.add_(y.index_select(0, src) * coef.view(shape))
        return out


class Gossip:
    """Base class. ``delta(z, w)`` returns the correction for ``z`` and updates ``w`` in place."""

    def __init__(self, mixer: Mixer, compressor: LayerwiseCompressor, eta: float) -> None:
        self.mix = mixer
        self.compress = compressor
        self.eta = eta

    def _update_weights(self, w: torch.Tensor) -> None:
        w.add_(self.mix(w) - w, alpha=self.eta)

    def delta(self, z: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {}

    def load_state_dict(self, d: dict[str, torch.Tensor]) -> None:
        for k, v in d.items():
            getattr(self, k).copy_(v)


ALGORITHMS: Registry[Callable[..., Gossip]] = Registry("algorithm")


@ALGORITHMS.register("sgp")
class SGP(Gossip):
    def __init__(self, mixer, compressor, eta, z0):
        if compressor.compression != "none":
            raise ValueError(
                "algorithm 'sgp' sends full models; use 'deepsqueeze' or 'choco' with compression"
            )
        super().__init__(mixer, compressor, eta)

    def delta(self, z, w):
        d = (self.mix(z) - z).mul_(self.eta)
        self._update_weights(w)
        return d


@ALGORITHMS.register("deepsqueeze")
class DeepSqueeze(Gossip):
    def __init__(self, mixer, compressor, eta, z0):
        super().__init__(mixer, compressor, eta)
        self.error = torch.zeros_like(z0)

    def delta(self, z, w):
        v = z + self.error
        c = self.compress(v)
        torch.sub(v, c, out=self.error)
        d = (self.mix(c) - c).mul_(self.eta)
        self._update_weights(w)
        return d

    def state_dict(self):
        return {"error": self.error}


@ALGORITHMS.register("choco")
class Choco(Gossip):
    def __init__(self, mixer, compressor, eta, z0):
        super().__init__(mixer, compressor, eta)
        self.xhat = torch.zeros_like(z0)  # public copies start at 0 (reference §3.3)

    def delta(self, z, w):
        self.xhat.add_(self.compress(z - self.xhat))
        d = (self.mix(self.xhat) - self.xhat).mul_(self.eta)
        self._update_weights(w)
        return d

    def state_dict(self):
        return {"xhat": self.xhat}


def make_algorithm(
    name: str, w: torch.Tensor, compressor: LayerwiseCompressor, eta: float, z0: torch.Tensor
) -> Gossip:
    return ALGORITHMS.get(name)(Mixer(w, z0.device), compressor, eta, z0)
