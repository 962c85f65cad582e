"""Which part of 8-bit training costs accuracy? ResNet-20 on a Fashion-MNIST subset, single node.

Usage: ``.venv/bin/python benchmarks/int8_ablation.py VARIANT... [--train 1000] [--epochs 3]
[--size 28] [--seeds 0 1]`` (variants first: ``--seeds`` takes every number after it).
A variant is a name and ``key=value`` options joined by commas:

- ``fp`` — full precision, the model's own init; options ``norm=`` (evonorm, rangeen, ...),
  ``act=`` (Range-EvoNorm gate: hardsigmoid, sigmoid), ``lpinit=`` (1: the reference's LP init,
  ``gamma``: only zero gamma in each block's last norm, ``fc``: only fc ~ N(0, 0.01));
- ``int8`` — the 8-bit model (reference LP init); options are ``precision.*`` keys, e.g.
  ``weight_bits=32``, ``act_rounding=nearest``, ``lp_init=0``.

Example (docs/int8.md's table): ``... int8_ablation.py fp fp,lpinit=1 int8 int8,act_rounding=nearest``.
Prints test and training accuracy (mean over seeds, then each seed) and the time per variant.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
import torch.nn.functional as F

from lpdt.config import ModelConfig, PrecisionConfig
from lpdt.data.images import DEBIAN_FASHION_MNIST, read_fashion_mnist
from lpdt.layers.quant import convert_to_int8
from lpdt.models import MODELS
from lpdt.models.common import init_lp_

ROOT = DEBIAN_FASHION_MNIST


def read(split: str, n: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The first ``n`` images (normalised, resized to ``size``) and labels of a split."""
    images, labels = read_fashion_mnist(ROOT, split)
    x = (torch.from_numpy(images[:n, None].astype(np.float32)) / 255.0 - 0.286) / 0.353
    if size != 28:
        x = F.interpolate(x, size=size, mode="bilinear", antialias=True, align_corners=False)
    return x, torch.from_numpy(labels[:n].astype(np.int64))


def build(variant: str, size: int) -> torch.nn.Module:
    name, *opts = variant.split(",")
    if not all("=" in o for o in opts):
        raise SystemExit(f"bad variant {variant!r}: options are key=value, joined by commas")
    kv = dict(o.split("=", 1) for o in opts)
    if name == "fp":
        mcfg = ModelConfig(name="resnet20", norm=kv.pop("norm", "evonorm"))
        mcfg.range_act = kv.pop("act", mcfg.range_act)
        lpinit = kv.pop("lpinit", "0")
        if kv:
            raise SystemExit(f"unknown fp option(s): {', '.join(kv)}")
        model = MODELS.get("resnet20")(mcfg, 10, (1, size, size))
        with torch.no_grad():
            if lpinit == "1":
                init_lp_(model)
            elif lpinit == "gamma":
                for block in model.blocks():
                    block.norm2.weight.zero_()
            elif lpinit == "fc":
                torch.nn.init.normal_(model.fc.weight, 0.0, 0.01)
                torch.nn.init.zeros_(model.fc.bias)
        return model
    if name != "int8":
        raise SystemExit(f"unknown variant {name!r}: fp or int8")
    mcfg = ModelConfig(name="resnet20", norm="evonorm")
    pcfg = PrecisionConfig(mode="int8")
    for key, value in kv.items():
        if not hasattr(pcfg, key):
            raise SystemExit(f"unknown precision option {key!r}")
        if key != "act_rounding" and not value.isdigit():
            raise SystemExit(
                f"precision option {key}={value!r}: expected an integer (0/1 for flags)"
            )
        setattr(pcfg, key, value if key == "act_rounding" else int(value))
    return convert_to_int8(MODELS.get("resnet20")(mcfg, 10, (1, size, size)), pcfg, mcfg)


def train_eval(model, data, epochs: int, lr: float, seed: int) -> tuple[float, float]:
    """SGD (momentum 0.9) at batch 32; test accuracy and accuracy on 500 training images."""
    (xtr, ytr), (xte, yte) = data
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        model.train()
        for idx in torch.randperm(len(xtr), generator=gen).split(32):
            opt.zero_grad()
            F.cross_entropy(model(xtr[idx]), ytr[idx]).backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        test = torch.cat([model(x).argmax(1) for x in xte.split(250)])
        train = torch.cat([model(x).argmax(1) for x in xtr[:500].split(250)])
    return (
        100.0 * (test == yte).float().mean().item(),
        100.0 * (train == ytr[:500]).float().mean().item(),
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("variants", nargs="+")
    p.add_argument("--train", type=int, default=1000, help="training images")
    p.add_argument("--test", type=int, default=500, help="test images")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--size", type=int, default=28, help="image side after resizing")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    args = p.parse_args()
    if not ROOT.exists():
        raise SystemExit(f"Fashion-MNIST not found under {ROOT} (Debian: dataset-fashion-mnist)")
    data = (read("train", args.train, args.size), read("test", args.test, args.size))
    steps = args.epochs * -(-args.train // 32)
    print(
        f"ResNet-20, {args.train} images x {args.epochs} epochs ({steps} steps), "
        f"{args.size} px, lr {args.lr}, seeds {args.seeds}"
    )
    for variant in args.variants:
        t0, results = time.perf_counter(), []
        for seed in args.seeds:
            torch.manual_seed(seed)
            try:
                model = build(variant, args.size)
            except ValueError as e:  # e.g. precision.weight_bits=7
                raise SystemExit(f"variant {variant!r}: {e}") from None
            results.append(train_eval(model, data, args.epochs, args.lr, seed))
        test = [r[0] for r in results]
        each = ", ".join(f"{t:.1f}" for t in test)
        print(
            f"{variant:40s} test {np.mean(test):5.1f} % ({each})  "
            f"train {np.mean([r[1] for r in results]):5.1f} %  "
            f"{time.perf_counter() - t0:.0f} s",
            flush=True,
        )


if __name__ == "__main__":
    main()
