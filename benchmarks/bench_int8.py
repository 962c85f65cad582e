"""One ResNet-20 training step (forward + backward + SGD) at batch 32: int8 (simulated) vs fp32.

Usage: ``.venv/bin/python benchmarks/bench_int8.py [--steps 20] [--warmup 5] [--batch 32]``.
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


def step_times(model: torch.nn.Module, batch: int, steps: int, warmup: int) -> list[float]:
    """Wall time of ``steps`` SGD steps on random CIFAR-shaped data after ``warmup`` steps."""
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(batch, 3, 32, 32, generator=gen)
    y = torch.randint(0, 10, (batch,), generator=gen)
    model.train()
    times = []
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return times


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--norm", default="evonorm", help="full-precision norm of the fp32 baseline")
    args = p.parse_args()
    cfg = RunConfig()
    cfg.model.norm = args.norm
    torch.manual_seed(0)
    fp = MODELS.get("resnet20")(cfg.model, 10, (3, 32, 32))
    q = convert_to_int8(fp, cfg.precision, cfg.model)
    # Interleave the two so that background load hits both alike.
    t_fp, t_q = [], []
    for _ in range(2):
        t_fp += step_times(fp, args.batch, args.steps // 2, args.warmup)
        t_q += step_times(q, args.batch, args.steps // 2, args.warmup)
    m_fp, m_q = statistics.median(t_fp), statistics.median(t_q)
    print(f"threads={torch.get_num_threads()} batch={args.batch} steps={len(t_fp)}")
    print(f"fp32 ({args.norm}) step: {1000 * m_fp:.1f} ms (median)")
    print(f"int8 (Range-EvoNorm, simulated) step: {1000 * m_q:.1f} ms (median)")
    print(f"ratio int8/fp32: {m_q / m_fp:.2f}")


if __name__ == "__main__":
    main()
