"""The distributed engine's overhead over pure compute, beside the simulator's.

ResNet-20, n nodes at per-node batch b, directed ring, CHOCO, on this machine. For each engine
it times ``--iters`` training iterations (after ``--warmup``) of

- pure compute: every node's forward, backward and optimizer step, no gossip (in the distributed
  engine: the same n processes, no messages),
- the engine, uncompressed and with 99 % top-k,

and prints images/s, the ratio of the engine's time to pure compute's (1.30 = 30 % overhead),
and the wire bytes each node sent per iteration (distributed: measured; simulated: counted).
The simulator runs in this process with ``--threads`` torch threads (default: all cores); the
distributed engine starts n processes that share the cores (1 thread each on 2 cores x 8 nodes).

    python benchmarks/bench_distributed.py [--nodes 8] [--batch 32] [--iters 20] [--warmup 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

from lpdt.config import load_config
from lpdt.engine.launch import free_port
from lpdt.engine.run import Run

CASES = {"compute": None, "dense": ("none", 0.0), "top99": ("topk", 0.99)}


def overrides(args: argparse.Namespace, case: str) -> list[str]:
    comp, ratio = CASES[case] or ("none", 0.0)
    n, b = args.nodes, args.batch
    return [
        f"model.name={args.model}",
        "data.dataset=synthetic",
        f"topology.nodes={n}",
        f"train.batch_size={n * b}",
        f"data.train_subset={n * b * (args.iters + args.warmup + 1)}",
        "data.test_subset=10",
        "topology.name=directed_ring",
        "algorithm.name=choco",
        f"algorithm.compression.name={comp}",
        f"algorithm.compression.ratio={ratio}",
        "device=cpu",
        "data.augment=false",
    ]


def iterate(run: Run, gossip: bool) -> None:
    """One training iteration: the engine's own (``Run.iteration``), or without gossip and the
    loss reduction (compute only)."""
    if gossip:
        run.iteration(0.01)
        return
    run.local_gradients()
    run.state.step(run.opt, 0.01)


def measure(run: Run, gossip: bool, args: argparse.Namespace, barrier) -> float:
    run.state.train()
    for _ in range(args.warmup):
        iterate(run, gossip)
    barrier()
    t0 = time.perf_counter()
    for _ in range(args.iters):
        iterate(run, gossip)
    barrier()
    return time.perf_counter() - t0


def worker(args: argparse.Namespace) -> None:
    import torch.distributed as dist

    from lpdt.decentral.peer import TorchGroup, init_process_group

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(args.threads)
    init_process_group(rank, world, torch.device("cpu"))
    try:
        cfg = load_config(None, overrides(args, args.worker))
        run = Run(cfg, log=lambda s: None, group=TorchGroup(rank, world, torch.device("cpu")))
        seconds = measure(run, CASES[args.worker] is not None, args, dist.barrier)
        sent = run.group.wire_bytes() or 0.0
        if rank == 0:
            print(json.dumps({"seconds": seconds, "wire_bytes": sent}), flush=True)
    finally:
        dist.destroy_process_group()


def distributed(args: argparse.Namespace, case: str) -> dict:
    n = args.nodes
    env = {
        **os.environ,
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "WORLD_SIZE": str(n),
        "LPDT_DIST_TIMEOUT_S": "600",
    }
    threads = max(1, (args.threads or os.cpu_count() or 1) // n)
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--worker",
        case,
        "--threads",
        str(threads),
    ] + _passthrough(args)
    procs = [
        subprocess.Popen(cmd, env={**env, "RANK": str(r)}, stdout=subprocess.PIPE, text=True)
        for r in range(n)
    ]
    try:
        out = procs[0].communicate(timeout=1200)[0]
        for p in procs[1:]:
            p.wait(timeout=60)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    if any(p.returncode for p in procs):
        raise RuntimeError(f"{case}: worker exit codes {[p.returncode for p in procs]}")
    return json.loads(out.strip().splitlines()[-1])


def simulated(args: argparse.Namespace, case: str) -> dict:
    torch.set_num_threads(args.threads or os.cpu_count() or 1)
    run = Run(load_config(None, overrides(args, case)), log=lambda s: None)
    seconds = measure(run, CASES[case] is not None, args, lambda: None)
    counted = run.compressor.message_bytes() * (args.iters + args.warmup) if CASES[case] else 0
    return {"seconds": seconds, "wire_bytes": counted}


def _passthrough(args: argparse.Namespace) -> list[str]:
    return [
        "--model",
        args.model,
        "--nodes",
        str(args.nodes),
        "--batch",
        str(args.batch),
        "--iters",
        str(args.iters),
        "--warmup",
        str(args.warmup),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet20")
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None, help="cores to use (default: all)")
    ap.add_argument("--engines", default="simulated,distributed")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    images = args.nodes * args.batch * args.iters
    print(
        f"{args.model}, {args.nodes} nodes x batch {args.batch}, directed ring, choco; "
        f"{args.iters} iterations after {args.warmup}; {os.cpu_count()} cores"
    )
    for engine in args.engines.split(","):
        fn = simulated if engine == "simulated" else distributed
        base = None
        for case in CASES:
            r = fn(args, case)
            ips = images / r["seconds"]
            base = base or r["seconds"]
            per_iter = r["wire_bytes"] / (args.iters + args.warmup)
            print(
                f"{engine:>11} {case:>8}: {ips:7.1f} img/s  time / compute "
                f"{r['seconds'] / base:5.2f}  wire {per_iter / 1e6:8.4f} MB per node "
                f"per iteration",
                flush=True,
            )


if __name__ == "__main__":
    main()
