"""Evaluating a run's models: node by node, or all held nodes in one batched forward, and the
per-epoch accuracy curve on a fixed subset of the test split (docs/engine.md, "Evaluation and
outputs").

- ``evaluate``: one model's top-1 accuracy on the test split or some of its rows, one
  ``Steps.predict`` call per evaluation batch.
- ``evaluate_nodes``: every held node's accuracy, each on its own rows. Node by node, or (where
  the run trains with ``train.batch_nodes``) all nodes at once: the replicas' parameters and
  buffers stacked (the views the batched training step holds, ``lpdt.engine.batched``) and one
  ``torch.func.vmap`` of ``functional_call`` per evaluation batch, so that a GPU launches one
  set of kernels for n nodes instead of n. Both compute the same numbers: every node sees the
  same batches, and an 8-bit node draws the same rounding-noise seeds in its own random stream,
  in the same order (``tests/engine/test_evaluation.py``).
- ``curve_rows`` and ``curve_streams``: the curve's fixed subset and the random streams its
  evaluation runs under, so that it changes nothing of the run (``Run.evaluate_curve``).

Evaluation changes no state of the run but one: an 8-bit model's forward rounds stochastically
in evaluation mode too, and draws a noise seed per batch from its node's stream, so *when* a run
evaluates on the full test split moves the 8-bit training that follows (``train.eval_every`` is
therefore part of the run's identity). The curve draws from a stream of its own instead.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from lpdt.data.base import Dataset, balanced_subset
from lpdt.decentral.streams import GlobalStreams, stream_seed
from lpdt.engine.steps import Steps
from lpdt.transfer import to_device

# The random stream of the curve's evaluation: (run seed, node, CURVE_STREAM, epoch). The node
# streams are 0-2 (``lpdt.decentral.streams``); this one is never drawn from by training.
CURVE_STREAM = 3


@torch.no_grad()
def evaluate(
    model: nn.Module,
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
        correct += (steps.predict(model, to_device(x, device)) == to_device(y, device)).sum()
    return 100.0 * int(correct) / len(rows)


def _node_predict(
    params: dict[str, torch.Tensor],
    model: nn.Module,
    buffers: dict[str, torch.Tensor],
    x: torch.Tensor,
    seed: torch.Tensor | None,
) -> torch.Tensor:
    """One node's predicted classes with its own parameters, buffers and noise seed (vmapped)."""
    from lpdt.layers.quant.quantizers import noise_seed

    with noise_seed(seed) if seed is not None else contextlib.nullcontext():
        return torch.func.functional_call(model, (params, buffers), (x,)).argmax(1)


@torch.no_grad()
def batched_predict(
    model: nn.Module,
    params: dict[str, torch.Tensor],
    buffers: dict[str, torch.Tensor],
    x: torch.Tensor,
    seeds: torch.Tensor | None,
) -> torch.Tensor:
    """Predicted classes ``[n, B]`` of n stacked replicas of ``model`` (parameters and buffers
    ``[n, ...]``) on their own inputs ``x [n, B, ...]``, one computation; ``seeds [n]``: each
    node's rounding-noise seed (8-bit models), else None."""
    from lpdt.layers.quant.quantizers import vmapped

    node = torch.func.vmap(
        _node_predict, in_dims=(0, None, 0, 0, None if seeds is None else 0), randomness="error"
    )
    with vmapped():
        return node(params, model, buffers, x, seeds)


@dataclass(frozen=True)
class StackedNodes:
    """The held nodes as stacked tensors for ``batched_predict``: parameters and gossiped buffers
    are views of the rows of ``state.x``, local buffers rows of one tensor per name (what
    ``lpdt.engine.batched.BatchedSteps`` holds: its ``params`` and ``held_buffers()``)."""

    model: nn.Module  # one replica: its code, run with each node's tensors
    params: dict[str, torch.Tensor]
    buffers: dict[str, torch.Tensor]
    quantized: bool  # 8-bit: each node draws a rounding-noise seed per batch


@torch.no_grad()
def evaluate_nodes(
    models: Sequence[nn.Module],
    data: Dataset,
    device: torch.device,
    batch: int,
    steps: Steps,
    rows: Sequence[torch.Tensor | None],
    node_rng: Callable[[int], contextlib.AbstractContextManager],
    stacked: StackedNodes | None = None,
) -> list[float]:
    """Top-1 accuracy (%) of each held node's model on its ``rows[k]`` of the test split (None:
    all of it). ``node_rng(k)``: the random state node k's forward runs under (its stream in
    ``Run.evaluate_all``, the curve's own in ``Run.evaluate_curve``), a stream that continues
    from one entry to the next (node by node it is entered once per node, batched once per
    evaluation batch).

    With ``stacked`` all nodes run as one batched forward per evaluation batch; a batch at which
    the nodes' row counts differ (the ragged ends of sharded rows) runs node by node. Each node
    sees the same batches either way, and draws its 8-bit noise seeds in the same order."""
    n_test = len(data.labels("test"))
    idx = [torch.arange(n_test) if r is None else r for r in rows]
    if stacked is None:
        out = []
        for k, (model, r) in enumerate(zip(models, idx, strict=True)):
            with node_rng(k):
                out.append(evaluate(model, data, device, batch, steps, r))
        return out
    from lpdt.layers.quant.quantizers import draw_seed

    for m in models:
        m.eval()
    correct = torch.zeros(len(models), dtype=torch.int64, device=device)
    for start in range(0, max(len(r) for r in idx), batch):
        chunks = [r[start : start + batch] for r in idx]
        if len({len(c) for c in chunks}) == 1:
            xs, ys = zip(*(data.batch("test", c) for c in chunks), strict=True)
            seeds = None
            if stacked.quantized:
                draws = []
                for k in range(len(models)):
                    with node_rng(k):
                        draws.append(draw_seed(device))
                seeds = torch.stack(draws)
            x, y = to_device(torch.stack(xs), device), to_device(torch.stack(ys), device)
            pred = batched_predict(stacked.model, stacked.params, stacked.buffers, x, seeds)
            correct += (pred == y).sum(1)
            continue
        for k, (model, c) in enumerate(zip(models, chunks, strict=True)):
            if len(c):
                x, y = data.batch("test", c)
                with node_rng(k):
                    correct[k] += (
                        steps.predict(model, to_device(x, device)) == to_device(y, device)
                    ).sum()
    return [100.0 * int(c) / len(r) for c, r in zip(correct.tolist(), idx, strict=True)]


def curve_rows(labels: np.ndarray, images: int, nodes: int) -> torch.Tensor:
    """The curve's fixed subset of the test split: ``images`` of it (at most all), at least one
    per node (a split smaller than the nodes is cycled through), class-balanced and the same
    for every run of a dataset and seed (``lpdt.data.base.balanced_subset``: the first images
    of each class, no randomness)."""
    rows = torch.from_numpy(balanced_subset(labels, min(len(labels), max(int(images), nodes))))
    return rows if len(rows) >= nodes else rows.repeat(-(-nodes // len(rows)))[:nodes]


def curve_streams(seed: int, ids: Sequence[int], epoch: int, device: torch.device) -> GlobalStreams:
    """The random streams of the curve's evaluation after ``epoch``: node i's seeded from (run
    seed, i, ``CURVE_STREAM``, epoch) alone, apart from every stream training draws from."""
    return GlobalStreams([stream_seed(seed, i, CURVE_STREAM, epoch) for i in ids], device)
