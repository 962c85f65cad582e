"""`snakemake plateau_check` (workflow/rules/plateau.smk): a dry run lists one 2x training job
per claim cell, each the cell's first-seed config with twice its epochs (milestones doubled)
and the 1x job's execution (threads, engine); the default target trains none of them."""

import copy
import re

from lpdt import grid
from lpdt.config import config_from_dict
from tests.workflow.test_snakemake import REPO, job_counts, snakemake, workdir


def jobs(out: str, rule: str) -> dict[str, tuple[int, str]]:
    """run id -> (threads, shell command) of every job of ``rule`` in a dry run with -p."""
    found = {}
    for block in out.split(f"rule {rule}:")[1:]:
        block = block.split("\nrule ", 1)[0]
        m = re.search(r"^\s+threads: (\d+)$", block, re.M)
        cmd = next(line for line in block.splitlines() if "lpdt.cli train" in line)
        found[re.search(r"configs/(\w+)\.yaml", cmd)[1]] = (int(m[1]) if m else 1, cmd)
    return found


def test_plateau_check_dry_run_lists_the_claim_cells_at_twice_their_epochs(tmp_path):
    wd = workdir(tmp_path)
    cfg = ("--config", "scale=quick", "engine=distributed")
    r = snakemake(wd, "-n", "-p", "--cores", "64", "plateau_check", *cfg)
    assert r.returncode == 0, r.stderr[-2000:]
    two, one = jobs(r.stdout, "plateau_train"), jobs(r.stdout, "train")
    runs = grid.expand(grid.load(REPO / "config/studies.yaml", REPO / "config/scales/quick.yaml"))
    # the claim cells: every cell with several seeds, at its first seed (the quick scale: 9)
    cells: dict[tuple, list[tuple[int, str]]] = {}
    for run in runs.values():
        for study, members in run.studies.items():
            for m in members:
                key = (study, m.block, tuple(sorted(m.coords.items())))
                cells.setdefault(key, []).append((m.seed, run.run_id))
    first = {min(v)[1] for v in cells.values() if len(v) > 1}
    # 9 claim cells of Tables 3 and 4, and the 4 fp32 normalisations of Figure 1
    assert len(first) == 13 and set(one) == first  # the 1x runs it needs, and only those
    expected = {}
    for rid in first:
        c = copy.deepcopy(runs[rid].config)
        c["train"]["epochs"] *= 2
        c["schedule"]["milestones"] = [2 * m for m in c["schedule"]["milestones"]]
        expected[config_from_dict(c).run_id()] = rid
    assert set(two) == set(expected)
    for rid2, (threads, cmd) in two.items():
        threads1, cmd1 = one[expected[rid2]]
        assert threads == threads1 == config_from_dict(runs[expected[rid2]].config).topology.nodes
        assert f"--config results/plateau/configs/{rid2}.yaml" in cmd
        assert f"--out results/plateau/runs/{rid2} " in cmd
        assert cmd.replace(rid2, "ID").replace("plateau/", "").replace("configs/", "") == (
            cmd1.replace(expected[rid2], "ID").replace("configs/", "").replace("train/", "")
        )  # the same command line (engine, resume) as the 1x job, on the doubled config
    assert job_counts(r.stdout)["plateau_check"] == 1
    # the default target does not run the check
    default = snakemake(wd, "-n", *cfg)
    assert default.returncode == 0, default.stderr[-2000:]
    counts = job_counts(default.stdout)
    assert "plateau_train" not in counts and "plateau_check" not in counts and counts["train"]
