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

DENSE_MAX_NODES = 32  # up to this many nodes, W @ Y is one dense [n, n] x [n, P] product


class Mixer:
    """Computes ``W @ Y`` (and the consensus correction ``eta (W - I) Y``) for all nodes at once.

    Up to ``DENSE_MAX_NODES`` nodes this is one dense ``[n, n] @ [n, P]`` product written into a
    preallocated buffer: it reads Y once, and on a CPU it is 10-30x faster than elementwise forms
    whose multi-hundred-MB temporaries are fresh pages every iteration (measured for ResNet-18 on
    4-16 nodes; see docs/engine.md). Beyond that, in-edges are spread over ``max in-degree``
    "slots" (slot k holds at most one in-neighbour per node), so W Y = diag(W) Y + sum_k coef_k
    Y[src_k]: O(edges * P) instead of O(n^2 * P).
    """

    def __init__(self, w: torch.Tensor, device: torch.device | str = "cpu") -> None:
        w = w.to(torch.float64)
        n = w.shape[0]
        self.n = n
        self.w = w.to(torch.float32).to(device)
        self.lap = (w - torch.eye(n, dtype=torch.float64)).to(torch.float32).to(device)
        self.dense = n <= DENSE_MAX_NODES
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
        """``W @ Y`` for ``Y`` of shape ``[n, ...]`` (a new tensor)."""
        if self.dense:
            return (self.w @ y.reshape(self.n, -1)).reshape(y.shape)
        return self._sparse(y, self.diag, self.coef, 1.0, torch.empty_like(y))

    def correction(self, y: torch.Tensor, eta: float, out: torch.Tensor) -> torch.Tensor:
        """``eta (W - I) Y`` written into ``out`` (``[n, P]``, preallocated by the caller)."""
        if self.dense:
            torch.mm(self.lap, y, out=out)
            return out.mul_(eta) if eta != 1.0 else out
        return self._sparse(y, self.diag - 1.0, self.coef, eta, out)

    def _sparse(self, y, diag, coefs, eta, out):
        shape = (-1,) + (1,) * (y.dim() - 1)
        torch.mul(y, (diag * eta).view(shape), out=out)
        for src, coef in zip(self.src, coefs):
            out.addcmul_(y.index_select(0, src), (coef * eta).view(shape))
        return out


class Gossip:
    """Base class. ``delta(z, w)`` returns the correction for ``z`` and updates ``w`` in place.

    The returned correction lives in a buffer the algorithm owns and overwrites at the next call
    (no per-iteration allocation of ``[n, P]`` temporaries): add it to ``z`` before gossiping again.
    """

    def __init__(
        self, mixer: Mixer, compressor: LayerwiseCompressor, eta: float, z0: torch.Tensor
    ) -> None:
        self.mix = mixer
        self.compress = compressor
        self.eta = eta
        self.out = torch.empty_like(z0)
        self.scratch = torch.empty_like(z0)

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
        super().__init__(mixer, compressor, eta, z0)

    def delta(self, z, w):
        d = self.mix.correction(z, self.eta, self.out)
        self._update_weights(w)
        return d


@ALGORITHMS.register("deepsqueeze")
class DeepSqueeze(Gossip):
    def __init__(self, mixer, compressor, eta, z0):
        super().__init__(mixer, compressor, eta, z0)
        self.error = torch.zeros_like(z0)

    def delta(self, z, w):
        v = torch.add(z, self.error, out=self.scratch)
        c = self.compress(v)
        torch.sub(v, c, out=self.error)
        d = self.mix.correction(c, self.eta, self.out)
        self._update_weights(w)
        return d

    def state_dict(self):
        return {"error": self.error}


@ALGORITHMS.register("choco")
class Choco(Gossip):
    def __init__(self, mixer, compressor, eta, z0):
        super().__init__(mixer, compressor, eta, z0)
        self.xhat = torch.zeros_like(z0)  # public copies start at 0 (reference §3.3)

    def delta(self, z, w):
        self.xhat.add_(self.compress(torch.sub(z, self.xhat, out=self.scratch)))
        d = self.mix.correction(self.xhat, self.eta, self.out)
        self._update_weights(w)
        return d

    def state_dict(self):
        return {"xhat": self.xhat}


def make_algorithm(
    name: str, w: torch.Tensor, compressor: LayerwiseCompressor, eta: float, z0: torch.Tensor
) -> Gossip:
    return ALGORITHMS.get(name)(Mixer(w, z0.device), compressor, eta, z0)
