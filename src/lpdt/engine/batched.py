"""The held nodes' training step as one computation over stacked parameters (``train.batch_nodes``).

The sequential step (``lpdt.engine.steps.Steps``) runs n small forward / backward passes, one per
node. On a GPU each of them is a few hundred small kernels and the card mostly waits on their
launches (docs/engine.md, "On a GPU"). Here the n nodes run as one: PyTorch's model-ensembling
recipe, ``torch.func.functional_call`` of one replica under ``torch.func.vmap`` over the nodes,
turns the n replicas' convolutions into one grouped convolution and every other layer into one
operation over ``[n, ...]``.

Nothing is copied per step and no layer's arithmetic is written twice:

- the parameters are leaves of autograd sharing the storage of the rows of the engine's
  ``state.x``; the losses come from one vmapped forward and their gradient from ordinary
  autograd outside the vmap (node k's loss depends on row k only), written into the node's row
  of ``state.grad`` with one ``_foreach_copy_``;
- the gossiped buffers (the 8-bit activation ranges) are views of ``state.x`` too, and the local
  ones (normalisation statistics) become rows of one stacked tensor per buffer, which each
  replica then holds as a view (``NodeState.stack_local_buffers``), so evaluation, averaging and
  checkpoints see them as before;
- the layers are the models' own modules: vmap runs their code once per node, with each node's
  batch, buffers and rounding-noise seed (a per-node int64 tensor, drawn in the node's random
  stream as the sequential step draws it); under vmap the 8-bit quantisers use their tensor
  operations (``quantizers.vmapped``) and every per-tensor range is per node, and the gradient
  side of the 8-bit layers (gradient quantiser, bifurcated conv / linear) runs as custom
  operators with vmap rules (``lpdt.layers.quant.vmap_ops``), so the 8-bit step compiles too.

So a batched step computes what the n sequential steps compute, node by node (each node's loss
and gradient within float rounding, and in float64 exactly: ``tests/engine/test_batched.py``,
fp32 and 8-bit with 8-bit gradients).

Models with random operations (``nn.Dropout``: VGG-11's classifier, the text models) run node by
node (``train.batch_nodes: auto``) or are refused (``true``): under vmap they would draw from one
generator for all nodes instead of each node's stream, and the run would differ from its
sequential twin. Hashed dropout (``model.dropout_noise: hash``, ``lpdt.layers.dropout``) draws
its mask from the node's noise seed instead, like the 8-bit rounding, and runs batched. Where
the nodes train batched they are evaluated batched too (``lpdt.engine.evaluation``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from lpdt.decentral.state import NodeState
from lpdt.engine.device import Log
from lpdt.engine.steps import compile_allowed, is_quantized, prepare_compile
from lpdt.errors import LpdtError
from lpdt.layers.quant.convert import draws_noise
from lpdt.layers.quant.quantizers import draw_seed, noise_seed, vmapped


class BatchNodesError(LpdtError, ValueError):
    """A model that the batched step cannot run (one line for the CLI)."""


def _node_loss(
    params: dict[str, torch.Tensor],
    model: nn.Module,
    buffers: dict[str, torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    seed: torch.Tensor | None,
) -> torch.Tensor:
    """One node's loss with its own parameters, buffers and noise seed (vmapped over the nodes)."""
    with noise_seed(seed) if seed is not None else contextlib.nullcontext():
        out = torch.func.functional_call(model, (params, buffers), (x,))
    return F.cross_entropy(out, y)


def batched_losses(
    model: nn.Module,
    params: dict[str, torch.Tensor],
    buffers: dict[str, torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    seeds: torch.Tensor | None,
) -> torch.Tensor:
    """The n nodes' losses ``[n]``, one vmapped forward (x ``[n, B, ...]``, y ``[n, B]``).

    The gradient is taken from outside the vmap, by ordinary autograd on the stacked
    parameters (``BatchedSteps.train_step``): node k's loss depends on row k only, so the
    gradient of their sum is each node's own gradient. (``torch.func.grad`` inside the vmap
    cannot run the 8-bit layers' custom operators' autograd formulas, and dynamo cannot vmap
    over an autograd.Function: ``lpdt.layers.quant.vmap_ops``.)"""
    seed_dim = None if seeds is None else 0
    node = torch.func.vmap(_node_loss, in_dims=(0, None, 0, 0, 0, seed_dim), randomness="error")
    with vmapped():
        return node(params, model, buffers, x, y, seeds)


def not_batchable(model: nn.Module) -> str | None:
    """Why ``model`` cannot run batched, or None."""
    random_ops = sorted({type(m).__name__ for m in model.modules() if isinstance(m, nn.Dropout)})
    if random_ops:
        return (
            f"the model has random operations ({', '.join(random_ops)}), which under vmap would "
            "not draw from each node's own stream"
        )
    return None


def use_batched(setting: bool | str, model: nn.Module, device: torch.device) -> bool:
    """``train.batch_nodes``: true / false, or auto: on CUDA for a model that can run batched."""
    if setting == "auto":
        return device.type == "cuda" and not_batchable(model) is None
    return bool(setting)


def compile_error_text(e: BaseException, limit: int = 300) -> str:
    """What made a compile fail, in one line: the type and the first line that says something
    (inductor's ``BackendCompilerFailed`` starts "backend='inductor' raised:" and names the
    cause on its next line, which the first line alone lost on the H200 of 2026-11-30)."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    said = [line for line in lines if not line.endswith("raised:")]
    return f"{type(e).__name__}: {said[0] if said else ''}"[:limit]


class BatchedSteps:
    """The training step of all held nodes at once, over views of ``state``'s rows."""

    def __init__(
        self,
        state: NodeState,
        compile: bool = False,
        mode: str = "default",
        log: Log = print,
        options: dict | None = None,
    ) -> None:
        """``options``: more inductor options for the compiled step (``prepare_compile``)."""
        model = state.models[0]
        why = not_batchable(model)
        if why:
            raise BatchNodesError(f"train.batch_nodes: {why}; set train.batch_nodes: false")
        self.state, self.log = state, log
        self.quantized = is_quantized(model)
        self.noisy = draws_noise(model)
        n = state.nodes
        # The parameters as leaves of autograd that share the storage of x's rows (the
        # optimiser's in-place updates of x are theirs), and where their gradients go. The
        # gossiped buffers (8-bit running ranges, rows of x too) are updated in place by the
        # forward: it updates private copies, copied in before and back after each step,
        # because AOTAutograd refuses an input mutated in place that shares storage with
        # inputs that require a gradient.
        self.params: dict[str, torch.Tensor] = {}
        self.grads: dict[str, torch.Tensor] = {}  # views of state.grad's rows
        self._gossiped: dict[str, torch.Tensor] = {}  # views of x's rows
        for seg in state.segments:
            view = state.x[:, seg.offset : seg.offset + seg.numel].view(n, *seg.shape)
            if seg.trainable:
                self.params[seg.name] = view.detach().requires_grad_()
                rows = state.grad[:, seg.offset : seg.offset + seg.numel]
                self.grads[seg.name] = rows.view(n, *seg.shape)
            else:
                self._gossiped[seg.name] = view
        self.buffers = {name: view.clone() for name, view in self._gossiped.items()}
        self.buffers.update(state.stack_local_buffers())
        self._compiled: Callable[..., torch.Tensor] | None = None
        self._size: int | None = None  # the batch size the compiled step is specialised to
        self._graphs = False  # CUDA graphs: mark each step, copy what it returns
        self._options = options or {}
        if compile and compile_allowed(model, log, batched=True):
            kw = prepare_compile(mode, self.quantized, options)
            self._graphs = mode == "reduce-overhead"
            if self._graphs:
                # The same tensors every step: CUDA graphs read them in place, no copies.
                for t in (*self.params.values(), *self.buffers.values(), *self.grads.values()):
                    torch._dynamo.mark_static_address(t)
            self._compiled = torch.compile(batched_losses, dynamic=False, **kw)

    def held_buffers(self) -> dict[str, torch.Tensor]:
        """Every buffer as the nodes hold it now, stacked: the gossiped ones as the views of
        ``x``'s rows (which gossip and the final rounds move; ``buffers`` holds the training
        step's private copies of them, current only while a step runs), the local ones as they
        are (the replicas' own buffers are views of them)."""
        return {**self.buffers, **self._gossiped}

    @property
    def compiled(self) -> bool:
        """Whether the step runs compiled (False also after a compile that failed)."""
        return self._compiled is not None

    def seeds(
        self, streams_node: Callable[[int], contextlib.AbstractContextManager]
    ) -> torch.Tensor | None:
        """One noise seed per node, each drawn in its node's random stream (8-bit models and
        hashed dropout), as ``Steps.train_step`` draws it; None for models that draw no noise."""
        if not self.noisy:
            return None
        out = []
        for k in range(self.state.nodes):
            with streams_node(k):
                out.append(draw_seed(self.state.device))
        return torch.stack(out)

    def train_step(
        self, x: torch.Tensor, y: torch.Tensor, seeds: torch.Tensor | None
    ) -> torch.Tensor:
        """Forward, losses and backward of every held node (x ``[n, B, ...]``, y ``[n, B]``);
        the gradients land in ``state.grad``. Returns the ``[n]`` detached losses.

        A compiled step is specialised to the first call's batch size; other sizes (an epoch's
        short last batch) run the same function eagerly, as ``Steps`` does."""
        args = (self.state.models[0], self.params, self.buffers, x, y, seeds)
        gossiped = list(self._gossiped.values())
        private = [self.buffers[name] for name in self._gossiped]
        if gossiped:
            torch._foreach_copy_(private, gossiped)
        if self._graphs:
            torch.compiler.cudagraph_mark_step_begin()
        if self._compiled is None:
            losses, grads = self._run(batched_losses, args)
        elif self._size is None:
            self._size = x.shape[1]
            losses, grads = self._first_compiled_call(args)
        elif x.shape[1] == self._size:
            with self._options_held():  # a recompile traces with them too
                losses, grads = self._run(self._compiled, args)
        else:
            losses, grads = self._run(batched_losses, args)
        torch._foreach_copy_(list(self.grads.values()), grads)
        if gossiped:
            torch._foreach_copy_(gossiped, private)
        # A CUDA graph's outputs are overwritten by its next replay: keep a copy.
        return losses.detach().clone() if self._graphs else losses.detach()

    def _run(
        self, fn: Callable[..., torch.Tensor], args: tuple
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        """The losses of ``fn`` and their gradients with respect to the stacked parameters."""
        losses = fn(*args)
        grads = torch.autograd.grad(losses.sum(), tuple(self.params.values()))
        return losses, grads

    def _options_held(self) -> contextlib.AbstractContextManager:
        """The step's inductor options patched into inductor's config while a compiled call
        runs. Why: ``torch.compile`` applies them in its backend only, but dynamo traces the
        step's Python before that, at the first call and at any recompile, and the layers read
        some of them there (``split_reductions``: lpdt.layers.quant.quantizers._split_for_a_gpu).
        No options: nothing is patched."""
        if not self._options:
            return contextlib.nullcontext()
        import torch._inductor.config as inductor_config  # imported by compiling anyway

        return inductor_config.patch(self._options)

    def _first_compiled_call(self, args: tuple) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        """The first call of the compiled step, which traces and compiles its forward (and, at
        the first backward, lowers its backward). Where torch cannot trace or compile it (a
        ``TorchDynamoException``: dynamo refused an operation, or inductor failed), the step
        runs eagerly, the same arithmetic, and says so in one line; the buffers the forward may
        have updated (the running ranges, when the backward failed to compile) are put back
        first, so the eager step starts from the same state. Any other error is an error."""
        from torch._dynamo.exc import TorchDynamoException

        assert self._compiled is not None
        self.log("compiling the batched training step (torch.compile)")
        saved = [b.clone() for b in self.buffers.values()]
        t0 = time.perf_counter()
        try:
            with self._options_held():
                out = self._run(self._compiled, args)
        except TorchDynamoException as e:
            self.log(
                f"train.batch_nodes: the batched step did not compile on torch {torch.__version__} "
                f"({compile_error_text(e)}); it runs eagerly"
            )
            self._compiled, self._graphs = None, False
            if saved:  # a model without buffers (an fp32 model with EvoNorm) has none to restore
                torch._foreach_copy_(list(self.buffers.values()), saved)
            return self._run(batched_losses, args)
        self.log(f"  compiled the batched training step in {time.perf_counter() - t0:.1f} s")
        return out
