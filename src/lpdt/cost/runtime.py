"""Wall-time estimate of a grid before it runs (``snakemake plan``), from measured step costs.

A training job's time is modelled as

    start-up + training samples x (seconds per training sample)
             + evaluated images x (seconds per evaluated image)

with the per-sample costs of its (model, precision, input px) measured on this project's
reference machine (a 2-core x86_64 CPU, torch 2.14.1, eager, one thread per job, two jobs at
once; see ``STEP_MS`` for how; ``benchmarks/bench_runtime.py`` prints the relative step costs). The grid's wall time is
the jobs packed onto ``slots`` parallel job slots (longest first). On another machine the absolute
numbers differ; the estimate scales with its per-sample speed.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from typing import Any

# (model, precision, px) -> (ms per training sample (forward + backward + optimizer + gossip),
#                            ms per evaluated image (forward only)).
# Measured 2026-11-24 on the reference machine, two jobs at once: ResNet-20 from real `lpdt train`
# epochs (8-node Choco, 6,000 images at 16 px: 5.5 s / epoch fp32, 12.0 s int8; evaluation 27 s
# / 61 s for 90,000 images); the other models scaled from ResNet-20 by their step-time ratio in
# benchmarks/bench_runtime.py (per-node batch 16; text models per example at 32 tokens).
STEP_MS: dict[tuple[str, str, int], tuple[float, float]] = {
    ("resnet20", "fp32", 16): (0.91, 0.30),
    ("resnet20", "int8", 16): (2.0, 0.68),
    ("resnet54", "fp32", 16): (2.05, 0.67),
    ("resnet54", "int8", 16): (4.6, 1.6),
    ("resnet18", "fp32", 32): (2.35, 0.45),
    ("resnet18", "int8", 32): (4.3, 0.50),
    ("vgg11", "fp32", 32): (3.7, 1.6),
    ("vgg11", "int8", 32): (5.9, 4.2),
    ("minilm", "fp32", 32): (21.0, 4.7),
    ("minilm", "int8", 32): (24.0, 8.5),
}
START_S = 8.0  # interpreter, imports, data loading, model build, final gossip, writing results
REFERENCE = "2-core x86_64 CPU, torch 2.14.1, eager, 1 thread per job, 2 jobs at once"

# Test-split sizes when no subset is set (images the evaluation reads).
FULL_TEST_SIZES = {"cifar10": 10000, "fashion_mnist": 10000, "imagenette": 3925,
                   "cifar100": 10000, "synthetic": 1000}  # fmt: skip


def input_px(cfg: Mapping[str, Any]) -> int:
    """Input side in px as the model sees it (text: tokens per example)."""
    data = cfg["data"]
    if cfg["model"]["name"] in ("minilm", "distilbert", "distilbert_tiny"):
        return int(data.get("max_length") or 128)
    return int(data.get("image_size") or 32)


def evaluated_images(cfg: Mapping[str, Any]) -> int:
    """Test images one run evaluates, over all its evaluations (every ``eval_every`` epochs and
    the final one; ``sharded``: each image once over the nodes, plus the average model)."""
    tr, data = cfg["train"], cfg["data"]
    n = int(cfg["topology"]["nodes"])
    test = int(data.get("test_subset") or FULL_TEST_SIZES.get(data["dataset"], 1000))
    per_eval = 2 * test if tr.get("node_eval") == "sharded" else (n + 1) * test
    evals = int(tr["epochs"]) // int(tr.get("eval_every") or 1)
    if int(tr["epochs"]) % int(tr.get("eval_every") or 1):
        evals += 1  # the last epoch is always evaluated
    return per_eval * (evals + 1)  # + the final evaluation after the last gossip rounds


def run_seconds(cfg: Mapping[str, Any], samples: int | None) -> float | None:
    """Estimated seconds of one training job (None: no measured cost for its model/precision/px)."""
    key = (cfg["model"]["name"], cfg["precision"]["mode"], input_px(cfg))
    if key not in STEP_MS or samples is None:
        return None
    train_ms, eval_ms = STEP_MS[key]
    return START_S + samples * train_ms / 1e3 + evaluated_images(cfg) * eval_ms / 1e3


def packed_wall_seconds(jobs: Iterable[float], slots: int) -> float:
    """Makespan of ``jobs`` (seconds) on ``slots`` parallel slots, longest job first (LPT)."""
    loads = [0.0] * max(1, slots)
    for t in sorted(jobs, reverse=True):
        heapq.heapreplace(loads, loads[0] + t)
    return max(loads)
