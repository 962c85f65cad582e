"""Gossip algorithms in matrix form (reference §3.4), all nodes at once.

Rows are nodes. After the local step has produced the numerators ``Z`` (``[n, P]``), each
algorithm returns the consensus correction ``delta`` that the caller adds to ``Z``, and the mixed
push-sum weights ``w`` (exchanged uncompressed, reference §2.4) that replace the caller's; it
changes neither (``lpdt.decentral.state.NodeState.gossip`` applies both). ``eta`` is the
consensus step size (the reference's ``--eta``; the paper's gamma).

- ``sgp`` (SGP / D-PSGD on regular graphs): delta = eta (W Z - Z). No compression.
- ``deepsqueeze`` (Sparse-Push): V = Z + E; C = comp(V); E = V - C; delta = eta (W C - C).
- ``choco`` (Quant-SGP / CHOCO-SGD): Q = comp(Z - X^); X^ += Q; delta = eta (W X^ - X^).

Without compression and with eta = 1 all three give Z <- W Z.

The seam between an algorithm and the engine that runs it. Each algorithm only says, for the
nodes this process holds (rows), what it computes from Z (``encode``): the *public* vectors Y that
get mixed (SGP: Z, Deep-Squeeze: C, CHOCO: X^), updating its own buffers (E, X^), and the
``Message`` that brings a receiver's copy of Y up to date (the dense rows, or the kept entries of
a compressed vector; receivers *replace* their copy with it, or *add* it to their copy for
CHOCO, whose messages are the increments Q of X^). An ``Exchange`` then delivers the messages
and computes ``eta (W Y - Y)`` and the mixed push-sum weights:

- ``Mixer`` (the simulator): every node's Y is a row of one ``[n, P]`` tensor, which is what
  every receiver's copy equals, so no message needs to move and W Y is one product.
- ``lpdt.decentral.peer.PeerExchange`` (one process per node): sends the message to the node's
  out-peers over ``torch.distributed``, updates its copies of its in-neighbours' Y from theirs,
  and mixes its own row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch

from lpdt.decentral.catalog import ALGORITHMS
from lpdt.decentral.compression import Compressor

DENSE_MAX_NODES = 32  # up to this many nodes, W @ Y is one dense [n, n] x [n, P] product


@dataclass(frozen=True)
class Message:
    """What each held node sends in one round (besides its push-sum weight).

    ``dense`` is the message as a receiver decodes it (``[m, P]``, zeros where nothing is sent);
    ``payload`` is the compressor's encoding of it (what goes on the wire: kept entries and
    their positions, or codes and per-tensor ranges), None when the dense rows themselves are
    sent. ``accumulate``: the receiver adds the
    message to its copy of the sender's public vector (True) or replaces its copy with it.
    """

    dense: torch.Tensor
    payload: tuple[torch.Tensor, ...] | None
    accumulate: bool


class Exchange(Protocol):
    """Delivers one round of messages and mixes (see the module docstring)."""

    def gossip(
        self, public: torch.Tensor, message: Message, w: torch.Tensor, eta: float, out: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write ``eta (W Y - Y)`` for the held rows into ``out`` (``Y``: the public vectors,
        ``public`` holding the held nodes' rows) and return it with the held nodes' mixed
        push-sum weights ``w + eta (W w - w)`` (a new tensor; ``w`` is not changed)."""
        ...

    def state_dict(self) -> dict[str, torch.Tensor]:
        """What the exchange keeps between rounds (a receiver's copies of its in-neighbours'
        public vectors), for checkpoints."""
        ...

    def load_state_dict(self, d: dict[str, torch.Tensor]) -> None: ...


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

    def gossip(
        self, public: torch.Tensor, message: Message, w: torch.Tensor, eta: float, out: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The in-process ``Exchange``: ``public`` holds every node's row, which is exactly what
        every receiver's copy of it would be, so ``message`` needs no delivery."""
        self.correction(public, eta, out)
        return out, torch.add(w, self(w) - w, alpha=eta)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {}  # the receivers' copies are the rows themselves

    def load_state_dict(self, d: dict[str, torch.Tensor]) -> None:
        pass

    def _sparse(
        self,
        y: torch.Tensor,
        diag: torch.Tensor,
        coefs: list[torch.Tensor],
        eta: float,
        out: torch.Tensor,
    ) -> torch.Tensor:
        shape = (-1,) + (1,) * (y.dim() - 1)
        torch.mul(y, (diag * eta).view(shape), out=out)
        for src, coef in zip(self.src, coefs):
            out.addcmul_(y.index_select(0, src), (coef * eta).view(shape))
        return out


class Gossip:
    """Base class. ``delta(z, w)`` returns the correction for ``z`` and the mixed push-sum
    weights (which travel with every message, uncompressed); it changes neither ``z`` nor ``w``.

    The returned correction lives in a buffer the algorithm owns and overwrites at the next call
    (no per-iteration allocation of ``[n, P]`` temporaries): add it to ``z`` before gossiping again.
    """

    def __init__(
        self, exchange: Exchange, compressor: Compressor, eta: float, z0: torch.Tensor
    ) -> None:
        self.exchange = exchange
        self.compress = compressor
        self.eta = eta
        self.out = torch.empty_like(z0)
        self.scratch = torch.empty_like(z0)

    def encode(self, z: torch.Tensor) -> tuple[torch.Tensor, Message]:
        """Update the algorithm's buffers from the numerators ``z``; return the public vectors of
        the held nodes and the message that brings receivers' copies of them up to date."""
        raise NotImplementedError

    def delta(self, z: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(delta, mixed w)`` for numerators ``z`` and push-sum weights ``w``."""
        public, message = self.encode(z)
        return self.exchange.gossip(public, message, w, self.eta, self.out)

    def buffers(self) -> dict[str, torch.Tensor]:
        """The algorithm's own state (Deep-Squeeze's error, CHOCO's public copies)."""
        return {}

    def state_dict(self) -> dict[str, object]:
        return {**self.buffers(), "exchange": self.exchange.state_dict()}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        for k, v in d.items():
            if k == "exchange":
                self.exchange.load_state_dict(v)
            else:
                getattr(self, k).copy_(v)


# The algorithms are registered, with what the rest of lpdt reads about them, in
# lpdt.decentral.catalog (ALGORITHMS).


class SGP(Gossip):
    """Y = Z, sent whole."""

    def encode(self, z: torch.Tensor) -> tuple[torch.Tensor, Message]:
        return z, Message(z, None, accumulate=False)


class DeepSqueeze(Gossip):
    """V = Z + E; Y = C = comp(V), sent compressed; E = V - C."""

    def __init__(
        self, exchange: Exchange, compressor: Compressor, eta: float, z0: torch.Tensor
    ) -> None:
        super().__init__(exchange, compressor, eta, z0)
        self.error = torch.zeros_like(z0)

    def encode(self, z: torch.Tensor) -> tuple[torch.Tensor, Message]:
        v = torch.add(z, self.error, out=self.scratch)
        c, payload = self.compress.encode(v)
        torch.sub(v, c, out=self.error)
        return c, Message(c, payload, accumulate=False)

    def buffers(self) -> dict[str, torch.Tensor]:
        return {"error": self.error}


class Choco(Gossip):
    """Q = comp(Z - X^), sent compressed; X^ += Q everywhere; Y = X^."""

    def __init__(
        self, exchange: Exchange, compressor: Compressor, eta: float, z0: torch.Tensor
    ) -> None:
        super().__init__(exchange, compressor, eta, z0)
        self.xhat = torch.zeros_like(z0)  # public copies start at 0 (reference §3.3)

    def encode(self, z: torch.Tensor) -> tuple[torch.Tensor, Message]:
        q, payload = self.compress.encode(torch.sub(z, self.xhat, out=self.scratch))
        self.xhat.add_(q)
        return self.xhat, Message(q, payload, accumulate=True)

    def buffers(self) -> dict[str, torch.Tensor]:
        return {"xhat": self.xhat}


def make_algorithm(
    name: str,
    w: torch.Tensor,
    compressor: Compressor,
    eta: float,
    z0: torch.Tensor,
    exchange: Exchange | None = None,
) -> Gossip:
    """The algorithm registered as ``name`` (``lpdt.decentral.catalog.ALGORITHMS``) on mixing
    matrix ``w``; ``exchange`` defaults to the in-process ``Mixer`` (``z0`` then holds all n
    nodes' rows)."""
    spec = ALGORITHMS.get(name)
    if not spec.compresses and compressor.compression != "none":  # (lpdt.config refuses it too)
        raise ValueError(f"algorithm {name!r} sends full models: compression must be 'none'")
    return spec.load()(exchange or Mixer(w, z0.device), compressor, eta, z0)
