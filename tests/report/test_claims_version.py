"""A claims version that cannot drift: docs/claims.md's change log ("Claims: versions") gives each
version from 7 on the fingerprint of the definitions it covers (``definitions_hash``: claims.yaml's
claims and the study claims, canonical JSON), and the current version's row must carry the
fingerprint of the definitions as they are. A change to claims.yaml's claims, or a claim declared
in config/studies.yaml or a scale, without a new version row fails here."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from lpdt.grid import load, read_yaml
from lpdt.report.claims import CLAIMS_FILE, CLAIMS_VERSION, definitions_hash, load_claims

ROOT = Path(__file__).resolve().parents[2]
FIRST_FINGERPRINTED = 7  # versions 1-6 predate the fingerprint (their definitions were code)


def versions_table() -> list[list[str]]:
    """The rows of the change log's table, each a list of its cells (the header left out)."""
    text = (ROOT / "docs" / "claims.md").read_text()
    section = text[text.index("## Claims: versions") :]
    lines = section.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| version |"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break  # the table ends at its first line that is not a row
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows


def studies_claims(spec: dict) -> dict[str, list]:
    return {name: s.get("claims") or [] for name, s in (spec.get("studies") or {}).items()}


def test_the_versions_table_is_one_table_of_every_version() -> None:
    """One row per version 1..CLAIMS_VERSION, in order and in one table (a blank line inside it
    once left version 6 outside the table)."""
    rows = versions_table()
    assert [int(r[0]) for r in rows] == list(range(1, CLAIMS_VERSION + 1))
    header = "| version | date | commit | definitions | change | before / after a result |"
    assert header in (ROOT / "docs" / "claims.md").read_text()
    for r in rows:
        assert len(r) == 6, r
        fingerprint = r[3].strip("`")
        if int(r[0]) < FIRST_FINGERPRINTED:
            assert fingerprint == "-", r[0]
        else:
            assert re.fullmatch(r"[0-9a-f]{12}", fingerprint), (r[0], fingerprint)


def test_the_current_version_carries_the_fingerprint_of_the_definitions() -> None:
    now = definitions_hash(studies_claims(read_yaml(ROOT / "config" / "studies.yaml")))
    row = versions_table()[CLAIMS_VERSION - 1]
    assert row[3].strip("`") == now, (
        f"the definitions' fingerprint is {now}, claims version {CLAIMS_VERSION}'s row says "
        f"{row[3]}: claims.yaml or a study claim changed without a new version; raise `version` "
        f"in {CLAIMS_FILE.name} and add a dated row with {now} to docs/claims.md"
    )


@pytest.mark.parametrize("scale", sorted((ROOT / "config" / "scales").glob("*.yaml")))
def test_every_scale_checks_the_versioned_definitions(scale: Path) -> None:
    """A scale that declared claims of its own would check definitions no version covers."""
    spec = load(ROOT / "config" / "studies.yaml", scale)
    assert definitions_hash(studies_claims(spec)) == definitions_hash(
        studies_claims(read_yaml(ROOT / "config" / "studies.yaml"))
    )


def test_the_fingerprint_moves_with_a_definition_and_not_with_the_layout(tmp_path: Path) -> None:
    doc = yaml.safe_load(CLAIMS_FILE.read_text())
    same = tmp_path / "same.yaml"  # another version number, no comments, keys in another order
    same.write_text(yaml.safe_dump({**doc, "version": 99}, sort_keys=True))
    assert definitions_hash(path=same) == definitions_hash()
    moved = json.loads(json.dumps(doc))
    moved["claims"][0]["threshold"] = 1.5  # "8-bit loses less than 1.5 %"
    changed = tmp_path / "changed.yaml"
    changed.write_text(yaml.safe_dump(moved, sort_keys=False))
    assert load_claims(changed)[1][0].threshold == 1.5
    assert definitions_hash(path=changed) != definitions_hash()
    declared = {"table3": [{"id": "x", "statement": "s", "vary": "skew", "a": 0, "b": 0.9}]}
    assert definitions_hash(declared) != definitions_hash()
    assert definitions_hash({"table3": []}) == definitions_hash()  # no claims: none declared


def test_claims_json_records_the_fingerprint(shared_tree: dict, tmp_path: Path) -> None:
    """``lpdt report`` writes the fingerprint of the definitions it checked (the fake tree's
    studies declare none: claims.yaml's alone, the current version's)."""
    from lpdt import cli
    from tests.report.conftest import report_argv

    assert cli.main(["report", *report_argv(shared_tree, tmp_path, "claims")]) == 0
    doc = json.loads((tmp_path / "claims.json").read_text())
    assert doc["version"] == CLAIMS_VERSION
    assert doc["definitions_hash"] == versions_table()[CLAIMS_VERSION - 1][3].strip("`")
