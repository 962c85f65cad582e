"""Paired differences over seeds: mean, sd, a 95 % t-interval, and the verdict rule.

Pure functions on plain numbers (tested on constructed inputs in tests/report/test_stats.py).

Interval: the two-sided Student t confidence interval of the mean of the per-seed differences,
``mean +- t_{1-a/2, n-1} * sd / sqrt(n)`` with ``sd`` the sample standard deviation (n - 1
denominator). It needs n >= 2: with one seed no interval can be formed, and the verdict is
"not enough data".

Verdict for a claim "effect <direction> threshold":

- direction ``<=`` (e.g. FP - LP <= 1.0): **held** if the interval's upper end is <= threshold,
  **not held** if its lower end is > threshold, **inconclusive** otherwise;
- direction ``>`` (e.g. Choco - DS > 0): **held** if the lower end is > threshold, **not held**
  if the upper end is <= threshold, **inconclusive** otherwise;
- direction ``within``, threshold ``(lo, hi)`` (e.g. 0 <= FP - LP <= 2): **held** if the whole
  interval lies in ``[lo, hi]``, **not held** if it lies entirely outside (``high < lo`` or
  ``low > hi``), **inconclusive** otherwise.

Precision of a design (``half_width``, ``detectable``): the interval's half-width
``t_{1-a/2, n-1} * sd / sqrt(n)``, and the minimum detectable effect at ``POWER`` (80 %) of the
paired t design, ``(t_{1-a/2, n-1} + t_{POWER, n-1}) * sd / sqrt(n)``: a true effect that far
beyond the threshold (or inside a bound of a range) puts the whole interval on that side with
probability about ``POWER``. It is the usual normal-shift approximation with the measured sd (the
exact power at that distance, from the noncentral t, is 0.77 for n = 3, 0.79 for n = 5); both
need n >= 2.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

HELD, NOT_HELD, INCONCLUSIVE, NO_DATA = "held", "not held", "inconclusive", "not enough data"
VERDICTS = (HELD, NOT_HELD, INCONCLUSIVE, NO_DATA)
DIRECTIONS = ("<=", ">", "within")
Threshold = float | tuple[float, float]  # a number; (lo, hi) for "within"
LEVEL = 0.95
POWER = 0.80  # of the minimum detectable effect (``detectable``)
METHOD = "95 % Student t-interval over seeds (mean of per-seed paired differences, n - 1 df)"


def t_quantile(p: float, df: int) -> float:
    """The p-quantile of Student's t with ``df`` degrees of freedom (scipy)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    from scipy.stats import t

    return float(t.ppf(p, df))


@dataclass(frozen=True)
class Interval:
    """Mean, sample sd and the t-interval of the values (low/high None when n < 2)."""

    n: int
    mean: float | None
    sd: float | None
    low: float | None
    high: float | None
    level: float = LEVEL

    @property
    def ci(self) -> list[float] | None:
        return None if self.low is None or self.high is None else [self.low, self.high]

    @property
    def half_width(self) -> float | None:
        """``t_{1-a/2, n-1} * sd / sqrt(n)``; None when n < 2."""
        return half_width(self.sd, self.n, self.level)

    @property
    def detectable(self) -> float | None:
        """The minimum detectable effect at 80 % power (``detectable``); None when n < 2."""
        return detectable(self.sd, self.n, self.level)


def finite(values: Iterable[float]) -> list[float]:
    out = []
    for v in values:
        try:
            f = float(v)
        except (TypeError, ValueError):
            continue
        if math.isfinite(f):
            out.append(f)
    return out


def t_interval(values: Iterable[float], level: float = LEVEL) -> Interval:
    """The mean of ``values`` with its two-sided ``level`` Student t-interval (NaNs dropped)."""
    v = finite(values)
    n = len(v)
    if n == 0:
        return Interval(0, None, None, None, None, level)
    mean = math.fsum(v) / n
    if n < 2:
        return Interval(1, mean, None, None, None, level)
    sd = math.sqrt(math.fsum((x - mean) ** 2 for x in v) / (n - 1))
    half = t_quantile(0.5 + level / 2, n - 1) * sd / math.sqrt(n)  # = half_width(sd, n, level)
    return Interval(n, mean, sd, mean - half, mean + half, level)


def half_width(sd: float | None, n: int, level: float = LEVEL) -> float | None:
    """The half-width of the two-sided ``level`` t-interval of a mean of ``n`` values with
    sample sd ``sd``: ``t_{1-a/2, n-1} * sd / sqrt(n)``; None when n < 2 or sd is unknown."""
    if sd is None or n < 2 or not math.isfinite(sd):
        return None
    return t_quantile(0.5 + level / 2, n - 1) * sd / math.sqrt(n)


def detectable(
    sd: float | None, n: int, level: float = LEVEL, power: float = POWER
) -> float | None:
    """The minimum detectable effect of a paired t design with ``n`` pairs (seeds) and sd ``sd``
    of the paired differences: ``(t_{1-a/2, n-1} + t_{power, n-1}) * sd / sqrt(n)``, a distance
    from the threshold (module docstring); None when n < 2 or sd is unknown."""
    if sd is None or n < 2 or not math.isfinite(sd):
        return None
    q = t_quantile(0.5 + level / 2, n - 1) + t_quantile(power, n - 1)
    return q * sd / math.sqrt(n)


def _number(threshold: Threshold, direction: str) -> float:
    """The threshold of a one-sided direction ("<=", ">"): one number."""
    if isinstance(threshold, tuple):
        raise ValueError(f"direction {direction!r} needs one number, got {threshold!r}")
    return float(threshold)


def _range(threshold: Threshold) -> tuple[float, float]:
    if isinstance(threshold, (int, float)):
        raise ValueError(f"direction 'within' needs a threshold (lo, hi), got {threshold!r}")
    lo, hi = (float(t) for t in threshold)
    if lo > hi:
        raise ValueError(f"threshold range ({lo}, {hi}) has lo > hi")
    return lo, hi


def verdict(low: float | None, high: float | None, threshold: Threshold, direction: str) -> str:
    """held / not held / inconclusive for an interval [low, high]; not enough data without one."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    if low is None or high is None or not (math.isfinite(low) and math.isfinite(high)):
        return NO_DATA
    if low > high:
        raise ValueError(f"interval [{low}, {high}] has low > high")
    if direction == "within":
        lo, hi = _range(threshold)
        if lo <= low and high <= hi:
            return HELD
        return NOT_HELD if high < lo or low > hi else INCONCLUSIVE
    threshold = _number(threshold, direction)
    if direction == "<=":
        if high <= threshold:
            return HELD
        return NOT_HELD if low > threshold else INCONCLUSIVE
    if low > threshold:
        return HELD
    return NOT_HELD if high <= threshold else INCONCLUSIVE


def point_verdict(value: float | None, threshold: Threshold, direction: str) -> str:
    """The same rule on a single number (the paper's own effect: one run per cell)."""
    if value is None or not math.isfinite(value):
        return NO_DATA
    return verdict(value, value, threshold, direction)


def holds(value: float, threshold: Threshold, direction: str) -> bool:
    """Whether a single number lies on the claim's side of its threshold (in its range)."""
    if direction == "within":
        lo, hi = _range(threshold)
        return lo <= value <= hi
    t = _number(threshold, direction)
    return value <= t if direction == "<=" else value > t
