"""The gossip algorithms, message compressors, communication graphs and local optimizers: the one
place that says what each one is.

Configs name an algorithm (``algorithm.name``), a compressor (``algorithm.compression.name``), a
graph (``topology.name``) and an optimizer (``optim.name``) by string; every other part of lpdt reads what it needs from the
entry registered here under that name: the config check (is it sparse? may it compress?), the
engines (its implementation), the cost model (its state buffers), the planner (does it select
top-k?), the report (its label in tables, figures and coordinates; is the graph directed?) and
the MLflow runs (its words in names and descriptions).

A spec imports no torch, so that light processes (MLflow logging, ``lpdt compare``) read it; the
implementation is loaded on first use, from an object or a ``"module:attribute"`` string.

Adding one (docs/extending.md): write the implementation (a ``Gossip`` subclass, or a factory of a
compressor) and register its spec, e.g.
``ALGORITHMS.add("mine", AlgorithmSpec(impl=MyGossip, label="Mine", short="Mine", title="Mine",
state_buffers=1))``, from the module that defines it; the built-ins are listed below.
"""

from __future__ import annotations

from dataclasses import dataclass

from lpdt.registry import Registry, Spec


@dataclass(frozen=True)
class AlgorithmSpec(Spec):
    """A gossip algorithm: ``impl`` is a ``lpdt.decentral.algorithms.Gossip`` subclass, called as
    ``impl(exchange, compressor, eta, z0)``."""

    label: str  # figures and prose: "Deep-Squeeze"
    short: str  # table rows ("DS (32-bit)", "LP-DS (8-bit)")
    title: str  # run descriptions (MLflow): "DeepSqueeze"
    # Model-sized vectors each node keeps beside its model (Deep-Squeeze's error, CHOCO's public
    # copy and its neighbours' sum): the cost model's memory (lpdt.cost.memory)
    state_buffers: int
    compresses: bool = True  # False: sends whole models, so compression must be "none"
    # Figures 4 and 5: (its fp32 colour, its 8-bit colour), one hue, darker at 8 bits; None: black
    colors: tuple[str, str] | None = None


@dataclass(frozen=True)
class CompressorSpec(Spec):
    """A message compressor: ``impl(segments, ratio, levels, generator)`` returns a compressor
    (``lpdt.decentral.compression``: ``encode``, ``message_bytes``, the wire format)."""

    label: str  # prose, before "messages": "top-k", "8-bit", "uncompressed"
    sparse: bool  # drops entries: ``ratio`` applies, and its messages carry indices
    # Run names (MLflow): "{pct}" is the percentage dropped ("top{pct}" -> "top99")
    token: str
    # The report's compression coordinate: None = the percentage dropped as a number (0, 90, 99);
    # else a string, "{pct}" formatted ("{pct}+int8" -> "90+int8")
    coordinate: str | None = None

    def coordinate_of(self, ratio: float) -> object:
        pct = int(round(100 * float(ratio)))
        return pct if self.coordinate is None else self.coordinate.format(pct=pct)

    def token_of(self, ratio: float) -> str:
        return self.token.format(pct=f"{round(100 * float(ratio), 4):g}")


@dataclass(frozen=True)
class TopologySpec(Spec):
    """A communication graph: ``impl(n, rows=...)`` gives each node's out-peers
    (``lpdt.decentral.topology``: the mixing matrix, the checks and Figure 3 follow)."""

    short: str  # run names (MLflow), before the node count: "ring8"
    words: str  # run descriptions, after "in a": "directed ring"
    directed: bool  # Figure 3 draws its edges as arrows
    shaped: bool = False  # it reads ``topology.rows`` (the torus); elsewhere rows are an error


@dataclass(frozen=True)
class OptimizerSpec(Spec):
    """A node's local optimizer: ``impl(cfg: OptimConfig, z)`` returns it
    (``lpdt.decentral.optim.LocalOptimizer``: ``step(z, g, lr)`` and its state)."""

    qgm: bool = False  # it can run as quasi-global momentum (optim.qgm)


ALGORITHMS: Registry[AlgorithmSpec] = Registry("algorithm", AlgorithmSpec)
COMPRESSORS: Registry[CompressorSpec] = Registry("compression", CompressorSpec)
TOPOLOGIES: Registry[TopologySpec] = Registry("topology", TopologySpec)
OPTIMIZERS: Registry[OptimizerSpec] = Registry("optimizer", OptimizerSpec)

_GOSSIP = "lpdt.decentral.algorithms"
# Registration order is the order of table rows (Deep-Squeeze before CHOCO, as the paper's).
ALGORITHMS.add(
    "sgp",
    AlgorithmSpec(
        f"{_GOSSIP}:SGP", label="SGP", short="SGP", title="SGP", state_buffers=0, compresses=False
    ),
)
ALGORITHMS.add(
    "deepsqueeze",
    AlgorithmSpec(
        f"{_GOSSIP}:DeepSqueeze",
        label="Deep-Squeeze",
        short="DS",
        title="DeepSqueeze",
        state_buffers=1,
        colors=("tab:blue", "midnightblue"),
    ),
)
ALGORITHMS.add(
    "choco",
    AlgorithmSpec(
        f"{_GOSSIP}:Choco",
        label="Choco",
        short="Choco",
        title="CHOCO-SGD",
        state_buffers=2,
        colors=("tab:orange", "firebrick"),
    ),
)

_COMP = "lpdt.decentral.compression"
COMPRESSORS.add(
    "none", CompressorSpec(f"{_COMP}:dense", label="uncompressed", sparse=False, token="dense")
)
COMPRESSORS.add(
    "topk", CompressorSpec(f"{_COMP}:topk", label="top-k", sparse=True, token="top{pct}")
)
COMPRESSORS.add(
    "randomk",
    CompressorSpec(f"{_COMP}:randomk", label="random-k", sparse=True, token="random{pct}"),
)
COMPRESSORS.add(
    "qsgd",
    CompressorSpec(
        f"{_COMP}:qsgd", label="QSGD", sparse=False, token="qsgd{pct}", coordinate="qsgd"
    ),
)
COMPRESSORS.add(
    "int8",
    CompressorSpec(
        f"{_COMP}:int8",
        label="8-bit",
        sparse=False,
        token="dense-msg8",
        coordinate="int8",
    ),
)
COMPRESSORS.add(
    "topk_int8",
    CompressorSpec(
        f"{_COMP}:topk_int8",
        label="top-k 8-bit",
        sparse=True,
        token="top{pct}-msg8",
        coordinate="{pct}+int8",
    ),
)

_GRAPH = "lpdt.decentral.topology"
for _name, _short, _words, _directed in (
    ("directed_ring", "ring", "directed ring", True),  # the paper's ring
    ("ring", "uring", "undirected ring", False),
    ("torus", "torus", "torus", False),
    ("code_grid", "code_grid", "circulant graph C_n(1, 4) of the reference code", False),
    ("complete", "complete", "complete graph", False),
    ("exponential", "exponential", "directed exponential graph", True),
):
    TOPOLOGIES.add(
        _name,
        TopologySpec(f"{_GRAPH}:{_name}", _short, _words, _directed, shaped=_name == "torus"),
    )


def shaped_topologies() -> list[str]:
    """The registered graphs laid out in rows (``TopologySpec.shaped``): the torus."""
    return [t for t in TOPOLOGIES.names() if TOPOLOGIES.get(t).shaped]


_OPTIM = "lpdt.decentral.optim"
OPTIMIZERS.add("sgd", OptimizerSpec(f"{_OPTIM}:sgd", qgm=True))
OPTIMIZERS.add("adam", OptimizerSpec(f"{_OPTIM}:adam"))
