"""The run config's schema: its dataclass tree (``RunConfig`` and its sections), the choices of
its registry-backed keys, and its identity (``RunConfig.run_id``: ``EXECUTION_KEYS`` left out,
``RECIPE_VERSIONS`` in). Reading, overriding and checking a config: the package (``lpdt.config``)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from lpdt.decentral.catalog import ALGORITHMS, COMPRESSORS, OPTIMIZERS, TOPOLOGIES
from lpdt.errors import LpdtError
from lpdt.typed import to_json


class ConfigError(LpdtError, ValueError):
    """A bad configuration key or value (the message is a single line)."""


# Registry-backed choices are resolved lazily (the registries fill up on import).
def _dataset_names() -> list[str]:
    from lpdt.data import DATASETS

    return DATASETS.names()


def _model_names() -> list[str]:
    from lpdt.models import MODELS

    return MODELS.names()


def _topology_names() -> list[str]:
    return TOPOLOGIES.names()


def _algorithm_names() -> list[str]:
    return ALGORITHMS.names()


def _compression_names() -> list[str]:
    return COMPRESSORS.names()


def _optimizer_names() -> list[str]:
    return OPTIMIZERS.names()


def _choices(fn: Callable[[], list[str]]) -> dict[str, Any]:
    return {"choices": fn}


@dataclass
class DataConfig:
    dataset: str = field(default="cifar10", metadata=_choices(_dataset_names))
    stand_in_for: str | None = None  # set when `dataset` stands in for a paper dataset (recorded)
    root: str | None = None  # None: $LPDT_DATA_ROOT, else ./data
    download: bool = False
    train_subset: int | None = None  # keep this many training samples (class-balanced), None = all
    test_subset: int | None = None  # evaluate on this many test samples (class-balanced)
    augment: bool = True
    image_size: int | None = None  # in-memory image datasets: resize to this many px (None: 32)
    max_length: int = 128  # text datasets: tokens per example
    per_class: int | None = None  # text stand-ins: examples per class (None = dataset default)


@dataclass
class PartitionConfig:
    kind: Literal["skew", "dirichlet"] = "skew"
    skew: float = 0.0
    alpha: float = 1.0  # dirichlet concentration
    seed: int = 1234


@dataclass
class ModelConfig:
    name: str = field(default="resnet20", metadata=_choices(_model_names))
    norm: Literal["batchnorm", "groupnorm", "evonorm", "rangeen", "rangebn"] = "evonorm"
    groups: int = 8  # EvoNorm / Range-EvoNorm groups (the reference's 8)
    gn_groups: int = 2  # GroupNorm groups (the reference trainer's 2)
    range_estimator: Literal["chunked", "paper"] = "chunked"
    range_chunks: int = 16  # chunked estimator: chunks per group (the reference's 16)
    range_act: Literal["hardsigmoid", "sigmoid"] = "hardsigmoid"  # full-precision Range-EvoNorm
    pretrained: bool = True  # text models: load pretrained weights
    # Dropout masks (VGG-11's classifier): "generator", nn.Dropout's draws from torch's generator;
    # "hash", a hash of the step's noise seed (lpdt.layers.dropout), which lets the nodes train
    # batched (train.batch_nodes). Image models only: text models also drop out inside attention.
    dropout_noise: Literal["generator", "hash"] = "generator"


# The normalisation each precision uses in the paper (section 3): EvoNorm-S0 at fp32,
# Range-EvoNorm at 8 bits (config/studies.yaml's precision coordinate sets it; MLflow run names
# leave it out where a run uses it, and claims pair runs by it where a study names no norm).
PAPER_NORMS: dict[str, str] = {"fp32": "evonorm", "int8": "rangeen"}


@dataclass
class PrecisionConfig:
    mode: Literal["fp32", "int8"] = "fp32"
    weight_bits: int = 8
    act_bits: int = 8
    grad_bits: int = 8
    act_rounding: Literal["stochastic", "nearest"] = "stochastic"  # reference: stochastic (bug)
    gossip_ranges: bool = True  # activation ranges travel with the model (reference §5.5)
    lp_init: bool = (
        True  # the reference's LP init (zero gamma in each block's last norm, reference §7.1)
    )


@dataclass
class TopologyConfig:
    name: str = field(default="directed_ring", metadata=_choices(_topology_names))
    nodes: int = 8
    rows: int | None = None  # torus shape; None = most square factorisation


@dataclass
class CompressionConfig:
    # none | topk | randomk (sparsifiers) | qsgd | int8 (quantizers) | topk_int8 (top-k with
    # 8-bit values), or any other registered in lpdt.decentral.catalog.COMPRESSORS
    name: str = field(default="none", metadata=_choices(_compression_names))
    ratio: float = 0.0  # sparsifiers: fraction dropped per tensor: 0.99 keeps 1 %
    levels: int = 8  # qsgd: bits per value (s = 2^levels - 1 levels)


@dataclass
class AlgorithmConfig:
    name: str = field(default="choco", metadata=_choices(_algorithm_names))
    consensus_lr: float | None = (
        None  # the reference's eta; None: 1.0 uncompressed, 0.01 compressed
    )
    compression: CompressionConfig = field(default_factory=CompressionConfig)


@dataclass
class OptimConfig:
    name: str = field(default="sgd", metadata=_choices(_optimizer_names))  # lpdt.decentral.catalog
    lr: float = 0.1
    momentum: float = 0.9
    nesterov: bool = True
    weight_decay: float = 1e-4
    qgm: bool = False  # Quasi-Global Momentum (reference §8.3); SGD only
    betas: tuple[float, float] = (0.9, 0.9)  # adam
    eps: float = 1e-8  # adam


@dataclass
class ScheduleConfig:
    warmup_epochs: int = 1  # epochs at lr * warmup_factor (the reference's epoch 0)
    warmup_factor: float = 0.1
    milestones: list[int] = field(default_factory=lambda: [100, 150])
    gamma: float = 0.1
    # "step": x gamma at each milestone (the paper's). "linear": after the warm-up, the lr falls
    # linearly per epoch to lr / (epochs after the warm-up) in the last epoch, so training ends at
    # its budget with a small step whatever the budget (milestones and gamma unused).
    decay: Literal["step", "linear"] = "step"


@dataclass
class TrainConfig:
    epochs: int = 200
    batch_size: int = 256  # total over nodes; per node = batch_size // nodes (reference)
    final_gossip_rounds: int = 51
    eval_every: int = 1  # evaluate every k epochs (the last epoch always)
    # The accuracy curve: after every epoch, each node on its share of this many images of the
    # test split (a fixed, class-balanced subset; history column acc_subset_node_mean, MLflow
    # epoch/acc_subset_node_mean). It changes nothing of the run (lpdt.engine.run.Run.
    # evaluate_curve), hence an execution key; 0: no curve.
    curve_images: int = 500
    # Save the resume checkpoint every k epochs (never after the last: the record follows). A
    # short run's checkpoints can cost more than a kill would (a 4-node MiniLM: 3.9 s a save,
    # against 19 s of training); a rerun resumes from the last one saved. An execution key.
    checkpoint_every: int = 1
    eval_batch_size: int = 256
    # "full": every node's model on the whole test split (n+1 passes over it). "sharded": node i
    # on test images i, i+n, i+2n, ... (each image once over the nodes), so the mean node
    # accuracy still averages over the whole split, with the same binomial standard error, at 1/n
    # of the cost; per-node min / max are then on 1/n of the split each. The average model is
    # always evaluated on the whole split.
    node_eval: Literal["full", "sharded"] = "full"
    max_iters_per_epoch: int | None = None  # cap (for tests / quick scale), None = full epoch
    # torch.compile each node's training step and evaluation (lpdt.engine.steps)
    compile: bool = False
    compile_mode: Literal[
        "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"
    ] = "default"  # torch.compile mode; "reduce-overhead" (CUDA graphs) is for GPUs
    # With ``compile``: also compile the evaluation forward. false: evaluation runs eagerly (a
    # cold compile of the 8-bit ResNet-20 evaluation forward took 44 s on the reference CPU, more
    # than a short run's few evaluations cost eagerly).
    compile_eval: bool = True
    # All held nodes' training step as one computation over stacked parameters (torch.func.vmap;
    # lpdt.engine.batched): the same arithmetic up to float rounding, for GPUs, where n small
    # steps leave the card waiting on kernel launches (one H100: 6.6x the compiled node-by-node
    # ResNet-20 step; docs/engine.md, "Batched nodes"). auto: on CUDA for models without
    # dropout, off on the CPU (where it measured no gain).
    batch_nodes: bool | Literal["auto"] = "auto"


@dataclass
class TrackingConfig:
    mlflow: bool = False
    uri: str = "sqlite:///results/mlflow.db"
    experiment: str = "lpdt"
    tags: dict[str, str] = field(default_factory=dict)


@dataclass
class RunConfig:
    name: str | None = None
    seed: int = 1234
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    threads: int | None = None  # torch intra-op threads; None = torch default
    # "simulated": one process holds all n nodes (lpdt.decentral.group.LocalGroup).
    # "distributed": one process per node over torch.distributed (lpdt.engine.launch; docs/distributed.md).
    engine: Literal["simulated", "distributed"] = "simulated"
    # Modules imported before the rest of the config is read: plugins that register the
    # algorithms, compressors, ... the config names (lpdt.plugins; docs/extending.md)
    plugins: list[str] = field(default_factory=list)
    data: DataConfig = field(default_factory=DataConfig)
    partition: PartitionConfig = field(default_factory=PartitionConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    precision: PrecisionConfig = field(default_factory=PrecisionConfig)
    topology: TopologyConfig = field(default_factory=TopologyConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)

    # -- derived values -------------------------------------------------------------------
    @property
    def consensus_lr(self) -> float:
        if self.algorithm.consensus_lr is not None:
            return self.algorithm.consensus_lr
        return 1.0 if self.algorithm.compression.name == "none" else 0.01

    @property
    def per_node_batch(self) -> int:
        return max(1, self.train.batch_size // self.topology.nodes)

    def to_dict(self) -> dict[str, Any]:
        return to_json(self)

    def run_id(self) -> str:
        """A stable short hash of what changes the results (``EXECUTION_KEYS`` excluded), and of
        the precision's recipe version (``RECIPE_VERSIONS``) where it has one."""
        tree = result_dict(self.to_dict())
        version = RECIPE_VERSIONS.get(self.precision.mode)
        if version is not None:
            tree["recipe_version"] = version
        blob = json.dumps(tree, sort_keys=True, default=str).encode()
        return hashlib.sha1(blob).hexdigest()[:12]


# Numerical recipes that changed without a config key to show it: the version joins the run id
# of that precision's runs, so runs of an older recipe keep their own ids and directories. A
# precision without an entry hashes exactly as before (fp32 run ids never moved).
# int8 2 (2026-11-25): the rounding noise is a counter hash keyed by a per-step seed, the same
# eager and compiled (docs/int8.md); version 1 drew other noise eager (16-bit lanes of torch's
# generator) and compiled (a hash seeded inside the graph).
RECIPE_VERSIONS: dict[str, int] = {"int8": 2}


# Keys that do not change a run's results: its label, how and where it executes, and how it is
# recorded. ``RunConfig.run_id()`` does not hash them, and a run directory written with other
# values of them still counts as the same run (``lpdt.engine.rundir``'s run-directory check). Dotted
# paths; a whole section (``tracking``) may be named; a key this version does not have (an
# execution switch added later, e.g. ``train.compile``) is simply absent. A key that does change
# numbers (seed, sizes, precision, ...) must never be listed here.
EXECUTION_KEYS: tuple[str, ...] = (
    "name",  # a label
    "threads",  # torch intra-op threads: speed, and the order of float sums (last bits)
    "device",  # cpu / cuda: where it runs (results may differ in the last bits, not in kind)
    "engine",  # simulated / distributed: the same arithmetic up to float reassociation of the
    # mixing sum (docs/distributed.md: equal to the simulator's sparse mixing bit for bit)
    "plugins",  # which modules register the names the config uses (the names are hashed)
    "data.root",  # where the dataset files are, not which data
    "tracking",  # MLflow logging
    "train.compile",  # torch.compile switch: speed; the same arithmetic up to the rounding of
    # fused kernels, like ``threads`` (docs/engine.md)
    "train.compile_mode",
    "train.compile_eval",
    "train.checkpoint_every",  # when the resume checkpoint is saved
    "train.curve_images",  # the per-epoch accuracy curve on a test subset: draws from a stream
    # of its own and restores the nodes' rows (tests/engine/test_evaluation.py)
    "train.batch_nodes",  # one vmapped step for all nodes: the same arithmetic up to float
    # rounding (tests/engine/test_batched.py)
)


# Execution keys that run ids hashed before they were known to be execution keys: ``result_dict``
# sets them to the value those ids hashed, so recorded ids stay and every value gives the same id.
# data.download (2026-11-30): fetch a missing dataset first, the same files; hashed, turning it on
# for the paper grid renamed all 289 runs, and turning it off again would have retrained them.
EXECUTION_KEYS_HASHED_AT: dict[str, object] = {
    "data.download": False,
}


# Keys added after runs were recorded, at the default that reproduces the older behaviour:
# ``result_dict`` drops them at that value, so run ids and stored configs of older runs still match.
ADDED_KEYS_AT_OLD_DEFAULT: dict[str, object] = {
    "schedule.decay": "step",
    "model.dropout_noise": "generator",
}


def _holder(tree: dict[str, Any], key: str) -> tuple[dict[str, Any] | None, str]:
    """The mapping that holds dotted ``key`` in ``tree`` (None if there is none), and its leaf."""
    *parents, leaf = key.split(".")
    node: Any = tree
    for part in parents:
        node = node.get(part) if isinstance(node, dict) else None
    return (node if isinstance(node, dict) else None), leaf


def result_dict(tree: dict[str, Any]) -> dict[str, Any]:
    """A copy of a config tree (``RunConfig.to_dict()`` or a stored one) without
    ``EXECUTION_KEYS``, nor a key of ``ADDED_KEYS_AT_OLD_DEFAULT`` at that value, and with
    ``EXECUTION_KEYS_HASHED_AT`` at theirs: the part that determines the results."""
    out = json.loads(json.dumps(tree, default=str))  # deep copy; tuples -> lists, as stored
    for key, hashed in EXECUTION_KEYS_HASHED_AT.items():
        node, leaf = _holder(out, key)
        if node is not None and leaf in node:
            node[leaf] = hashed
    for key, old in ADDED_KEYS_AT_OLD_DEFAULT.items():
        node, leaf = _holder(out, key)
        if node is not None and node.get(leaf) == old:
            node.pop(leaf)
    for key in EXECUTION_KEYS:
        node, leaf = _holder(out, key)
        if node is not None:
            node.pop(leaf, None)
    return out
