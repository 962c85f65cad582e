"""One ResNet-20 training step (forward + backward + SGD) at batch 32: int8 (simulated) vs fp32.

Usage: ``.venv/bin/python benchmarks/bench_int8.py [--steps 40] [--rounds 4] [--batch 32]``.
Prints the median step time of each and the ratio int8 / fp32 (target: <= 2).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from lpdt.config import RunConfig
from lpdt.layers.quant import convert_to_int8
from lpdt.models import MODELS


def step_times(
    model: torch.nn.Module, batch: int, steps: int, warmup: int, clock=time.perf_counter
) -> list[float]:
    """Times (``clock``) of ``steps`` SGD steps on random CIFAR-shaped data after ``warmup`` steps."""
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(batch, 3, 32, 32, generator=gen)
    y = torch.randint(0, 10, (batch,), generator=gen)
    model.train()
    times = []
    for i in range(warmup + steps):
        t0 = clock()
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        if i >= warmup:
            times.append(clock() - t0)
    return times


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--rounds", type=int, default=4, help="alternations of fp32 and int8 blocks")
    p.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="wall time, or process CPU time (steadier on a shared VM; meaningful at 1 thread)",
    )
    p.add_argument("--norm", default="evonorm", help="full-precision norm of the fp32 baseline")
    args = p.parse_args()
    cfg = RunConfig()
    cfg.model.norm = args.norm
    torch.manual_seed(0)
    fp = MODELS.get("resnet20")(cfg.model, 10, (3, 32, 32))
    q = convert_to_int8(fp, cfg.precision, cfg.model)
    # Alternate blocks of the two so that background load (a shared machine) hits both alike;
    # the per-round ratios show how much that load moved the numbers.
    t_fp, t_q, ratios = [], [], []
    per_round = max(1, args.steps // args.rounds)
    clock = time.perf_counter if args.clock == "wall" else time.process_time
    for _ in range(args.rounds):
        a = step_times(fp, args.batch, per_round, args.warmup, clock)
        b = step_times(q, args.batch, per_round, args.warmup, clock)
        t_fp, t_q = t_fp + a, t_q + b
        ratios.append(statistics.median(b) / statistics.median(a))
    m_fp, m_q = statistics.median(t_fp), statistics.median(t_q)
    print(
        f"threads={torch.get_num_threads()} batch={args.batch} steps={len(t_fp)} each, clock={args.clock}"
    )
    print(f"fp32 ({args.norm}) step: {1000 * m_fp:.1f} ms (median)")
    print(f"int8 (Range-EvoNorm, simulated) step: {1000 * m_q:.1f} ms (median)")
    print("per-round ratios: " + " ".join(f"{r:.2f}" for r in ratios))
    print(f"ratio int8/fp32: {m_q / m_fp:.2f}")


if __name__ == "__main__":
    main()
