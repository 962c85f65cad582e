from __future__ import annotations

import pytest
import torch

from tests.cost.nets import Tiny


@pytest.fixture
def tiny() -> Tiny:
    torch.manual_seed(0)
    return Tiny("rangeen")
