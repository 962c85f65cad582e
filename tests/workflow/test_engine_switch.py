"""The workflow's engine switch: `--config engine=distributed` runs every training job with one
process per node and reserves that many cores for it (dry runs in a temporary directory)."""

import re

from lpdt import grid
from lpdt.config import config_from_dict
from tests.workflow.test_snakemake import REPO, snakemake, workdir


def train_jobs(out: str) -> dict[str, tuple[int, str]]:
    """run id -> (threads, shell command) of every `rule train` job of a dry run with -p."""
    jobs = {}
    for block in out.split("rule train:")[1:]:
        block = block.split("\nrule ", 1)[0]
        m = re.search(r"^\s+threads: (\d+)$", block, re.M)
        cmd = next(line for line in block.splitlines() if "lpdt.cli train" in line)
        jobs[re.search(r"configs/(\w+)\.yaml", cmd)[1]] = (int(m[1]) if m else 1, cmd)
    return jobs


def test_distributed_engine_reserves_a_core_per_node(tmp_path):
    wd = workdir(tmp_path)
    args = ("-n", "-p", "--cores", "64", "--config", "scale=smoke", "mlflow=False")
    # a job per run with the simulated engine too (batch_runs off); with the distributed engine
    # batch_runs: auto is off by itself: the same jobs, one per run
    sim = train_jobs(snakemake(wd, *args, "batch_runs=False").stdout)
    dist = train_jobs(snakemake(wd, *args, "engine=distributed").stdout)
    assert sim and sim.keys() == dist.keys()
    runs = grid.expand(grid.load(REPO / "config/studies.yaml", REPO / "config/scales/smoke.yaml"))
    for run_id, (threads, cmd) in dist.items():
        assert threads == config_from_dict(runs[run_id].config).topology.nodes, cmd
        assert "--set engine=distributed" in cmd
        assert sim[run_id][0] == 1 and "--set engine=simulated" in sim[run_id][1]
    assert len({t for t, _ in dist.values()}) > 1  # the smoke grid has several node counts
