"""One decentralized training run, readable top to bottom.

Every iteration, all n nodes (reference §3.1):
  1. compute a gradient at their de-biased model z_i / w_i on a local mini-batch,
  2. take a local optimizer step on the push-sum numerator z_i,
  3. compress and gossip: z <- z + delta (``lpdt.decentral.algorithms``), w mixed likewise.
After the last epoch, ``final_gossip_rounds`` gossip-only rounds run (no SGD; forward passes in
train mode keep BatchNorm / 8-bit range statistics current, as the reference does), and every
node's model, plus the exact average model, is evaluated on the test set.

Outputs (``docs/architecture.md``): ``config.yaml``, ``history.csv`` (rewritten atomically after
every epoch), ``metrics.json`` (written last, atomically) and, while running, ``checkpoint.pt``
(removed once the run is complete).
"""

from __future__ import annotations

import dataclasses
import math
import os
import platform
import random
import signal
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import torch

import lpdt
from lpdt import provenance, record
from lpdt.config import RunConfig, dump_config
from lpdt.data import Dataset, load_dataset
from lpdt.data.sampler import NodeSampler
from lpdt.decentral.algorithms import make_algorithm
from lpdt.decentral.compression import make_compressor
from lpdt.decentral.group import LocalGroup, NodeGroup
from lpdt.decentral.optim import make_optimizer
from lpdt.decentral.state import NodeState
from lpdt.decentral.streams import NodeStreams
from lpdt.decentral.topology import mixing_matrix, out_peers
from lpdt.engine.batched import BatchedSteps, use_batched
from lpdt.engine.checkpoint import Checkpoint
from lpdt.engine.device import print_line, resolve_device
from lpdt.engine.rundir import open_run_dir, previous, restorable
from lpdt.engine.steps import Steps
from lpdt.engine.sysmetrics import SystemSampler
from lpdt.io import no_space, torch_save_atomic, write_text_atomic
from lpdt.models import build_model
from lpdt.record import (
    Communication,
    DatasetRecord,
    FinalMetrics,
    HistoryRow,
    ModelRecord,
    Provenance,
    RunRecord,
    Timing,
    Versions,
)

Log = Callable[[str], None]

PROGRESS_EVERY_S = 30.0  # seconds between in-epoch progress lines (tests lower it)


# ----------------------------------------------------------------------------------------------
# Small pieces
# ----------------------------------------------------------------------------------------------


def lr_at(cfg: RunConfig, epoch: int) -> float:
    """Warm-up epochs at ``lr * warmup_factor``, then multi-step decay (reference §8.4), or a
    linear decay per epoch that ends at ``lr / (epochs after the warm-up)`` (``decay: linear``)."""
    s = cfg.schedule
    if epoch < s.warmup_epochs:
        return cfg.optim.lr * s.warmup_factor
    if s.decay == "linear":
        left = cfg.train.epochs - s.warmup_epochs
        return cfg.optim.lr * (cfg.train.epochs - epoch) / max(left, 1)
    return cfg.optim.lr * s.gamma ** sum(epoch >= m for m in s.milestones)


def partition_indices(labels: np.ndarray, cfg: RunConfig) -> list[np.ndarray]:
    from lpdt.data.partition import dirichlet_partition, skew_partition

    p, n = cfg.partition, cfg.topology.nodes
    if p.kind == "dirichlet":
        return dirichlet_partition(labels, n, p.alpha, seed=p.seed)
    return skew_partition(labels, n, p.skew, seed=p.seed)


@torch.no_grad()
def evaluate(
    model: torch.nn.Module,
    data: Dataset,
    device: torch.device,
    batch: int,
    steps: Steps,
    rows: torch.Tensor | None = None,
) -> float:
    """Top-1 accuracy (%) of one model on the test split (or on its ``rows`` only)."""
    model.eval()
    labels = data.labels("test")
    rows = torch.arange(len(labels)) if rows is None else rows
    correct = torch.zeros((), dtype=torch.int64, device=device)
    for start in range(0, len(rows), batch):
        x, y = data.batch("test", rows[start : start + batch])
        correct += (steps.predict(model, x.to(device)) == y.to(device)).sum()
    return 100.0 * int(correct) / len(rows)


# ----------------------------------------------------------------------------------------------
# The run
# ----------------------------------------------------------------------------------------------


class Run:
    """Everything one training run holds; ``train()`` below drives it.

    The rows of the run's state are the nodes this process holds (``group.ids``): all n in the
    simulator (``LocalGroup``), one per process in the distributed engine
    (``lpdt.decentral.peer.TorchGroup``). Row k is node ``group.ids[k]``.
    """

    def __init__(
        self, cfg: RunConfig, log: Log = print_line, group: NodeGroup | None = None
    ) -> None:
        self.cfg, self.log = cfg, log
        self.group = group or LocalGroup(cfg.topology.nodes)
        ids = self.group.ids
        self.device = resolve_device(cfg.device)
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        random.seed(cfg.seed)
        np.random.seed(cfg.seed)
        torch.manual_seed(cfg.seed)

        # Data: one partition and one sampler per node; test data is shared by all nodes.
        self.data = load_dataset(cfg.data)
        n = cfg.topology.nodes
        parts = partition_indices(self.data.labels("train"), cfg)
        self.samplers = [
            NodeSampler(parts[i], cfg.per_node_batch, seed=cfg.seed * 1000 + i) for i in ids
        ]
        self.train_samples = sum(len(p) for p in parts)  # over all nodes
        self.iters = max(-(-len(p) // cfg.per_node_batch) for p in parts)  # batches per pass
        if cfg.train.max_iters_per_epoch:
            self.iters = min(self.iters, cfg.train.max_iters_per_epoch)

        # Model: identical initial weights on every node (the seed is the same everywhere).
        torch.manual_seed(cfg.seed)
        info = self.data.info
        model = build_model(cfg, info.num_classes, info.input_shape)
        self.state = NodeState(model, len(ids), self.device)
        self.streams = NodeStreams(cfg.seed, ids, self.device)  # each node's random streams
        # One training step / evaluation forward for all nodes (compiled once if asked), and
        # with ``train.batch_nodes`` the held nodes' training step as one computation; the node
        # step then trains only an epoch's short last batch, eagerly (no compile for one batch).
        batched = use_batched(cfg.train.batch_nodes, model, self.device)
        self.steps = Steps(
            model,
            cfg.train.compile,
            cfg.train.compile_mode,
            log,
            compile_eval=cfg.train.compile_eval,
            compile_train=not batched,
        )
        self.batched = (
            BatchedSteps(self.state, cfg.train.compile, cfg.train.compile_mode, log)
            if batched
            else None
        )

        # Communication: graph, compressor, gossip algorithm, local optimizer.
        self.peers = out_peers(cfg.topology.name, n, cfg.topology.rows)
        comp = cfg.algorithm.compression
        self.compressor = make_compressor(
            [(s.offset, s.numel) for s in self.state.segments],
            comp.name,
            comp.ratio,
            comp.levels,
            generator=self.streams.compress,
        )
        w_matrix = mixing_matrix(cfg.topology.name, n, cfg.topology.rows)
        exchange = self.group.exchange(w_matrix, self.compressor, self.state.p_total, self.device)
        self.algo = make_algorithm(
            cfg.algorithm.name, w_matrix, self.compressor, cfg.consensus_lr, self.state.x, exchange
        )
        self.opt = make_optimizer(cfg.optim, self.state.x[:, : self.state.p_train])
        self.msg_bytes = self.compressor.message_bytes()
        self.msgs_per_round = float(np.mean([len(p) for p in self.peers]))  # per node

        # Progress counters (all saved in checkpoints).
        self.epoch = 0  # epochs completed
        self.bytes_train = 0.0
        self.bytes_final = 0.0
        self.train_s = 0.0
        self.samples = 0
        self.iterations = 0
        self.history: list[HistoryRow] = []

    # -- one iteration -----------------------------------------------------------------------
    def batch(self, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Row k's next training mini-batch (its sampler, its augmentation stream)."""
        x, y = self.data.batch(
            "train",
            self.samplers[k].next(),
            augment=self.cfg.data.augment,
            generator=self.streams.aug[k],
        )
        return x.to(self.device), y.to(self.device)

    def local_gradients(self) -> torch.Tensor:
        """Forward/backward on every held node at z/w; gradients land in ``state.grad``.
        Returns the held nodes' losses. With ``train.batch_nodes`` all nodes run as one step
        when their batches have one size (an epoch's short last batch runs node by node)."""
        st = self.state
        st.grad.zero_()
        batches = [self.batch(k) for k in range(st.nodes)]  # each node's own sampler and stream
        self.samples += sum(len(y) for _, y in batches)
        with st.debiased():  # the gradient is taken at z / w
            if self.batched is not None and len({len(y) for _, y in batches}) == 1:
                x, y = (torch.stack(t) for t in zip(*batches, strict=True))
                return self.batched.train_step(x, y, self.batched.seeds(self.streams.node))
            losses = []
            for k, (model, (x, y)) in enumerate(zip(st.models, batches, strict=True)):
                with self.streams.node(k):
                    losses.append(self.steps.train_step(model, x, y))
            return torch.stack(losses)

    def gossip(self, lr: float) -> None:
        st = self.state
        delta = st.gossip(self.algo)  # z += delta; w <- the mixed weights
        if self.opt.folds_gossip:  # QGM; st.grad is free until the next backward
            self.opt.after_gossip(st.debias(delta[:, : st.p_train], out=st.grad), lr)

    def iteration(self, lr: float) -> torch.Tensor | None:
        """One training iteration of the held nodes: gradients at z/w, the local step, gossip.
        Returns the mean loss over all nodes; None (nothing stepped) when it is not finite."""
        losses = self.local_gradients()
        loss = self.group.mean(losses)  # over all nodes: a non-finite loss anywhere shows
        if not torch.isfinite(loss):
            return None
        self.opt.step(self.state.x[:, : self.state.p_train], self.state.grad, lr)
        self.gossip(lr)
        self.bytes_train += self.msg_bytes * self.msgs_per_round
        self.iterations += 1
        return loss

    def train_epoch(
        self, lr: float, on_iteration: Callable[[torch.Tensor], None] | None = None
    ) -> float:
        """One epoch; returns the mean training loss, NaN if training diverged.

        ``on_iteration(losses)`` is called after every iteration (progress output).
        """
        self.state.train()
        total = torch.zeros(())
        t0 = time.perf_counter()
        for _ in range(self.iters):
            loss = self.iteration(lr)
            if loss is None:
                return math.nan
            total += loss.cpu()
            if on_iteration is not None:
                on_iteration(loss.reshape(1))
        self.train_s += time.perf_counter() - t0
        finite = torch.isfinite(self.state.x).all(1).to(torch.float32)  # per held node
        if float(self.group.mean(finite)) < 1.0:
            return math.nan
        return float(total) / self.iters

    @torch.no_grad()
    def final_gossip(self) -> None:
        """Gossip-only rounds (reference §9.2): forwards in train mode, no SGD step."""
        self.state.train()
        for _ in range(self.cfg.train.final_gossip_rounds):
            with self.state.debiased():
                for k, model in enumerate(self.state.models):
                    x, _ = self.batch(k)
                    with self.streams.node(k):
                        model(x)
            self.gossip(lr=1.0)  # lr only scales QGM's buffer, which is no longer used
            self.bytes_final += self.msg_bytes * self.msgs_per_round

    def evaluate_all(self) -> dict[str, float]:
        """Accuracy of every node's model and of the exact average model, and consensus distance
        (on every process of the run; the average model is evaluated by the writer only)."""
        st, bs, g = self.state, self.cfg.train.eval_batch_size, self.group
        n, n_test = g.nodes, len(self.data.labels("test"))
        shards: list[torch.Tensor | None] = [None] * st.nodes
        if self.cfg.train.node_eval == "sharded":
            shards = [torch.arange(i, n_test, n) for i in g.ids]
        mine = []
        with st.debiased():
            for k, (m, rows) in enumerate(zip(st.models, shards, strict=True)):
                with self.streams.node(k):
                    mine.append(evaluate(m, self.data, self.device, bs, self.steps, rows))
        accs = g.gather(torch.tensor(mine, dtype=torch.float64)).tolist()
        with torch.no_grad():
            z = st.debiased_rows()
            z_mean = g.mean(z)  # the one all-reduce of whole models (distributed engine)
            avg_model = st.model_from(z_mean, g.mean(st.local_float_buffers()))
            zt = z[:, : st.p_train]
            consensus = float(g.mean((zt - z_mean[: st.p_train]).pow(2).sum(1)))
            del z, zt, z_mean
        avg = evaluate(avg_model, self.data, self.device, bs, self.steps) if g.writer else math.nan
        return {
            "acc_node_mean": float(np.mean(accs)),
            "acc_node_min": float(np.min(accs)),
            "acc_node_max": float(np.max(accs)),
            "acc_avg_model": avg,
            "consensus_distance": consensus,
        }

    # -- checkpoints -----------------------------------------------------------------------
    def checkpoint(self) -> Checkpoint:
        """This process's state after epoch ``self.epoch`` (the run's config, wall time and
        provenance are the caller's to fill in)."""
        st = self.state
        return Checkpoint(
            epoch=self.epoch,
            nodes=list(self.group.ids),
            x=st.x,
            w=st.w,
            local_buffers=[st.local_buffers(i) for i in range(st.nodes)],
            opt=self.opt.state_dict(),
            algo=self.algo.state_dict(),
            samplers=[s.state_dict() for s in self.samplers],
            streams=self.streams.state_dict(),
            torch_rng=torch.get_rng_state(),
            cuda_rng=torch.cuda.get_rng_state(self.device) if self.device.type == "cuda" else None,
            counters={
                k: getattr(self, k) for k in ("bytes_train", "train_s", "samples", "iterations")
            },
            history=list(self.history),
        )

    def restore(self, ck: Checkpoint) -> None:
        st = self.state
        if ck.nodes is not None and list(ck.nodes) != list(self.group.ids):
            raise ValueError(
                f"the checkpoint holds nodes {ck.nodes}, this process {self.group.ids}"
            )
        with torch.no_grad():
            st.x.copy_(ck.x)
            st.w.copy_(ck.w)
            for i, bufs in enumerate(ck.local_buffers):
                mine = st.local_buffers(i)
                for k, v in bufs.items():
                    mine[k].copy_(v)
        self.opt.load_state_dict(ck.opt)
        self.algo.load_state_dict(ck.algo)
        for s, d in zip(self.samplers, ck.samplers):
            s.load_state_dict(d)
        self.streams.load_state_dict(ck.streams)
        torch.set_rng_state(ck.torch_rng)
        if self.device.type == "cuda" and ck.cuda_rng is not None:
            torch.cuda.set_rng_state(ck.cuda_rng, self.device)
        for k, v in ck.counters.items():
            setattr(self, k, v)
        self.history = list(ck.history)
        self.epoch = ck.epoch


def _duration(s: float) -> str:
    s = max(0, round(s))
    if s < 60:
        return f"{s}s"
    m, s = divmod(s, 60)
    if m < 60:
        return f"{m}m{s:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m"


class _Progress:
    """In-epoch progress, at most one line per ``every_s`` seconds: epoch and iteration, mean
    loss of the epoch so far, images/s since the previous line, and the run's ETA (from this
    session's wall time per iteration after its first, which includes any compile; evaluation
    included). ``after_gradients`` is the ``on_iteration`` callback of ``Run.train_epoch``."""

    def __init__(self, run: Run, epochs: int, log: Log, every_s: float) -> None:
        self.run, self.epochs, self.log, self.every_s = run, epochs, log, every_s
        self.t0 = self.last_t = time.perf_counter()
        self.it0, self.last_samples = run.iterations, run.samples
        self.epoch, self.k, self.loss_sum = -1, 0, None
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
        self.loss_sum = loss if self.loss_sum is None else self.loss_sum + loss
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
            f"{float(self.loss_sum) / self.k:.4f}  {ips:.0f} img/s  ETA "
            f"{_duration(eta) if eta is not None else '?'}"
        )
        self.last_t, self.last_samples = now, r.samples


def train(
    cfg: RunConfig,
    out_dir: str | Path,
    resume: bool = False,
    force: bool = False,
    log: Log = print_line,
    group: NodeGroup | None = None,
) -> RunRecord:
    """Run (or resume, or skip if complete) one experiment in this process; returns the run's
    record (a complete run: the one read from its ``metrics.json``). ``lpdt.engine.train``
    picks the engine and is the entry point for both.

    Files already in ``out_dir`` (a complete run, a started run's ``config.yaml``, a checkpoint
    to resume) must belong to ``cfg`` (``lpdt.engine.rundir``: same config up to
    ``lpdt.config.EXECUTION_KEYS``, else ``RunDirError``). ``force`` discards them instead.

    ``engine: distributed``: every worker process (``lpdt.engine.worker``) runs this function with its
    ``group`` (the node it holds); the writer (process 0) alone writes ``config.yaml``,
    ``history.csv`` and ``metrics.json``, and each process its own checkpoint. Without a
    ``group`` such a config is refused (one process cannot hold one node of n).
    """
    if cfg.engine == "distributed" and group is None:
        raise ValueError(
            "engine: distributed runs one process per node: start it with lpdt.engine.train "
            "(or lpdt train), not lpdt.engine.loop.train"
        )
    group = group or LocalGroup(cfg.topology.nodes)
    out = Path(out_dir)
    metrics_path, ck_path = out / record.METRICS_FILE, out / group.checkpoint_name
    done = open_run_dir(cfg, out, force, [ck_path, previous(ck_path)], log)
    if done is not None:
        return done
    prov = provenance.capture(resolve_device(cfg.device))

    run = Run(cfg, log, group)
    # Every process takes part (a distributed run's processes must all start at one epoch).
    holds, wall0, prov = _resume(cfg, run, ck_path, resume, prov, log)
    out.mkdir(parents=True, exist_ok=True)
    if group.writer:
        write_text_atomic(out / "config.yaml", dump_config(cfg))
    log(_start_line(cfg, run))

    status = "ok"
    t_start = time.perf_counter()

    def wall() -> float:
        return wall0 + time.perf_counter() - t_start

    progress = _Progress(run, cfg.train.epochs, log, PROGRESS_EVERY_S)
    system = SystemSampler(group.total(run.samples), run.train_s)  # CPU, memory, threads, images/s
    while run.epoch < cfg.train.epochs:
        epoch = run.epoch
        lr = lr_at(cfg, epoch)
        loss = run.train_epoch(lr, progress.after_gradients)
        fields = {"epoch": epoch, "lr": lr, "train_loss": loss}
        if math.isnan(loss):
            status = "diverged"
            run.history.append(HistoryRow.from_dict(fields))
            if group.writer:
                record.write_history(out, run.history)
            log(f"epoch {epoch}: training diverged (non-finite loss or weights); stopping")
            break
        last = epoch == cfg.train.epochs - 1
        if (epoch + 1) % cfg.train.eval_every == 0 and not last:
            fields.update(run.evaluate_all())
        wall_s = wall()
        fields.update(bytes_per_node=run.bytes_train, wall_s=wall_s)
        fields.update(system.epoch(group.total(run.samples), run.train_s))
        row = HistoryRow.from_dict(fields)
        run.history.append(row)
        run.epoch += 1
        if group.writer:  # grows by a row per epoch, for watching a run
            record.write_history(out, run.history)
        log(_epoch_line(row, cfg.train.epochs, None if last else progress.eta_s()))
        if not last:
            holds = _save_checkpoint(cfg, run, ck_path, holds, wall_s, prov)

    final: FinalMetrics | None = None
    wire_train = group.wire_bytes()  # measured (distributed engine), before the final rounds
    if status == "ok":
        run.final_gossip()
        final = FinalMetrics(**run.evaluate_all(), train_loss=run.history[-1].train_loss)
        run.history.append(
            HistoryRow(
                epoch="final",
                **vars(final),
                bytes_per_node=run.bytes_train + run.bytes_final,
                wall_s=wall(),
            )
        )
        log(
            f"final (after {cfg.train.final_gossip_rounds} gossip rounds): node accuracy "
            f"{final.acc_node_mean:.2f} % (min {final.acc_node_min:.2f}, max "
            f"{final.acc_node_max:.2f}), average model {final.acc_avg_model:.2f} %"
        )

    rec = _run_record(cfg, run, status, final, prov, system, wire_train, total_s=wall())
    if group.writer:
        rec.write(out)  # history.csv, then metrics.json last: its presence means "complete"
    group.barrier()  # the record is written: now every process may drop its checkpoint
    ck_path.unlink(missing_ok=True)
    previous(ck_path).unlink(missing_ok=True)
    if cfg.tracking.mlflow and group.writer:
        from lpdt.tracking import log_run

        try:
            log_run(out, cfg.tracking.uri, cfg.tracking.experiment, cfg.tracking.tags)
        except Exception as e:  # the run's files are complete; tracking is a convenience
            why = "no space left on device while writing the MLflow store" if no_space(e) else e
            log(f"warning: could not log to MLflow at {cfg.tracking.uri}: {why}")
    log(f"wrote {metrics_path}")
    return rec


def _resume(
    cfg: RunConfig, run: Run, ck_path: Path, resume: bool, prov: Provenance, log: Log
) -> tuple[Path | None, float, Provenance]:
    """Restore ``run`` from the newest epoch that every process can restore (with ``resume``;
    every process must call this, it is a collective). Returns which of this process's files
    holds the restored epoch (``None``: a fresh start), the wall time of the earlier sessions,
    and the provenance of the record (that of the session that started the run)."""
    found = restorable(cfg, ck_path, run.device) if resume else {}
    target = _common_epoch(run.group, found)
    if target:
        holds, ck = found[target]
        run.restore(ck)
        last_wall = run.history[-1].wall_s if run.history else None
        wall0 = float(ck.wall_s if ck.wall_s is not None else last_wall or 0.0)
        if ck.provenance:  # the record describes the session that started the run
            first = Provenance.from_dict(ck.provenance, str(holds))
            prov = provenance.resumed(first, prov, run.epoch)
        log(f"resumed from {holds} after epoch {run.epoch}")
        return holds, wall0, prov
    if found:
        log(
            f"note: not every process has a checkpoint of one epoch (this one has epochs "
            f"{sorted(found)}); starting from scratch"
        )
    elif ck_path.exists():
        log(f"note: {ck_path} exists; starting from scratch (pass --resume to continue it)")
    return None, 0.0, prov


def _start_line(cfg: RunConfig, run: Run) -> str:
    info = run.data.info
    return (
        f"run {cfg.run_id()}: {cfg.model.name} ({cfg.precision.mode}, {run.state.p_train:,} "
        f"params) on {info.name}"
        f"{' (stand-in for ' + str(info.stand_in_for) + ')' if info.stand_in else ''}, "
        f"{cfg.topology.nodes} nodes {cfg.topology.name}, {cfg.algorithm.name} "
        f"{cfg.algorithm.compression.name} {cfg.algorithm.compression.ratio}, skew "
        f"{cfg.partition.skew}, {run.iters} it/epoch x {cfg.train.epochs} epochs, "
        f"device {run.device}"
    )


def _save_checkpoint(
    cfg: RunConfig, run: Run, ck_path: Path, holds: Path | None, wall_s: float, prov: Provenance
) -> Path:
    """Save ``run`` after its epoch ``run.epoch`` to ``ck_path``; ``holds``: which of this
    process's files holds its previous epoch (``None``: none of this session's). Returns the
    file that holds the new epoch. In the distributed engine the epoch before stays (as
    ``.prev``) until the new one is saved, so that the processes can agree on an epoch
    whenever they are killed (``_common_epoch``)."""
    group = run.group
    ck = dataclasses.replace(
        run.checkpoint(), run_config=cfg.to_dict(), wall_s=wall_s, provenance=prov.to_dict()
    )
    _fault_point("before-save", group, run.epoch)
    if group.engine == "distributed":  # keep the epoch before until all have saved
        if holds == ck_path:  # this run's previous epoch
            ck_path.replace(previous(ck_path))
        elif holds is None:  # a fresh start: any older file is another session's
            previous(ck_path).unlink(missing_ok=True)
        # (holds == the .prev file: it is the epoch before; the current one is replaced)
        _fault_point("after-rename", group, run.epoch)
    torch_save_atomic(ck_path, ck.to_dict())
    return ck_path


def _run_record(
    cfg: RunConfig,
    run: Run,
    status: str,
    final: FinalMetrics | None,
    prov: Provenance,
    system: SystemSampler,
    wire_train: float | None,
    total_s: float,
) -> RunRecord:
    """The run's record (``lpdt.record``) from the finished ``run``: ``wire_train`` is the
    measured wire bytes before the final gossip rounds, ``total_s`` the wall time across
    resumes."""
    st, info, group = run.state, run.data.info, run.group
    total_bytes = run.bytes_train + run.bytes_final
    wire_total = group.wire_bytes()
    samples = group.total(run.samples)  # over all processes
    return RunRecord(
        run_id=cfg.run_id(),
        name=cfg.name,
        status=status,
        config=cfg.to_dict(),
        dataset=DatasetRecord(
            name=info.name,
            source=info.source,
            stand_in=info.stand_in,
            stand_in_for=info.stand_in_for,
            num_classes=info.num_classes,
            train_samples=int(run.train_samples),
            test_samples=int(len(run.data.labels("test"))),
        ),
        model=ModelRecord(name=cfg.model.name, params=st.p_train, gossiped=st.p_total),
        final=final,
        communication=Communication(
            bytes_per_message=run.msg_bytes,
            messages_per_node=run.msgs_per_round * (run.iterations + cfg.train.final_gossip_rounds),
            bytes_per_node=total_bytes,
            bytes_per_node_train=run.bytes_train,
            gb_per_node=total_bytes / 1e9,
            gb_per_node_train=run.bytes_train / 1e9,
            gb_per_node_8bit_analytic=total_bytes / 4e9,
            wire_bytes_per_node=wire_total,
            wire_bytes_per_node_train=wire_train,
        ),
        time=Timing(
            train_s=run.train_s,
            total_s=total_s,
            images_per_s=samples / run.train_s if run.train_s else None,
            s_per_iter=run.train_s / run.iterations if run.iterations else None,
            iterations=run.iterations,
        ),
        epochs_completed=run.epoch,
        iters_per_epoch=run.iters,
        history=tuple(run.history),
        device=str(run.device),
        provenance=dataclasses.replace(prov, finished=provenance.utc_now()),
        versions=Versions(
            lpdt=lpdt.__version__, torch=torch.__version__, python=platform.python_version()
        ),
        engine=group.engine,
        system=system.summary(),
    )


def _common_epoch(group: NodeGroup, epochs: Iterable[int]) -> int:
    """The newest epoch that every process of the run can restore; 0 (start from scratch) when
    there is none, e.g. a process killed before its first save.

    A distributed process saves epoch e only after every process has finished saving epoch e - 1
    (epoch e's gossip and reductions need all of them), and keeps e - 1 as ``.prev`` until its
    save of e is complete: so wherever processes are killed, they hold epochs e and e - 1 between
    them and agree on one, or some process has none (it died before its first save)."""
    mine = sorted(epochs, reverse=True)[:2]
    row = torch.tensor([mine + [-1] * (2 - len(mine))], dtype=torch.float64)  # [1, 2]
    rows = group.gather(row).reshape(-1, 2).tolist()  # one row per process
    common = set.intersection(*({int(e) for e in r if e >= 0} for r in rows))
    return max(common, default=0)


FAULT_ENV = "LPDT_TEST_FAULT"


def _fault_point(point: str, group: NodeGroup, epoch: int) -> None:
    """Test-only fault injection (tests/distributed/test_faults.py): with ``LPDT_TEST_FAULT`` set
    to ``<point>:<node>:<epoch>``, the process holding node ``<node>`` kills itself (SIGKILL) at
    ``point`` of its save of ``epoch`` ("before-save": before touching its files; "after-rename":
    its last checkpoint moved to ``.prev``, the new one not written), a window that a kill from
    outside can hit only by chance. Not for users: nothing else reads it."""
    spec = os.environ.get(FAULT_ENV)
    if spec and spec == f"{point}:{group.ids[0]}:{epoch}":
        os.kill(os.getpid(), signal.SIGKILL)


def _epoch_line(row: HistoryRow, epochs: int, eta_s: float | None = None) -> str:
    assert isinstance(row.epoch, int) and row.lr is not None and row.train_loss is not None
    s = f"epoch {row.epoch + 1}/{epochs}  lr {row.lr:.4g}  loss {row.train_loss:.4f}"
    if row.acc_node_mean is not None:
        s += (
            f"  acc {row.acc_node_mean:.2f} % (min {row.acc_node_min:.2f}, max "
            f"{row.acc_node_max:.2f})  avg-model {row.acc_avg_model:.2f} %  "
            f"consensus {row.consensus_distance:.3g}"
        )
    eta = f", ETA {_duration(eta_s)}" if eta_s is not None else ""
    return s + f"  [{row.wall_s:.1f} s{eta}]"
