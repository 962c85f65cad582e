"""The runs that send 8-bit messages (study ``messages``) beside their fp32-message cells, and the
compression coordinate of an 8-bit message codec (lpdt.report.aggregate.compression_key)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from lpdt.report.aggregate import KEYS, compression_key, norm_key
from lpdt.report.claims import sent_8bit, sent_text


@pytest.mark.parametrize(
    ("name", "ratio", "key"),
    [
        ("none", 0.0, 0),
        ("topk", 0.9, 90),
        ("randomk", 0.99, 99),
        ("int8", 0.0, "int8"),
        ("topk_int8", 0.9, "90+int8"),
        ("qsgd", 0.0, "qsgd"),
    ],
)
def test_compression_key_names_the_message_codec(name: str, ratio: float, key: object) -> None:
    assert compression_key(name, ratio) == key
    assert norm_key("compression", key) == key  # canonical already: a string stays a string


def test_norm_key_keeps_percentages_and_fractions_as_before() -> None:
    assert norm_key("compression", 0.99) == 99 and norm_key("compression", "90") == 90
    assert norm_key("compression", "90+int8") == "90+int8"


def _run(study: str, run_id: str, compression: object, acc: float, gb: float, seed: int = 1234):
    coords = dict.fromkeys(KEYS)
    coords |= {"dataset": "cifar10", "model": "resnet20", "nodes": 4, "skew": 0.0}
    coords |= {"topology": "directed_ring", "algorithm": "choco", "precision": "fp32"}
    coords["compression"] = compression
    return {
        **coords,
        "study": study,
        "run_id": run_id,
        "seed": seed,
        "status": "ok" if math.isfinite(acc) else "diverged",
        "acc": acc,
        "gb_per_node": gb,
    }


def test_each_8bit_message_run_sits_beside_its_cells_fp32_message_run() -> None:
    df = pd.DataFrame(
        [
            _run("table3", "fp-dense", 0, 84.6, 0.59),
            _run("table3", "fp-dense-2", 0, 84.0, 0.59, seed=1235),  # another seed: not it
            _run("table3", "fp-top90", 90, 84.3, 0.12),
            _run("messages", "m-dense", "int8", 83.8, 0.148),
            _run("messages", "m-top90", "90+int8", 84.6, 0.045),
        ]
    )
    rows = {r["compression"]: r for r in sent_8bit(df)}
    assert rows["int8"]["fp32_run_id"] == "fp-dense" and rows["int8"]["fp32_acc"] == 84.6
    assert rows["90+int8"]["fp32_run_id"] == "fp-top90"
    assert rows["90+int8"]["gb_per_node"] == 0.045 and rows["90+int8"]["acc"] == 84.6
    text = sent_text(list(rows.values()))
    assert "int8: 0.148 GB/node, accuracy 83.80 %" in text
    assert f"{0.59 / 0.148:.2f}x" in text and f"{0.12 / 0.045:.2f}x" in text


def test_a_diverged_8bit_message_run_is_said_and_one_without_a_partner_has_none() -> None:
    df = pd.DataFrame(
        [
            _run("messages", "m-dense", "int8", math.nan, 0.148),
            _run("messages", "m-top90", "90+int8", 84.6, 0.045),
        ]
    )
    rows = {r["compression"]: r for r in sent_8bit(df)}
    assert rows["int8"]["acc"] is None and rows["int8"]["status"] == "diverged"
    assert "fp32_run_id" not in rows["90+int8"]
    assert "int8: diverged" in sent_text(list(rows.values()))
    assert sent_8bit(df[df["study"] != "messages"]) == []
