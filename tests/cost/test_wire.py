"""Measured message bytes (lpdt.cost.wire): fp32 against 8-bit messages, dense and top-k, on the
distributed engine's wire format, checked against what real two-process runs send."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from lpdt.config import load_config
from lpdt.cost.wire import implied_ratio, message_nbytes, wire_row
from lpdt.engine.run import Run
from tests.cost.nets import Tiny
from tests.distributed.test_equivalence import BASE, run_ranks

NODES = 2


def test_implied_ratios() -> None:
    """1-byte values: 4x dense; with b-byte indices (4 + b) / (1 + b): 2x uint16, 1.6x int32."""
    assert (implied_ratio(0), implied_ratio(2), implied_ratio(4)) == (4.0, 2.0, 1.6)


def test_wire_row_counts_the_codec_bytes() -> None:
    """Dense: 4 (P + 1) bytes fp32 against 4 + 8 T + P at 8 bits (a [min, max] per tensor); top-k
    (uint16 indices): 4 + 6 K against 4 + 8 T + 3 K (one byte of padding where it is odd)."""
    torch.manual_seed(0)
    net = Tiny()
    numels = [p.numel() for p in net.parameters()]
    p, t = sum(numels), len(numels)
    dense = wire_row(net, net, 0.0)
    assert (dense["bytes_fp32"], dense["bytes_int8"]) == (4 * (p + 1), 4 + 8 * t + p)
    assert dense["ratio"] == pytest.approx(4 * (p + 1) / (4 + 8 * t + p))
    top = wire_row(net, net, 0.9)
    k = sum(max(1, int(m * 0.1)) for m in numels)
    assert top["sent_fp32"] == top["sent_int8"] == k and top["index_bytes"] == 2
    codes_end = 4 + 8 * t + k
    assert (top["bytes_fp32"], top["bytes_int8"]) == (4 + 6 * k, codes_end + codes_end % 2 + 2 * k)
    assert top["implied_ratio"] == 2.0 and top["ratio"] < 2.0  # the per-tensor ranges cost bytes


CASES = {  # name: (precision, message codec)
    "dense fp32": ("fp32", "none"),
    "dense 8-bit": ("int8", "int8"),
    "top-k fp32": ("fp32", "topk"),
    "top-k 8-bit": ("int8", "topk_int8"),
}


def _overrides(precision: str, codec: str) -> list[str]:
    o = [
        *BASE,
        f"topology.nodes={NODES}",
        "algorithm.name=choco",
        f"precision.mode={precision}",
        "train.max_iters_per_epoch=2",
        "train.final_gossip_rounds=1",
    ]
    if codec != "none":
        o += [f"algorithm.compression.name={codec}", "algorithm.consensus_lr=0.5"]
    if codec.startswith("topk"):
        o += ["algorithm.compression.ratio=0.9"]
    return o


def test_tiny_runs_send_what_the_measurement_counts(tmp_path: Path) -> None:
    """The same tiny run (2 processes over gloo) with fp32 and with 8-bit messages, dense and top-k:
    the bytes each node handed to the transport, per gossip round, are the bytes
    ``message_nbytes`` measures on the run's own state; so the measured 8-bit / fp32 ratio is
    the runs' ratio: about 4x dense, below the 2x that top-k with uint16 indices allows."""
    cases = [_overrides(*c) for c in CASES.values()]
    run_ranks(NODES, cases, tmp_path, timeout_s=300.0)
    sent, measured = {}, {}
    for i, (name, (_, codec)) in enumerate(CASES.items()):
        rec = json.loads((tmp_path / f"{i}.wire.json").read_text())
        sent[name] = rec["wire_bytes_per_node"]
        # one out-peer per node on the 2-node ring: one message per gossip round
        per_message = sent[name] / rec["gossip_rounds"]
        run = Run(load_config(None, cases[i]), log=lambda s: None)  # the same model and state
        segments = [(s.offset, s.numel) for s in run.state.segments]
        ratio = 0.9 if codec.startswith("topk") else 0.0
        measured[name] = message_nbytes(segments, run.state.x[:1].clone(), codec, ratio)
        assert per_message == measured[name][0], name
    dense = sent["dense fp32"] / sent["dense 8-bit"]
    top = sent["top-k fp32"] / sent["top-k 8-bit"]
    assert dense == pytest.approx(measured["dense fp32"][0] / measured["dense 8-bit"][0])
    assert top == pytest.approx(measured["top-k fp32"][0] / measured["top-k 8-bit"][0])
    assert 3.5 < dense < 4.0
    assert measured["top-k 8-bit"][2] == 2 and 1.0 < top < implied_ratio(2) == 2.0
