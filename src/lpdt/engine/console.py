"""What a run prints while it trains: its start line, a progress line at most every
``PROGRESS_EVERY_S`` seconds inside an epoch (iteration, loss, images/s, ETA), and one line per
epoch."""

from __future__ import annotations

import os
import time

import torch

from lpdt.config import RunConfig, unused_settings
from lpdt.decentral.topology import shape_note
from lpdt.engine.device import Log
from lpdt.engine.run import Run
from lpdt.engine.schedule import schedule_note
from lpdt.layers.dropout import has_dropout
from lpdt.layers.quant.convert import has_norm, int8_norm
from lpdt.record import HistoryRow

PROGRESS_EVERY_S = 30.0  # seconds between in-epoch progress lines (tests lower it)


def duration(s: float) -> str:
    s = max(0, round(s))
    if s < 60:
        return f"{s}s"
    m, s = divmod(s, 60)
    if m < 60:
        return f"{m}m{s:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m"


class Progress:
    """In-epoch progress, at most one line per ``every_s`` seconds: epoch and iteration, mean
    loss of the epoch so far, images/s since the previous line, and the run's ETA (from this
    session's wall time per iteration after its first, which includes any compile; evaluation
    included). ``after_gradients`` is the ``on_iteration`` callback of ``Run.train_epoch``."""

    def __init__(self, run: Run, epochs: int, log: Log, every_s: float) -> None:
        self.run, self.epochs, self.log, self.every_s = run, epochs, log, every_s
        self.t0 = self.last_t = time.perf_counter()
        self.it0, self.last_samples = run.iterations, run.samples
        self.epoch, self.k = -1, 0
        self.loss_sum: torch.Tensor | None = None  # this epoch's losses so far (on the device)
        self.started = False

    def eta_s(self, done_in_iter: int = 0) -> float | None:
        """Seconds left for the run; ``done_in_iter``: the current iteration is (nearly) done."""
        r = self.run
        done = r.iterations + done_in_iter - self.it0
        if done <= 0:
            return None
        per_iter = (time.perf_counter() - self.t0) / done
        return per_iter * (self.epochs * r.iters - r.iterations - done_in_iter)

    def after_gradients(self, losses: torch.Tensor) -> None:
        r = self.run
        if r.epoch != self.epoch:
            self.epoch, self.k, self.loss_sum = r.epoch, 0, None
        self.k += 1
        loss = losses.detach().mean()
        loss_sum = loss if self.loss_sum is None else self.loss_sum + loss
        self.loss_sum = loss_sum
        now = time.perf_counter()
        if not self.started:  # this session's first iteration includes compiling the step
            self.started = True  # (train.compile): rates and the ETA start after it
            self.t0 = self.last_t = now
            self.it0, self.last_samples = r.iterations, r.samples
            return
        if now - self.last_t < self.every_s or self.k >= r.iters:
            return
        ips = (r.samples - self.last_samples) / max(now - self.last_t, 1e-9)
        ips *= r.group.nodes / r.state.nodes  # the whole run's rate: every node takes a batch
        eta = self.eta_s(done_in_iter=1)
        self.log(
            f"  epoch {r.epoch + 1}/{self.epochs} iter {self.k}/{r.iters}  loss "
            f"{float(loss_sum) / self.k:.4f}  {ips:.0f} img/s  ETA "
            f"{duration(eta) if eta is not None else '?'}"
        )
        self.last_t, self.last_samples = now, r.samples


def start_line(cfg: RunConfig, run: Run) -> str:
    info = run.data.info
    p = cfg.precision
    bits = (p.weight_bits, p.act_bits, p.grad_bits)
    mode = (
        p.mode if p.mode == "fp32" or bits == (8, 8, 8) else "int8 w{}/a{}/g{} bits".format(*bits)
    )
    return (
        f"run {cfg.run_id()}: {cfg.model.name} ({mode}, {run.state.p_train:,} "
        f"params) on {info.name}"
        f"{' (stand-in for ' + str(info.stand_in_for) + ')' if info.stand_in else ''}, "
        f"{cfg.topology.nodes} nodes {cfg.topology.name}, {cfg.algorithm.name} "
        f"{cfg.algorithm.compression.name} {cfg.algorithm.compression.ratio}, skew "
        f"{cfg.partition.skew}, {run.iters} it/epoch x {cfg.train.epochs} epochs, "
        f"device {run.device}"
    )


def subset_notes(cfg: RunConfig, run: Run) -> list[str]:
    """A line for each ``data.*_subset`` larger than its split: the whole split is used (a
    record says how many; nothing was printed)."""
    notes = []
    for split in ("train", "test"):
        asked = getattr(cfg.data, f"{split}_subset")
        has = len(run.data.labels(split))
        if asked is not None and asked > has:
            notes.append(
                f"note: data.{split}_subset {asked:,} is more than the {has:,} {split} examples "
                f"of {run.data.info.name}: all {has:,} are used"
            )
    return notes


def batch_note(cfg: RunConfig, run: Run) -> str | None:
    """A line when a node's batch is larger than every node's partition: each epoch is then
    one short batch per node (the reference's ``DataLoader`` without ``drop_last`` does the
    same), which a run's first line does not make plain."""
    largest = run.largest_part
    if cfg.per_node_batch <= largest:
        return None
    return (
        f"note: train.batch_size {cfg.train.batch_size} over {cfg.topology.nodes} nodes is "
        f"{cfg.per_node_batch} per node, more than the largest partition's {largest:,} "
        f"training examples: each epoch is one batch of a node's whole partition"
    )


def settings_notes(cfg: RunConfig, run: Run) -> list[str]:
    """Lines for what the config asks and the run does otherwise: a BN-style or EvoNorm norm at
    8 bits (it trains 8-bit Range-EvoNorm), and the settings that change nothing here
    (``lpdt.config.unused_settings``: a norm on a model without one, bits at fp32, ...)."""
    slot = has_norm(run.state.models[0])
    m, notes = cfg.model, []
    if slot and cfg.precision.mode == "int8" and int8_norm(m.norm) != m.norm:
        notes.append(
            f"note: model.norm={m.norm} at 8 bits trains 8-bit Range-EvoNorm, as every norm but "
            "Range-BN (model.norm=rangebn) does (docs/int8.md)"
        )
    unused = unused_settings(cfg, norm_slot=slot, dropout=has_dropout(run.state.models[0]))
    if unused:
        notes.append("note: settings that change nothing in this run: " + ", ".join(unused))
    return notes


def threads_note(cfg: RunConfig) -> str | None:
    """A line when ``threads`` asks for more threads than the machine has cores: each step's
    threads then wait on each other (4,096 threads on 2 cores ran a 1-epoch tiny run for more
    than 100 s)."""
    cores = os.cpu_count() or 1
    if cfg.threads is None or cfg.threads <= cores:
        return None
    return (
        f"note: threads={cfg.threads} on a machine of {cores} cores: the threads take turns, "
        "which is slower than one per core (threads: null uses them all)"
    )


def run_notes(cfg: RunConfig, run: Run) -> list[str]:
    """The notes a run prints after its first line: what it does that its config does not make
    plain (a subset or a batch larger than the data, a torus laid out as a ring, milestones it
    never reaches, settings it does not use)."""
    t = cfg.topology
    notes = [
        *subset_notes(cfg, run),
        batch_note(cfg, run),
        shape_note(t.name, t.nodes, t.rows),
        schedule_note(cfg),
        threads_note(cfg),
        *settings_notes(cfg, run),
    ]
    return [n for n in notes if n]


def epoch_line(row: HistoryRow, epochs: int, eta_s: float | None = None) -> str:
    assert isinstance(row.epoch, int) and row.lr is not None and row.train_loss is not None
    s = f"epoch {row.epoch + 1}/{epochs}  lr {row.lr:.4g}  loss {row.train_loss:.4f}"
    if row.acc_node_mean is not None:
        s += (
            f"  acc {row.acc_node_mean:.2f} % (min {row.acc_node_min:.2f}, max "
            f"{row.acc_node_max:.2f})  avg-model {row.acc_avg_model:.2f} %  "
            f"consensus {row.consensus_distance:.3g}"
        )
    if row.acc_subset_node_mean is not None:  # the curve (train.curve_images)
        s += f"  subset acc {row.acc_subset_node_mean:.2f} %"
    eta = f", ETA {duration(eta_s)}" if eta_s is not None else ""
    return s + f"  [{row.wall_s:.1f} s{eta}]"
