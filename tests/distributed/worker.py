"""A rank of the equivalence tests: ``python -m tests.distributed.worker CASES.json OUT_DIR``.

For every case (a list of config overrides) it trains node RANK for a few epochs and the final
gossip rounds through ``lpdt.engine.run.Run`` with a ``TorchGroup`` (the distributed engine's code
path), then saves the node's state to ``OUT_DIR/<case index>.rank<RANK>.pt``, and rank 0 the bytes every
node handed to the transport (``TorchGroup.wire_bytes``) and the gossip rounds to
``OUT_DIR/<case index>.wire.json``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from lpdt.config import load_config
from lpdt.decentral.catalog import TOPOLOGIES, TopologySpec
from lpdt.decentral.peer import TorchGroup, init_process_group
from lpdt.engine.device import resolve_device
from lpdt.engine.run import Run
from lpdt.engine.schedule import lr_at


def _irregular(n: int, **_: object) -> list[list[int]]:
    """Out-degrees 3, 1, 1, ...: W is not row-stochastic, so push-sum weights move."""
    return [[1, 2, 3], *[[(i + 1) % n] for i in range(1, n)]]


if "test_irregular" not in TOPOLOGIES:
    TOPOLOGIES.add(
        "test_irregular",
        TopologySpec(_irregular, short="irregular", words="irregular graph", directed=True),
    )


def node_state(run: Run) -> dict[str, torch.Tensor]:
    """What the equivalence tests compare, for the rows a run holds."""
    st = run.state
    out = {"x": st.x.clone(), "w": st.w.clone()}
    out.update({f"algo.{k}": v.clone() for k, v in run.algo.buffers().items()})
    out.update(
        {
            f"opt.{k}": v.clone()
            for k, v in run.opt.state_dict().items()
            if isinstance(v, torch.Tensor)
        }
    )
    return out


def train_briefly(run: Run, epochs: int) -> None:
    for epoch in range(epochs):
        run.train_epoch(lr_at(run.cfg, epoch))
    run.final_gossip()


def main() -> int:
    cases, out = json.loads(Path(sys.argv[1]).read_text()), Path(sys.argv[2])
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    # Every case runs on the device its config names (cpu, or cuda: tests/test_cuda.py).
    device = resolve_device(load_config(None, cases[0]["overrides"]).device)
    if device.type == "cuda":  # as lpdt.engine.worker places ranks: LOCAL_RANK over the GPUs
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]) % torch.cuda.device_count())
        torch.cuda.set_device(device)
    init_process_group(rank, world, device)
    try:
        for c, case in enumerate(cases):
            cfg = load_config(None, case["overrides"])
            run = Run(cfg, log=lambda s: None, group=TorchGroup(rank, world, device))
            train_briefly(run, case["epochs"])
            state = {k: v.cpu() for k, v in node_state(run).items()}
            torch.save(state, out / f"{c}.rank{rank}.pt")
            wire = run.group.wire_bytes()  # a collective: every rank calls it
            if rank == 0:
                rounds = run.iterations + run.cfg.train.final_gossip_rounds
                (out / f"{c}.wire.json").write_text(
                    json.dumps({"wire_bytes_per_node": wire, "gossip_rounds": rounds})
                )
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
