"""The rounding noise's hash: a counter-based 32-bit hash of (seed, salt, element index).

One hash, several forms that compute the same bits (``tests/layers/test_quant.py`` checks each
against the hash written in Python integers):

- Python integers (``key_int``): the key of (seed, salt), for a seed read on the CPU;
- tensor operations (``mix_``, ``index_hash``): int32 eagerly (products wrap), int64 with masks
  where ``wide`` (the eager implementation of the operator below);
- for compiled graphs, the operator ``lpdt::dither_hash`` (``operators``), which inductor lowers
  to one int64 expression (``lowering``).
"""

from __future__ import annotations

import torch

# Multipliers of the 32-bit hash (Wellons' "lowbias32"; 2^32 minus the golden-ratio constant
# 0x9E3779B9), all below 2^31: int64 products of 32-bit values never overflow, and each fits an
# int32 scalar.
GOLDEN = 0x61C88647
_M1 = 0x21F0AAAD
_M2 = 0x735A2D97
SALT = 0x632BE5AB  # spreads the salts over the 32-bit key space
MASK32 = 0xFFFFFFFF
ROUNDS = ((16, _M1), (15, _M2), (15, None))  # (shift, multiplier) of the finaliser's rounds


def mix_(h: torch.Tensor, wide: bool, scratch: bool = True) -> torch.Tensor:
    """Wellons' lowbias32 finaliser on 32-bit values, **in place** (``h`` must be a fresh tensor).

    ``wide``: ``h`` is int64 holding values below 2^32, and each product is masked back to 32
    bits; otherwise ``h`` is int32 and products wrap by themselves (the shifts are masked to be
    logical on the signed type). Both give the same 32 bits. In place, and eagerly with one
    scratch tensor for the three shifts (``scratch``; not under vmap, which refuses ``out=``),
    because each allocation of a tensor the size of the activation costs page faults
    (allocation-bound eagerly: 2-4x slower out of place)."""
    buf = torch.empty_like(h) if scratch and not wide else None
    for shift, multiplier in ROUNDS:
        if wide:
            h.bitwise_xor_(h.bitwise_right_shift(shift))
        else:
            shifted = torch.bitwise_right_shift(h, shift, out=buf)
            h.bitwise_xor_(shifted.bitwise_and_(2 ** (32 - shift) - 1))
        if multiplier is not None:
            low32_(h.mul_(multiplier), wide)
    return h


def mix_int(h: int) -> int:
    """``mix_`` on one 32-bit value in Python integers (the same bits)."""
    for shift, multiplier in ROUNDS:
        h ^= h >> shift
        if multiplier is not None:
            h = (h * multiplier) & MASK32
    return h


def salted(salt: int) -> int:
    """The salt's offset of the key, in 32 bits."""
    return (salt * SALT) & MASK32


def key_int(seed: int, salt: int) -> int:
    """The 32-bit key of (seed, salt) in Python integers."""
    return mix_int((seed + salted(salt)) & MASK32)


def signed32(h: int) -> int:
    """A 32-bit value as the signed int32 with the same bits."""
    return h - 2**32 if h >= 2**31 else h


def low32_(h: torch.Tensor, wide: bool) -> torch.Tensor:
    """``h`` reduced to its low 32 bits in place: a mask in int64, nothing in int32 (it wraps)."""
    return h.bitwise_and_(MASK32) if wide else h


def index_hash(
    count: int,
    key: torch.Tensor | int,
    device: torch.device,
    wide: bool,
    fresh: bool,
    scratch: bool = True,
) -> torch.Tensor:
    """The top 16 bits of the hash of element indices 0..count-1 under ``key`` (int32 or int64;
    values in [0, 2^16)). ``key`` broadcasts against the indices (a column keys one row each);
    ``fresh``: the sum with the key must be a new tensor (a key wider than the indices, or under
    vmap, where the key is per node and the indices are not); ``scratch``: ``mix_``'s.

    The key is added before the multiply: a constant times the index alone is folded by
    inductor into the kernel's index arithmetic, int32 on a GPU, where Triton refuses products
    of 2^31 or more (a per-sample view made it 8192 x GOLDEN). Key-plus-index is a value."""
    h = torch.arange(count, device=device, dtype=torch.int64 if wide else torch.int32)
    h = h + key if fresh else h.add_(key)
    h = low32_(low32_(h, wide).mul_(GOLDEN), wide)
    h = mix_(h, wide, scratch).bitwise_right_shift_(16)
    return h if wide else h.bitwise_and_(0xFFFF)


def noise_from_levels(h: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """U(-1/2, 1/2) noise from 16-bit levels ``h``: ``(h + 0.5) * 2^-16 - 0.5`` in ``dtype``."""
    return h.to(dtype).add_(0.5).mul_(2.0**-16).sub_(0.5)
