"""``lpdt partition``: per-node class histograms of the skew partitioner (the paper's Figure 2).

Labels come from the dataset itself, or, with ``--class-sizes cifar10|imagenette``, from the
paper's exact class counts (reference §1.1) without reading any data: that is what Figure 2 needs
offline. Nothing is synthesised silently: without data and without ``--class-sizes`` it fails.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from lpdt.data.partition import class_histograms, skew_partition
from lpdt.io import emit_json, output_file, write_json_atomic

# The reference's hard-coded class sizes (reference §1.1).
PAPER_CLASS_SIZES: dict[str, list[int]] = {
    "cifar10": [5000] * 10,
    "imagenette": [963, 955, 993, 858, 941, 956, 961, 931, 951, 960],
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dataset", default=None, help="dataset to read labels from (default: cifar10)"
    )
    parser.add_argument(
        "--class-sizes",
        choices=sorted(PAPER_CLASS_SIZES),
        default=None,
        help="use the paper's exact class counts instead of reading the dataset",
    )
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--skew", type=float, nargs="+", default=[0.0, 0.4, 0.8, 0.9])
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument(
        "--data-root", default=None, help="data root (default $LPDT_DATA_ROOT or ./data)"
    )
    parser.add_argument(
        "--download",
        action="store_true",
        help="download the dataset where it is missing (a run config's data.download: true)",
    )
    parser.add_argument(
        "--json",
        type=output_file,
        default=None,
        help="write the histograms to this JSON file (-: print them instead of the tables)",
    )


def _labels(args: argparse.Namespace) -> tuple[str, str, np.ndarray]:
    """``(dataset name, where its labels came from, the training split's labels)``."""
    if args.class_sizes:
        # they read no data: a --dataset, --data-root or --download beside them would be ignored
        given = [
            f"--{o.replace('_', '-')}"
            for o in ("dataset", "data_root", "download")
            if getattr(args, o) not in (None, False)
        ]
        if given:
            raise ValueError(
                f"--class-sizes {args.class_sizes} reads no data: drop {', '.join(given)} "
                "(or drop --class-sizes to read the dataset's own labels)"
            )
        sizes = PAPER_CLASS_SIZES[args.class_sizes]
        source = "the paper's class counts (--class-sizes)"
        return args.class_sizes, source, np.repeat(np.arange(len(sizes)), sizes)
    from lpdt.config import DataConfig
    from lpdt.data import load_dataset
    from lpdt.data.base import DatasetError

    if args.dataset == "":  # read cifar10 without a word
        raise ValueError("--dataset '': give a dataset's name, or leave --dataset out (cifar10)")
    name = args.dataset or "cifar10"
    try:
        ds = load_dataset(DataConfig(dataset=name, root=args.data_root, download=args.download))
    except DatasetError as e:  # its hints name the config keys: say this command's options
        text = str(e).replace("set data.download: true", "pass --download")
        raise DatasetError(text.replace("data.root", "--data-root")) from e
    return name, ds.info.source, ds.labels("train")


def _table(hist: np.ndarray) -> str:
    width = max(6, len(str(int(hist.max(initial=0)))) + 1)
    head = "node " + "".join(f"{'c' + str(c):>{width}}" for c in range(hist.shape[1])) + "   total"
    rows = [
        f"{r:>4} " + "".join(f"{v:>{width}}" for v in row) + f"{int(row.sum()):>8}"
        for r, row in enumerate(hist)
    ]
    return "\n".join([head, *rows])


def run(args: argparse.Namespace) -> int:
    """Errors (an unknown dataset, bad values) are raised: ``lpdt.cli.main`` prints them as one
    line, ``lpdt partition: error: ...``, exit 2."""
    if not 0 <= args.seed < 2**32:  # numpy's seeds, as a run config's partition.seed
        raise ValueError(f"--seed {args.seed}: must be in [0, 2**32)")
    twice = sorted({s for s in args.skew if args.skew.count(s) > 1})
    if twice:  # its table printed twice; the JSON, keyed by skew, held it once
        raise ValueError(f"--skew {twice[0]:g} is given twice: one table per skew")
    name, source, labels = _labels(args)
    num_classes = int(labels.max()) + 1
    result: dict = {
        "dataset": name,
        "source": source,
        "nodes": args.nodes,
        "seed": args.seed,
        "skews": {},
    }
    # where the labels came from: a dataset may be found elsewhere than --data-root (Debian's
    # Fashion-MNIST, docs/data.md)
    tables = [f"labels: {name} training split, {len(labels):,} samples, from {source}\n"]
    for s in args.skew:
        parts = skew_partition(labels, args.nodes, s, seed=args.seed)
        hist = class_histograms(labels, parts, num_classes)
        result["skews"][str(s)] = hist.tolist()
        unused = len(labels) - int(hist.sum())
        title = f"{name}: {args.nodes} nodes, skew {s}, seed {args.seed} ({unused} samples unused)"
        tables.append(f"{title}\n{_table(hist)}\n")
    if args.json == "-":
        emit_json(result, "-")
        return 0
    if args.json:  # first: the file is whole even if the reader of the tables stops early
        write_json_atomic(Path(args.json), result)  # nothing left behind if it cannot be written
    print("\n".join(tables))
    if args.json:
        print(f"wrote {args.json}")
    return 0
