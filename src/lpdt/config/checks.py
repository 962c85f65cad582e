"""The checks of a run config's values beyond their types: ranges, and the combinations that
would silently do nothing (a compression ratio for a compressor that drops nothing, ...)."""

from __future__ import annotations

import re

from lpdt.config.schema import ConfigError, RunConfig
from lpdt.data import DATASETS
from lpdt.decentral.catalog import (
    ALGORITHMS,
    COMPRESSORS,
    OPTIMIZERS,
    TOPOLOGIES,
    shaped_topologies,
)
from lpdt.models import MODELS

# torch's intra-op threads: a value past the largest machines' cores is a typo. OpenMP cannot
# start 20,000 threads ("libgomp: Thread creation failed"), and 100,000 crashed the process
# with a segmentation fault instead of a config error.
MAX_THREADS = 1024


def _ratio_hint(ratio: float) -> str:
    """The error for a compression ratio outside [0, 1): it is a fraction, not the percentage
    that studies and tables use ("Comp. 99 %" is ratio 0.99)."""
    msg = f"{ratio:g} is not a fraction in [0, 1) (the fraction dropped per tensor)"
    if 1.0 <= ratio < 100.0:
        msg += f"; for {ratio:g} % compression write {ratio / 100:g}"
    return msg


def check_ranges(cfg: RunConfig) -> None:
    """Raise ``ConfigError`` naming the key of the first value out of its range."""

    def need(cond: bool, key: str, msg: str) -> None:
        if not cond:
            raise ConfigError(f"config key {key!r}: {msg}")

    need(0.0 <= cfg.partition.skew <= 1.0, "partition.skew", "must be in [0, 1]")
    need(cfg.partition.alpha > 0, "partition.alpha", "must be > 0")
    need(cfg.topology.nodes >= 1, "topology.nodes", "must be >= 1")
    need(
        cfg.topology.rows is None or TOPOLOGIES.get(cfg.topology.name).shaped,
        "topology.rows",
        f"has no effect with topology.name {cfg.topology.name!r} (only "
        f"{', '.join(shaped_topologies())} is laid out in rows)",
    )
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
    # each of these trained silently (a negative rate, a rate of 0, weight growth) or diverged
    need(cfg.optim.weight_decay >= 0, "optim.weight_decay", "must be >= 0")
    need(cfg.optim.eps > 0, "optim.eps", "must be > 0")
    need(all(0 <= b < 1 for b in cfg.optim.betas), "optim.betas", "both must be in [0, 1)")
    s = cfg.schedule  # each checked where the schedule uses it
    need(s.warmup_epochs >= 0, "schedule.warmup_epochs", "must be >= 0")
    if s.warmup_epochs > 0:
        need(s.warmup_factor > 0, "schedule.warmup_factor", "must be > 0 (a factor of the lr)")
    if s.decay == "step":
        need(
            0 < s.gamma <= 1, "schedule.gamma", "must be in (0, 1] (the lr's factor at a milestone)"
        )
        need(
            all(m >= 0 for m in s.milestones),
            "schedule.milestones",
            "each must be an epoch >= 0 (the lr decays from that epoch on)",
        )
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
    need(cfg.train.eval_batch_size >= 1, "train.eval_batch_size", "must be >= 1")
    cap = cfg.train.max_iters_per_epoch
    need(cap is None or cap >= 1, "train.max_iters_per_epoch", "must be >= 1 or null (no cap)")
    need(
        cfg.threads is None or 1 <= cfg.threads <= MAX_THREADS,
        "threads",
        f"must be between 1 and {MAX_THREADS}, or null (torch's: the machine's cores)",
    )
    for key, seed in (("seed", cfg.seed), ("partition.seed", cfg.partition.seed)):
        need(0 <= seed < 2**32, key, "must be in [0, 2**32)")  # numpy's seeds
    need(cfg.model.groups >= 1, "model.groups", "must be >= 1")
    need(cfg.model.gn_groups >= 1, "model.gn_groups", "must be >= 1")
    need(
        re.fullmatch(r"auto|cpu|cuda(:\d+)?", cfg.device) is not None,
        "device",
        f"{cfg.device!r} is not a device; allowed: auto, cpu, cuda, cuda:N",
    )
    need(cfg.model.range_chunks >= 1, "model.range_chunks", "must be >= 1")
    spec = MODELS.find(cfg.model.name)
    need(
        cfg.model.dropout_noise == "generator" or spec is None or spec.inputs != "text",
        "model.dropout_noise",
        f"hash replaces nn.Dropout modules, but {cfg.model.name!r} (a text model) also drops out "
        "inside its attention, from torch's generator; use generator",
    )
    data = DATASETS.find(cfg.data.dataset)
    need(
        spec is None or data is None or spec.inputs == data.inputs,
        "model.name",
        f"{cfg.model.name!r} takes {spec.inputs if spec else ''} inputs, but data.dataset "
        f"{cfg.data.dataset!r} holds {data.inputs if data else ''} examples",
    )
    for k in ("train_subset", "test_subset"):
        v = getattr(cfg.data, k)
        need(v is None or v >= 1, f"data.{k}", "must be >= 1 or null")
        cap = data.max_subset if data is not None else None
        if v is not None and cap is not None:
            need(
                v <= cap,
                f"data.{k}",
                f"must be at most {cap:,} for {cfg.data.dataset!r}, whose examples are "
                "generated in memory at the size asked",
            )
    per_class = cfg.data.per_class
    need(  # 80 % of a class trains: at 2 per class none would be left to test
        per_class is None or per_class >= 3,
        "data.per_class",
        "must be >= 3 or null (80 % of each class trains, and the test split needs one)",
    )
    if spec is not None and spec.inputs == "text":  # image models do not read it
        # a model read from files (its weights or its config) holds 512 positions; one built
        # from a config of lpdt's (distilbert_tiny) as many as the examples have tokens
        longest = 512 if spec.reads_files else 4096
        need(
            3 <= cfg.data.max_length <= longest,
            "data.max_length",
            f"must be in 3..{longest} (tokens per example, [CLS] and [SEP] included"
            f"{f'; {cfg.model.name} holds 512 positions' if spec.reads_files else ''})",
        )
    need(
        cfg.data.image_size is None or 8 <= cfg.data.image_size <= 64,
        "data.image_size",
        "must be between 8 and 64 px, or null (the dataset's 32 px)",
    )
    need(  # read and ignored, it would have priced (lpdt.plan) a size that never trained
        cfg.data.image_size is None or data is None or (data.inputs == "image" and data.resized),
        "data.image_size",
        f"{cfg.data.dataset!r} "
        + ("holds text" if data and data.inputs == "text" else "is not resized (its own crops)")
        + ": leave it null",
    )


# The norm keys each norm layer reads ("rangeen8": every norm at 8 bits but Range-BN, which
# lpdt.layers.quant.convert makes 8-bit Range-EvoNorm; Range-BN reads none: 16 chunks, fixed)
_NORM_READS: dict[str, tuple[str, ...]] = {
    "batchnorm": (),
    "groupnorm": ("gn_groups",),
    "evonorm": ("groups",),
    "rangeen": ("groups", "range_estimator", "range_chunks", "range_act"),
    "rangebn": (),
    "rangeen8": ("groups", "range_estimator", "range_chunks"),
}
_NORM_KEYS = ("norm", "groups", "gn_groups", "range_estimator", "range_chunks", "range_act")
_PRECISION_KEYS = (
    "weight_bits",
    "act_bits",
    "grad_bits",
    "act_rounding",
    "gossip_ranges",
    "lp_init",
)


def unused_settings(cfg: RunConfig, norm_slot: bool = True, dropout: bool = True) -> list[str]:
    """The keys set to other than their defaults that change nothing in this run, each with
    why (``model.groups=3 (model.norm batchnorm)``); all but the execution keys among them
    (``train.compile_mode``, ``train.compile_eval``) still change its run id.
    ``norm_slot``: whether the model has a norm layer that ``model.norm`` chooses (the
    engine's to say: ``lpdt.layers.quant.convert.has_norm``); ``dropout``: whether it has a
    dropout layer that ``model.dropout_noise`` draws for."""
    out: list[str] = []

    def unused(section: str, key: str, why: str) -> None:
        part = getattr(cfg, section)
        value, default = getattr(part, key), getattr(type(part)(), key)
        if value != default:
            out.append(f"{section}.{key}={value} ({why})")

    p, m = cfg.precision, cfg.model
    if p.mode == "fp32":
        for key in _PRECISION_KEYS:
            unused("precision", key, "precision.mode fp32")
    elif p.act_bits == 32:
        unused("precision", "act_rounding", "32-bit activations")
    if not norm_slot:
        for key in _NORM_KEYS:
            unused("model", key, f"{m.name} has no norm layer")
    else:
        int8 = p.mode == "int8"
        kind = ("rangebn" if m.norm == "rangebn" else "rangeen8") if int8 else m.norm
        why = f"model.norm {m.norm}{' at 8 bits' if int8 else ''}"
        for key in _NORM_KEYS[1:]:
            if key not in _NORM_READS[kind]:
                unused("model", key, why)
    if MODELS.get(m.name).inputs == "image":
        unused("model", "pretrained", "image models train from scratch")
    if not dropout:
        unused("model", "dropout_noise", f"{m.name} has no dropout layer")
    if not cfg.train.compile:
        unused("train", "compile_mode", "train.compile false")
        unused("train", "compile_eval", "train.compile false")
    return out
