"""``lpdt cost``: operation counts, energy, memory (``model``), communication volume (``comm``)
and every cost table of the paper (``all``).

    lpdt cost model --model resnet20 --norm rangeen --precision int8 --batch 32 [--json [FILE]]
    lpdt cost comm --model resnet20 --nodes 8 --topology directed_ring --compression 0.99 \
        --epochs 200 --train-size 50000 --batch 256 [--json [FILE]]
    lpdt cost all --out results/cost
"""

from __future__ import annotations

import argparse
import math

from lpdt.cost.energy import HOROWITZ_45NM, EnergyTable
from lpdt.cost.ops import LAYER_TYPES, MODES, PRECISIONS
from lpdt.cost.trace import NORM_KINDS as NORMS
from lpdt.data import full_train_size
from lpdt.decentral.catalog import ALGORITHMS
from lpdt.io import emit_json, output_dir, output_file


def _add_energy(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--energy",
        action="append",
        default=[],
        metavar="KEY=PJ",
        help="override the energy per operation in pJ (keys: fp32_add, fp32_mult, int8_add, "
        "int8_mult; default Horowitz ISSCC 2014, 45 nm); repeatable",
    )


def _add_json(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--json",
        type=output_file,
        nargs="?",
        const="-",
        default=None,
        metavar="FILE",
        help="print JSON instead of text (or write it to FILE)",
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="cost_command", metavar="{model,comm,all}")

    m = sub.add_parser(
        "model", help="op counts, energy and memory of one model per node per iteration"
    )
    m.add_argument("--model", default="resnet20", help="registered model name (lpdt.models)")
    m.add_argument(
        "--norm", default=None, choices=NORMS, help="norm kind (default: config default)"
    )
    m.add_argument("--precision", default="fp32", choices=PRECISIONS)
    m.add_argument("--batch", type=int, default=32, help="per-node batch size (default 32)")
    m.add_argument("--classes", type=int, default=10)
    m.add_argument("--input-shape", default="3,32,32", help="C,H,W (default 3,32,32: CIFAR-10)")
    m.add_argument("--algorithm", default="choco", choices=ALGORITHMS.names())
    m.add_argument("--layers", action="store_true", help="also list every traced layer")
    _add_energy(m)
    _add_json(m)

    c = sub.add_parser("comm", help="communication volume per node over a training run")
    c.add_argument("--model", default="resnet20")
    c.add_argument(
        "--norm", default=None, choices=NORMS, help="norm kind (default: config default)"
    )
    c.add_argument("--nodes", type=int, default=8)
    c.add_argument("--topology", default="directed_ring")
    c.add_argument("--rows", type=int, default=None, help="torus rows (default: most square)")
    c.add_argument(
        "--compression",
        type=float,
        default=0.0,
        help="fraction dropped per tensor (0.99 keeps 1%%)",
    )
    c.add_argument("--compressor", default="topk", choices=("topk", "randomk"))
    c.add_argument("--epochs", type=int, default=200)
    c.add_argument("--train-size", type=int, default=full_train_size("cifar10"))  # 50,000
    c.add_argument("--batch", type=int, default=256, help="total batch over all nodes")
    c.add_argument(
        "--precision",
        default="fp32",
        choices=PRECISIONS,
        help="model whose tensors are gossiped: int8 adds the 8-bit activation ranges "
        "(messages stay fp32, as in the reference)",
    )
    c.add_argument("--classes", type=int, default=10)
    c.add_argument("--input-shape", default="3,32,32")
    c.add_argument(
        "--off-by-one",
        action="store_true",
        help="count T-1 messages as the reference's byte counter does (default: T)",
    )
    _add_json(c)

    a = sub.add_parser("all", help="write Tables 7/9/10, Figure 7 data and Table 3 'Data' as CSV")
    a.add_argument(
        "--out", type=output_dir, required=True, help="output directory (e.g. results/cost)"
    )
    a.add_argument("--batch", type=int, default=32, help="per-node batch size (default 32)")
    a.add_argument("--off-by-one", action="store_true", help="Table 3: count T-1 messages")
    _add_energy(a)


def parse_energy(items: list[str]) -> EnergyTable:
    values: dict[str, float] = {}
    for item in items:
        if "=" not in item:
            raise ValueError(f"--energy {item!r} must look like KEY=PJ, e.g. fp32_add=0.9")
        k, v = item.split("=", 1)
        if k.strip() in values:  # the last would win without a word
            raise ValueError(f"--energy {k.strip()} is given twice")
        try:
            values[k.strip()] = float(v)
        except ValueError:
            raise ValueError(f"--energy {item!r}: {v!r} is not a number (pJ)") from None
    return HOROWITZ_45NM.with_overrides(values)


# The most values one example may hold: the cost model runs one through the model, and its
# activations (tens of channels at the full size) must fit in memory
MAX_INPUT_VALUES = 3 * 1024 * 1024


def parse_shape(text: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(s) for s in text.split(","))
    except ValueError:
        raise ValueError(
            f"--input-shape {text!r} must be comma-separated integers, e.g. 3,32,32"
        ) from None
    if not shape or any(s < 1 for s in shape):
        raise ValueError(f"--input-shape {text!r} must be positive integers, e.g. 3,32,32")
    if math.prod(shape) > MAX_INPUT_VALUES:  # else the allocator's "can't allocate 120 GB"
        raise ValueError(
            f"--input-shape {text!r}: {math.prod(shape):,} values per example, more than the "
            f"{MAX_INPUT_VALUES:,} the cost model runs through a model (3,1024,1024 fits)"
        )
    return shape


def _norm_note(norm: str | None, precision: str) -> str | None:
    """What to say when the priced norm is not the one ``lpdt train`` builds at 8 bits (it
    trains every norm but Range-BN as 8-bit Range-EvoNorm): the operations are those of the norm
    asked for, as the paper's Table 10 prices its two 8-bit norms."""
    from lpdt.layers.quant import int8_norm

    if precision != "int8" or norm not in NORMS or int8_norm(norm) == norm:
        return None
    return (
        f"priced with {norm}'s operations at 8 bits; lpdt train at 8 bits trains "
        f"model.norm={norm} as 8-bit Range-EvoNorm (--norm {int8_norm(norm)} prices that)"
    )


def _run_model(args: argparse.Namespace) -> int:
    from lpdt.cost.model import cost_of

    c = cost_of(
        args.model,
        args.norm,
        precision=args.precision,
        batch=args.batch,
        num_classes=args.classes,
        input_shape=parse_shape(args.input_shape),
        energy=parse_energy(args.energy),
        algorithm=args.algorithm,
    )
    note = (
        f"{args.model} has no norm layer: --norm {args.norm} changes nothing"
        if args.norm is not None and not any(r.norm for r in c.records)  # priced the same
        else _norm_note(c.norm, c.precision)
    )
    if args.json:
        d = c.to_dict()
        if note:
            d["note"] = note
        if args.layers:
            d["layers"] = [r.__dict__ for r in c.records]
        emit_json(d, args.json)
        return 0
    print(
        f"{c.model} (norm {c.norm}, {c.precision}, batch {c.batch}, {c.params:,} parameters), "
        f"per node per iteration; energy table: {c.energy_table.source}"
    )
    if note:
        print(f"note: {note}")
    for mode in MODES:
        e = c.energy_by_type_mj(mode)
        print(f"\n{mode}: {c.energy_mj(mode):.4f} mJ")
        print(
            f"  {'layer type':<28}{'layers':>7}{'additions':>18}{'multiplications':>18}{'mJ':>11}"
        )
        for t, label in LAYER_TYPES.items():
            o = c.ops[mode][t]
            if o.adds or o.mults:
                print(
                    f"  {label:<28}{c.layer_counts[t]:>7}{o.adds:>18,}{o.mults:>18,}{e[t]:>11.4f}"
                )
    print(f"\nmemory, training: {c.memory_training_mib:.2f} MiB")
    for k, v in c.memory_training.items():
        print(f"  {k:<22}{v / 2**20:>10.2f} MiB")
    print(f"memory, inference: {c.memory_inference_mib:.2f} MiB")
    if args.layers:
        print("\nlayers:")
        for r in c.records:
            print(
                f"  {r.kind:<8} {r.name:<40} cin={r.c_in} cout={r.c_out} k={r.k} "
                f"L^2={r.in_hw}->{r.out_hw} out={r.out_numel}"
            )
    return 0


def _run_comm(args: argparse.Namespace) -> int:
    from lpdt.cost.comm import comm_volume, gossiped_numels
    from lpdt.cost.model import build
    from lpdt.decentral.topology import shape_note

    net = build(args.model, args.norm, args.classes, parse_shape(args.input_shape), args.precision)
    v = comm_volume(
        gossiped_numels(net),
        topology=args.topology,
        nodes=args.nodes,
        compression=args.compressor if args.compression > 0 else "none",
        ratio=args.compression,
        epochs=args.epochs,
        train_size=args.train_size,
        batch_size=args.batch,
        rows=args.rows,
        off_by_one=args.off_by_one,
    )
    # a torus on a prime node count is a ring, as lpdt topology and lpdt train say (comm_volume
    # above refused a topology that is not one)
    note = shape_note(args.topology, args.nodes, args.rows)
    if args.json:
        d = {"model": args.model, "norm": args.norm, "precision": args.precision}
        emit_json(
            d | v.to_dict() | ({"note": note.removeprefix("note: ")} if note else {}), args.json
        )
        return 0
    if note:
        print(note)
    print(
        f"{args.model}: P = {v.params:,} gossiped entries, {v.kept:,} sent per message "
        f"({v.bytes_per_message:,} bytes)\n"
        f"{v.topology} on {v.nodes} nodes: {v.out_peers:g} out-peer(s); {v.epochs} epochs x "
        f"{v.iterations_per_epoch} iterations = {v.iterations:,} ({v.messages_counted:,} counted)\n"
        f"data sent per node: {v.gb_per_node:.4g} GB (fp32), "
        f"{v.gb_per_node_8bit_analytic:.4g} GB (8-bit, analytic = fp32 / 4)"
    )
    return 0


def _run_all(args: argparse.Namespace) -> int:
    from lpdt.cost.cost_tables import write_all

    files = write_all(
        args.out,
        batch=args.batch,
        energy=parse_energy(args.energy),
        off_by_one=args.off_by_one,
        log=lambda line: print(f"{line} ...", flush=True),
    )
    for path in files.values():
        print(f"wrote {path}")
    return 0


def run(args: argparse.Namespace) -> int:
    cmd = getattr(args, "cost_command", None)
    if cmd == "model":
        return _run_model(args)
    if cmd == "comm":
        return _run_comm(args)
    if cmd == "all":
        return _run_all(args)
    raise ValueError("choose a cost subcommand: model, comm or all (lpdt cost --help)")
