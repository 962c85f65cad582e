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

import torch
import torch.nn.functional as F

from lpdt.config import load_config
from lpdt.decentral.algorithms import make_algorithm
from lpdt.decentral.compression import LayerwiseCompressor
from lpdt.decentral.optim import make_optimizer
from lpdt.decentral.state import NodeState
from lpdt.decentral.topology import mixing_matrix
from lpdt.models import MODELS, build_model


def timed(fn, iters: int, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


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

    t_pure = timed(pure, args.iters)
    print(f"model {args.model} ({args.precision}), {n} nodes x batch {b}, "
          f"{torch.get_num_threads()} threads")  # fmt: skip
    print(f"pure compute        : {n * b / t_pure:8.1f} images/s  ({t_pure * 1000:.1f} ms/iter)")

    for compression, ratio in (("none", 0.0), ("topk", 0.99)):
        st = NodeState(model, n)
        w = torch.ones(n)
        comp = LayerwiseCompressor([(s.offset, s.numel) for s in st.segments], compression, ratio)
        eta = 1.0 if compression == "none" else 0.01
        algo = make_algorithm("choco", mixing_matrix("directed_ring", n), comp, eta, st.x)
        opt = make_optimizer(cfg.optim, st.x[:, : st.p_train])
        st.train()

        t = timed(engine_iteration(st, w, opt, algo, xs, ys), args.iters)
        print(f"engine, {compression:4} {ratio:4.2f}: {n * b / t:8.1f} images/s  "
              f"({t * 1000:.1f} ms/iter)  overhead {100 * (t / t_pure - 1):+.1f} %")  # fmt: skip


if __name__ == "__main__":
    main()
