"""How the report writes numbers, in one place: rounded values in JSON (``rounded``), fixed
decimals in text with "-" for a missing value (``fixed``, ``span``), and table cells left blank
for a missing value (``table_cell``, ``as_text``)."""

from __future__ import annotations

import math


def rounded(v: float | None, digits: int = 4) -> float | None:
    """``v`` rounded for a JSON record; None for a missing or non-finite value."""
    return None if v is None or not math.isfinite(v) else round(float(v), digits)


def fixed(v: float | None, digits: int = 2) -> str:
    """``v`` with ``digits`` decimals for a sentence; "-" when it is missing."""
    return "-" if v is None else f"{v:.{digits}f}"


def span(lo_hi: list[float]) -> str:
    """A range of two values at 2 decimals, "a-b", or one value where both print alike."""
    lo, hi = lo_hi
    return fixed(lo) if fixed(lo) == fixed(hi) else f"{fixed(lo)}-{fixed(hi)}"


def table_cell(v: float | None, digits: int = 2) -> str:
    """``v`` with ``digits`` decimals for a table cell; empty when missing or NaN."""
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}"


def as_text(v: object) -> str:
    """``v`` as a table's text; empty when missing or NaN."""
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)
