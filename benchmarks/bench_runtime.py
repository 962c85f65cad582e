"""Per-sample costs behind the plan's wall-time estimate (``lpdt.plan.runtime.STEP_MS``).

Usage: ``.venv/bin/python benchmarks/bench_runtime.py [--steps 12] [--jobs 2] [--probe N]``.

For each (model, precision, input px) of the quick scale, times a training step (forward,
backward, SGD) at per-node batch 16 and an evaluation forward at batch 500, one thread, eager,
and prints ms per sample in the form of ``STEP_MS``. ``--jobs 2`` runs two copies of each
measurement at once (as the workflow runs two training jobs at once on 2 cores) and reports the
slower copy's time.

``--probe N`` instead runs the plan's speed probe (``lpdt.plan.probe``, ``--jobs`` copies at once)
N times, one after the other, and prints each run and their median in the form of
``probe.PROBE_REF_MS``: record it there, on an idle machine, whenever the constants are refitted
on another reference machine.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import time

import torch

from lpdt.config import load_config
from lpdt.models import build_model
from lpdt.plan import probe

CASES = [
    ("resnet20", "fp32", 16),
    ("resnet20", "int8", 16),
    ("resnet54", "fp32", 16),
    ("resnet54", "int8", 16),
    ("resnet18", "fp32", 32),
    ("resnet18", "int8", 32),
    ("vgg11", "fp32", 32),
    ("vgg11", "int8", 32),
    ("minilm", "fp32", 32),
    ("minilm", "int8", 32),
]


def _inputs(model_name: str, px: int, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    if model_name == "minilm":
        return torch.randint(1000, 2000, (batch, px), generator=gen), torch.randint(0, 4, (batch,))
    return torch.randn(batch, 3, px, px, generator=gen), torch.randint(0, 10, (batch,))


def measure(case: tuple[str, str, int], steps: int) -> tuple[float, float]:
    """(ms per training sample, ms per evaluated image) of one case, one thread."""
    torch.set_num_threads(1)
    name, precision, px = case
    overrides = [f"model.name={name}", f"precision.mode={precision}"]
    if precision == "int8":
        overrides.append("model.norm=rangeen")
    if name == "minilm":
        overrides += ["data.dataset=fortunes4", f"data.max_length={px}"]
    cfg = load_config(None, overrides)
    classes = 4 if name == "minilm" else 10
    shape = (px,) if name == "minilm" else (3, px, px)
    model = build_model(cfg, classes, shape)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = _inputs(name, px, 16)
    model.train()
    times = []
    for i in range(steps + 2):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        if i >= 2:
            times.append(time.perf_counter() - t0)
    train_ms = statistics.median(times) * 1e3 / 16
    xe, _ = _inputs(name, px, 500 if name != "minilm" else 100)
    model.eval()
    with torch.no_grad():
        model(xe)
        t0 = time.perf_counter()
        for _ in range(2):
            model(xe)
    eval_ms = (time.perf_counter() - t0) / 2 * 1e3 / len(xe)
    return train_ms, eval_ms


def _worker(args: tuple[tuple[str, str, int], int]) -> tuple[float, float]:
    return measure(*args)


def run_probe(repeats: int, slots: int) -> None:
    """The plan's speed probe ``repeats`` times with ``slots`` copies at once; the median run."""
    runs: list[dict[str, float]] = []
    for i in range(repeats):
        t0 = time.perf_counter()
        result = probe.probe_speed(slots)
        took = time.perf_counter() - t0
        notes = [f"no kernel: {result.kernel}"] if result.kernel else []
        notes += [f"{k} did not settle" for k in result.unsettled]
        print(
            f"# probe {i + 1} ({slots} at once): "
            + ", ".join(f"{p} {v:.2f} ms/step" for p, v in result.ms.items())
            + f" ({took:.1f} s{''.join('; ' + n for n in notes)})",
            flush=True,
        )
        runs.append(result.ms)
    med = {p: statistics.median(r[p] for r in runs) for p in runs[0]}
    print("PROBE_REF_MS = {" + ", ".join(f"{p!r}: {v:.1f}" for p, v in med.items()) + "}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--jobs", type=int, default=2, help="copies measured at once (default 2)")
    ap.add_argument("--cases", default="", help="comma list of model:precision:px (default all)")
    ap.add_argument("--probe", type=int, default=0, help="run the plan's speed probe N times")
    a = ap.parse_args()
    if a.probe > 0:
        run_probe(a.probe, a.jobs)
        return
    cases = CASES
    if a.cases:
        cases = [(m, p, int(s)) for m, p, s in (c.split(":") for c in a.cases.split(","))]
    print(f"# ms per sample, eager, 1 thread, {a.jobs} at once, {a.steps} steps")
    ctx = mp.get_context("spawn")
    with ctx.Pool(a.jobs) as pool:
        for case in cases:
            res = pool.map(_worker, [(case, a.steps)] * a.jobs)
            train_ms = max(r[0] for r in res)
            eval_ms = max(r[1] for r in res)
            print(f"    {case!r}: ({train_ms:.2f}, {eval_ms:.2f}),", flush=True)


if __name__ == "__main__":
    main()
