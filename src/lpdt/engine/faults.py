"""Test-only fault injection points of the training lifecycle (``lpdt.engine.loop``)."""

from __future__ import annotations

import os
import signal

from lpdt.decentral.group import NodeGroup

FAULT_ENV = "LPDT_TEST_FAULT"


def fault_point(point: str, group: NodeGroup, epoch: int) -> None:
    """Test-only fault injection (tests/distributed/test_faults.py): with ``LPDT_TEST_FAULT`` set
    to ``<point>:<node>:<epoch>``, the process holding node ``<node>`` kills itself (SIGKILL) at
    ``point`` of its save of ``epoch`` ("before-save": before touching its files; "after-rename":
    its last checkpoint moved to ``.prev``, the new one not written), a window that a kill from
    outside can hit only by chance. Not for users: nothing else reads it."""
    spec = os.environ.get(FAULT_ENV)
    if spec and spec == f"{point}:{group.ids[0]}:{epoch}":
        os.kill(os.getpid(), signal.SIGKILL)
