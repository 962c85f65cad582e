"""fp32 vs 8-bit on 8 nodes through the real engine: the setting of the slow 8-node int8 test.

Usage: ``.venv/bin/python benchmarks/int8_engine_gap.py VARIANT... [--seeds 1234 1]
[--test 3000] [--jobs 2]`` (variants first: ``--seeds`` takes every number after it).

A variant is ``fp32`` or ``int8`` followed by comma-joined config overrides (``lpdt train --set``
keys), e.g. ``fp32,model.norm=rangeen`` (fp32 Range-EvoNorm) or ``int8,model.range_chunks=4``.
Every variant runs once per seed: ResNet-20 on the first ``--train`` Fashion-MNIST images at
``--size`` px, 8 nodes on a directed ring, Choco-SGD without compression, total batch 128, SGD
lr 0.05, ``--epochs`` epochs (x0.1 for the last two), 10 final gossip rounds. It prints the mean
node accuracy on the first ``--test`` test images (mean over seeds, then each seed). Runs go to
``--jobs`` single-threaded worker processes.

Example (docs/int8.md's 8-node table): ``... int8_engine_gap.py fp32 int8 --seeds 1234 1 2 3``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from int8_ablation import read  # same folder: the Fashion-MNIST subset reader

import lpdt.train
from lpdt.config import ConfigError, RunConfig, load_config, parse_value
from lpdt.data.base import DatasetInfo, TensorDataset
from lpdt.data.images import DEBIAN_FASHION_MNIST


def run_config(variant: str, seed: int, epochs: int) -> RunConfig:
    """The slow test's 8-node config for ``variant`` (``fp32|int8[,key=value...]``)."""
    precision, *overrides = variant.split(",")
    if precision not in ("fp32", "int8"):
        raise ConfigError(f"variant {variant!r}: must start with fp32 or int8")
    tree = {
        "seed": seed,
        "threads": 1,
        "topology.nodes": 8,
        "algorithm.name": "choco",
        "precision.mode": precision,
        "model.norm": "rangeen" if precision == "int8" else "evonorm",
        "data.augment": False,
        "optim.lr": 0.05,
        "train.epochs": epochs,
        "train.batch_size": 128,
        "train.final_gossip_rounds": 10,
        "train.eval_every": 1000,
        "schedule.warmup_epochs": 0,
        "schedule.milestones": [epochs - 2],
    }
    for o in overrides:
        if "=" not in o:
            raise ConfigError(f"variant {variant!r}: option {o!r} must look like key=value")
        key, value = o.split("=", 1)
        tree[key.strip()] = parse_value(value)
    return load_config(None, tree)


def accuracy(variant: str, seed: int, args: argparse.Namespace) -> float:
    """Mean node accuracy (%) of one run (in a worker process)."""
    (xtr, ytr), (xte, yte) = (
        read("train", args.train, args.size),
        read("test", args.test, args.size),
    )
    info = DatasetInfo(
        name=f"fashion_mnist_{args.size}px",
        source=str(DEBIAN_FASHION_MNIST),
        input_shape=(1, args.size, args.size),
    )
    lpdt.train.load_dataset = lambda cfg: TensorDataset(info, xtr, ytr, xte, yte)
    cfg = run_config(variant, seed, args.epochs)
    with tempfile.TemporaryDirectory() as out:
        metrics = lpdt.train.train(cfg, Path(out) / "run", log=lambda s: None)
    return float(metrics["final"]["acc_node_mean"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("variants", nargs="+")
    p.add_argument("--seeds", type=int, nargs="+", default=[1234, 1])
    p.add_argument("--train", type=int, default=3000, help="training images")
    p.add_argument("--test", type=int, default=3000, help="test images")
    p.add_argument("--size", type=int, default=16, help="image side after resizing")
    p.add_argument("--epochs", type=int, default=16)
    p.add_argument("--jobs", type=int, default=2, help="worker processes (one thread each)")
    args = p.parse_args()
    if min(args.jobs, args.train, args.test, args.size, args.epochs) < 1:
        p.error("--jobs, --train, --test, --size and --epochs must be >= 1")
    if not DEBIAN_FASHION_MNIST.exists():
        raise SystemExit(f"Fashion-MNIST not found under {DEBIAN_FASHION_MNIST}")
    try:
        for v in args.variants:
            run_config(v, args.seeds[0], args.epochs)  # fail on a bad variant before any run
    except ConfigError as e:
        raise SystemExit(f"error: {e}") from None
    jobs = [(v, s) for v in args.variants for s in args.seeds]
    print(
        f"{len(jobs)} runs: ResNet-20, 8 nodes, {args.train} images at {args.size} px, "
        f"{args.epochs} epochs, {args.test} test images, {args.jobs} workers",
        flush=True,
    )
    t0 = time.perf_counter()
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(args.jobs, mp_context=ctx) as pool:
        futures = {job: pool.submit(accuracy, *job, args) for job in jobs}
        acc = {job: f.result() for job, f in futures.items()}
    for v in args.variants:
        each = [acc[v, s] for s in args.seeds]
        seeds = ", ".join(f"{s}: {a:.2f}" for s, a in zip(args.seeds, each))
        print(f"{v:36s} {np.mean(each):6.2f} %  ({seeds})")
    print(f"{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
