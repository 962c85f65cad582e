"""The README's `lpdt compare` example is what the command prints: its command, run on the
constructed tree below, prints the README's output block character for character (so the example
cannot go stale when the output's form changes), and that output's overall line is the claim
`lp_close_to_fp_dense` computed by the report on the same tree (so the README can point at
`results/claims.json` for the numbers of real runs).

The tree is fake records (``tests.fake_records``), not training results: the README says so. It
has the quick scale's claim cells for this comparison (Choco on a ring of 4, skew 0 and 0.9 in
Table 3, skew 0.9 with QGM in Table 4), five seeds, accuracies chosen here. On a change of the
output's form, the failure prints the new block to paste into the README.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from pathlib import Path

import pytest

from lpdt import cli
from lpdt.report.aggregate import aggregate
from lpdt.report.claims import check_claims
from lpdt.report.paper import load_paper
from tests.fake_records import fake_record
from tests.report.conftest import CLAIM_CELL, PAPER_CSV, write_cost

README = Path(__file__).resolve().parents[2] / "README.md"
# (study, skew, qgm, FP accuracy, FP - 8-bit per seed)
CELLS = [
    ("table3", 0.0, False, 84.0, (0.4, 0.6, 0.5, 0.3, 0.7)),
    ("table3", 0.9, False, 74.0, (1.2, 1.8, 1.5, 1.4, 1.6)),
    ("table4", 0.9, True, 76.5, (0.0, 0.4, 0.2, -0.2, 0.1)),
]
SEEDS = (1234, 1235, 1236, 1237, 1238)
SEED_SPREAD = (0.0, -0.8, 0.5, 0.3, -0.4)  # seed-to-seed noise shared by a seed's pair


def make_readme_tree(root: Path) -> Path:
    """``root/results``: a manifest of studies table3 and table4 and a record per run."""
    studies: dict = {}
    for i, (study, skew, qgm, acc, loss) in enumerate(CELLS):
        for k, seed in enumerate(SEEDS):
            for prec in ("fp32", "int8"):
                rid = f"c{i}-{prec}-s{seed}"
                a = acc + SEED_SPREAD[k] - (loss[k] if prec == "int8" else 0.0)
                rec = fake_record(rid, round(a, 2), config={"seed": seed}, total_s=60.0)
                rec.write(root / "results" / "runs" / rid)
                coords = CLAIM_CELL | {"skew": skew, "qgm": qgm, "precision": prec}
                entry = {"run_id": rid, "dir": f"results/runs/{rid}", "coords": coords}
                studies.setdefault(study, {"kind": "grid", "runs": []})["runs"].append(
                    entry | {"seed": seed}
                )
    manifest = root / "results" / "manifest.json"
    manifest.write_text(json.dumps({"scale": "readme", "studies": studies}))
    (root / "results" / "cost").mkdir()
    write_cost(root / "results" / "cost")
    return manifest


def readme_example() -> tuple[list[str], str]:
    """The README's compare command (its arguments after `lpdt compare`) and output block."""
    text = README.read_text()
    m = re.search(
        r"```bash\n\.venv/bin/lpdt compare (?P<cmd>.*?)\n```\n(?P<between>.*?)```\n(?P<out>.*?)```",
        text,
        re.S,
    )
    assert m, "README.md: no `lpdt compare` block followed by an output block"
    return shlex.split(m["cmd"].replace("\\\n", " ")), m["out"].rstrip("\n")


def test_the_readme_example_is_what_the_command_prints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    argv, block = readme_example()
    make_readme_tree(tmp_path)
    monkeypatch.chdir(tmp_path)  # the README runs it from the repository: `results/`
    assert cli.main(["compare", *argv]) == 0
    printed = capsys.readouterr().out.rstrip("\n")
    assert printed == block, f"README.md's compare output is stale; it now prints:\n{printed}"


# The overall line computed by hand from CELLS: per seed, the mean over the three cells of
# FP - 8-bit (the seed spread cancels in each pair): (0.4 + 1.2 + 0.0) / 3, (0.6 + 1.8 + 0.4) / 3,
# (0.5 + 1.5 + 0.2) / 3, (0.3 + 1.4 - 0.2) / 3, (0.7 + 1.6 + 0.1) / 3.
PER_SEED = [1.6 / 3, 2.8 / 3, 2.2 / 3, 1.5 / 3, 2.4 / 3]
MEAN = 10.5 / 15  # 0.7
SD = math.sqrt(sum((x - MEAN) ** 2 for x in PER_SEED) / 4)  # 0.18257
HALF = 2.7764451051977987 * SD / math.sqrt(5)  # t(0.975, 4): [0.4733, 0.9267]


def test_the_readme_overall_line_is_the_claims_number(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """What the README says: the overall line is lp_close_to_fp_dense in claims.json; both are
    the mean and interval computed by hand above (held: the interval lies below 1)."""
    argv, _ = readme_example()
    manifest = make_readme_tree(tmp_path)
    df, _ = aggregate(manifest)
    claim = next(
        c
        for c in check_claims(df, load_paper(PAPER_CSV), manifest.parent / "cost")
        if c.id == "lp_close_to_fp_dense"
    )
    monkeypatch.chdir(tmp_path)
    assert cli.main(["compare", *argv, "--json"]) == 0
    o = json.loads(capsys.readouterr().out)["overall"]
    for mean, ci, n, verdict in (
        (o["mean"], o["ci"], o["n"], o["verdict"]),
        (claim.mean, claim.ci, claim.n, claim.verdict),
    ):
        assert (n, verdict) == (len(SEEDS), "held")
        assert mean == pytest.approx(MEAN, abs=1e-4)
        assert list(ci) == pytest.approx([MEAN - HALF, MEAN + HALF], abs=1e-4)
    assert [o["per_seed"][str(s)] for s in SEEDS] == pytest.approx(PER_SEED, abs=1e-4)
