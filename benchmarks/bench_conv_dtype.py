"""One convolution call at the claims' shapes: fp32 against bf16, contiguous against channels-last.

Usage: ``.venv/bin/python benchmarks/bench_conv_dtype.py [--batch 8] [--size 12] [--iters 400]``.

For the three stages of a CIFAR ResNet at ``--size`` px (16 channels at full size, 32 at half,
64 at a quarter), one thread, 3x3 convolutions with integer-valued operands in [-127, 127] (what
an exact bf16 path of the 8-bit layers would convolve): the forward call and the input-gradient
call (``convolution_backward`` with only the input's gradient), in microseconds per call, and
the largest relative error of the bf16 forward's output against fp32 (its output is rounded to
bf16). The question it answers: how much of the 8-bit step's convolution time a bf16 path could
save (docs/engine.md, issue 26).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

INPUT_GRAD_ONLY = [True, False, False]  # convolution_backward's output mask: the input's gradient
VARIANTS = (
    ("fp32", torch.float32, False),
    ("fp32 channels-last", torch.float32, True),
    ("bf16", torch.bfloat16, False),
    ("bf16 channels-last", torch.bfloat16, True),
)


def per_call_us(fn: Callable[[], object], iters: int) -> float:
    for _ in range(20):
        fn()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t0) / iters * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--size", type=int, default=12)
    ap.add_argument("--iters", type=int, default=400)
    a = ap.parse_args()
    if a.batch < 1 or a.size < 4 or a.iters < 1:
        raise SystemExit("--batch >= 1, --size >= 4 and --iters >= 1")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    print(f"# us per call, 1 thread, batch {a.batch}, 3x3, stride 1, padding 1")
    for channels, px in ((16, a.size), (32, a.size // 2), (64, a.size // 4)):
        x = torch.randint(-127, 128, (a.batch, channels, px, px)).float()
        w = torch.randint(-127, 128, (channels, channels, 3, 3)).float()
        g = torch.randn(a.batch, channels, px, px)
        parts = []
        for name, dtype, channels_last in VARIANTS:
            xx, ww, gg = x.to(dtype), w.to(dtype), g.to(dtype)
            if channels_last:
                xx, ww, gg = (t.contiguous(memory_format=torch.channels_last) for t in (xx, ww, gg))
            fwd = per_call_us(lambda xx=xx, ww=ww: F.conv2d(xx, ww, padding=1), a.iters)
            bwd = per_call_us(
                lambda xx=xx, ww=ww, gg=gg: torch.ops.aten.convolution_backward(
                    gg, xx, ww, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, INPUT_GRAD_ONLY
                ),
                a.iters,
            )
            parts.append(f"{name} {fwd:.0f} / {bwd:.0f}")
        exact = F.conv2d(x, w, padding=1)
        rounded = F.conv2d(x.bfloat16(), w.bfloat16(), padding=1).float()
        err = ((rounded - exact).abs() / exact.abs().clamp_min(1.0)).max().item()
        print(
            f"{channels} channels, {px} px: forward / input gradient: {'; '.join(parts)}; "
            f"bf16 output's largest relative error {err:.1e}",
            flush=True,
        )


if __name__ == "__main__":
    main()
