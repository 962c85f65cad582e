"""Shared fixtures and constants of the whole suite.

``TINY``: the config keys every tiny training run of the tests shares (generated images, the
tiny CNN, the CPU, one thread, a constant learning rate); each module adds its own sizes, nodes
and algorithm. ``tiny_config``: a fixture that loads such a config (``tiny_config("seed=3")``).
Fake run records for the report and tracking tests: ``tests/fake_records.py``.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from lpdt.config import RunConfig, load_config

TINY = [
    "data.dataset=synthetic",
    "model.name=tiny_cnn",
    "device=cpu",
    "threads=1",
    "schedule.warmup_epochs=0",
    "schedule.milestones=[]",
]


@pytest.fixture
def tiny_config() -> Callable[..., RunConfig]:
    """A tiny run config: ``TINY`` plus the given overrides (``KEY=VALUE``, later ones win)."""
    return lambda *overrides: load_config(None, [*TINY, *overrides])
