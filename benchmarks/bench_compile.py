"""Eager vs compiled training step (``train.compile``), fp32 and 8-bit, on CPU or CUDA.

For each case (model, nodes, precision) the script builds the engine's n node replicas
(``lpdt.decentral.state.NodeState``) and times one *round*: every node's forward, loss and
backward through ``lpdt.steps.Steps`` (the trainer's code), eager and compiled, in alternating
blocks (``--rounds``) so that drifting machine load hits both alike. It prints the first
compile time, the time per node step, images/s and the ratios the issue's targets use.

    python benchmarks/bench_compile.py                              # ResNet-20 x 8, VGG-11 x 16
    python benchmarks/bench_compile.py --cases resnet20:8 --iters 10 --rounds 4
    python benchmarks/bench_compile.py --device cuda                # on a GPU machine, unchanged
    python benchmarks/bench_compile.py --cases resnet20:8 --profile 12  # where the time goes

Numbers (docs/engine.md, docs/int8.md) are measured with this script.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from lpdt.config import ModelConfig, PrecisionConfig
from lpdt.decentral.state import NodeState
from lpdt.layers.quant import convert_to_int8
from lpdt.models import MODELS
from lpdt.steps import Steps


def build(model_name: str, precision: str, size: int, device: torch.device) -> torch.nn.Module:
    norm = "evonorm" if precision == "fp32" else "rangeen"
    mcfg = ModelConfig(name=model_name, norm=norm)
    model = MODELS.get(model_name)(mcfg, 10, (3, size, size))
    if precision == "int8":
        model = convert_to_int8(model, PrecisionConfig(), mcfg)
    return model.to(device)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_rounds(steps: Steps, state: NodeState, x, y, iters: int, device) -> float:
    """Seconds per round (every node one step), averaged over ``iters`` rounds."""
    sync(device)
    t0 = time.perf_counter()
    for _ in range(iters):
        state.grad.zero_()
        for model in state.models:
            steps.train_step(model, x, y)
    sync(device)
    return (time.perf_counter() - t0) / iters


def profile_round(steps: Steps, state: NodeState, x, y, device, top: int) -> str:
    """One round under ``torch.profiler``: the share of the self time spent in convolutions
    (forward and backward) and the ``top`` operators / inductor kernels by self time."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=acts) as prof:
        time_rounds(steps, state, x, y, 1, device)
    events = prof.key_averages()
    attr = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    total = sum(getattr(e, attr) for e in events)
    # aten's convolution kernels (inductor's fused kernels may carry "convolution" in their names)
    conv = sum(getattr(e, attr) for e in events if e.key.startswith("aten::") and "conv" in e.key)
    head = (
        f"self time {total / 1e3 / len(state.models):.1f} ms per node step, of which "
        f"convolutions {conv / 1e3 / len(state.models):.1f} ms ({100 * conv / total:.0f} %)"
    )
    return head + "\n" + events.table(sort_by=attr, row_limit=top)


def run_case(model_name: str, nodes: int, precision: str, args, device) -> dict:
    torch.manual_seed(0)
    state = NodeState(build(model_name, precision, args.size, device), nodes, device)
    state.train()
    x = torch.randn(args.batch, 3, args.size, args.size, device=device)
    y = torch.randint(0, 10, (args.batch,), device=device)
    eager = Steps(state.models[0], compile=False)
    compiled = Steps(state.models[0], compile=True, mode=args.mode, log=lambda m: None)
    t0 = time.perf_counter()
    time_rounds(compiled, state, x, y, 1, device)  # compiles once; all nodes share the graph
    compile_s = time.perf_counter() - t0
    time_rounds(eager, state, x, y, 1, device)  # warm-up
    per = {"eager": [], "compiled": []}
    for _ in range(args.rounds):
        for name, steps in (("eager", eager), ("compiled", compiled)):
            per[name].append(time_rounds(steps, state, x, y, args.iters, device))
    out = {"compile_s": compile_s}
    for name, ts in per.items():
        t = statistics.median(ts)
        out[name] = {"ms_per_node_step": 1e3 * t / nodes, "images_per_s": nodes * args.batch / t}
    out["ratio"] = out["compiled"]["ms_per_node_step"] / out["eager"]["ms_per_node_step"]
    out["round_ratios"] = [c / e for c, e in zip(per["compiled"], per["eager"])]
    if args.profile:
        for name, steps in (("eager", eager), ("compiled", compiled)):
            print(f"--- profile: {model_name} x {nodes} {precision} {name}: "
                  f"{profile_round(steps, state, x, y, device, args.profile)}", flush=True)  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--cases", default="resnet20:8,vgg11:16", help="model:nodes,... (default %(default)s)"
    )
    p.add_argument("--precisions", default="fp32,int8")
    p.add_argument("--batch", type=int, default=32, help="per-node batch (default 32)")
    p.add_argument("--size", type=int, default=32, help="input resolution (default 32)")
    p.add_argument("--iters", type=int, default=3, help="rounds per timing block (default 3)")
    p.add_argument("--rounds", type=int, default=3, help="alternating blocks (default 3)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N (default cpu)")
    p.add_argument("--mode", default="default", help="torch.compile mode (default: default)")
    p.add_argument("--profile", type=int, default=0, metavar="N",
                   help="also profile one round of each step and print its top N operators "
                        "(inductor kernels named; default 0: no profile)")  # fmt: skip
    args = p.parse_args(argv)
    try:
        cases = [(m, int(n)) for m, n in (c.split(":") for c in args.cases.split(","))]
    except ValueError:
        print(
            f"error: --cases {args.cases!r}: expected model:nodes,... e.g. resnet20:8",
            file=sys.stderr,
        )
        return 2
    for m, n in cases:
        if m not in MODELS.names() or n < 1:
            print(f"error: --cases: unknown model {m!r} or nodes {n} < 1", file=sys.stderr)
            return 2
    precisions = args.precisions.split(",")
    if not set(precisions) <= {"fp32", "int8"}:
        print(f"error: --precisions {args.precisions!r}: allowed fp32, int8", file=sys.stderr)
        return 2
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.profile:  # name the generated kernels in the profile (changes the compiled code's key)
        import torch._inductor.config as inductor_config

        inductor_config.cpp.enable_kernel_profile = True
    device = torch.device(args.device)
    print(f"torch {torch.__version__}, device {device}"
          f"{' (' + torch.cuda.get_device_name(device) + ')' if device.type == 'cuda' else ''}, "
          f"{torch.get_num_threads()} threads, per-node batch {args.batch}, {args.size} px, "
          f"median of {args.rounds} blocks x {args.iters} rounds", flush=True)  # fmt: skip
    for model_name, nodes in cases:
        res = {}
        for prec in precisions:
            r = res[prec] = run_case(model_name, nodes, prec, args, device)
            print(f"{model_name} x {nodes} {prec}: compile {r['compile_s']:.1f} s | eager "
                  f"{r['eager']['ms_per_node_step']:.1f} ms/step {r['eager']['images_per_s']:.0f} img/s"
                  f" | compiled {r['compiled']['ms_per_node_step']:.1f} ms/step "
                  f"{r['compiled']['images_per_s']:.0f} img/s | compiled/eager {r['ratio']:.2f} "
                  f"(blocks {', '.join(f'{v:.2f}' for v in r['round_ratios'])})", flush=True)  # fmt: skip
        if {"fp32", "int8"} <= set(res):
            f, q = res["fp32"], res["int8"]
            print(f"{model_name} x {nodes}: int8/fp32 eager "
                  f"{q['eager']['ms_per_node_step'] / f['eager']['ms_per_node_step']:.2f}, "
                  f"int8 compiled / fp32 compiled "
                  f"{q['compiled']['ms_per_node_step'] / f['compiled']['ms_per_node_step']:.2f}",
                  flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
