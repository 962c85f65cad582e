"""Engine overhead: a full decentralized iteration versus the pure compute it contains.

For n nodes of one model at per-node batch b (the ``synthetic`` dataset at 32 px, directed ring,
CHOCO), prints images/s of
  - pure compute: n sequential forward+backward+SGD steps of standalone models (no communication),
  - a full decentralized iteration of the engine, ``lpdt.engine.run.Run.iteration`` itself (de-bias,
    n forward/backward into the flat gradient, the loss reduction, the batched optimizer step,
    compression, gossip and the push-sum weights), uncompressed and with 99 % top-k,
and the overhead (ratio - 1). Both sides draw their batches through a run's own samplers
(``Run.batch``), so they measure the same compute and the same data access.

    python benchmarks/bench_engine.py [--model resnet20] [--nodes 8] [--batch 32] [--iters 20]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from lpdt.config import load_config
from lpdt.engine.run import Run
from lpdt.models import MODELS


def timed_interleaved(
    fns: dict[str, Callable[[], None]], iters: int, warmup: int = 3
) -> dict[str, float]:
    """Median wall time of each function, calling them in turn so drift hits all alike."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(iters):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(ts) for name, ts in times.items()}


def run_of(args: argparse.Namespace, compression: str, ratio: float) -> Run:
    """The engine's run of the benchmark's config, as ``lpdt train`` builds it."""
    n, b = args.nodes, args.batch
    cfg = load_config(
        None,
        [
            f"model.name={args.model}",
            f"precision.mode={args.precision}",
            "data.dataset=synthetic",
            f"data.train_subset={n * b * 8}",
            "data.test_subset=10",
            "data.augment=false",
            "partition.skew=0.0",  # IID: b * 8 samples per node, every batch full
            f"topology.nodes={n}",
            "topology.name=directed_ring",
            f"train.batch_size={n * b}",
            "algorithm.name=choco",
            f"algorithm.compression.name={compression}",
            f"algorithm.compression.ratio={ratio}",
            "device=cpu",
        ],
    )
    run = Run(cfg, log=lambda s: None)
    run.state.train()
    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet20" if "resnet20" in MODELS else "tiny_cnn")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "int8"])
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    n, b = args.nodes, args.batch

    # Pure compute: n standalone copies of the model, each with its own torch SGD, fed by the
    # samplers of a run of the same config.
    data = run_of(args, "none", 0.0)
    models = [copy.deepcopy(data.state.template) for _ in range(n)]
    opts = [
        torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9, nesterov=True, weight_decay=1e-4)
        for m in models
    ]
    for m in models:
        m.train()

    def pure() -> None:
        for k, (m, o) in enumerate(zip(models, opts, strict=True)):
            x, y = data.batch(k)
            o.zero_grad()
            F.cross_entropy(m(x), y).backward()
            o.step()

    # Build both engine variants first, then time all three interleaved, one iteration each in
    # turn: on a shared 2-core machine the load drifts over seconds, and timing the variants one
    # after the other would attribute that drift to whichever ran later.
    variants: dict[str, Callable[[], None]] = {"pure compute": pure}
    for compression, ratio in (("none", 0.0), ("topk", 0.99)):
        run = run_of(args, compression, ratio)
        variants[f"engine, {compression:4} {ratio:4.2f}"] = lambda run=run: run.iteration(0.01)

    times = timed_interleaved(variants, args.iters)
    t_pure = times["pure compute"]
    print(
        f"model {args.model} ({args.precision}), {n} nodes x batch {b}, "
        f"{torch.get_num_threads()} threads, median of {args.iters} interleaved iterations"
    )
    for name, t in times.items():
        overhead = "" if name == "pure compute" else f"  overhead {100 * (t / t_pure - 1):+.1f} %"
        print(f"{name:19}: {n * b / t:8.1f} images/s  ({t * 1000:.1f} ms/iter){overhead}")


if __name__ == "__main__":
    main()
