"""The numerics of one decentralized training run: ``Run`` (build, iteration, epoch, final
gossip rounds, evaluation, checkpoint state), readable top to bottom; ``lpdt.engine.loop.train``
drives it (the lifecycle).

Every iteration, all n nodes (reference §3.1):
  1. compute a gradient at their de-biased model z_i / w_i on a local mini-batch,
  2. take a local optimizer step on the push-sum numerator z_i,
  3. compress and gossip: z <- z + delta (``lpdt.decentral.algorithms``), w mixed likewise.
After the last epoch, ``final_gossip_rounds`` gossip-only rounds run (no SGD; forward passes in
train mode keep BatchNorm / 8-bit range statistics current, as the reference does), and every
node's model, plus the exact average model, is evaluated on the test set.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable

import numpy as np
import torch

from lpdt.config import ConfigError, RunConfig
from lpdt.data import load_dataset
from lpdt.data.sampler import NodeSampler
from lpdt.decentral.algorithms import make_algorithm
from lpdt.decentral.compression import make_compressor
from lpdt.decentral.group import LocalGroup, NodeGroup
from lpdt.decentral.optim import make_optimizer
from lpdt.decentral.state import NodeState, NodeStateDict
from lpdt.decentral.streams import NodeStreams
from lpdt.decentral.topology import mixing_matrix, out_peers
from lpdt.engine.batched import BatchedSteps, use_batched
from lpdt.engine.checkpoint import Checkpoint
from lpdt.engine.device import Log, print_line, resolve_device
from lpdt.engine.evaluation import (
    StackedNodes,
    curve_rows,
    curve_streams,
    evaluate,
    evaluate_nodes,
)
from lpdt.engine.steps import Steps
from lpdt.layers.norms import batch_statistic_sizes
from lpdt.models import build_model
from lpdt.record import (
    HistoryRow,
)
from lpdt.transfer import to_device


def partition_indices(labels: np.ndarray, cfg: RunConfig) -> list[np.ndarray]:
    from lpdt.data.partition import dirichlet_partition, skew_partition

    p, n = cfg.partition, cfg.topology.nodes
    if p.kind == "dirichlet":
        return dirichlet_partition(labels, n, p.alpha, seed=p.seed)
    return skew_partition(labels, n, p.skew, seed=p.seed)


def smallest_batch(part_sizes: list[int], per_node: int, draws: int) -> tuple[int, int]:
    """The fewest examples a node's batch holds over ``draws`` batches, and the partition that
    gives it: a node's batches hold ``per_node`` examples, and the last of each pass (its
    ceil(n / per_node)-th draw) the rest of its partition, if the run draws that far."""

    def fewest(n: int) -> int:
        rest = n % per_node
        return rest if rest and draws >= -(-n // per_node) else min(n, per_node)

    return min((fewest(n), n) for n in part_sizes)


def check_norm_batches(
    cfg: RunConfig,
    model: torch.nn.Module,
    input_shape: tuple[int, ...],
    part_sizes: list[int],
    draws: int,
) -> None:
    """Refuse, before training, a run in which a batch-statistics norm (BN, Range-BN) would
    normalise one value per channel: a batch of one example at a 1x1 feature map, from which a
    batch norm computes nothing (its output would be its bias; Range-BN's range is 0). Such a
    run stopped at its first such batch, possibly the last of the first pass after an epoch of
    training, with torch's or the range estimator's error, which named no setting. ``draws``:
    the batches a node draws over the run (with ``train.max_iters_per_epoch`` a node may never
    reach the end of a pass, and never draw its short batch)."""
    b = cfg.per_node_batch
    fewest, part = smallest_batch(part_sizes, b, draws)
    if fewest >= 2:
        return  # every norm sees at least 2 values per channel
    ones = [(n, k) for n, k, hw in batch_statistic_sizes(model, input_shape) if hw == 1]
    if not ones:
        return
    t = f"train.batch_size={cfg.train.batch_size} over topology.nodes={cfg.topology.nodes}"
    why = (
        f"{t} is 1 example per node"
        if b == 1
        else f"a node's {part} training examples at {t} ({b} per node) leave 1 example for the "
        "last batch of each pass"
    )
    name, kind = ones[0]
    where = f"{kind} layer {name}" + (f" (and {len(ones) - 1} more)" if len(ones) > 1 else "")
    other = "rangeen" if cfg.precision.mode == "int8" else "groupnorm, evonorm or rangeen"
    raise ConfigError(
        f"{why}; the {where} of {cfg.model.name} normalises a 1x1 feature map over the batch, "
        "so it would see 1 value per channel and compute nothing (its output is its bias); give "
        f"every batch at least 2 examples, or use a norm of each example (model.norm: {other})"
    )


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
        n_test = len(self.data.labels("test"))
        if cfg.train.node_eval == "sharded" and n_test < n:  # a node with no image to score
            raise ConfigError(
                f"train.node_eval: sharded gives each of the {n} nodes its share of the test "
                f"split, which has {n_test} images; use more test images or node_eval: full"
            )
        parts = partition_indices(self.data.labels("train"), cfg)
        self.samplers = [
            NodeSampler(parts[i], cfg.per_node_batch, seed=cfg.seed * 1000 + i) for i in ids
        ]
        self.train_samples = sum(len(p) for p in parts)  # over all nodes
        self.largest_part = max(len(p) for p in parts)  # of all nodes, held here or not
        self.iters = max(-(-len(p) // cfg.per_node_batch) for p in parts)  # batches per pass
        if cfg.train.max_iters_per_epoch:
            self.iters = min(self.iters, cfg.train.max_iters_per_epoch)

        # Model: identical initial weights on every node (the seed is the same everywhere).
        torch.manual_seed(cfg.seed)
        info = self.data.info
        model = build_model(cfg, info.num_classes, info.input_shape)
        # the batches a node draws: every epoch's iterations and the final rounds' forwards
        draws = cfg.train.epochs * self.iters + cfg.train.final_gossip_rounds
        check_norm_batches(cfg, model, info.input_shape, [len(p) for p in parts], draws)
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
        self.curve_steps = Steps(model)  # the accuracy curve's forwards, eager (evaluate_curve)

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
        z = self.state.numerators()  # what the algorithm and the optimizer are sized from
        self.algo = make_algorithm(
            cfg.algorithm.name, w_matrix, self.compressor, cfg.consensus_lr, z, exchange
        )
        self.opt = make_optimizer(cfg.optim, self.state.numerators(trainable=True))
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
        """Row k's next training mini-batch (its sampler, its augmentation stream), on the host:
        the callers copy it to the device with ``to_device``, which does not wait for the
        device (one copy for all nodes where they step batched)."""
        return self.data.batch(
            "train",
            self.samplers[k].next(),
            augment=self.cfg.data.augment,
            generator=self.streams.aug[k],
        )

    def local_gradients(self) -> torch.Tensor:
        """Forward/backward on every held node at z/w; gradients land in the state's rows.
        Returns the held nodes' losses. With ``train.batch_nodes`` all nodes run as one step
        when their batches have one size (an epoch's short last batch runs node by node)."""
        st = self.state
        st.zero_grad()
        batches = [self.batch(k) for k in range(st.nodes)]  # each node's own sampler and stream
        self.samples += sum(len(y) for _, y in batches)
        with st.debiased():  # the gradient is taken at z / w
            dev = self.device
            if self.batched is not None and len({len(y) for _, y in batches}) == 1:
                x, y = (to_device(torch.stack(t), dev) for t in zip(*batches, strict=True))
                return self.batched.train_step(x, y, self.batched.seeds(self.streams.node))
            losses = []
            for k, (model, (x, y)) in enumerate(zip(st.models, batches, strict=True)):
                with self.streams.node(k):
                    losses.append(
                        self.steps.train_step(model, to_device(x, dev), to_device(y, dev))
                    )
            return torch.stack(losses)

    def iteration(self, lr: float) -> torch.Tensor:
        """One training iteration of the held nodes: gradients at z/w, the local step, gossip.
        Returns the mean loss over all nodes, on the device.

        Nothing here reads a value on the host (in one process: the distributed engine's
        collectives over gloo copy through the host by design): on a GPU that would wait for the
        step to finish before the host could copy the next batches and launch the gossip. So a
        non-finite loss is not caught here but at the end of the epoch (``train_epoch``), which
        then reports the divergence in the same epoch as a check here would; the iterations in
        between step on (their state is not used again: a diverged run is neither checkpointed
        nor evaluated) and count in the run's counters (iterations, samples, bytes)."""
        losses = self.local_gradients()
        loss = self.group.mean(losses)  # over all nodes: a non-finite loss anywhere shows
        self.state.step(self.opt, lr)
        self.state.gossip(self.algo, self.opt, lr)  # z += delta; w <- mixed; QGM's fold
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
        total = torch.zeros((), device=self.device)
        t0 = time.perf_counter()
        for _ in range(self.iters):
            loss = self.iteration(lr)
            total += loss  # the same float32 additions, in the same order, as on the host
            if on_iteration is not None:
                on_iteration(loss.reshape(1))
        mean_loss = float(total) / self.iters  # the epoch's wait for the device
        self.train_s += time.perf_counter() - t0  # so the epoch's time includes the device's
        if not math.isfinite(mean_loss):  # a non-finite loss anywhere: the same on every process
            return math.nan
        if float(self.group.mean(self.state.finite_rows())) < 1.0:
            return math.nan
        return mean_loss

    @torch.no_grad()
    def final_gossip(self) -> None:
        """Gossip-only rounds (reference §9.2): forwards in train mode, no SGD step."""
        self.state.train()
        for _ in range(self.cfg.train.final_gossip_rounds):
            with self.state.debiased():
                for k, model in enumerate(self.state.models):
                    x, _ = self.batch(k)
                    with self.streams.node(k):
                        model(to_device(x, self.device))
            # lr only scales QGM's buffer, which is no longer used
            self.state.gossip(self.algo, self.opt, lr=1.0)
            self.bytes_final += self.msg_bytes * self.msgs_per_round

    def _stacked(self) -> StackedNodes | None:
        """The held nodes as stacked tensors for one batched evaluation forward, where the run
        trains them batched (``train.batch_nodes``); None: evaluate node by node."""
        b = self.batched
        if b is None:
            return None
        return StackedNodes(self.state.models[0], b.params, b.held_buffers(), b.quantized)

    def evaluate_all(self) -> dict[str, float]:
        """Accuracy of every node's model and of the exact average model, and consensus distance
        (on every process of the run; the average model is evaluated by the writer only). The
        held nodes are evaluated together where they train batched (``evaluate_nodes``)."""
        st, bs, g = self.state, self.cfg.train.eval_batch_size, self.group
        n, n_test = g.nodes, len(self.data.labels("test"))
        shards: list[torch.Tensor | None] = [None] * st.nodes
        if self.cfg.train.node_eval == "sharded":
            shards = [torch.arange(i, n_test, n) for i in g.ids]
        with st.debiased():
            mine = evaluate_nodes(
                st.models,
                self.data,
                self.device,
                bs,
                self.steps,
                shards,
                self.streams.node,
                self._stacked(),
            )
        accs = g.gather(torch.tensor(mine, dtype=torch.float64)).tolist()
        avg_model, consensus = st.average(g)  # collectives on every process
        avg = evaluate(avg_model, self.data, self.device, bs, self.steps) if g.writer else math.nan
        return {
            "acc_node_mean": float(np.mean(accs)),
            "acc_node_min": float(np.min(accs)),
            "acc_node_max": float(np.max(accs)),
            "acc_avg_model": avg,
            "consensus_distance": consensus,
        }

    def evaluate_curve(self, epoch: int) -> dict[str, float]:
        """The accuracy curve's point after ``epoch`` (``train.curve_images``): each node's
        accuracy on its share of a fixed subset of the test split (node i: the subset's images
        i, i + n, ...), their mean as ``acc_subset_node_mean``.

        It changes nothing of the run: the forwards run eagerly (``curve_steps``: a compiled
        evaluation forward keeps the batch size of its first call), under a random stream of
        their own (``curve_streams``, seeded from the run's seed, the node and the epoch: the
        8-bit rounding noise, continued from batch to batch), and the nodes' rows are restored
        bit for bit after the de-biasing (``x / w * w`` may differ from ``x`` in the last bit)."""
        st, g, cfg = self.state, self.group, self.cfg
        subset = curve_rows(self.data.labels("test"), cfg.train.curve_images, g.nodes)
        shards: list[torch.Tensor | None] = [subset[i :: g.nodes] for i in g.ids]

        streams = curve_streams(cfg.seed, g.ids, epoch, self.device)
        with st.preserved(), st.debiased():
            mine = evaluate_nodes(
                st.models,
                self.data,
                self.device,
                cfg.train.eval_batch_size,
                self.curve_steps,
                shards,
                streams.node,
                self._stacked(),
            )
        accs = g.gather(torch.tensor(mine, dtype=torch.float64)).tolist()
        return {"acc_subset_node_mean": float(np.mean(accs))}

    # -- checkpoints -----------------------------------------------------------------------
    def checkpoint(self) -> Checkpoint:
        """This process's state after epoch ``self.epoch`` (the run's config, wall time and
        provenance are the caller's to fill in)."""
        rows = self.state.state_dict()  # the Checkpoint's x, w, local_buffers
        return Checkpoint(
            epoch=self.epoch,
            nodes=list(self.group.ids),
            x=rows["x"],
            w=rows["w"],
            local_buffers=rows["local_buffers"],
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
        if ck.nodes is not None and list(ck.nodes) != list(self.group.ids):
            raise ValueError(
                f"the checkpoint holds nodes {ck.nodes}, this process {self.group.ids}"
            )
        if ck.epoch > self.cfg.train.epochs:  # a checkpoint without its config, of a longer run
            raise ValueError(
                f"the checkpoint is from after epoch {ck.epoch}, past this run's "
                f"train.epochs={self.cfg.train.epochs}: it is another run's"
            )
        self.state.load_state_dict(NodeStateDict(x=ck.x, w=ck.w, local_buffers=ck.local_buffers))
        self.opt.load_state_dict(ck.opt)
        self.algo.load_state_dict(ck.algo)
        for s, d in zip(self.samplers, ck.samplers):
            s.load_state_dict(d)
        self.streams.load_state_dict(ck.streams)
        torch.set_rng_state(ck.torch_rng)
        if self.device.type == "cuda" and ck.cuda_rng is not None:
            torch.cuda.set_rng_state(ck.cuda_rng, self.device)
        for name, value in ck.counters.items():
            setattr(self, name, value)
        self.history = list(ck.history)
        self.epoch = ck.epoch
