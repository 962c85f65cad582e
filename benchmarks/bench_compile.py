"""Eager vs compiled training step (``train.compile``), fp32 and 8-bit, on CPU or CUDA.

For each case (model, nodes) the script builds the engine's n node replicas
(``lpdt.decentral.state.NodeState``) for each precision and times one *round*: every node's
forward, loss and backward through ``lpdt.engine.steps.Steps`` (the trainer's code). All four steps
(fp32 eager, fp32 compiled, 8-bit eager, 8-bit compiled) run in turn within each of
``--rounds`` blocks, so that drifting machine load hits all alike; every ratio is taken within
a block and reported as the median with its range over blocks. It prints the first compile
time, the time per node step, images/s, the ratios the issue's targets use, each step's share
of aten convolution time (one profiled round each), and the arithmetic floor: FLOPs per node
step (``torch.utils.flop_counter``) over the rate of a large fp32 matmul on the same threads.

    python benchmarks/bench_compile.py                              # ResNet-20 x 8, VGG-11 x 16
    python benchmarks/bench_compile.py --cases resnet20:8 --iters 10 --rounds 4
    python benchmarks/bench_compile.py --device cuda                # on a GPU machine, unchanged
    python benchmarks/bench_compile.py --cases resnet20:8 --profile 12  # where the time goes
    python benchmarks/bench_compile.py --cases resnet8:4 --batch 8 --size 12 --threads 1 \
        --range-chunks 2                                            # the quick claims' shape
    python benchmarks/bench_compile.py ... --int8 act_bits=32       # what the activations cost
    python benchmarks/bench_compile.py ... --ablate act_bits=32 --ablate grad_bits=32
                                        # the same, as extra steps timed in the same blocks

Numbers (docs/engine.md, docs/int8.md) are measured with this script.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
import torch._inductor.config as inductor_config

from lpdt.config import ModelConfig, PrecisionConfig
from lpdt.decentral.state import NodeState
from lpdt.engine.steps import Steps
from lpdt.layers.dropout import hash_dropout_
from lpdt.layers.quant import convert_to_int8, quantizers
from lpdt.models import MODELS, make_model


def build(
    model_name: str,
    precision: str,
    size: int,
    device: torch.device,
    range_chunks: int = ModelConfig.range_chunks,
    fp32_norm: str = "evonorm",
    int8: PrecisionConfig | None = None,
    dropout_noise: str = "generator",
) -> torch.nn.Module:
    """The model of one precision: fp32 with ``fp32_norm``, 8-bit with Range-EvoNorm and the
    ``int8`` precision settings (default: the paper's recipe); ``dropout_noise`` as the config
    key (``hash``: VGG-11's dropout hashed, as the paper scale runs it)."""
    norm = fp32_norm if precision == "fp32" else "rangeen"
    mcfg = ModelConfig(name=model_name, norm=norm, range_chunks=range_chunks)
    model = make_model(model_name, mcfg, 10, (3, size, size))
    if dropout_noise == "hash":
        model = hash_dropout_(model)
    if precision == "int8":
        model = convert_to_int8(model, int8 or PrecisionConfig(mode="int8"), mcfg)
    return model.to(device)


def int8_settings(text: str, option: str = "--int8") -> PrecisionConfig:
    """``--int8 act_bits=32,grad_bits=32``: the 8-bit recipe with some settings changed (an
    ablation: which part of the recipe costs what)."""
    kw: dict[str, int | str] = {}
    allowed = ("weight_bits", "act_bits", "grad_bits", "act_rounding")
    for item in filter(None, text.split(",")):
        key, sep, value = item.partition("=")
        if not sep or key not in allowed:
            raise ValueError(f"{option} {text!r}: expected KEY=VALUE,... with KEY one of {allowed}")
        if key == "act_rounding":
            if value not in ("stochastic", "nearest"):
                raise ValueError(f"{option}: act_rounding is stochastic or nearest, not {value!r}")
            kw[key] = value
        elif not value.isdigit() or not 1 <= int(value) <= 32:
            raise ValueError(f"{option}: {key} takes a bit count 1-32, not {value!r}")
        else:
            kw[key] = int(value)
    return PrecisionConfig(mode="int8", **kw)  # type: ignore[arg-type]


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
    (forward and backward), in inductor's kernels, in other aten operators and in the rest, and
    the ``top`` operators / inductor kernels by self time."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=acts) as prof:
        time_rounds(steps, state, x, y, 1, device)
    events = prof.key_averages()
    attr = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    total = sum(getattr(e, attr) for e in events)
    # aten's convolution kernels (inductor's fused kernels may carry "convolution" in their names)
    conv = sum(getattr(e, attr) for e in events if e.key.startswith("aten::") and "conv" in e.key)
    aten = sum(getattr(e, attr) for e in events if e.key.startswith("aten::")) - conv
    # inductor's generated kernels: graph_<n>_cpp_fused_... on the CPU, triton_... on CUDA
    fused = sum(getattr(e, attr) for e in events if e.key.startswith(("graph_", "triton_")))
    nodes = len(state.models)

    def ms(t: float) -> str:
        return f"{t / 1e3 / nodes:.2f} ms"

    # On the CPU, inductor names its kernels in the profile only when compiled with
    # ``cpp.enable_kernel_profile`` (``--profile N``); otherwise their time is in "the rest".
    named = device.type == "cuda" or inductor_config.cpp.enable_kernel_profile
    kernels = f"inductor kernels {ms(fused)}, " if named else ""
    rest = "" if named else "inductor kernels (not named without --profile N), "
    head = (
        f"self time {total / 1e3 / nodes:.1f} ms per node step, of which "
        f"convolutions {conv / 1e3 / nodes:.1f} ms ({100 * conv / total:.0f} %); "
        f"{kernels}other aten operators {ms(aten)}, the rest ({rest}Python, "
        f"compiled-graph wrappers, guards, autograd engine) {ms(total - conv - aten - fused)}"
    )
    return head if top <= 0 else head + "\n" + events.table(sort_by=attr, row_limit=top)


def loadavg() -> str:
    """The 1/5/15-minute load averages (Linux), to print next to every measurement."""
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "n/a"


def step_flops(model: torch.nn.Module, x, y) -> int:
    """FLOPs of one eager forward + backward (``torch.utils.flop_counter``: matmuls and
    convolutions only, which is what the floor counts)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        Steps(model).train_step(model, x, y)
    model.zero_grad(set_to_none=False)
    return counter.get_total_flops()


def matmul_gflops(device: torch.device, n: int = 1024, reps: int = 20) -> float:
    """The attainable fp32 rate: a large square matmul on the same threads (best of 3)."""
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    a @ b
    best = float("inf")
    for _ in range(3):
        sync(device)
        t0 = time.perf_counter()
        for _ in range(reps):
            a @ b
        sync(device)
        best = min(best, (time.perf_counter() - t0) / reps)
    return 2 * n**3 / best / 1e9


def spread(vals: list[float]) -> str:
    return f"{statistics.median(vals):.2f} (blocks {', '.join(f'{v:.2f}' for v in vals)})"


def run_case(model_name: str, nodes: int, precisions: list[str], args, device) -> None:
    """All steps of one case in alternating blocks; prints the times, ratios and profiles."""
    x = torch.randn(args.batch, 3, args.size, args.size, device=device)
    y = torch.randint(0, 10, (args.batch,), device=device)
    variants: dict[str, tuple[Steps, NodeState]] = {}
    compile_s: dict[str, float] = {}

    def compiled_step(prec: str, int8: PrecisionConfig) -> tuple[Steps, NodeState, float]:
        """The n replicas of one model, their compiled step, and its first call's seconds."""
        torch.manual_seed(0)
        model = build(model_name, prec, args.size, device, args.range_chunks, args.fp32_norm, int8)
        state = NodeState(model, nodes, device)
        state.train()
        steps = Steps(state.models[0], compile=True, mode=args.mode, log=lambda m: None)
        t0 = time.perf_counter()
        time_rounds(steps, state, x, y, 1, device)  # compiles once; all nodes share the graph
        return steps, state, time.perf_counter() - t0

    for prec in precisions:
        compiled, state, compile_s[prec] = compiled_step(prec, args.int8)
        eager = Steps(state.models[0], compile=False)
        time_rounds(eager, state, x, y, 1, device)  # warm-up
        variants[f"{prec} eager"] = (eager, state)
        variants[f"{prec} compiled"] = (compiled, state)
    for text, settings in args.ablations.items():  # compiled only: what each part costs there
        compiled, state, _ = compiled_step("int8", settings)
        variants[f"int8 [{text}] compiled"] = (compiled, state)
    per: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, (steps, state) in variants.items():
            per[name].append(time_rounds(steps, state, x, y, args.iters, device) / nodes)
    for prec in precisions:
        e, c = per[f"{prec} eager"], per[f"{prec} compiled"]
        print(
            f"{model_name} x {nodes} {prec}: compile {compile_s[prec]:.1f} s | eager "
            f"{1e3 * statistics.median(e):.1f} ms/step {args.batch / statistics.median(e):.0f} img/s"
            f" | compiled {1e3 * statistics.median(c):.1f} ms/step "
            f"{args.batch / statistics.median(c):.0f} img/s | compiled/eager "
            f"{spread([b / a for a, b in zip(e, c)])}",
            flush=True,
        )
    if {"fp32", "int8"} <= set(precisions):
        for kind in ("eager", "compiled"):
            q, f = per[f"int8 {kind}"], per[f"fp32 {kind}"]
            print(
                f"{model_name} x {nodes}: int8 {kind} / fp32 {kind} "
                f"{spread([a / b for a, b in zip(q, f)])}",
                flush=True,
            )
    for text in args.ablations:
        a, q = per[f"int8 [{text}] compiled"], per["int8 compiled"]
        line = (
            f"{model_name} x {nodes}: int8 [{text}] compiled {1e3 * statistics.median(a):.2f} "
            f"ms/step; saves {spread([1e3 * (b - c) for b, c in zip(q, a)])} ms against int8 "
            "compiled"
        )
        if "fp32" in precisions:
            f = per["fp32 compiled"]
            line += f"; / fp32 compiled {spread([c / d for c, d in zip(a, f)])}"
        print(line, flush=True)
    for name, (steps, state) in variants.items():
        if name.startswith("int8 ["):
            continue  # ablations are timed, not profiled
        print(
            f"--- profile: {model_name} x {nodes} {name}: "
            f"{profile_round(steps, state, x, y, device, args.profile)}",
            flush=True,
        )
    if "fp32" in precisions:
        state = variants["fp32 eager"][1]
        flops = step_flops(state.models[0], x, y)
        rate = matmul_gflops(device)
        best = 1e3 * min(per["fp32 compiled"])
        floor = 1e3 * flops / (rate * 1e9)
        print(
            f"{model_name} x {nodes}: floor {flops / 1e9:.3g} GFLOP per node step (convolutions "
            f"and matmuls) / {rate:.0f} GFLOP/s (fp32 matmul {torch.get_num_threads()} "
            f"threads) = {floor:.3g} ms; fp32 compiled best block {best:.1f} ms = "
            f"{best / floor:.1f}x the floor",
            flush=True,
        )


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
    p.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="N",
        help="print each step's top N operators in its profiled round (inductor "
        "kernels named; default 0: the convolution share only)",
    )
    p.add_argument(
        "--range-chunks",
        type=int,
        default=ModelConfig.range_chunks,
        help="Range-EvoNorm chunks per group (default %(default)s, the model default; the quick "
        "scale's claim cells use 2)",
    )
    p.add_argument(
        "--fp32-norm",
        default="evonorm",
        choices=("evonorm", "rangeen", "batchnorm", "groupnorm"),
        help="the fp32 model's norm (default evonorm, the paper's fp32 baseline; rangeen: the "
        "8-bit model's norm at fp32)",
    )
    p.add_argument(
        "--int8",
        default="",
        metavar="KEY=VALUE,...",
        help="change the 8-bit recipe (weight_bits, act_bits, grad_bits, act_rounding), e.g. "
        "act_bits=32: which part costs what",
    )
    p.add_argument(
        "--ablate",
        action="append",
        metavar="KEY=VALUE,...",
        help="an extra compiled 8-bit step with these settings changed (as --int8), timed in the "
        "same alternating blocks as the others, so that what a part of the recipe costs rises "
        "above the run-to-run noise; repeatable, e.g. --ablate act_bits=32 --ablate grad_bits=32",
    )
    p.add_argument(
        "--no-dither",
        action="store_true",
        help="timing experiment: stochastic rounding without its noise (zero), to price the hash",
    )
    args = p.parse_args(argv)
    int8_text = args.int8 or "the recipe"
    args.ablate = args.ablate or []
    try:
        # an ablation changes the --int8 recipe: its settings after --int8's (the later wins)
        base, args.int8 = args.int8, int8_settings(args.int8)
        for a in args.ablate:
            int8_settings(a, "--ablate")  # the error names the option that holds the typo
        args.ablations = {a: int8_settings(f"{base},{a}") for a in args.ablate}
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.ablate and "int8" not in args.precisions.split(","):
        print(
            "error: --ablate changes the 8-bit recipe: --precisions must hold int8", file=sys.stderr
        )
        return 2
    if args.range_chunks < 1:
        print(f"error: --range-chunks {args.range_chunks}: must be >= 1", file=sys.stderr)
        return 2
    if args.no_dither:  # every quantiser looks the noise up in this module at call time
        quantizers.dither = lambda x, seed=None, salt=0: torch.zeros_like(x)
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
        inductor_config.cpp.enable_kernel_profile = True
    device = torch.device(args.device)
    print(
        f"torch {torch.__version__}, device {device}"
        f"{' (' + torch.cuda.get_device_name(device) + ')' if device.type == 'cuda' else ''}, "
        f"{torch.get_num_threads()} threads, per-node batch {args.batch}, {args.size} px, "
        f"median of {args.rounds} blocks x {args.iters} rounds; range_chunks {args.range_chunks}, "
        f"fp32 norm {args.fp32_norm}, 8-bit: {int8_text}{', no dither' if args.no_dither else ''}",
        flush=True,
    )
    for model_name, nodes in cases:
        print(f"load average before {model_name}: {loadavg()}", flush=True)
        run_case(model_name, nodes, precisions, args, device)
        print(f"load average after {model_name}: {loadavg()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
