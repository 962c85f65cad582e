"""Trace one tiny simulated run (``lpdt.engine.train``: 2 nodes, 1 epoch of 2 iterations, CPU)
and print two measures of how its calls wander between lpdt's modules.

1. The run config's path: every call into an lpdt function whose arguments hold the
   ``RunConfig`` or one of its sections (by identity), in call order. Printed: the number of
   such calls and of the modules visited; the "turns back up" (a call from a module to one of a
   higher layer: the package layers ``LAYERS`` of tests/test_imports.py and, inside lpdt.engine,
   its module order ``ENGINE_ORDER``: launch > worker > loop > ... > device); the sequence of modules
   (repeats collapsed), the "rises between successive modules" in it and the modules entered
   again.
2. The node-state ping-pong: over all calls into lpdt functions (the called functions'
   modules, repeats collapsed), how often the sequence alternates between ``lpdt.engine.run``
   and ``lpdt.decentral.state`` (transitions run -> state plus state -> run). Few means the run
   hands the node state whole tasks instead of reaching into its tensors step by step.

    .venv/bin/python tools/config_path.py    # from the checkout's root
"""

from __future__ import annotations

import dataclasses
import sys
import tempfile
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the tests' layers, engine order and tiny run

from tests.conftest import TINY  # noqa: E402
from tests.test_imports import ENGINE_ORDER, LAYERS  # noqa: E402

import lpdt.engine as engine  # noqa: E402
from lpdt.config import load_config  # noqa: E402

RANK = {p: i for i, ps in enumerate(LAYERS) for p in ps}
PING, PONG = "lpdt.engine.run", "lpdt.decentral.state"  # measure 2's pair of modules
OVERRIDES = [  # the suite's tiny run (tests/conftest.py), on 2 nodes for 2 iterations
    *TINY,
    "topology.nodes=2",
    "train.epochs=1",
    "train.max_iters_per_epoch=2",
    "data.train_subset=64",
    "data.test_subset=32",
    "train.final_gossip_rounds=1",
]


def level(mod: str) -> float | None:
    """A module's height: its package's layer, plus a fraction for its place in lpdt.engine;
    None outside the layers."""
    parts = mod.split(".")
    if len(parts) < 2:
        return None
    base = RANK.get(parts[1])
    if base is None:
        return None
    sub = 0.0
    if parts[1] == "engine":
        if len(parts) > 2 and parts[2] in ENGINE_ORDER:
            sub = 1 - (ENGINE_ORDER.index(parts[2]) + 1) / (len(ENGINE_ORDER) + 1)
        else:
            sub = 1.0  # the package itself, above all its modules
    return base + sub


def collapsed(mods: list[str]) -> list[str]:
    """``mods`` with runs of one module collapsed to one entry."""
    return [m for i, m in enumerate(mods) if i == 0 or mods[i - 1] != m]


def alternations(walk: list[str], a: str, b: str) -> int:
    """Transitions a -> b and b -> a between successive entries of ``walk``."""
    return sum({x, y} == {a, b} for x, y in zip(walk, walk[1:], strict=False))


def trace() -> tuple[list[tuple[str, str, str]], list[str]]:
    """Run the tiny training run under a profiler. Returns the calls passing the config
    (caller's module, callee's module, function) and the module of every lpdt function called,
    repeats collapsed."""
    cfg = load_config(None, OVERRIDES)
    sections = [getattr(cfg, f.name) for f in dataclasses.fields(cfg)]
    ids = {id(cfg)} | {id(s) for s in sections if dataclasses.is_dataclass(s)}
    ids |= {id(cfg.algorithm.compression)}
    seq: list[tuple[str, str, str]] = []
    walk: list[str] = []

    def prof(frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        mod = frame.f_globals.get("__name__", "")
        if not mod.startswith("lpdt"):
            return
        if not walk or walk[-1] != mod:
            walk.append(mod)
        code = frame.f_code
        n = code.co_argcount + code.co_kwonlyargcount
        if any(id(frame.f_locals.get(v)) in ids for v in code.co_varnames[:n]):
            caller = frame.f_back.f_globals.get("__name__", "") if frame.f_back else ""
            seq.append((caller, mod, code.co_name))

    out = Path(tempfile.mkdtemp()) / "run"
    sys.setprofile(prof)
    try:
        engine.train(cfg, out, log=lambda m: None)
    finally:
        sys.setprofile(None)
    return seq, walk


def main() -> None:
    seq, all_calls = trace()
    mods: list[str] = []
    up_list = []
    for caller, mod, fn in seq:
        if mod not in mods:
            mods.append(mod)
        a, b = level(caller), level(mod)
        if a is not None and b is not None and b > a:
            up_list.append(f"{caller} -> {mod}.{fn}")
    print(
        "calls passing the config:",
        len(seq),
        "modules visited:",
        len(mods),
        "turns back up:",
        len(up_list),
    )
    print(Counter(up_list).most_common(12))
    walk = collapsed([mod for _, mod, _ in seq])
    rises = [
        (a, b)
        for a, b in zip(walk, walk[1:], strict=False)
        if (la := level(a)) is not None and (lb := level(b)) is not None and lb > la
    ]
    print(
        "sequence of modules (repeats collapsed):",
        len(walk),
        "rises between successive modules:",
        len(rises),
    )
    print("re-entries:", {m: walk.count(m) - 1 for m in set(walk) if walk.count(m) > 1})
    print(" -> ".join(w.replace("lpdt.", "") for w in walk))
    print(
        f"all lpdt calls: {len(all_calls)} modules in sequence (repeats collapsed), "
        f"alternations {PING.removeprefix('lpdt.')} <-> {PONG.removeprefix('lpdt.')}: "
        f"{alternations(all_calls, PING, PONG)}"
    )


if __name__ == "__main__":
    main()
