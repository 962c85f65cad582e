"""The runs that send 8-bit messages (study ``messages``) beside their fp32-message cells, matched
on the run's whole identity (a difference in the consensus step said; never chosen by row order),
and the compression coordinate of an 8-bit message codec (lpdt.report.aggregate.compression_key).
Expected texts are written out by hand."""

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


def _config(codec: str, step: float | None) -> dict:
    """A run config's algorithm part: the message codec and the consensus step (None: the
    default, 1.0 uncompressed and 0.01 compressed)."""
    algorithm: dict = {"name": "choco", "compression": {"name": codec, "ratio": 0.0}}
    if step is not None:
        algorithm["consensus_lr"] = step
    return {"algorithm": algorithm, "train": {"epochs": 20}}


def _run(
    study: str,
    run_id: str,
    compression: object,
    acc: float,
    gb: float,
    seed: int = 1234,
    config: dict | None = None,
) -> dict:
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
        "config": config or {},
    }


# The quick scale's case: Table 3's uncompressed cell gossips with the default consensus step
# (1.0 without compression), its 90 % top-k cell with 0.1; both 8-bit-message runs with 0.1.
FP_DENSE = _run("table3", "fp-dense", 0, 84.6, 0.59, config=_config("none", None))
FP_TOP90 = _run("table3", "fp-top90", 90, 84.3, 0.12, config=_config("topk", 0.1))
M_DENSE = _run("messages", "m-dense", "int8", 83.8, 0.148, config=_config("int8", 0.1))
M_TOP90 = _run("messages", "m-top90", "90+int8", 84.6, 0.045, config=_config("topk_int8", 0.1))


def test_each_8bit_message_run_sits_beside_its_cells_fp32_message_run() -> None:
    other_seed = _run("table3", "fp-dense-2", 0, 84.0, 0.59, seed=1235, config=FP_DENSE["config"])
    df = pd.DataFrame([FP_DENSE, other_seed, FP_TOP90, M_DENSE, M_TOP90])
    rows = {r["compression"]: r for r in sent_8bit(df)}
    assert rows["int8"]["fp32_run_id"] == "fp-dense" and rows["int8"]["fp32_acc"] == 84.6
    # the dense pair changes the consensus step too (1.0, the uncompressed default, against
    # 0.1): said, not hidden; the top-k pair differs in nothing but the messages
    assert rows["int8"]["fp32_differs"] == {"algorithm.consensus_lr": [1.0, 0.1]}
    assert rows["90+int8"]["fp32_run_id"] == "fp-top90" and "fp32_differs" not in rows["90+int8"]
    assert rows["90+int8"]["gb_per_node"] == 0.045 and rows["90+int8"]["acc"] == 84.6
    # 0.59 / 0.148 = 3.986..., 0.12 / 0.045 = 2.666...
    assert sent_text(list(rows.values())) == (
        "runs that send 8-bit messages (one seed): int8: 0.148 GB/node, accuracy 83.80 % "
        "(fp32 messages: 0.59 GB/node, 3.99x, 84.60 %, a run that differs in more than the "
        "messages: consensus step 1 there, 0.1 here); 90+int8: 0.045 GB/node, accuracy "
        "84.60 % (fp32 messages: 0.12 GB/node, 2.67x, 84.30 %)"
    )


@pytest.mark.parametrize("order", [1, -1])
def test_the_run_of_the_same_step_is_preferred_whatever_the_row_order(order: int) -> None:
    """A second fp32-message run of the dense cell and seed that gossips with 0.1, as the
    8-bit-message run does (another study's): it is the baseline, in either row order."""
    same_step = _run("steps", "fp-dense-0.1", 0, 84.9, 0.59, config=_config("none", 0.1))
    df = pd.DataFrame([FP_DENSE, same_step, M_DENSE][::order])
    (row,) = sent_8bit(df)
    assert (row["fp32_run_id"], row["fp32_acc"]) == ("fp-dense-0.1", 84.9)
    assert "fp32_differs" not in row


def test_two_runs_that_match_equally_are_both_named_and_neither_chosen() -> None:
    twin = FP_DENSE | {"study": "fig4", "run_id": "fp-dense-twin", "acc": 83.0}
    (row,) = sent_8bit(pd.DataFrame([FP_DENSE, twin, M_DENSE]))
    assert "fp32_run_id" not in row and row["fp32_ambiguous"] == ["fp-dense", "fp-dense-twin"]
    assert sent_text([row]).endswith(
        "(fp32 messages: 2 runs match equally, none shown: fp-dense, fp-dense-twin)"
    )


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
