"""Typed run configuration: defaults, YAML loading, ``key=value`` overrides, validation and run id.

A run config is a tree of dataclasses. ``load_config`` merges (in order) the defaults, a YAML
file and ``--set`` overrides, then validates every value. Any problem raises ``ConfigError``
with one line that names the key and the allowed values; the CLI turns it into exit code 2.

Override keys are dotted paths (``partition.skew=0.9``). A leaf name that is unique in the whole
tree may be used alone (``skew=0.9``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from lpdt import plugins
from lpdt.decentral.catalog import ALGORITHMS, COMPRESSORS, OPTIMIZERS, TOPOLOGIES
from lpdt.errors import LpdtError
from lpdt.typed import Reader, to_json, type_name


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


# Keys added after runs were recorded, at the default that reproduces the older behaviour:
# ``result_dict`` drops them at that value, so run ids and stored configs of older runs still match.
ADDED_KEYS_AT_OLD_DEFAULT: dict[str, object] = {"schedule.decay": "step"}


def result_dict(tree: dict[str, Any]) -> dict[str, Any]:
    """A copy of a config tree (``RunConfig.to_dict()`` or a stored one) without
    ``EXECUTION_KEYS``, nor a key of ``ADDED_KEYS_AT_OLD_DEFAULT`` at that value: the part that
    determines the results."""
    out = json.loads(json.dumps(tree, default=str))  # deep copy; tuples -> lists, as stored
    for key, old in ADDED_KEYS_AT_OLD_DEFAULT.items():
        *parents, leaf = key.split(".")
        node: Any = out
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict) and node.get(leaf) == old:
            node.pop(leaf)
    for key in EXECUTION_KEYS:
        *parents, leaf = key.split(".")
        node = out
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(leaf, None)
    return out


def config_diff(a: dict[str, Any], b: dict[str, Any], prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two config trees (a key on one side only
    counts), sorted."""
    out: list[str] = []
    for k in sorted(set(a) | set(b), key=str):
        va, vb = a.get(k, _MISSING), b.get(k, _MISSING)
        if isinstance(va, dict) and isinstance(vb, dict):
            out += config_diff(va, vb, f"{prefix}{k}.")
        elif va != vb:
            out.append(f"{prefix}{k}")
    return out


def result_diff(cfg: RunConfig, stored: dict[str, Any]) -> list[str]:
    """The result-affecting keys in which a stored config tree (a run directory's
    ``config.yaml``, ``metrics.json`` or checkpoint) differs from ``cfg``. The stored tree is read
    with this version's defaults where it validates, so keys added since it was written do not
    count as differences."""
    with contextlib.suppress(ConfigError, TypeError):  # else written by another version
        stored = config_from_dict(stored).to_dict()
    return config_diff(result_dict(cfg.to_dict()), result_dict(stored))


_MISSING = object()


# ----------------------------------------------------------------------------------------------
# Loading, overrides, validation
# ----------------------------------------------------------------------------------------------


def _leaf_paths(cls: type, prefix: str = "") -> dict[str, str]:
    """Map every dotted leaf path of a config dataclass to itself."""
    out: dict[str, str] = {}
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        path = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(hints[f.name]):
            out.update(_leaf_paths(hints[f.name], path + "."))
        else:
            out[path] = path
    return out


def resolve_key(key: str) -> str:
    """Turn an override key (dotted path or unique leaf name) into a dotted path."""
    paths = _leaf_paths(RunConfig)
    if key in paths:
        return key
    sections = {p.rsplit(".", 1)[0] for p in paths if "." in p}
    if key in sections:
        return key
    matches = [p for p in paths if p.rsplit(".", 1)[-1] == key]
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        raise ConfigError(f"config key {key!r} is ambiguous; use one of: {', '.join(matches)}")
    raise ConfigError(f"unknown config key {key!r}; allowed keys: {', '.join(sorted(paths))}")


def parse_value(text: str) -> Any:
    """Parse an override value with YAML rules (``0.9`` -> float, ``true`` -> bool, ``[1,2]``)."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def set_path(tree: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node = tree
    for p in parts[:-1]:
        node = node.setdefault(p, {})
        if not isinstance(node, dict):
            raise ConfigError(f"config key {'.'.join(parts[:-1])!r} is not a section")
    node[parts[-1]] = value


def deep_merge(base: Any, over: Any, null_deletes: bool = False) -> Any:
    """Overlay ``over`` on ``base``: mappings merge recursively, anything else replaces. With
    ``null_deletes``, a None in ``over`` removes the key instead (the workflow's scale overlays
    delete blocks this way); without it, None is a value like any other (``key: null``)."""
    if not (isinstance(base, dict) and isinstance(over, dict)):
        return over
    out = dict(base)
    for k, v in over.items():
        if v is None and null_deletes:
            out.pop(k, None)
        elif k in out:
            out[k] = deep_merge(out[k], v, null_deletes)
        else:
            out[k] = v
    return out


def _coerce(value: Any, tp: Any, path: str, f: dataclasses.Field | None) -> Any:
    """Check (and gently coerce) ``value`` against type ``tp``; raise ConfigError otherwise. The
    config's reading of a value that is not a section (``lpdt.typed`` says how it differs from
    the JSON rules, and why)."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    bad = ConfigError(
        f"config key {path!r}: invalid value {value!r}; expected {type_name(tp, python=True)}"
    )
    if origin in (types.UnionType, typing.Union):
        if value is None and type(None) in args:
            return None
        for a in args:
            if a is type(None):
                continue
            try:
                return _coerce(value, a, path, f)
            except ConfigError:
                pass
        raise bad
    if origin is Literal:
        if value not in args:
            raise ConfigError(
                f"config key {path!r}: invalid value {value!r}; allowed: "
                + ", ".join(str(a) for a in args)
            )
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise bad
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad
        return value
    if tp is float:
        if isinstance(value, str):  # YAML 1.1 reads "1e6" (no dot) as a string
            try:
                return float(value)
            except ValueError:
                raise bad from None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise bad
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise bad
        if f is not None and "choices" in f.metadata:
            choices = f.metadata["choices"]()
            if value not in choices:
                raise ConfigError(
                    f"config key {path!r}: invalid value {value!r}; allowed: {', '.join(choices)}"
                )
        return value
    if origin is list:
        if not isinstance(value, list | tuple):
            raise bad
        return [_coerce(v, args[0], f"{path}[{i}]", None) for i, v in enumerate(value)]
    if origin is tuple:
        if not isinstance(value, list | tuple) or len(value) != len(args):
            raise bad
        return tuple(
            _coerce(v, a, f"{path}[{i}]", None) for i, (v, a) in enumerate(zip(value, args))
        )
    if origin is dict:
        if not isinstance(value, dict):
            raise bad
        return {str(k): str(v) for k, v in value.items()}
    raise bad


# Reads a config tree (``config_from_dict``): the field loop is ``lpdt.typed``'s, the values
# ``_coerce``'s.
_READER = Reader(
    error=ConfigError,
    root="<root>",
    not_object="config section {where!r} must be a mapping",
    unknown="unknown config key {key!r}; allowed here: {allowed}",
    missing="config key {key!r} is missing",
    coerce=_coerce,
)


def _ratio_hint(ratio: float) -> str:
    """The error for a compression ratio outside [0, 1): it is a fraction, not the percentage
    that studies and tables use ("Comp. 99 %" is ratio 0.99)."""
    msg = f"{ratio:g} is not a fraction in [0, 1) (the fraction dropped per tensor)"
    if 1.0 <= ratio < 100.0:
        msg += f"; for {ratio:g} % compression write {ratio / 100:g}"
    return msg


def _check_ranges(cfg: RunConfig) -> None:
    def need(cond: bool, key: str, msg: str) -> None:
        if not cond:
            raise ConfigError(f"config key {key!r}: {msg}")

    need(0.0 <= cfg.partition.skew <= 1.0, "partition.skew", "must be in [0, 1]")
    need(cfg.partition.alpha > 0, "partition.alpha", "must be > 0")
    need(cfg.topology.nodes >= 1, "topology.nodes", "must be >= 1")
    c = cfg.algorithm.compression
    need(0.0 <= c.ratio < 1.0, "algorithm.compression.ratio", _ratio_hint(c.ratio))
    need(1 <= c.levels <= 8, "algorithm.compression.levels", "must be in 1..8 (bits)")
    sparse = [n for n in COMPRESSORS if COMPRESSORS.get(n).sparse]
    need(
        c.ratio == 0.0 or c.name in sparse,
        "algorithm.compression.ratio",
        f"{c.ratio:g} has no effect with algorithm.compression.name {c.name!r}"
        f" (only {', '.join(sparse)} drop entries); set algorithm.compression.name=topk",
    )
    compressing = [n for n in ALGORITHMS if ALGORITHMS.get(n).compresses]
    need(
        c.name == "none" or cfg.algorithm.name in compressing,
        "algorithm.compression.name",
        f"{c.name!r} with algorithm.name {cfg.algorithm.name!r}, which sends whole models;"
        f" compress with {' or '.join(compressing)}",
    )
    if cfg.algorithm.consensus_lr is not None:
        need(0 < cfg.algorithm.consensus_lr <= 1, "algorithm.consensus_lr", "must be in (0, 1]")
    for k in ("weight_bits", "act_bits", "grad_bits"):
        need(getattr(cfg.precision, k) in (4, 8, 16, 32), f"precision.{k}", "allowed: 4, 8, 16, 32")
    need(cfg.optim.lr > 0, "optim.lr", "must be > 0")
    need(0 <= cfg.optim.momentum < 1, "optim.momentum", "must be in [0, 1)")
    with_qgm = [n for n in OPTIMIZERS if OPTIMIZERS.get(n).qgm]
    need(
        not cfg.optim.qgm or cfg.optim.name in with_qgm,
        "optim.qgm",
        f"requires optim.name: {' or '.join(with_qgm)}",
    )
    need(cfg.train.epochs >= 1, "train.epochs", "must be >= 1")
    need(
        cfg.train.batch_size >= cfg.topology.nodes, "train.batch_size", "must be >= topology.nodes"
    )
    need(cfg.train.final_gossip_rounds >= 0, "train.final_gossip_rounds", "must be >= 0")
    need(cfg.train.eval_every >= 1, "train.eval_every", "must be >= 1")
    need(cfg.train.curve_images >= 0, "train.curve_images", "must be >= 0 (0: no curve)")
    need(cfg.train.checkpoint_every >= 1, "train.checkpoint_every", "must be >= 1")
    need(cfg.model.groups >= 1, "model.groups", "must be >= 1")
    need(
        re.fullmatch(r"auto|cpu|cuda(:\d+)?", cfg.device) is not None,
        "device",
        f"{cfg.device!r} is not a device; allowed: auto, cpu, cuda, cuda:N",
    )
    need(cfg.model.range_chunks >= 1, "model.range_chunks", "must be >= 1")
    for k in ("train_subset", "test_subset"):
        v = getattr(cfg.data, k)
        need(v is None or v >= 1, f"data.{k}", "must be >= 1 or null")
    need(
        cfg.data.image_size is None or 8 <= cfg.data.image_size <= 64,
        "data.image_size",
        "must be between 8 and 64 px, or null (the dataset's 32 px)",
    )


def config_from_dict(tree: dict[str, Any]) -> RunConfig:
    """The checked config of a tree, after importing the plugins it names (``plugins``), those
    of ``$LPDT_PLUGINS`` and the installed ones (``lpdt.plugins``): they register names it uses."""
    names = tree.get("plugins") if isinstance(tree, dict) else None
    if not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
        names = []  # absent, or not a list of names: the reader says so below
    try:
        plugins.load(names)
    except plugins.PluginError as e:
        raise ConfigError(str(e)) from None
    cfg = _READER.build(RunConfig, tree)
    _check_ranges(cfg)
    return cfg


def load_config(
    path: str | Path | None = None, overrides: list[str] | dict[str, Any] | None = None
) -> RunConfig:
    """Defaults <- YAML file <- overrides (``["a.b=1", ...]`` or ``{"a.b": 1}``)."""
    tree: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file {str(p)!r} does not exist")
        try:
            loaded = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError as e:
            raise ConfigError(
                f"config file {str(p)!r} is not valid YAML: {e}".replace("\n", " ")
            ) from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"config file {str(p)!r} must contain a mapping")
        tree = deep_merge(tree, loaded)
    items: list[tuple[str, Any]]
    if isinstance(overrides, dict):
        items = list(overrides.items())
    else:
        items = []
        for o in overrides or []:
            if "=" not in o:
                raise ConfigError(f"override {o!r} must look like key=value")
            k, v = o.split("=", 1)
            items.append((k.strip(), parse_value(v)))
    for k, v in items:
        set_path(tree, resolve_key(k), v)
    return config_from_dict(tree)


def dump_config(cfg: RunConfig) -> str:
    return yaml.safe_dump(cfg.to_dict(), sort_keys=False)
