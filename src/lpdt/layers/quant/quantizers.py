"""The uniform quantiser itself: plain tensor functions, no autograd, no state.

Written as a handful of elementwise operations (in place on fresh tensors: eagerly that saves an
allocation per step) and reductions so that ``torch.compile`` fuses each call into one or two
kernels (one reduction for the range, one pass for subtract / divide / noise / clamp / round /
rescale).

Rounding noise (``dither``) is a counter-based hash of (seed, salt, element index)
(``lpdt.layers.quant.noise_hash``): eager and compiled code compute the same bits, and a compiled
graph computes it inside the fused rounding kernel (no random-number kernel, no extra pass).
Compiled, the noise and the rounding are operators that inductor lowers to one expression each
(``lpdt.layers.quant.operators``: far fewer graph nodes to compile). Eagerly on the CPU,
``quantize`` runs the same arithmetic as one C++ loop instead (``lpdt.layers.quant.kernel``; the
same bits), and off the CPU as that operator compiled once into one kernel
(``lpdt.layers.quant.fused``; the same bits). The seed is an int64 tensor: the training step's (``noise_seed``:
``lpdt.engine.steps`` draws one per node step from torch's generator, outside any compiled
graph, so eager and compiled steps draw the same noise), or, outside a step, a fresh draw from
torch's generator per call. The salt is a Python int that tells the call sites of one step
apart (``convert_to_int8`` numbers them).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from lpdt.layers.formulas import compiled_for_a_gpu, tracing
from lpdt.layers.quant import fused, kernel
from lpdt.layers.quant.noise_hash import (
    MASK32,
    SALT,
    index_hash,
    key_int,
    mix_,
    noise_from_levels,
    salted,
    signed32,
)
from lpdt.layers.quant.operators import dither_hash, quantize_levels, to_levels
from lpdt.layers.quant.spec import MIN_STEP

_step_seed: torch.Tensor | None = None
# The dither keys of the enclosing ``noise_seed`` block's seed, one per salt (``_step_keys``),
# computed once per block on the eager tensor path; and the most salts any block has needed, so
# that later blocks compute the whole table at once.
_keys: torch.Tensor | None = None
_salts_seen = 0
# Set while the held nodes' step runs under ``torch.func.vmap`` (``lpdt.engine.batched``): the
# tensors are then per-node views of stacked ones, which neither the C++ kernel nor a read of the
# seed on the host can take, so the quantisers use their tensor operations, or the fused
# operator's vmap rule (the same bits).
_vmapped = False


@contextlib.contextmanager
def vmapped() -> Iterator[None]:
    """Within the block the quantisers run under ``torch.func.vmap`` (tensor operations only)."""
    global _vmapped
    saved, _vmapped = _vmapped, True
    try:
        yield
    finally:
        _vmapped = saved


@contextlib.contextmanager
def noise_seed(seed: torch.Tensor) -> Iterator[None]:
    """Every stochastic rounding inside the block (forward, and the backward if it runs inside
    too) uses ``seed`` (an int64 tensor with one element), told apart by the call sites' salts."""
    global _step_seed, _keys
    saved = _step_seed, _keys
    _step_seed, _keys = seed, None
    try:
        yield
    finally:
        _step_seed, _keys = saved


def is_vmapped() -> bool:
    """Whether the quantisers run under ``torch.func.vmap`` (inside a ``vmapped`` block)."""
    return _vmapped


def step_seed() -> torch.Tensor | None:
    """The seed set by the enclosing ``noise_seed`` block, or None."""
    return _step_seed


def draw_seed(device: torch.device | str = "cpu") -> torch.Tensor:
    """A fresh 31-bit noise seed from torch's generator of ``device``."""
    return torch.randint(0, 2**31, (1,), device=device)


def _cpu_fast_path(seed: torch.Tensor) -> bool:
    """Whether ``dither`` may read its seed as a Python integer: a seed on the CPU (no device
    synchronisation there), not under vmap, and the CPU fast paths on (``LPDT_QUANT_KERNEL``
    unset or not ``0``; ``0`` runs the tensor operations a GPU runs, the same bits)."""
    return seed.device.type == "cpu" and not _vmapped and kernel.enabled()


def _cpu_key(seed: torch.Tensor, salt: int) -> int:
    """The dither's 32-bit key of (seed, salt) in Python integers, for a seed on the CPU."""
    return key_int(int(seed.reshape(())), salt)


def _step_keys(seed: torch.Tensor, salt: int) -> torch.Tensor | None:
    """The int32 dither key of (``seed``, ``salt``) read from the step's table, or None where
    ``seed`` is not the enclosing ``noise_seed`` block's (then ``dither`` computes it).

    Eagerly on a GPU each key costs about 13 operations on a one-element tensor, and an 8-bit
    ResNet-20 step draws noise at 112 call sites: the table computes every salt's key in those
    13 operations once per step, and a call reads its own with one (the same 32 bits: the same
    integer operations on a vector of salts). The seed is matched by its storage (a seed saved
    for a backward comes back as another tensor object); the block holds it, so no other tensor
    can share that storage while the block lasts."""
    global _keys, _salts_seen
    step = _step_seed
    if (
        step is None
        or seed.device != step.device
        or seed.numel() != 1
        or seed.data_ptr() != step.data_ptr()
    ):
        return None
    if _keys is None or salt >= _keys.numel():
        _salts_seen = max(_salts_seen, salt + 1, 64)
        salts = torch.arange(_salts_seen, device=seed.device, dtype=torch.int64)
        offsets = salts.mul_(SALT).bitwise_and_(MASK32)
        offsets = torch.where(offsets >= 2**31, offsets - 2**32, offsets).to(torch.int32)
        _keys = mix_(offsets.add_(step.reshape(()).to(torch.int32)), False)
    return _keys[salt]


def dither(
    x: torch.Tensor, seed: torch.Tensor | None = None, salt: int = 0, rows: bool = False
) -> torch.Tensor:
    """U(-1/2, 1/2) noise on 2^16 levels shaped like ``x``: the top 16 bits of a 32-bit hash of
    the element index, keyed by (seed, salt). ``seed=None``: a fresh seed from torch's generator.

    ``rows``: ``x`` is ``[n, ...]`` and ``seed`` ``[n]`` (or ``[n, 1]``): row k's noise is
    ``dither(x[k], seed[k], salt)``, its elements counted from 0 (the node-stacked gradients of
    the batched step, ``quantize_minmax_nodes``).

    Unbiased to within 2^-17 of a quantisation step (as fine as fp32 itself near 255).

    The same bits three ways (``noise_hash``): eagerly in int32 (products wrap; 2-7x faster per
    operation than int64 on this CPU); inside a compiled graph as the operator
    ``lpdt::dither_hash``, which inductor lowers to one int64 expression with masks (inductor
    2.14's vectorised CPU code for wrapping int32 products corrupted the heap in a fused
    backward kernel), and whose vmap rule serves the batched step; eagerly on the CPU, the key
    in Python integers. ``tests/layers/test_quant.py`` checks each against the hash in Python
    integers.
    """
    count = x[0].numel() if rows else x.numel()  # elements counted per key
    if count >= 2**31:
        raise ValueError(f"dither: {count} elements; the 32-bit counter holds at most 2^31")
    if seed is None:
        seed = draw_seed(x.device)
    h: torch.Tensor
    if tracing():
        blocks = seed.reshape(-1) if rows else seed.reshape(())
        h = dither_hash(blocks.to(x.device), x.shape[1:] if rows else x.shape, salt)
    else:
        key: torch.Tensor | int
        if not rows and _cpu_fast_path(seed):
            # Eagerly on the CPU, the key in Python integers: reading the seed costs no device
            # synchronisation there, and it saves ten one-element tensor operations per call
            # (about 4 % of an eager 8-bit ResNet-8 step at the claims' shape:
            # docs/notebook/2026-11-23-int8-measurements.md).
            key = signed32(_cpu_key(seed, salt))
        else:  # the same 32 bits as a signed int32 (the additions wrap)
            seed = seed.reshape(-1, 1) if rows else seed.reshape(())
            table = None if rows or _vmapped else _step_keys(seed, salt)
            if table is None:
                key = mix_(seed.to(torch.int32) + signed32(salted(salt)), False, not _vmapped)
            else:
                key = table
        # Under vmap the key is per node and the indices are not; with rows, the key is a
        # column: a new tensor.
        h = index_hash(count, key, x.device, False, _vmapped or rows, not _vmapped)
    return noise_from_levels(h, x.dtype).view(x.shape)


def quantize(
    x: torch.Tensor,
    lo: torch.Tensor,
    hi: torch.Tensor,
    bits: int,
    stochastic: bool,
    seed: torch.Tensor | None = None,
    salt: int = 0,
    rows: bool = False,
) -> torch.Tensor:
    """Uniform asymmetric quantisation of ``x`` to ``bits`` bits over ``[lo, hi]``.

    q = round(clamp((x - lo)/step + xi, 0, 2^b - 1)), output q*step + lo with
    step = max((hi - lo)/(2^b - 1), 1e-8); xi = ``dither(x, seed, salt)`` when ``stochastic``
    (unbiased inside the range), else 0. ``lo``/``hi`` are tensors (no host synchronisation).
    32 bits: a copy. Eagerly on the CPU (float32, scalar range, no gradient), one pass of the
    C++ kernel gives the same bits; compiled, one operator (``operators.quantize_levels``), which
    inductor lowers to one expression. ``rows``: one seed per row of ``x`` (``dither``'s rows).
    """
    if bits >= 32:
        return x.clone()
    levels = float(2**bits - 1)
    if tracing() and x.dtype == lo.dtype == hi.dtype:
        # One operator that inductor lowers to one expression (``operators``): the same
        # arithmetic in one graph node instead of about fifty.
        return quantize_levels(*_operands(x, lo, hi, stochastic, seed, rows), levels, salt)
    k = None if rows else _eager_kernel(x, lo, hi)
    if k is not None:  # the same bits in one pass (lpdt.layers.quant.kernel)
        key = _kernel_key(x, stochastic, seed, salt)
        shape = _shape(x, lo, hi)
        return k.quantize(x, lo, hi, levels, MIN_STEP, stochastic, key).view(shape)
    if fused.enabled(x.device) and x.dtype == lo.dtype == hi.dtype:
        # Off the CPU: the same operator compiled once into one kernel (``fused``), one launch
        # instead of about forty.
        xs, _, _, blocks = _operands(x, lo, hi, stochastic, seed, rows, expand_ranges=False)
        return fused.quantize(xs, lo, hi, blocks, levels, salt)
    noise = None
    if stochastic:  # shaped like the result: x, or x broadcast against the range (a view)
        shape = _shape(x, lo, hi)
        noise = dither(x if x.shape == shape else x.expand(shape), seed, salt, rows)
    return to_levels(x, lo, hi, levels, noise, in_place=not _vmapped)


def _operands(
    x: torch.Tensor,
    lo: torch.Tensor,
    hi: torch.Tensor,
    stochastic: bool,
    seed: torch.Tensor | None,
    rows: bool,
    expand_ranges: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The rounding operators' operands of a ``quantize`` call: ``x``, ``lo`` and ``hi``
    expanded to one shape (views; the ranges as they are without ``expand_ranges``), and the
    seed as the blocks it keys (0-d, or ``[n]`` with ``rows``; a fresh draw if None; None for
    nearest rounding)."""
    shape = _shape(x, lo, hi)
    blocks = None
    if stochastic:
        blocks = draw_seed(x.device) if seed is None else seed.to(x.device)
        blocks = blocks.reshape(-1) if rows else blocks.reshape(())
    if expand_ranges:
        lo, hi = lo.expand(shape), hi.expand(shape)
    return x if x.shape == shape else x.expand(shape), lo, hi, blocks


def _shape(x: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor) -> torch.Size:
    """The broadcast shape of ``x`` and its range: ``x``'s for a one-value range of no more
    dimensions (every call in a step; ``torch.broadcast_shapes`` costs about 50 us eagerly)."""
    if all(r.numel() == 1 and r.dim() <= x.dim() for r in (lo, hi)):
        return x.shape
    return torch.broadcast_shapes(x.shape, lo.shape, hi.shape)


def _eager_kernel(x: torch.Tensor, *ranges: torch.Tensor) -> kernel.Kernel | None:
    """The one-pass kernel where it computes what the tensor operations would: eagerly (not
    while torch.compile traces: inductor fuses the tensor operations itself), float32 on the
    CPU, scalar ranges, fewer than 2^31 elements, nothing that needs a gradient, not under vmap."""
    tensors = (x, *ranges)
    if (
        tracing()
        or _vmapped
        or any(t.dtype != torch.float32 or t.device.type != "cpu" for t in tensors)
        or any(r.numel() != 1 for r in ranges)
        or x.numel() >= 2**31
        or (torch.is_grad_enabled() and any(t.requires_grad for t in tensors))
    ):
        return None
    return kernel.load()


def _kernel_key(x: torch.Tensor, stochastic: bool, seed: torch.Tensor | None, salt: int) -> int:
    """The kernel's noise key: ``dither``'s (seed, salt) key; a fresh seed from torch's generator
    when ``seed`` is None, drawn as ``dither`` draws it; 0 (unused) for nearest rounding."""
    if not stochastic:
        return 0
    return _cpu_key(draw_seed(x.device) if seed is None else seed, salt)


def quantize_minmax(
    x: torch.Tensor,
    bits: int,
    stochastic: bool = False,
    seed: torch.Tensor | None = None,
    salt: int = 0,
) -> torch.Tensor:
    """Quantise ``x`` over its own per-tensor [min, max] (weights: nearest; gradients: stochastic)."""
    if bits >= 32:
        return x
    x = x.detach()
    k = _eager_kernel(x) if x.numel() > 0 else None
    if k is not None:  # the range and the rounding in one call (lpdt.layers.quant.kernel)
        key = _kernel_key(x, stochastic, seed, salt)
        return k.quantize_minmax(x, float(2**bits - 1), MIN_STEP, stochastic, key)
    if _split_for_a_gpu(x):
        lo, hi = (r.reshape(()) for r in _split_ranges(x.reshape(1, -1)))
    else:
        lo, hi = torch.aminmax(x)  # one pass, one launch: the same values as amin and amax
    return quantize(x, lo, hi, bits, stochastic, seed, salt)


def quantize_minmax_nodes(
    x: torch.Tensor, bits: int, seeds: torch.Tensor | None, salt: int = 0
) -> torch.Tensor:
    """``quantize_minmax`` (stochastic) of each node's ``x[k]`` with its own range and
    ``seeds[k]``, for node-stacked ``x`` ``[n, ...]``: the same bits as n separate calls
    (``seeds=None``: one node, a fresh seed, as ``quantize_minmax`` draws it).

    One node, or eagerly on the CPU: node by node (``quantize_minmax``, the C++ kernel where it
    runs); otherwise one pass over all nodes (per-node ranges, per-node noise keys)."""
    if bits >= 32:
        return x
    x = x.detach()
    n = x.shape[0]
    if n == 1 or seeds is None:
        if n != 1:
            raise ValueError(f"quantize_minmax_nodes: {n} nodes need {n} seeds, not None")
        return quantize_minmax(x[0], bits, True, seeds, salt).unsqueeze(0)
    seeds = seeds.reshape(n, 1)
    if _eager_kernel(x) is not None:
        return torch.stack([quantize_minmax(x[k], bits, True, seeds[k], salt) for k in range(n)])
    flat = x.reshape(n, -1)
    lo, hi = row_ranges(flat, 1, keepdim=True)
    return quantize(flat, lo, hi, bits, True, seeds, salt, rows=True).view(x.shape)


def batch_range(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The activation range of a batch: the batch means of the per-sample min and max, ``[1]``
    each.

    Compiled for a GPU, each mean is a sum over the per-sample minima and maxima stacked, the
    other bound's entries masked to zero, divided by the batch size: the same values up to the
    order of summation. Why: inductor fuses two reductions into one kernel only where they read
    the same buffer at the same indices, so two means of two rows were two kernels, each with its
    running-range update; these two read the whole stack and are one (on a GPU's count the
    batched 8-bit ResNet-20 x 8 round 635 -> 583 kernels,
    docs/notebook/2026-11-29-stacked-parameter-quantisers.md)."""
    xs = x.detach().reshape(x.shape[0], -1)
    lo, hi = row_ranges(xs, -1)
    if not compiled_for_a_gpu(x):
        return lo.mean().reshape(1), hi.mean().reshape(1)
    both = torch.stack([lo, hi])
    which = torch.arange(2, device=both.device).view(2, 1)
    means = [torch.where(which == k, both, 0.0).sum().reshape(1) / xs.shape[0] for k in (0, 1)]
    return means[0], means[1]


def row_ranges(
    x: torch.Tensor, dim: int, keepdim: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """The min and max of ``x`` along ``dim``: one ``aminmax`` (one launch; compiled, one
    reduction) where a step compiles or runs the eager GPU path (``fused.enabled``), else
    ``amin`` and ``amax``, the same values: eagerly on the CPU ``aminmax`` along a dimension is
    not vectorised (4-5x their time: [32, 16384] 918 against 184 us, one thread). Compiled for
    a GPU, rows longer than ``SPLIT_ROW`` are reduced in two stages (``_split_ranges``)."""
    if _split_for_a_gpu(x, dim):
        lo, hi = _split_ranges(x.movedim(dim, -1))
        return (lo.unsqueeze(dim), hi.unsqueeze(dim)) if keepdim else (lo, hi)
    if tracing() or fused.enabled(x.device):
        return torch.aminmax(x, dim=dim, keepdim=keepdim)
    return x.amin(dim, keepdim=keepdim), x.amax(dim, keepdim=keepdim)


# The longest piece of ``_split_ranges``: inductor's own split of the ranges of a batched 8-bit
# ResNet-20 step for a GPU (rows of 16,384 and 262,144 elements were each cut into pieces of
# 8,192; rows of 9,216 into two of 4,608; rows of 8,192 or fewer were not cut).
SPLIT_ROW = 8192
# The shortest piece ``_split_pieces`` cuts: a row that cannot be cut into equal pieces of
# MIN_PIECE to SPLIT_ROW values is left to inductor.
MIN_PIECE = 1024


def _split_for_a_gpu(x: torch.Tensor, dim: int | None = None) -> bool:
    """Whether a range of ``x`` (along ``dim``; None: all of it) is compiled for a GPU, long
    enough for ``_split_ranges`` (and cut evenly by ``_split_pieces``), and inductor splits
    reductions (its ``split_reductions``, on by default: told not to, it takes a range in one
    kernel, and a split by hand would be two)."""
    if not compiled_for_a_gpu(x):
        return False
    from torch._inductor import config  # loaded by compiling anyway

    if not config.split_reductions:
        return False
    return _split_pieces(x.numel() if dim is None else x.shape[dim]) > 1


def _split_pieces(n: int) -> int:
    """How many equal pieces ``_split_ranges`` cuts a row of ``n`` values into: the smallest
    count that divides ``n`` into pieces of at most ``SPLIT_ROW`` and at least ``MIN_PIECE``
    values (a multiple of ``SPLIT_ROW``: pieces of ``SPLIT_ROW``); 1, not cut, for a row of at
    most ``SPLIT_ROW`` or where no such count exists."""
    if n <= SPLIT_ROW:
        return 1
    for pieces in range(-(-n // SPLIT_ROW), n // MIN_PIECE + 1):
        if n % pieces == 0:
            return pieces
    return 1


def _split_ranges(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The min and max of each row of ``x`` (along its last dimension, cut into
    ``_split_pieces`` equal pieces) in two reductions: the min and max of each piece, then the
    min of the pieces' minima and of their negated maxima, stacked.

    The same values as ``aminmax`` (a min of minima is the min; ``-min(-m)`` is ``max(m)``; a
    NaN stays a NaN). Why: for a GPU inductor splits a long ``aminmax`` itself, but finishes
    the min and the max in two kernels (they read two buffers, and it fuses kernels that share
    a read); stacked, they are one. Three launches become two per range: 709 -> 635 kernels for
    the batched 8-bit ResNet-20 x 8 round on a GPU's count, rows a multiple of ``SPLIT_ROW``
    (docs/notebook/2026-11-29-stacked-parameter-quantisers.md); 583 -> 566 with the other rows
    longer than it, the convolutions' weights of 9,216 and 36,864 values per node (where the
    rounding also joins the second reduction: four kernels became two or three;
    docs/notebook/2026-11-30-test-suite-cold-compiles.md). The CPU keeps one ``aminmax``."""
    pieces = _split_pieces(x.shape[-1])
    lo, hi = torch.aminmax(x.reshape(*x.shape[:-1], pieces, x.shape[-1] // pieces), dim=-1)
    both = torch.stack([lo, hi.neg()]).amin(-1)
    return both[0], both[1].neg()
