"""``ClaimResult``, the typed result of one claim: its ``to_dict()`` is the ``claims.json`` entry
the dict records of ``check_claims`` were before it (the same keys, order and values, so the same
bytes), docs/claims.md lists its fields in order, and a result is consistent with its kind."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest

from lpdt.report.aggregate import aggregate
from lpdt.report.claim_text import write_claims
from lpdt.report.claims import (
    ACCURACY_ONLY,
    CLAIMS_VERSION,
    ClaimResult,
    check_claims,
    study_claims,
)
from lpdt.report.paper import load_paper
from tests.report.conftest import PAPER_CSV

ROOT = Path(__file__).resolve().parents[2]

DECLARED = {
    "id": "lp_costs_under_1",
    "statement": "8-bit costs under a point at skew 0.8",
    "vary": "precision",
    "a": "fp32",
    "b": "int8",
    "where": {"skew": ">=0.8"},
    "direction": "<=",
    "threshold": 1.0,
}


def _legacy(c: ClaimResult) -> dict[str, Any]:
    """The record as ``check_claims`` built it before ``ClaimResult`` (claims version 5): this
    dict literal, in this order, pairs as lists, the paper's cell counts for accuracy claims
    only."""
    thr = list(c.threshold) if isinstance(c.threshold, tuple) else c.threshold
    extra: dict[str, Any] = {}
    if c.kind == "accuracy":
        extra = {
            "paper_cells": c.paper_cells,
            "paper_effect_all_cells": c.paper_effect_all_cells,
            "paper_cells_all": c.paper_cells_all,
        }
    return {
        "id": c.id,
        "version": c.version,
        "statement": c.statement,
        "definition": c.definition,
        "kind": c.kind,
        "source": c.source,
        "effect": c.effect,
        "direction": c.direction,
        "threshold": thr,
        "rule": c.rule,
        "verdict": c.verdict,
        "mean": c.mean,
        "sd": c.sd,
        "ci": None if c.ci is None else list(c.ci),
        "n": c.n,
        "half_width": c.half_width,
        "detectable": c.detectable,
        "interval_method": c.interval_method,
        "paper_effect": c.paper_effect,
        "paper_note": c.paper_note,
        "paper_verdict": c.paper_verdict,
        **extra,
        "stand_in_data": c.stand_in_data,
        "numbers": dict(c.numbers),
        "paper_numbers": dict(c.paper_numbers),
    }


@pytest.fixture(scope="module")
def results(seeded_tree: dict) -> list[ClaimResult]:
    """Every kind of claim on the seeded tree: the paper's (accuracy with intervals, without
    data, cost with a range threshold, arithmetic) and one declared in a study."""
    df, manifest = aggregate(seeded_tree["manifest"])
    table3 = dataclasses.replace(manifest.studies["table3"], claims=(DECLARED,))
    declared = study_claims(
        dataclasses.replace(manifest, studies={**manifest.studies, "table3": table3})
    )
    return check_claims(df, load_paper(PAPER_CSV), seeded_tree["cost"], declared)


def test_to_dict_is_the_record_claims_json_held(results: list[ClaimResult], tmp_path) -> None:
    kinds = {c.kind for c in results}
    assert kinds == {"accuracy", "cost", "arithmetic"}
    # the inputs cover the conversions: a range threshold, an interval, a declared claim
    assert any(isinstance(c.threshold, tuple) for c in results)
    assert any(c.ci is not None for c in results)
    assert {c.version for c in results} == {CLAIMS_VERSION, None}
    for c in results:
        assert json.dumps(c.to_dict()) == json.dumps(_legacy(c)), c.id
        has = [k in c.to_dict() for k in ACCURACY_ONLY]
        assert has == [c.kind == "accuracy"] * len(ACCURACY_ONLY), c.id
    write_claims(results, tmp_path / "claims.json")
    doc = json.loads((tmp_path / "claims.json").read_text())
    assert doc["claims"] == [json.loads(json.dumps(_legacy(c))) for c in results]


def test_docs_list_the_fields_in_order() -> None:
    """docs/claims.md's table of a claim's fields names every field of ``ClaimResult``, in the
    order of ``to_dict()``."""
    text = (ROOT / "docs" / "claims.md").read_text()
    table = text.split("it has, in this order:", 1)[1].split("\n\n", 2)[1]
    named = [
        name
        for cell in re.findall(r"^\| `([^`|]+)` \|", table, re.M)  # the first column
        for name in cell.split(", ")
    ]
    assert named == [f.name for f in dataclasses.fields(ClaimResult)]


def test_a_result_matches_its_kind(results: list[ClaimResult]) -> None:
    acc = next(c for c in results if c.kind == "accuracy")
    cost = next(c for c in results if c.kind == "cost")
    with pytest.raises(ValueError, match=f"claim {acc.id}: an accuracy claim needs"):
        dataclasses.replace(acc, paper_cells=None)
    with pytest.raises(ValueError, match=f"claim {cost.id}: a cost claim has no paper cells"):
        dataclasses.replace(cost, paper_cells_all=3)
