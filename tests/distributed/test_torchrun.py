"""The documented two-machine ``torchrun`` command, with both "machines" on this one (127.0.0.1):
two torchrun agents (``--nnodes 2 --node-rank 0|1``, static rendezvous at a free loopback port)
each start 2 of the 4 workers, and the run's record equals the one ``lpdt train`` writes when
it launches the 4 workers itself (docs/distributed.md, "Running it")."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from lpdt.engine.launch import free_port
from lpdt.record import MEASURED_FIELDS
from tests.conftest import TINY

REPO = Path(__file__).resolve().parents[2]
ARGS = [
    *TINY,
    "data.train_subset=640",
    "data.test_subset=40",
    "topology.nodes=4",
    "train.batch_size=32",
    "train.epochs=2",
    "train.final_gossip_rounds=2",
    "engine=distributed",
    "algorithm.name=choco",
    "algorithm.compression.name=topk",
    "algorithm.compression.ratio=0.9",
]
TIMEOUT_S = 180


def train_args(out: Path) -> list[str]:
    args = ["train", "--out", str(out), "--resume"]  # as docs/distributed.md writes it
    for a in ARGS:
        args += ["--set", a]
    return args


def stop(procs: list[subprocess.Popen]) -> None:
    """Kill every process group we started (torchrun agents and their workers), by pid."""
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        p.wait(timeout=30)


# slow (22 s; the local launch's equivalence with the simulator is in the default suite): make test-slow runs it
@pytest.mark.slow
def test_two_torchrun_agents_reproduce_the_local_launch(tmp_path):
    # torchrun is torch's console script: an environment with torch has it (no skip)
    torchrun = shutil.which("torchrun", path=Path(sys.executable).parent)
    assert torchrun is not None, f"no torchrun next to {sys.executable} (torch installs it)"
    env = {**os.environ, "LPDT_DIST_TIMEOUT_S": "60"}
    local = subprocess.run(
        [sys.executable, "-m", "lpdt.cli", *train_args(tmp_path / "local")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert local.returncode == 0, local.stderr

    port = free_port()
    out = tmp_path / "torchrun"
    agents = []
    try:
        for node_rank in (0, 1):
            cmd = [
                torchrun,
                "--nnodes",
                "2",
                "--nproc-per-node",
                "2",
                "--node-rank",
                str(node_rank),
                "--master-addr",
                "127.0.0.1",
                "--master-port",
                str(port),
                "-m",
                "lpdt.cli",
                *train_args(out),
            ]
            agents.append(
                subprocess.Popen(
                    cmd,
                    cwd=REPO,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    start_new_session=True,
                )
            )
        logs = [a.communicate(timeout=TIMEOUT_S)[0] for a in agents]
    finally:
        stop(agents)
    assert [a.returncode for a in agents] == [0, 0], "\n".join(logs)[-3000:]

    a = json.loads((tmp_path / "local" / "metrics.json").read_text())
    b = json.loads((out / "metrics.json").read_text())
    assert b["engine"] == a["engine"] == "distributed"
    assert b["final"] == a["final"]  # same threads, same float operations: equal numbers
    comm_a, comm_b = a["communication"], b["communication"]
    assert comm_b["wire_bytes_per_node"] == comm_a["wire_bytes_per_node"] > 0

    def results(history: list[dict]) -> list[dict]:
        return [{k: v for k, v in r.items() if k not in MEASURED_FIELDS} for r in history]

    assert results(b["history"]) == results(a["history"])
