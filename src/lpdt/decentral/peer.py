"""One node per process: gossip messages on the wire (``torch.distributed`` point to point).

Process r holds node r. Every round it sends one message to each of its distinct out-peers and
receives one from each in-neighbour (``isend`` / ``irecv`` along the graph's edges only; no
collective carries gossip). A message is one contiguous byte buffer (``WireCodec``):

- dense (no compression): ``w`` (fp32) then the P fp32 values: ``4 (P + 1)`` bytes, exactly the
  reference's count;
- top-k / random-k: ``w`` (fp32), the K kept values (fp32), then their indices *within their
  tensor* as uint16 when every tensor has at most 65,536 entries (ResNet-20, VGG-11's
  convolutions are not: int32 then): ``4 + 6 K`` (or ``4 + 8 K``) bytes, where the reference
  counts ``6 K + 3``. Which entries of which tensor are kept is fixed by the config (``K`` per
  tensor), so the receiver needs no further header.

The receiver keeps a copy of each in-neighbour's public vector (Deep-Squeeze / SGP: replaced by
every message; CHOCO: its public copy x^_j, to which each message Q_j is added, as in the
paper's Algorithm 3) and mixes its own row with exactly the operations, in the same order, as the
simulator's sparse mixing path (``Mixer._sparse``): so both engines run one implementation of
every algorithm (``lpdt.decentral.algorithms``), and the distributed engine equals the simulator
bit for bit when the simulator mixes sparsely, within float reassociation when it uses its dense
product (tests/distributed/test_equivalence.py; the wire codec: tests/decentral/test_peer.py).
"""

from __future__ import annotations

import datetime as dt
import os

import torch
import torch.distributed as dist

from lpdt.decentral.algorithms import Message
from lpdt.decentral.compression import Compressor
from lpdt.record import Engine

FP32 = 4  # bytes


class WireCodec:
    """Packs one node's message and push-sum weight into one uint8 buffer and unpacks it: the
    weight (fp32), then the compressor's fields (``wire_fields``), each at an offset that is a
    multiple of its item size."""

    def __init__(self, compressor: Compressor, p_total: int) -> None:
        self.compressor = compressor
        self.p_total = p_total
        self.fields: list[tuple[torch.dtype, int, int]] = []  # (dtype, count, byte offset)
        at = FP32
        for dtype, count in compressor.wire_fields():
            at = -(-at // dtype.itemsize) * dtype.itemsize
            self.fields.append((dtype, count, at))
            at += dtype.itemsize * count
        self.nbytes = at

    def _views(self, buf: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        views = [buf[o : o + d.itemsize * c].view(d) for d, c, o in self.fields]
        return buf[:FP32].view(torch.float32), views

    def pack(self, message: Message, w: torch.Tensor, buf: torch.Tensor) -> None:
        """Write row 0 of ``message`` and the weight ``w[0]`` into ``buf`` (uint8 [nbytes])."""
        w_view, views = self._views(buf)
        w_view.copy_(w[:1])
        self.compressor.wire_pack(message.dense, message.payload, views)

    def unpack(self, buf: torch.Tensor, copy: torch.Tensor, accumulate: bool) -> torch.Tensor:
        """Bring ``copy`` (the sender's public vector as this receiver knows it, ``[P]``) up to
        date from ``buf``; return the sender's push-sum weight (``[1]``)."""
        w_view, views = self._views(buf)
        self.compressor.wire_unpack(views, copy, accumulate)
        return w_view.to(copy.device)


class PeerExchange:
    """The ``Exchange`` of a process holding node ``node`` (row 0) of mixing matrix ``w``."""

    def __init__(
        self,
        node: int,
        w_matrix: torch.Tensor,
        codec: WireCodec,
        device: torch.device,
        wire_device: torch.device,
    ) -> None:
        w = w_matrix.to(torch.float64)
        n = w.shape[0]
        self.node = node
        # Distinct peers (code_grid counts a duplicate edge twice in W and sends once).
        self.out_peers = [i for i in range(n) if i != node and w[i, node] != 0]
        self.in_peers = [j for j in range(n) if j != node and w[node, j] != 0]  # Mixer's order
        # The coefficients exactly as the Mixer builds them (float64 -> float32).
        self.diag = torch.tensor([float(w[node, node])], dtype=torch.float32, device=device)
        self.coef = torch.tensor(
            [float(w[node, j]) for j in self.in_peers], dtype=torch.float32, device=device
        )
        self.codec = codec
        self.copies = torch.zeros(len(self.in_peers), codec.p_total, device=device)
        self.send_buf = torch.empty(codec.nbytes, dtype=torch.uint8, device=wire_device)
        stride = -(-codec.nbytes // 8) * 8  # rows start at multiples of 8 (fp32 / int views)
        self.recv_bufs = torch.empty(
            len(self.in_peers), stride, dtype=torch.uint8, device=wire_device
        )[:, : codec.nbytes]
        self.in_w = torch.empty(len(self.in_peers), device=device)
        self.bytes_sent = 0  # payload bytes handed to the transport

    def gossip(
        self, public: torch.Tensor, message: Message, w: torch.Tensor, eta: float, out: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        self.codec.pack(message, w, self.send_buf)
        reqs = [dist.isend(self.send_buf, dst=j) for j in self.out_peers]
        reqs += [dist.irecv(self.recv_bufs[k], src=j) for k, j in enumerate(self.in_peers)]
        for r in reqs:
            if r is None:  # torch returns no handle only for a rank outside the group
                raise RuntimeError(
                    "gossip: a send or receive was not posted (rank outside the group)"
                )
            r.wait()
        self.bytes_sent += self.codec.nbytes * len(self.out_peers)
        for k in range(len(self.in_peers)):
            self.in_w[k : k + 1] = self.codec.unpack(
                self.recv_bufs[k], self.copies[k], message.accumulate
            )
        # eta (W Y - Y) for row 0, as Mixer._sparse: Y_0 (w_00 - 1) eta + sum_j Y_j (w_0j eta)
        torch.mul(public, ((self.diag - 1.0) * eta).view(-1, 1), out=out)
        for k in range(len(self.in_peers)):
            out.addcmul_(self.copies[k : k + 1], (self.coef[k : k + 1] * eta).view(-1, 1))
        # w + eta (W w - w), W w as Mixer._sparse with eta 1
        mixed = torch.mul(w, self.diag * 1.0)
        for k in range(len(self.in_peers)):
            mixed.addcmul_(self.in_w[k : k + 1], self.coef[k : k + 1] * 1.0)
        return out, torch.add(w, mixed - w, alpha=eta)

    def state_dict(self) -> dict:
        """The receiver's copies (CHOCO's x^_j of the in-neighbours) and the byte counter."""
        return {"copies": self.copies, "bytes_sent": self.bytes_sent}

    def load_state_dict(self, d: dict) -> None:
        self.copies.copy_(d["copies"])
        self.bytes_sent = int(d["bytes_sent"])


DEFAULT_TIMEOUT_S = 1800.0


def timeout_s() -> float:
    """Longest wait for any message or collective (``LPDT_DIST_TIMEOUT_S``, default 30 min:
    a peer may be evaluating or compiling meanwhile); a dead peer is usually noticed at once
    (its connections close), a hung one after this long."""
    return float(os.environ.get("LPDT_DIST_TIMEOUT_S", DEFAULT_TIMEOUT_S))


class TorchGroup:
    """Node ``rank`` of a ``torch.distributed`` process group of ``nodes`` processes."""

    engine: Engine = "distributed"

    def __init__(self, rank: int, nodes: int, device: torch.device) -> None:
        self.rank, self.nodes = rank, nodes
        self.ids = [rank]
        self.writer = rank == 0
        self.checkpoint_name = f"checkpoint.rank{rank}.pt"
        # Collectives and messages go through the backend's device: CPU tensors for gloo.
        self.wire_device = torch.device("cpu") if dist.get_backend() == "gloo" else device
        self._exchange: PeerExchange | None = None

    def exchange(
        self, w_matrix: torch.Tensor, compressor: Compressor, p_total: int, device: torch.device
    ) -> PeerExchange:
        self._exchange = PeerExchange(
            self.rank, w_matrix, WireCodec(compressor, p_total), device, self.wire_device
        )
        return self._exchange

    def _all_reduce(self, t: torch.Tensor) -> torch.Tensor:
        buf = t.to(self.wire_device, copy=True)
        dist.all_reduce(buf)
        return buf.to(t.device)

    def mean(self, rows: torch.Tensor) -> torch.Tensor:
        return self._all_reduce(rows.sum(0)) / self.nodes

    def gather(self, rows: torch.Tensor) -> torch.Tensor:
        src = rows.to(self.wire_device).contiguous()
        out = [torch.empty_like(src) for _ in range(self.nodes)]
        dist.all_gather(out, src)
        return torch.cat(out).to(rows.device)

    def total(self, value: float) -> float:
        return float(self._all_reduce(torch.tensor([value], dtype=torch.float64)))

    def wire_bytes(self) -> float | None:
        sent = float(self._exchange.bytes_sent) if self._exchange is not None else 0.0
        return self.total(sent) / self.nodes

    def barrier(self) -> None:
        dist.barrier()


def init_process_group(rank: int, world: int, device: torch.device) -> None:
    """Join the process group from the environment (``MASTER_ADDR`` / ``MASTER_PORT``, as set by
    ``lpdt.engine.launch`` or torchrun). gloo on CPU; on CUDA, NCCL when every process of this machine
    has a GPU of its own, else gloo with messages staged through host memory."""
    backend = "gloo"
    if device.type == "cuda":
        local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
        if torch.cuda.device_count() >= local:
            backend = "nccl"
    dist.init_process_group(
        backend, rank=rank, world_size=world, timeout=dt.timedelta(seconds=timeout_s())
    )
