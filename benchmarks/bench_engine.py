"""Engine overhead: a full decentralized iteration versus the pure compute it contains.

For n nodes of one model at per-node batch b, prints images/s of
  - pure compute: n sequential forward+backward+SGD steps of standalone models (no communication),
  - a full decentralized iteration of the engine (de-bias, n forward/backward into the flat
    gradient, batched optimizer step, compression, gossip), uncompressed and with 99 % top-k,
and the overhead (ratio - 1). Batches are pre-generated so both sides measure the same compute.

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
from lpdt.decentral.algorithms import make_algorithm
from lpdt.decentral.compression import LayerwiseCompressor
from lpdt.decentral.optim import make_optimizer
from lpdt.decentral.state import NodeState
from lpdt.decentral.topology import mixing_matrix
from lpdt.models import MODELS, build_model


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


def engine_iteration(st, w, opt, algo, xs, ys):
    """One full decentralized iteration, exactly as ``lpdt.train.Run`` performs it."""

    def iteration() -> None:
        st.grad.zero_()
        st.x.div_(w[:, None])
        for m, x, y in zip(st.models, xs, ys):
            F.cross_entropy(m(x), y).backward()
        st.x.mul_(w[:, None])
        opt.step(st.x[:, : st.p_train], st.grad, 0.01)
        st.x.add_(algo.delta(st.x, w))

    return iteration


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
    cfg = load_config(None, [f"model.name={args.model}", f"precision.mode={args.precision}"])
    torch.manual_seed(0)
    model = build_model(cfg, 10, (3, 32, 32))
    xs = [torch.randn(b, 3, 32, 32) for _ in range(n)]
    ys = [torch.randint(0, 10, (b,)) for _ in range(n)]

    # Pure compute: n standalone models, each with its own torch SGD.
    models = [copy.deepcopy(model) for _ in range(n)]
    opts = [torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9, nesterov=True,
                            weight_decay=1e-4) for m in models]  # fmt: skip

    def pure() -> None:
        for m, o, x, y in zip(models, opts, xs, ys):
            o.zero_grad()
            F.cross_entropy(m(x), y).backward()
            o.step()

    # Build both engine variants first, then time all three interleaved, one iteration each in
    # turn: on a shared 2-core machine the load drifts over seconds, and timing the variants one
    # after the other would attribute that drift to whichever ran later.
    variants: dict[str, Callable[[], None]] = {"pure compute": pure}
    for compression, ratio in (("none", 0.0), ("topk", 0.99)):
        st = NodeState(model, n)
        w = torch.ones(n)
        comp = LayerwiseCompressor([(s.offset, s.numel) for s in st.segments], compression, ratio)
        eta = 1.0 if compression == "none" else 0.01
        algo = make_algorithm("choco", mixing_matrix("directed_ring", n), comp, eta, st.x)
        opt = make_optimizer(cfg.optim, st.x[:, : st.p_train])
        st.train()
        variants[f"engine, {compression:4} {ratio:4.2f}"] = engine_iteration(
            st, w, opt, algo, xs, ys
        )

    times = timed_interleaved(variants, args.iters)
    t_pure = times["pure compute"]
    print(f"model {args.model} ({args.precision}), {n} nodes x batch {b}, "
          f"{torch.get_num_threads()} threads, median of {args.iters} interleaved iterations")  # fmt: skip
    for name, t in times.items():
        overhead = "" if name == "pure compute" else f"  overhead {100 * (t / t_pure - 1):+.1f} %"
        print(f"{name:19}: {n * b / t:8.1f} images/s  ({t * 1000:.1f} ms/iter){overhead}")


if __name__ == "__main__":
    main()
