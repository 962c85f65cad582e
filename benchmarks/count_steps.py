"""Count the work of one node step for every (model, norm, precision, input size) of a scale's
grid, on the CPU: ``lpdt.plan.counts.COUNTS``, which the GPU price reads (docs/compute.md,
"The paper's price").

    python benchmarks/count_steps.py                    # eager counts, the paper grid
    python benchmarks/count_steps.py --kernels resnet20  # also compile (cold) the listed models

Prints the table as Python, one entry a line, to paste over ``COUNTS`` (with the date and the
commit). Eager counts take about a minute in all; the listed models' compiled counts (the CPU's
kernels and bytes, ``count_kernels``, and a GPU's launches, ``count_launches``) a few minutes
per model, an 8-bit ResNet-54 about ten.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def grid_keys(scale: str) -> list[tuple[str, str, str, int]]:
    """The keys of the scale's runs and of the measured H100 steps (``lpdt.plan.gpu``)."""
    from lpdt import grid
    from lpdt.plan import counts, gpu, runtime

    spec = grid.load(ROOT / "config/studies.yaml", ROOT / f"config/scales/{scale}.yaml")
    keys = {counts.key(r.config, runtime.input_px(r.config)) for r in grid.expand(spec).values()}
    keys |= {(r.model, r.norm, r.precision, r.px) for r in gpu.STEP_ROWS}
    return sorted(keys)


# Inductor's mix-order reduction fusion fails to lower some graphs for CUDA (VGG-11 at 224 px:
# "AssertionError: 256 v.s. 8192" in MixOrderReduction, torch 2.11 and 2.14.1); such a step is
# counted with it off, and the line says so.
NO_MIX_ORDER = {"triton.mix_order_reduction": False}


def gpu_launches(key: tuple[str, str, str, int]) -> tuple[str, str]:
    """(``launches_train=..., launches_eval=...``, a note) of ``key``: a GPU's launches
    (``count_launches``), with inductor's defaults or, where they fail, mix-order reduction off
    (the note says so)."""
    from torch._inductor.exc import InductorError

    from lpdt.plan.counts import count_launches

    try:
        (tk, tl), (ek, el) = count_launches(*key)
        note = ""
    except InductorError as e:  # the retry's error, if any, is raised
        (tk, tl), (ek, el) = count_launches(*key, options=NO_MIX_ORDER)
        first = (str(e).strip().splitlines() or [""])[0][:60]  # one line: the table's comment
        note = f"; launches with mix-order reduction off ({type(e).__name__}: {first})"
    return f"launches_train={tk + tl}, launches_eval={ek + el}", note


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scale", default="paper")
    p.add_argument("--kernels", default="", help="models to compile (comma-separated), or 'all'")
    a = p.parse_args()
    from lpdt.plan.counts import count_kernels, count_step

    compile_models = set(a.kernels.split(",")) if a.kernels else set()
    for k in grid_keys(a.scale):
        t0 = time.perf_counter()
        c = count_step(*k)
        kt = ke = None
        moved = note = ""
        if "all" in compile_models or k[0] in compile_models:
            kt, ke, b = count_kernels(*k)
            launches, note = gpu_launches(k)
            moved = f", {b:.4g}, {launches}"  # compiled_bytes_train, the GPU's launches
        print(
            f"    {k!r}: StepCounts({c.ops_train}, {c.ops_eval}, {c.flops_train:.4g}, "
            f"{c.flops_eval:.4g}, {c.bytes_train:.4g}, {c.bytes_eval:.4g}, {kt}, {ke}, "
            f"{c.params}, {c.dropout}{moved}),"
            f"  # {time.perf_counter() - t0:.0f} s{note}",
            flush=True,
        )


if __name__ == "__main__":
    main()
