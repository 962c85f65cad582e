"""Claims declared in a study (`claims:` in the studies file, carried by the manifest): checked
by lpdt report beside the paper's, listed on the summary page; a mistake is one line."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from pathlib import Path

import pytest
from scipy.stats import t as student_t

from lpdt import cli as lpdt_cli
from lpdt.grid import Manifest
from lpdt.report.claims import CLAIMS, study_claims
from tests.report.conftest import make_tree, report_argv

HALF = float(student_t.ppf(0.975, 2)) * 0.2 / math.sqrt(3)  # three seeds, per-seed sd 0.2

# In the seeded tree, FP - LP is 0.5 + 0.2, 0.5, 0.5 - 0.2 for seeds 1, 2, 3 in every cell.
DECLARED = [
    {
        "id": "lp_costs_under_1",
        "statement": "8-bit costs under a point at skew 0.8",
        "vary": "precision",
        "a": "fp32",
        "b": "int8",
        "where": {"skew": ">=0.8"},
        "direction": "<=",
        "threshold": 1.0,
    },
    {
        "id": "lp_costs_under_0.9",
        "statement": "8-bit costs under 0.9 points, compressed",
        "vary": "precision",
        "a": "fp32",
        "b": "int8",
        "where": {"compression": 99, "algorithm": "choco"},
        "direction": "<=",
        "threshold": 0.9,
        "studies": ["table3", "table4"],
    },
]


def tree_with(tmp_path: Path, claims: list[dict], study: str = "table3") -> dict[str, Path]:
    tree = make_tree(tmp_path, seeds=(1, 2, 3))
    m = json.loads(tree["manifest"].read_text())
    m["studies"][study]["claims"] = claims
    tree["manifest"].write_text(json.dumps(m))
    return tree


def report(tree: dict[str, Path], out: Path, only: str | None = None) -> int:
    return lpdt_cli.main(["report", *report_argv(tree, out, only)])


def test_declared_claims_are_checked_beside_the_papers(tmp_path: Path) -> None:
    tree = tree_with(tmp_path, DECLARED)
    assert report(tree, tmp_path / "out", "claims") == 0
    doc = json.loads((tmp_path / "out" / "claims.json").read_text())
    by_id = {c["id"]: c for c in doc["claims"]}
    assert [c["id"] for c in doc["claims"]] == [c.id for c in CLAIMS] + [d["id"] for d in DECLARED]
    one, two = by_id["lp_costs_under_1"], by_id["lp_costs_under_0.9"]
    for c in (one, two):
        assert c["mean"] == pytest.approx(0.5) and c["n"] == 3 and c["source"] == "study table3"
        assert c["ci"] == pytest.approx([0.5 - HALF, 0.5 + HALF], abs=1e-4)
        assert c["version"] is None and c["kind"] == "accuracy"
    assert one["verdict"] == "held"  # 0.997 <= 1
    assert two["verdict"] == "inconclusive"  # 0.9 lies inside [0.003, 0.997]
    # skew >= 0.8 in table3: 2 algorithms x 2 compressions; compressed Choco in table3 and table4
    assert one["numbers"]["cells"] == 4 and two["numbers"]["cells"] == 2
    assert "precision (fp32 vs int8)" in one["definition"] and "skew>=0.8" in one["definition"]
    # the paper's claims and their counts are what they were without the declared ones
    assert doc["counts"] == json.loads(json.dumps(_counts_without(tmp_path)))
    assert doc["declared_counts"]["held"] == 1 and doc["declared_counts"]["inconclusive"] == 1
    md = (tmp_path / "out" / "claims.md").read_text()
    assert "Claims declared in the studies" in md and "8-bit costs under 0.9 points" in md


def _counts_without(tmp_path: Path) -> dict:
    tree = make_tree(tmp_path / "plain", seeds=(1, 2, 3))
    assert report(tree, tmp_path / "plain" / "out", "claims") == 0
    doc = json.loads((tmp_path / "plain" / "out" / "claims.json").read_text())
    assert "declared_counts" not in doc
    return doc["counts"]


def test_declared_claims_on_the_summary_page(tmp_path: Path) -> None:
    if not shutil.which("pdftotext"):
        pytest.skip("poppler-utils not installed")
    tree = tree_with(tmp_path, DECLARED[:1])
    assert report(tree, tmp_path / "out") == 0
    page1 = subprocess.run(
        ["pdftotext", "-l", "1", str(tmp_path / "out" / "report.pdf"), "-"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    flat = " ".join(page1.split())
    assert "Claims declared in the studies" in flat
    assert "Of 1 claim declared in the studies (lp_costs_under_1), 1 held" in flat
    assert "8-bit costs under a point at skew 0.8" in flat


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"thresold": 1.0}, "unknown key 'thresold'"),
        ({"vary": "precison"}, "unknown coordinate 'precison'"),
        ({"where": {"skwe": 0.8}}, "unknown coordinate 'skwe'"),
        ({"where": {"skew": ">=high"}}, "'high' is not a value of skew"),
        ({"where": {"algorithm": ">choco"}}, "'>' needs a number"),
        ({"direction": ">="}, "direction '>=' is not one of"),
        ({"direction": "within"}, "needs threshold [lo, hi]"),
        ({"threshold": "one"}, "threshold must be a number"),
        ({"studies": ["table33"]}, "unknown study 'table33'"),
        ({"id": "choco_beats_ds"}, "id 'choco_beats_ds' is already taken"),
    ],
)
def test_a_mistake_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture, change: dict, says: str
) -> None:
    bad = {**DECLARED[0], **change}
    if change.get("thresold"):
        del bad["threshold"]
    tree = tree_with(tmp_path, [bad])
    assert report(tree, tmp_path / "out", "claims") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and says in err, err
    assert "study 'table3', claim 1" in err


def test_missing_keys_are_named() -> None:
    with pytest.raises(ValueError, match=r"claim 1 \(x\): missing vary, a, b"):
        study_claims(
            Manifest.from_dict(
                {
                    "scale": "s",
                    "studies": {
                        "s": {
                            "kind": "grid",
                            "runs": [],
                            "claims": [
                                {"id": "x", "statement": "s", "direction": ">", "threshold": 0}
                            ],
                        }
                    },
                }
            )
        )


# -- the paper's claims as data (src/lpdt/report/claims.yaml) ----------------------------------


def test_the_paper_claims_file_loads_and_names_only_known_coordinates_and_studies():
    from lpdt.grid import read_yaml
    from lpdt.report import claims
    from lpdt.report.aggregate import KEYS

    _, loaded = claims.load_claims()
    # the paper's twelve claims, by id and kind, written out here
    assert [(c.id, c.kind) for c in loaded] == [
        ("lp_close_to_fp_dense", "paired"),
        ("lp_loss_compressed", "paired"),
        ("choco_beats_ds", "paired"),
        ("acc_falls_with_skew", "series"),
        ("qgm_helps_high_skew", "paired"),
        ("lp_gain_high_skew", "paired"),
        ("evonorm_beats_batchnorm", "paired"),
        ("evonorm_beats_groupnorm", "paired"),
        ("rangeen_equiv_evonorm", "paired"),
        ("comm_4x", "cost"),
        ("energy_20x", "arithmetic"),
        ("memory_3_5x_resnet", "arithmetic"),
    ]
    studies = set(read_yaml(Path(__file__).parents[2] / "config/studies.yaml")["studies"])
    for c in loaded:
        assert c.kind in claims.KINDS
        if c.family == "accuracy":  # paired and series claims name what they compare
            assert c.vary in KEYS and set(c.where) <= set(KEYS) and set(c.studies) <= studies
        if c.kind == "arithmetic":
            assert c.column


@pytest.mark.parametrize(
    "change, message",
    [
        ({"treshold": 1.0}, "unknown key 'treshold'"),
        ({"id": None}, None),  # removed below: a missing key
        ({"kind": "vibes"}, "kind 'vibes'"),
        ({"kind": "series", "vary": None}, "missing vary"),
        ({"vary": None, "a": None}, "missing vary, a"),  # a paired claim (the default kind)
        ({"kind": "arithmetic"}, "missing column"),
        ({"vary": "precison"}, "unknown coordinate 'precison'"),
    ],
)
def test_a_damaged_claims_file_is_one_line_naming_the_entry(tmp_path, change, message):
    import yaml

    from lpdt.report import claims

    doc = yaml.safe_load(claims.CLAIMS_FILE.read_text())
    entry = doc["claims"][1]
    for k, v in change.items():
        if v is None:
            del entry[k]
        else:
            entry[k] = v
    path = tmp_path / "claims.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(ValueError) as e:
        claims.load_claims(path)
    text = str(e.value)
    assert "\n" not in text and f"{path}, claim 2" in text
    if "id" in entry:  # the entry is named by its id too
        assert f"{path}, claim 2 ({entry['id']})" in text
    assert (message or "missing id") in text
