"""The package's imports: every module imports, imports go one way (no circle), and no module
imports another module's ``_private`` names (the project's conventions): neither the package's
nor the tests' or the benchmarks' modules, by ``from m import _name`` or by ``m._name`` with
``m`` an imported module of the package, the tests or the benchmarks.

The graph is read from the source with ``ast`` and counts every ``import`` of an ``lpdt``
module, at module level or inside a function (a lazy import that closes a circle is still a
circle). Known exceptions, listed below with their reason, are the only ones allowed.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import lpdt

SRC = Path(lpdt.__file__).resolve().parent
REPO = Path(__file__).resolve().parents[1]

# Circles allowed (each a set of modules, with its reason): none since the registries hold specs
# that name their implementations by string (``lpdt.registry.Spec``) instead of importing the
# modules that registered themselves.
KNOWN_CIRCLES: list[set[str]] = []


def _modules() -> dict[str, Path]:
    mods = {}
    for f in sorted(SRC.rglob("*.py")):
        parts = list(f.relative_to(SRC.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = f
    return mods


MODULES = _modules()
# The tests' and the benchmarks' modules (named from the checkout's root: tests.report.conftest).
OTHER = {
    ".".join(f.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__"): f
    for d in ("tests", "benchmarks")
    for f in sorted((REPO / d).rglob("*.py"))
}
PACKAGES = ("lpdt", "tests", "benchmarks")  # the top-level names whose private names are checked


def _imports(name: str, path: Path) -> list[tuple[str, str | None, int]]:
    """``(module, imported name or None, line)`` for every import of an ``lpdt`` module in
    ``path``; ``from lpdt.x import y`` gives ``(lpdt.x.y, None)`` when ``y`` is a module."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(a.name, None, node.lineno) for a in node.names if a.name.startswith("lpdt")]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package, up level - 1
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            if base == "lpdt" or base.startswith("lpdt."):
                for a in node.names:
                    sub = f"{base}.{a.name}"
                    found.append(
                        (sub, None, node.lineno) if sub in MODULES else (base, a.name, node.lineno)
                    )
    return found


def _owner(target: str) -> str:
    """The module of ``MODULES`` that ``target`` (a dotted name) lies in."""
    while target not in MODULES and "." in target:
        target = target.rpartition(".")[0]
    return target


def _graph() -> dict[str, set[str]]:
    return {m: {_owner(t) for t, _, _ in _imports(m, p)} - {m} for m, p in MODULES.items()}


def _circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


@pytest.mark.parametrize("name", sorted(m for m in MODULES if not m.endswith("__main__")))
def test_every_module_imports(name):
    importlib.import_module(name)


def test_no_import_circle():
    circles = [c for c in _circles(_graph()) if c not in KNOWN_CIRCLES]
    assert not circles, f"import circles: {[sorted(c) for c in circles]}"


# The packages of lpdt from the bottom up: a package imports only packages of a lower layer
# (the top-level modules count as packages). Same-layer packages import nothing of each other.
LAYERS: tuple[tuple[str, ...], ...] = (
    # the error base class; the typed trees' JSON reading and writing; host-to-device copies
    ("errors", "typed", "transfer"),
    ("io", "registry", "plugins"),  # atomic files; the name registries; plugin loading
    ("record",),  # the run record: metrics.json and history.csv
    ("provenance",),  # what produced a run: the code, the machine
    ("layers", "data", "decentral"),  # components: layers, datasets, algorithms
    ("models",),  # the models, built from layers, sized from their data
    ("config",),  # the run config, which checks the components' names
    ("cost", "engine", "gpus"),  # the cost model; the training engine; GPU slots
    ("grid",),  # studies x scale -> run configs and the manifest
    ("plan",),  # wall time and GPU price of a grid
    ("report",),  # tables, figures, claims and the PDF from the run records
    ("tracking",),  # MLflow: logging, syncing the manifest, the web app
    ("cli",),  # the command line
)
# Imports against the layers (at most 2, each with its reason): (importer, imported module).
UPWARD: dict[tuple[str, str], str] = {
    (
        "lpdt.data.cli",
        "lpdt.config",
    ): "a command (lpdt partition) that builds a DataConfig from its options",
    ("lpdt.decentral.optim", "lpdt.config"): "the optimizer factories take OptimConfig",
}


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_packages_import_down_the_layers():
    """Every import between two packages of lpdt goes from a higher layer (``LAYERS``) to a
    lower one, except the at most two listed in ``UPWARD``, each of which still exists."""
    layer = {p: i for i, names in enumerate(LAYERS) for p in names}
    packages = {_package(m) for m in MODULES} - {""}
    assert packages == set(layer), f"packages missing from LAYERS: {packages ^ set(layer)}"
    against = set()
    for m, targets in _graph().items():
        for t in targets:
            a, b = _package(m), _package(t)
            if a and b and a != b and layer[a] <= layer[b]:
                against.add((m, t))
    assert against == set(UPWARD), f"imports against the layers: {sorted(against - set(UPWARD))}"
    assert len(UPWARD) <= 2


# lpdt.engine's modules from the top down (test_the_engine_imports_one_way; tools/config_path.py
# ranks calls by it too).
ENGINE_ORDER = (
    "launch",
    "worker",
    "loop",
    "console",
    "faults",
    "run",
    "evaluation",
    "schedule",
    "rundir",
    "checkpoint",
    "batched",
    "steps",
    "sysmetrics",
    "device",
    "opcount",
    "cudacount",
)


def test_the_engine_imports_one_way():
    """lpdt.engine: the package -> launch -> worker -> loop (the lifecycle) -> console, faults ->
    run (the numerics) -> schedule -> rundir -> checkpoint -> steps, sysmetrics, device: nothing
    imports a module above it, and no module the package itself."""
    graph = _graph()
    order = ["lpdt.engine", *(f"lpdt.engine.{m}" for m in ENGINE_ORDER)]
    engine = {m for m in MODULES if m.startswith("lpdt.engine.")}
    assert engine == set(order[1:]), "a module of lpdt.engine is missing from this order"
    for i, m in enumerate(order):
        above = set(order[:i])
        assert not graph[m] & above, f"{m} imports {sorted(graph[m] & above)}"
    assert (
        "lpdt.engine.device" in graph["lpdt.engine.loop"]
        and "lpdt.engine.device" in graph["lpdt.engine.worker"]
    )


def test_the_tracking_layers_import_one_way():
    """lpdt.tracking: cli -> runs -> names, store, nothing upwards; the package re-exports them
    all."""
    import lpdt.tracking

    graph = _graph()
    order = [
        "lpdt.tracking.cli",
        "lpdt.tracking.runs",
        "lpdt.tracking.names",
        "lpdt.tracking.store",
    ]
    for i, m in enumerate(order):
        above = set(order[:i]) | {"lpdt.tracking"}
        assert not graph[m] & above, f"{m} imports {sorted(graph[m] & above)}"
    assert "lpdt.tracking.runs" in graph["lpdt.tracking.cli"]
    assert "lpdt.tracking.store" in graph["lpdt.tracking.runs"]
    for m in order:  # every public name a layer defines is importable from lpdt.tracking
        module = importlib.import_module(m)
        public = [n for n in _defined(MODULES[m]) if not n.startswith("_")]
        missing = [n for n in public if getattr(lpdt.tracking, n, None) is not getattr(module, n)]
        assert public and not missing, f"lpdt.tracking does not re-export {m}'s {missing}"


def _defined(path: Path) -> list[str]:
    """The names a module defines at top level: functions, classes and assigned names (not type
    variables)."""
    out = []
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            out.append(node.name)
        elif isinstance(node, ast.Assign):
            call = node.value if isinstance(node.value, ast.Call) else None
            if call is not None and getattr(call.func, "id", None) == "TypeVar":
                continue
            out += [t.id for t in node.targets if isinstance(t, ast.Name)]
    return out


def _ours(name: str) -> bool:
    return name.split(".")[0] in PACKAGES


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _dotted(node: ast.expr) -> list[str] | None:
    """``a.b.c`` as ["a", "b", "c"]; None for anything but names and attributes."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return None if base is None else [*base, node.attr]
    return None


def private_uses(
    source: str, known: set[str], module: str = "", package: bool = False
) -> list[tuple[str, str, int]]:
    """``(module, private name, line)`` for every ``from m import _name`` and every ``m._name``
    in ``source`` where ``m`` is one of the ``known`` modules of ``PACKAGES`` (a name bound by
    ``import m``, ``import m as x`` or ``from package import m``, or an attribute chain of one:
    ``lpdt.cost.published._read``). ``module``: the dotted name of ``source`` (``package``: it is a
    package's ``__init__``), from which relative imports are resolved."""
    tree = ast.parse(source)
    bound: dict[str, str] = {}  # local name -> the module it is
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if _ours(a.name) and a.asname:  # import m as x: x is m
                    bound[a.asname] = a.name
                elif _ours(a.name):  # import lpdt.x.y: lpdt is lpdt
                    bound[a.name.split(".")[0]] = a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package, up level - 1
                parts = (module if package else module.rpartition(".")[0]).split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            if not _ours(base):
                continue
            for a in node.names:
                sub = f"{base}.{a.name}"
                if sub in known:
                    bound[a.asname or a.name] = sub
                elif _private(a.name):
                    found.append((base, a.name, node.lineno))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            chain = _dotted(node.value)
            if chain is not None and chain[0] in bound:
                module = ".".join([bound[chain[0]], *chain[1:]])
                if module in known:
                    found.append((module, node.attr, node.lineno))
    return found


def test_no_module_imports_another_modules_private_names():
    """The package's, the tests' and the benchmarks' modules alike."""
    known = set(MODULES) | set(OTHER) | set(PACKAGES)
    bad = [
        f"{m}:{line} uses {name} of {t}"
        for m, p in {**MODULES, **OTHER}.items()
        for t, name, line in private_uses(p.read_text(), known, m, p.name == "__init__.py")
        if t != m and not (t in MODULES and _owner(t) == m)
    ]
    assert not bad, "; ".join(bad)


def test_the_private_check_finds_imports_and_attributes():
    """The checker itself, on a made-up module."""
    source = (
        "import lpdt.cost.published\n"
        "import lpdt.grid as g\n"
        "from lpdt.report import aggregate\n"
        "from tests.report.test_report import _args\n"
        "from lpdt.engine.loop import train, _print\n"
        "lpdt.cost.published._read(x); g._x; aggregate._seed(1); aggregate.__name__; other._y\n"
        "from .test_snakemake import REPO, _job\n"
    )
    known = {"lpdt", "lpdt.cost.published", "lpdt.grid", "lpdt.report", "lpdt.report.aggregate"}
    assert sorted(private_uses(source, known, "tests.workflow.test_mine")) == [
        ("lpdt.cost.published", "_read", 6),
        ("lpdt.engine.loop", "_print", 5),
        ("lpdt.grid", "_x", 6),
        ("lpdt.report.aggregate", "_seed", 6),
        ("tests.report.test_report", "_args", 4),
        ("tests.workflow.test_snakemake", "_job", 7),
    ]


def test_the_circle_check_finds_a_circle():
    """The checker itself: a circle through a lazy import is found."""
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]


def test_light_modules_import_no_torch():
    """The specs (``lpdt.decentral.catalog``, ``lpdt.models``, ``lpdt.data``), the config, the grid, the GPU
    slots, MLflow tracking and the planner are read by processes that must stay light (building
    the workflow's DAG, the MLflow log process): importing them imports no torch."""
    light = "lpdt.config lpdt.data lpdt.models lpdt.decentral.catalog lpdt.gpus lpdt.grid"
    code = (
        f"import sys, {', '.join(light.split())}, lpdt.tracking, lpdt.plan.runtime; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "[]", r.stdout[:2000]


def test_an_eager_run_imports_no_compiler(tmp_path):
    """A process that trains eagerly (an 8-bit tiny run through ``lpdt train``) never imports
    ``torch._dynamo``: it costs about 1.4 s of start-up (2-core VM) in every such process, and
    the engine imports the compiler's modules only where a step compiles."""
    from tests.conftest import TINY

    sets = [a for o in [*TINY, "train.epochs=1", "precision.mode=int8"] for a in ("--set", o)]
    code = (
        "import sys; from lpdt.cli import main; "
        f"rc = main(['train', *{sets!r}, '--out', {str(tmp_path / 'run')!r}]); "
        "print(rc, sorted(m for m in sys.modules if m.startswith(('torch._dynamo', 'torch._inductor'))))"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1] == "0 []", r.stdout[-2000:]


def test_the_architecture_page_shows_the_layers_the_test_pins():
    """docs/architecture.md, *Package layers*: the same packages in the same layers as ``LAYERS``."""
    import re

    text = (REPO / "docs" / "architecture.md").read_text().split("## Package layers", 1)[1]
    rows = re.findall(r"^\| (\d+) \| ([^|]+) \|", text.split("\n## ", 1)[0], re.M)
    shown = [tuple(re.findall(r"`(\w+)`", names)) for _, names in rows]
    assert shown == list(LAYERS)
