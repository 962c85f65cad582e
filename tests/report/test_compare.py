"""lpdt compare on constructed run trees whose answer is known, against the claims' own numbers,
and its one-line refusals."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from scipy.stats import t as student_t

from lpdt import cli
from lpdt.config import dump_config, load_config
from lpdt.report.aggregate import aggregate
from lpdt.report.claims import BY_ID, check_claims
from lpdt.report.compare import compare, load_runs
from lpdt.report.pairs import Condition, condition, parse_where
from lpdt.report.paper import load_paper
from lpdt.report.stats import HELD, INCONCLUSIVE
from tests.fake_records import fake_record
from tests.report.conftest import PAPER_CSV

T2 = float(student_t.ppf(0.975, 2))  # three seeds
RUN_CONFIG = dump_config(load_config(None, []))  # what a started run writes


def write_runs(root: Path, runs: list[tuple[dict, int, float | str]]) -> Path:
    """``root/runs/<id>/metrics.json`` for (config fragment, seed, accuracy or "diverged")."""
    for i, (frag, seed, acc) in enumerate(runs):
        rid = f"r{i:03d}"
        config = {**frag, "seed": seed, "partition": {**frag.get("partition", {}), "seed": seed}}
        if acc == "diverged":
            rec = fake_record(rid, 50.0, status="diverged", config=config)
        else:
            rec = fake_record(rid, float(acc), config=config)
        rec.write(root / "runs" / rid)
    return root


def fp(skew: float, **kw: object) -> dict:
    return {"precision": {"mode": "fp32"}, "partition": {"skew": skew}, **kw}


def lp(skew: float, **kw: object) -> dict:
    return {
        "precision": {"mode": "int8"},
        "model": {"norm": "rangeen"},
        "partition": {"skew": skew},
        **kw,
    }


# FP - LP per seed: cell skew 0 -> 1, 2, 3; cell skew 0.8 -> 0, 1, 2. Per seed, mean over the
# two cells: 0.5, 1.5, 2.5, so the overall mean is 1.5 with sd 1.
LOSS = {0.0: {1: 1.0, 2: 2.0, 3: 3.0}, 0.8: {1: 0.0, 2: 1.0, 3: 2.0}}


def known_runs() -> list[tuple[dict, int, float | str]]:
    out: list[tuple[dict, int, float | str]] = []
    for skew, loss in LOSS.items():
        for seed, d in loss.items():
            base = 80.0 - 5 * skew + seed  # seed-to-seed spread the pairing must cancel
            out += [(fp(skew), seed, base), (lp(skew), seed, base - d)]
    return out


def lpdt(*argv: str) -> int:
    return cli.main(["compare", *argv])


def test_known_answer_per_cell_and_overall(tmp_path: Path) -> None:
    frame, keys = load_runs(write_runs(tmp_path, known_runs()))
    res = compare(frame, keys, "precision", "fp32", "int8", threshold=0.0, direction=">")
    half = T2 * 1.0 / math.sqrt(3)
    o = res["overall"]
    assert (o["n"], o["cells"], o["pairs"]) == (3, 2, 6)
    assert o["mean"] == pytest.approx(1.5)
    assert o["ci"] == pytest.approx([1.5 - half, 1.5 + half], abs=1e-4)
    assert o["per_seed"] == {"1": 0.5, "2": 1.5, "3": 2.5}
    assert o["verdict"] == INCONCLUSIVE  # the interval straddles 0
    by_skew = {c["cell"]["skew"]: c for c in res["cells"]}
    assert by_skew["0.0"]["mean"] == pytest.approx(2.0) and by_skew["0.8"]["mean"] == pytest.approx(
        1.0
    )
    assert by_skew["0.0"]["ci"] == pytest.approx([2.0 - half, 2.0 + half], abs=1e-4)
    assert res["shown"] == ["skew"]
    held = compare(frame, keys, "precision", "fp32", "int8", threshold=-1.0, direction=">")
    assert held["overall"]["verdict"] == HELD  # low end 1.5 - 2.48 = -0.98 > -1
    within = compare(
        frame, keys, "precision", "fp32", "int8", threshold=(-1.0, 4.0), direction="within"
    )
    assert within["overall"]["verdict"] == HELD


def test_the_command_prints_table_and_json(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    root = write_runs(tmp_path, known_runs())
    assert (
        lpdt(
            str(root),
            "--vary",
            "precision",
            "--a",
            "fp32",
            "--b",
            "int8",
            "--threshold",
            "0",
            "--direction",
            ">",
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "skew=0.8" in out and "overall (2 cells, n=3 seeds)" in out and "inconclusive" in out
    assert (
        lpdt(
            str(root),
            "--vary",
            "precision",
            "--a",
            "fp32",
            "--b",
            "int8",
            "--where",
            "skew>=0.5",
            "--json",
        )
        == 0
    )
    res = json.loads(capsys.readouterr().out)
    assert [c["cell"]["skew"] for c in res["cells"]] == ["0.8"]
    assert res["overall"]["mean"] == pytest.approx(1.0) and res["overall"]["verdict"] is None


def test_a_negative_lower_bound_is_read_as_written_and_a_folder_names_its_stand_ins(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """``--threshold -1,4`` (the paper's within margins start below zero) was read as an option:
    argparse's usage and "expected one argument", exit 2. A folder of runs (no manifest) named
    no stand-in, where a manifest of the same runs did: the records' data stand-in now."""
    root = write_runs(tmp_path, known_runs())
    argv = ["--vary", "precision", "--a", "fp32", "--b", "int8", "--direction", "within"]
    assert lpdt(str(root), *argv, "--threshold", "-1,4", "--json") == 0
    assert json.loads(capsys.readouterr().out)["overall"]["verdict"] == HELD
    assert lpdt(str(root), *argv, "--threshold", "-1.5e0,-0.5") == 0
    out = capsys.readouterr().out.splitlines()
    assert "stand-ins: fashion_mnist standing in for cifar10" in out, out
    assert cli.attach_negative_lists(["--a", "-1", "--b", "-1,x", "--c=-1,2", "-1,2"]) == [
        *("--a", "-1", "--b", "-1,x", "--c=-1,2", "-1,2")  # plain numbers argparse reads itself
    ]


def test_runs_differing_in_another_setting_never_pair(tmp_path: Path) -> None:
    """Without a manifest, a config value outside the coordinates that differs between runs
    becomes a coordinate: a 5-epoch FP run has no LP partner and changes nothing."""
    runs = known_runs() + [(fp(0.0, train={"epochs": 5}), 1, 10.0)]
    frame, keys = load_runs(write_runs(tmp_path, runs))
    assert "train.epochs" in keys
    res = compare(frame, keys, "precision", "fp32", "int8")
    assert res["overall"]["mean"] == pytest.approx(1.5) and res["overall"]["pairs"] == 6


def test_varying_a_config_key_that_is_no_coordinate(tmp_path: Path) -> None:
    runs = [
        (fp(0.0, train={"epochs": e}), s, 70.0 + s + (2.0 if e == 4 else 0.0) + 0.1 * s * (e == 4))
        for e in (2, 4)
        for s in (1, 2, 3)
    ]
    frame, keys = load_runs(write_runs(tmp_path, runs))
    res = compare(frame, keys, "train.epochs", "4", "2")
    assert res["overall"]["mean"] == pytest.approx(2.2)  # 2 + 0.1 * mean(1, 2, 3)


# The seeded fake tree (tests/report/conftest.py): FP accuracy 80 + 1 (Choco) - 5 * skew -
# compression / 99; the 8-bit run of a cell 0.5 lower, moved by -0.2, 0, +0.2 for seeds 1-3. So
# FP - LP is 0.7, 0.5, 0.3 in every cell (mean 0.5, sd 0.2); Choco - DS is 1 at both precisions;
# Table 4's QGM FP run (77.5) against Table 3's Choco FP run at skew 0.8 (81 - 4 = 77) is 0.5 for
# every seed. (mean, sd, cells, verdict) of each claim, with its studies, conditions and values:
HALF = T2 * 0.2 / math.sqrt(3)
BY_HAND = {
    # table3, 0 %: skew 0 / 0.8 x DS / Choco
    "lp_close_to_fp_dense": (0.5, 0.2, 4, "held"),  # [0.003, 0.997] <= 1
    # table3, 99 %: the same four cells
    "lp_loss_compressed": (0.5, 0.2, 4, "held"),  # inside [0, 2]
    # table3, 99 %: skew 0 / 0.8 x FP / LP
    "choco_beats_ds": (1.0, 0.0, 4, "held"),
    # skew 0.8, 0 %, FP: one cell
    "qgm_helps_high_skew": (0.5, 0.0, 1, "held"),
}


@pytest.mark.parametrize("cid", sorted(BY_HAND))
def test_a_claims_comparison_gives_the_answer_computed_by_hand(
    seeded_tree: dict, capsys: pytest.CaptureFixture, cid: str
) -> None:
    """The command, given a claim's studies, conditions, values and threshold, and the claim as
    check_claims computes it on the same tree: each against the numbers above."""
    mean, sd, cells, verdict = BY_HAND[cid]
    half = T2 * sd / math.sqrt(3)
    df, _ = aggregate(seeded_tree["manifest"])
    claim = {c.id: c for c in check_claims(df, load_paper(PAPER_CSV), seeded_tree["cost"])}[cid]
    spec = BY_ID[cid]
    argv = [
        str(seeded_tree["manifest"]),
        "--vary",
        str(spec.vary),
        "--a",
        str(spec.a).lower(),
        "--b",
        str(spec.b).lower(),
        "--json",
    ]
    for s in spec.studies:  # those the tree has (table5, table6: none; the command refuses them)
        argv += ["--study", s] if s in set(df["study"]) else []
    for k, v in spec.where.items():
        argv += ["--where", f"{k}{v}" if str(v)[0] in "<>!=" else f"{k}={v}"]
    thr = spec.threshold
    argv += [
        "--threshold",
        ",".join(map(str, thr)) if isinstance(thr, tuple) else str(thr),
        "--direction",
        spec.direction,
    ]
    assert lpdt(*argv) == 0
    o = json.loads(capsys.readouterr().out)["overall"]
    for n, m, ci, cells_used, v in (
        (o["n"], o["mean"], o["ci"], o["cells"], o["verdict"]),
        (claim.n, claim.mean, claim.ci, claim.numbers["cells"], claim.verdict),
    ):
        assert (n, cells_used, v) == (3, cells, verdict)
        assert m == pytest.approx(mean, abs=1e-4)
        assert list(ci) == pytest.approx([mean - half, mean + half], abs=1e-4)


def test_the_readme_example_on_the_seeded_tree(
    seeded_tree: dict, capsys: pytest.CaptureFixture
) -> None:
    """The README's command on the seeded tree: FP - LP 0.7, 0.5, 0.3 in table3's four 0 %
    cells (table4's QGM cell has no 8-bit run): 0.5 [0.003, 0.997], held."""
    assert (
        lpdt(
            str(seeded_tree["manifest"].parent),
            "--vary",
            "precision",
            "--a",
            "fp32",
            "--b",
            "int8",
            "--study",
            "table3",
            "--study",
            "table4",
            "--where",
            "compression=0",
            "--threshold",
            "1",
            "--direction",
            "<=",
            "--json",
        )
        == 0
    )
    res = json.loads(capsys.readouterr().out)
    o = res["overall"]
    assert (o["n"], o["cells"], o["verdict"]) == (3, 4, "held")
    assert o["mean"] == pytest.approx(0.5, abs=1e-4)
    assert o["ci"] == pytest.approx([0.5 - HALF, 0.5 + HALF], abs=1e-4)
    assert res["norm"] == "each precision's paper norm (fp32 evonorm, int8 rangeen)"
    # the compared runs trained on a stand-in dataset: named, as the report names it
    assert res["stand_ins"] == ["fashion_mnist standing in for cifar10"]
    argv = [str(seeded_tree["manifest"].parent), "--vary", "precision", "--a", "fp32"]
    assert lpdt(*argv, "--b", "int8", "--study", "table3") == 0
    assert (
        "stand-ins: fashion_mnist standing in for cifar10" in capsys.readouterr().out.splitlines()
    )


def test_runs_identical_but_for_the_precision_pair_with_the_norm_held_fixed(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Issue 52's case: two seeds of a run trained fp32 and 8-bit, both with model.norm=rangeen,
    identical except precision.mode. They pair on Range-EvoNorm (FP - LP = 0.3 and 0.5), also
    with --where norm=rangeen, and the output says the norm was held fixed."""
    rangeen = {"model": {"norm": "rangeen"}}
    runs: list[tuple[dict, int, float | str]] = [
        (fp(0.0, **rangeen), 1, 80.3),
        (lp(0.0), 1, 80.0),
        (fp(0.0, **rangeen), 2, 81.5),
        (lp(0.0), 2, 81.0),
    ]
    root = str(write_runs(tmp_path, runs))
    for where in ([], ["--where", "norm=rangeen"]):
        assert lpdt(root, *ARGS, *where, "--json") == 0
        res = json.loads(capsys.readouterr().out)
        assert res["overall"]["per_seed"] == pytest.approx({"1": 0.3, "2": 0.5})
        assert res["overall"]["mean"] == pytest.approx(0.4) and res["norm"] == "held fixed: rangeen"
    assert lpdt(root, *ARGS) == 0
    assert "norm: held fixed: rangeen" in capsys.readouterr().out.splitlines()


def test_a_norm_at_one_precision_only_says_why_nothing_pairs(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """FP BatchNorm against 8-bit Range-EvoNorm: no shared norm, and neither is FP's paper norm;
    the refusal names the norms."""
    runs: list[tuple[dict, int, float | str]] = [
        (fp(0.0, model={"norm": "batchnorm"}), 1, 80.0),
        (lp(0.0), 1, 79.0),
    ]
    err = _error(capsys, str(write_runs(tmp_path, runs)), *ARGS)
    assert (
        "they differ in norm (a: batchnorm; b: rangeen; two runs pair on a norm they share" in err
    )


def test_a_diverged_run_counts_as_a_loss_with_a_direction(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """With --threshold 1 --direction '<=' (8-bit loses less than a point) the diverged 8-bit
    run of seed 3 at skew 0 counts as 0 %: FP - LP = 80 + 3 - 0 = 83 in that cell; seed 3's mean
    over the two cells (83 + 2) / 2 = 42.5. Without a direction it is set aside."""
    runs = [r for r in known_runs() if not (r[0] == lp(0.0) and r[1] == 3)]
    runs.append((lp(0.0), 3, "diverged"))
    root = str(write_runs(tmp_path, runs))
    assert lpdt(root, *ARGS, "--threshold", "1", "--direction", "<=", "--json") == 0
    o = json.loads(capsys.readouterr().out)["overall"]
    assert o["per_seed"] == {"1": 0.5, "2": 1.5, "3": 42.5} and o["n"] == 3
    assert o["counted_as_loss"][0]["seed"] == 3
    assert lpdt(root, *ARGS, "--threshold", "1", "--direction", "<=") == 0
    assert "counted as a loss: skew=0.0 seed 3: b (precision=int8) run" in capsys.readouterr().out
    assert lpdt(root, *ARGS, "--json") == 0
    o = json.loads(capsys.readouterr().out)["overall"]
    # seed 3 set aside in the skew-0 cell, which then pairs 2 of its 3 seeds: below the minimum
    # of 3, so it is left out and the skew-0.8 cell read alone (LOSS: 0, 1, 2)
    assert "counted_as_loss" not in o and (o["n"], o["cells"]) == (3, 1)
    assert o["per_seed"] == {"1": 0.0, "2": 1.0, "3": 2.0}
    (left,) = o["cells_left_out"]
    assert left["cell"]["skew"] == "0.0" and left["why"].startswith("below the minimum")


def test_conditions_compare_canonical_values() -> None:
    """Compression is compared in % however it is written; booleans and lists as in YAML."""
    assert condition("compression", "<=0.99") == Condition("compression", "<=", (99.0,))
    assert condition("compression", [0.9, 99]).values == (90, 99)
    assert condition("compression", "90,0.99").values == (90, 99)
    assert condition("qgm", "true").values == (True,) and condition("qgm", False).values == (False,)
    assert condition("precision", "!=int8") == Condition("precision", "!=", ("int8",))
    assert parse_where(["skew>=0.8", "precision!=int8"]) == {"skew": ">=0.8", "precision": "!=int8"}
    with pytest.raises(ValueError, match="where skew=0.0,: an empty value between commas"):
        condition("skew", "=0.0,")  # it read as "no run has skew=None"


def _error(capsys: pytest.CaptureFixture, *argv: str) -> str:
    assert lpdt(*argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


ARGS = ("--vary", "precision", "--a", "fp32", "--b", "int8")


def test_refusals_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    root = str(write_runs(tmp_path / "known", known_runs()))
    one = tmp_path / "known" / "runs" / "r000" / "metrics.json"
    assert f"{one} is one run's record, not a manifest" in _error(capsys, str(one), *ARGS)
    assert "unknown key 'precison'" in _error(
        capsys, root, "--vary", "precison", "--a", "fp32", "--b", "int8"
    )
    assert "no run has precision=fp16" in _error(
        capsys, root, "--vary", "precision", "--a", "fp16", "--b", "int8"
    )
    assert "no run has skew=0.5" in _error(capsys, root, *ARGS, "--where", "skew=0.5")
    assert "needs --direction" in _error(capsys, root, *ARGS, "--threshold", "1")
    assert "expected KEY=VALUE" in _error(capsys, root, *ARGS, "--where", "skew")
    # an order test on a word, or one no run meets, named the empty side of --a
    assert "--where precision>=1: precision is not a number (values: fp32, int8)" in _error(
        capsys, root, *ARGS, "--where", "precision>=1"
    )
    assert "no run meets --where skew>5 (skew values: 0, 0.8)" in _error(
        capsys, root, *ARGS, "--where", "skew>5"
    )
    (tmp_path / "empty").mkdir()
    assert "no manifest.json" in _error(capsys, str(tmp_path / "empty"), *ARGS)
    assert "nothing does not exist" in _error(capsys, str(tmp_path / "nothing"), *ARGS)


def test_nothing_pairs_names_the_keys_that_differ(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    runs = [(fp(0.0, model={"name": "resnet20"}), s, 80.0) for s in (1, 2)]
    runs += [(lp(0.0, model={"name": "vgg11", "norm": "rangeen"}), s, 79.0) for s in (1, 2)]
    err = _error(capsys, str(write_runs(tmp_path, runs)), *ARGS)
    assert "nothing pairs" in err and "model (a: resnet20; b: vgg11)" in err


def test_unpaired_seeds_pair_what_pairs(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A cell whose int8 side lacks seed 3 pairs seeds 1 and 2 and names seed 3 as set aside
    (unpaired); the overall uses the seeds both cells share (1, 2): n = 2 of 3."""
    runs = [
        r
        for r in known_runs()
        if not (
            r[0]["precision"]["mode"] == "int8" and r[1] == 3 and r[0]["partition"]["skew"] == 0.8
        )
    ]
    root = str(write_runs(tmp_path, runs))
    frame, keys = load_runs(root)
    res = compare(frame, keys, "precision", "fp32", "int8")
    o = res["overall"]
    assert (o["n"], o["seeds_of"], o["cells"], o["pairs"]) == (2, 3, 2, 4)
    assert o["per_seed"] == {"1": 0.5, "2": 1.5}  # LOSS: (1 + 0) / 2, (2 + 1) / 2
    by_why = {(d["cell"]["skew"], d["seed"]): d["why"] for d in o["set_aside"]}
    assert by_why == {("0.8", 3): "unpaired", ("0.0", 3): "not shared"}
    cell = {c["cell"]["skew"]: c for c in res["cells"]}["0.8"]
    assert cell["seeds"] == [1, 2] and cell["set_aside"][0]["seed"] == 3
    assert "precision=int8): no run" in cell["set_aside"][0]["detail"]
    assert lpdt(root, *ARGS) == 0
    out = capsys.readouterr().out
    assert "n=2 of 3 seeds" in out and "set aside: skew=0.8 seed 3" in out


def test_a_diverged_run_is_set_aside_and_named(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    runs = known_runs() + [(lp(0.4), 1, "diverged"), (fp(0.4), 1, 80.0)]
    root = str(write_runs(tmp_path, runs))
    frame, keys = load_runs(root)
    o = compare(frame, keys, "precision", "fp32", "int8")["overall"]
    # the skew-0.4 cell has no pair: left out, its diverged int8 run named (r012 is its id)
    assert (o["mean"], o["n"], o["cells"]) == (pytest.approx(1.5), 3, 2)
    (left,) = o["cells_left_out"]
    assert left["cell"]["skew"] == "0.4" and left["why"] == "no pair (diverged)"
    assert left["set_aside"] == [
        {"seed": 1, "why": "diverged", "detail": "b (precision=int8) run r012 diverged"}
    ]
    assert lpdt(root, *ARGS) == 0
    assert "skew=0.4: no pair (diverged)" in capsys.readouterr().out


def test_one_seed_on_one_side_pairs_that_seed(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Figure 1's case: one cell with six FP seeds and one 8-bit seed: the seed that pairs is
    compared (no interval: one seed), the five others are named as unpaired."""
    runs = [(fp(0.8), s, 80.0 + s) for s in range(1, 7)] + [(lp(0.8), 1, 80.25)]
    root = str(write_runs(tmp_path, runs))
    assert lpdt(root, *ARGS, "--json") == 0
    o = json.loads(capsys.readouterr().out)["overall"]
    assert (o["n"], o["seeds_of"], o["mean"], o["verdict"]) == (1, 6, 0.75, None)
    assert [(d["seed"], d["why"]) for d in o["set_aside"]] == [(s, "unpaired") for s in range(2, 7)]
    assert "one seed" in o["why"]


def test_a_duplicated_run_is_one_line_naming_both(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Two int8 runs of one cell and seed (here: two ids for one configuration, as two recipe
    versions of a precision would be) are refused, both named; one of them diverged: no
    ambiguity, the finished one pairs."""
    base = known_runs()
    root = write_runs(tmp_path / "dup", [*base, (lp(0.0), 2, 77.0)])
    err = _error(capsys, str(root), *ARGS)
    assert "several runs on one side of a pair" in err and "seed 2" in err
    assert "r003, r012" in err  # the original int8 skew-0 seed-2 run and the extra one
    root = write_runs(tmp_path / "div", [*base, (lp(0.0), 2, "diverged")])
    assert lpdt(str(root), *ARGS, "--json") == 0
    o = json.loads(capsys.readouterr().out)["overall"]
    assert o["mean"] == pytest.approx(1.5) and o["n"] == 3 and "set_aside" not in o


def test_one_run_in_two_folders_is_read_once_or_refused_when_they_differ(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A folder without a manifest holding one run twice (a copy of its folder, or a rerun into
    another folder: other times and provenance): read once; a second record of the run with
    other results was left out silently (one of the two picked): now one line naming both."""
    import shutil

    root = write_runs(tmp_path / "copy", known_runs())
    shutil.copytree(root / "runs" / "r000", root / "runs" / "r000-copy")
    data = json.loads((root / "runs" / "r000-copy" / "metrics.json").read_text())
    data["time"]["total_s"] += 1.0  # a rerun: its own wall time
    (root / "runs" / "r000-copy" / "metrics.json").write_text(json.dumps(data))
    assert lpdt(str(root), *ARGS, "--json") == 0
    assert json.loads(capsys.readouterr().out)["overall"]["mean"] == pytest.approx(1.5)
    data = json.loads((root / "runs" / "r000-copy" / "metrics.json").read_text())
    data["final"]["acc_node_mean"] = 50.0
    (root / "runs" / "r000-copy" / "metrics.json").write_text(json.dumps(data))
    err = _error(capsys, str(root), *ARGS)
    first, second = (root / "runs" / d / "metrics.json" for d in ("r000", "r000-copy"))
    assert f"{first} and {second} are both run r000, with other results" in err, err
    assert "50.00 %" in err


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        (("topology", "nodes"), [2], "config.topology.nodes: "),
        (("partition", "skew"), "abc", "config.partition.skew: 'abc' is not a finite number"),
    ],
)
def test_a_config_value_of_the_wrong_kind_names_the_record(
    key: tuple[str, str], value: object, says: str, tmp_path: Path, capsys
) -> None:
    """Without a manifest the coordinates come from the records' configs: a value there that
    its coordinate cannot take said "could not convert string to float", naming no file."""
    root = write_runs(tmp_path / "bad", known_runs())
    path = root / "runs" / "r001" / "metrics.json"
    data = json.loads(path.read_text())
    data["config"].setdefault(key[0], {})[key[1]] = value
    path.write_text(json.dumps(data))
    err = _error(capsys, str(root), *ARGS)
    assert f"lpdt compare: error: {path}: {says}" in err, err


def test_runs_alike_but_for_the_id_are_refused(
    seeded_tree: dict, capsys: pytest.CaptureFixture
) -> None:
    """fig1's FP EvoNorm runs and table3's FP runs (norm unset: EvoNorm, the FP default) share
    every coordinate and config value: two runs on one side of one pair, both named."""
    err = _error(
        capsys,
        str(seeded_tree["manifest"]),
        *ARGS,
        "--where",
        "nodes=8",
        "--where",
        "compression=0",
    )
    assert "several runs on one side of a pair" in err and "skew=0.8" in err
    assert "has several runs (run" in err and "alike in every coordinate" in err


def test_runs_differing_in_a_config_value_of_the_manifest_never_pair(
    seeded_tree: dict, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """With a manifest, a config value outside the coordinates (fig1 trains 2 epochs) tells
    fig1's runs from table3's: each pairs within its own study; fig1's BatchNorm has no 8-bit
    partner and is named, not an error."""
    import shutil

    root = tmp_path / "tree"
    shutil.copytree(seeded_tree["root"], root)
    m = json.loads((root / "results" / "manifest.json").read_text())
    for e in m["studies"]["fig1"]["runs"]:
        rec = root / e["dir"] / "metrics.json"
        doc = json.loads(rec.read_text())
        doc["config"]["train"]["epochs"] = 2
        rec.write_text(json.dumps(doc))
    argv = [str(root / "results" / "manifest.json"), *ARGS, "--where", "nodes=8"]
    assert lpdt(*argv, "--where", "compression=0", "--json") == 0
    res = json.loads(capsys.readouterr().out)
    assert "norm" in res["shown"] or "norm" in res["fixed"] or res["overall"]["cells_left_out"]
    left = {
        (d["cell"].get("norm"), d["cell"].get("train.epochs")): d
        for d in res["overall"]["cells_left_out"]
    }
    assert ("batchnorm", "2") in left and left[("batchnorm", "2")]["why"] == "no pair (unpaired)"
    assert res["overall"]["n"] == 3


def test_a_coordinate_no_run_names_is_not_printed_as_fixed(
    seeded_tree: dict, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A manifest whose studies name no dataset (a hand-written one) printed "fixed:
    dataset=None ..."; a coordinate no run has is no setting held fixed."""
    import shutil

    root = tmp_path / "tree"
    shutil.copytree(seeded_tree["root"], root)
    path = root / "results" / "manifest.json"
    m = json.loads(path.read_text())
    for study in m["studies"].values():
        for e in study.get("runs", []):
            e["coords"].pop("dataset", None)
    path.write_text(json.dumps(m))
    argv = [str(path), *ARGS, "--study", "table3", "--where", "nodes=8"]
    assert lpdt(*argv) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("fixed: "))
    assert "None" not in line and "dataset" not in line and "model=resnet20" in line, line
    assert lpdt(*argv, "--json") == 0
    assert "dataset" not in json.loads(capsys.readouterr().out)["fixed"]


@pytest.mark.parametrize("text", ["nan,inf", "-inf,1", "nan"])
def test_a_threshold_that_is_not_a_finite_number_is_refused(text):
    """As ``--where`` refuses nan and inf: a NaN or infinite threshold gave the verdict
    "inconclusive" and wrote NaN / Infinity into the JSON."""
    from lpdt.report.compare import CompareError, parse_threshold

    direction = "within" if "," in text else ">"
    with pytest.raises(CompareError, match="expected finite numbers"):
        parse_threshold(text, direction)


def test_runs_without_results_say_so(tmp_path: Path) -> None:
    """A selection whose runs have not finished (a manifest before its runs train, or every run
    diverged): said so, with the statuses, not "nothing pairs ... they differ in ..."."""
    from lpdt.report.compare import CompareError

    frame, keys = load_runs(write_runs(tmp_path, known_runs()))
    frame["status"] = ["missing"] * (len(frame) - 1) + ["diverged"]
    with pytest.raises(
        CompareError,
        match=r"none of the selection's 12 runs has a result yet "
        r"\(statuses: 11 missing, 1 diverged\)",
    ):
        compare(frame, keys, "precision", "fp32", "int8")


def test_unfinished_run_folders_are_named(tmp_path: Path, capsys) -> None:
    """A run folder with its config.yaml and no metrics.json (a run that stopped, or is still
    running) was left out without a word, and passed alone read "no manifest.json, no
    runs/*/metrics.json ..." (before 2026-12-01)."""
    root = write_runs(tmp_path, known_runs())
    finished = len(load_runs(root)[0])
    for name in ("x1", "x2"):
        (root / "runs" / name).mkdir()
        (root / "runs" / name / "config.yaml").write_text(RUN_CONFIG)
    notes: list[str] = []
    frame, _ = load_runs(root, note=notes.append)
    assert len(frame) == finished
    assert notes == [
        f"2 run folder(s) hold config.yaml and no metrics.json (not finished), left out: "
        f"{root / 'runs' / 'x1'}, {root / 'runs' / 'x2'}"
    ]
    assert lpdt(str(root), "--vary", "precision", "--a", "int8", "--b", "fp32") == 0
    assert "lpdt compare: note: 2 run folder(s)" in capsys.readouterr().err
    # one unfinished run passed alone
    assert lpdt(str(root / "runs" / "x1"), "--vary", "seed", "--a", "1", "--b", "2") == 2
    err = capsys.readouterr().err.strip()
    assert f"{root / 'runs' / 'x1'} is one run, and it has not finished" in err, err
    # one finished run passed alone: not "not finished" (a review found the first form said so)
    one = root / "runs" / "r000"
    (one / "config.yaml").write_text("seed: 1\n")
    assert lpdt(str(one), "--vary", "seed", "--a", "1", "--b", "2") == 2
    err = capsys.readouterr().err.strip()
    assert f"{one} is one run's folder: pass the folder that holds the runs ({one.parent})" in err
    # a folder of unfinished runs only, in either layout: said so (it read "no manifest.json,
    # no runs/*/metrics.json and no */metrics.json")
    for folder in (tmp_path / "only", tmp_path / "only2" / "runs"):
        (folder / "x1").mkdir(parents=True)
        (folder / "x1" / "config.yaml").write_text(RUN_CONFIG)
    # a checkout's root: its config/config.yaml is no run (it was counted as one)
    (tmp_path / "only" / "config").mkdir()
    (tmp_path / "only" / "config" / "config.yaml").write_text("scale: quick\n")
    for src in (tmp_path / "only", tmp_path / "only2"):
        assert lpdt(str(src), "--vary", "seed", "--a", "1", "--b", "2") == 2
        err = capsys.readouterr().err.strip()
        assert f"{src}: its 1 run folder(s) hold config.yaml and no metrics.json: none" in err
