"""The runs that send 8-bit messages (study ``messages``) beside the run of the same cell and seed
that sends fp32 messages: what the communication claim shows of real traffic (claims.json's
``numbers.sent_8bit``, claims.md, the PDF's claim details). Illustrative (one seed): no verdict
reads it.

The fp32-message run is matched on the run's whole identity: the coordinates (the message codec
read as the compression it carries: ``int8`` -> 0 %, ``90+int8`` -> 90 %), the seed, and every
result-affecting config value beyond them (``lpdt.report.pairs.config_extras``' keys, the
consensus step as the run uses it: its own, else 1.0 uncompressed and 0.01 compressed). Where no
run of that cell and seed agrees in every value, the one that differs in the fewest is shown with
what differs (``fp32_differs``: key -> [fp32-message run's value, 8-bit-message run's value]):
the quick scale's dense pair gossips with consensus step 0.1, and Table 3's uncompressed cell,
its only fp32-message run, with 1.0, so that comparison changes the step too, and says so. Two
runs that match equally well are both named (``fp32_ambiguous``) and neither is shown: never
chosen by row order.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from lpdt.report import pairs
from lpdt.report.aggregate import KEYS, norm_key
from lpdt.report.formatting import rounded

MESSAGES_STUDY = "messages"  # runs that send 8-bit messages (config/studies.yaml), one seed
CONSENSUS_STEP = "algorithm.consensus_lr"
# How each differing config key is named in the text.
KEY_NAMES = {CONSENSUS_STEP: "consensus step"}


def _fp32_messages(compression: object) -> object:
    """The compression coordinate of the same cell sending fp32 messages: ``"int8"`` -> 0,
    ``"90+int8"`` -> 90 (``lpdt.report.aggregate.compression_key``)."""
    text = str(compression)
    return 0 if text == "int8" else norm_key("compression", text.removesuffix("+int8"))


def identity(config: object) -> dict[str, Any]:
    """A run config's result-affecting values beyond the coordinates, the seed and the message
    codec (flat keys; ``lpdt.config.result_dict`` less ``pairs.COVERED``), the consensus step
    as the run uses it (``lpdt.config.RunConfig.consensus_lr``: its own, else 1.0 uncompressed
    and 0.01 compressed); {} without a config."""
    from lpdt.config import result_dict

    if not isinstance(config, Mapping) or not config:
        return {}
    flat = pairs.flat_config(result_dict(dict(config)))
    if flat.get(CONSENSUS_STEP) is None:
        codec = flat.get("algorithm.compression.name") or "none"
        flat[CONSENSUS_STEP] = 1.0 if codec == "none" else 0.01
    return {k: v for k, v in flat.items() if k not in pairs.COVERED}


def differs(base: Mapping[str, Any], mine: Mapping[str, Any]) -> dict[str, list[Any]]:
    """key -> [base's value, mine's] for every key whose values differ (either config known)."""
    if not base or not mine:
        return {}
    keys = sorted(set(base) | set(mine))
    text = {k: [json.dumps(x.get(k), sort_keys=True) for x in (base, mine)] for k in keys}
    return {k: [base.get(k), mine.get(k)] for k in keys if text[k][0] != text[k][1]}


def _baseline(r: Mapping[Any, Any], base: pd.DataFrame) -> dict[str, Any]:
    """The fp32-message run shown beside ``r`` (module docstring): its fields, and what differs;
    both runs named where two match equally well; {} without a run of that cell and seed."""
    if not len(base):
        return {}
    mine = identity(r.get("config"))
    found = [(differs(identity(b.get("config")), mine), b) for b in base.to_dict("records")]
    fewest = min(len(d) for d, _ in found)
    best = [(d, b) for d, b in found if len(d) == fewest]
    if len({b["run_id"] for _, b in best}) > 1:
        return {"fp32_ambiguous": sorted(str(b["run_id"]) for _, b in best)}
    d, b = best[0]
    out = {
        "fp32_run_id": b["run_id"],
        "fp32_acc": rounded(b["acc"]),
        "fp32_gb_per_node": rounded(b["gb_per_node"], 6),
    }
    if d:
        out["fp32_differs"] = d
    return out


def sent_8bit(df: pd.DataFrame) -> list[dict]:
    """The runs of study ``messages`` (they really send 8-bit messages) beside the run of the same
    cell, seed and config that sends fp32 messages (any study; module docstring): the bytes each
    sent per node (training and final gossip) and its accuracy."""
    if "study" not in df or "gb_per_node" not in df:
        return []
    runs = pairs.with_seed(df[df["status"] == "ok"]).drop_duplicates("run_id")
    out = []
    mine = pairs.with_seed(df[df["study"] == MESSAGES_STUDY]).drop_duplicates("run_id")
    for r in mine.to_dict("records"):
        same = (runs["seed"] == r["seed"]) & (runs["run_id"] != r["run_id"])
        for k in KEYS:
            want = _fp32_messages(r[k]) if k == "compression" else norm_key(k, r[k])
            same &= runs[k].map(lambda v, k=k, want=want: norm_key(k, v) == want)
        row = {
            "compression": str(r["compression"]),
            "run_id": r["run_id"],
            "status": r["status"],
            "acc": rounded(r["acc"]) if r["status"] == "ok" else None,
            "gb_per_node": rounded(r["gb_per_node"], 6),
        }
        out.append(row | _baseline(r, runs[same]))
    return out


def _value(v: object) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def differs_text(d: Mapping[str, Sequence[Any]]) -> str:
    """'consensus step 1 there, 0.1 here' (the fp32-message run's value, then the 8-bit-message
    run's)."""
    return "; ".join(
        f"{KEY_NAMES.get(k, k)} {_value(v[0])} there, {_value(v[1])} here" for k, v in d.items()
    )


def sent_text(rows: Sequence[Mapping[str, Any]]) -> str:
    """'runs that send 8-bit messages (one seed): int8: 0.148 GB/node, accuracy 85.02 % (fp32
    messages: 0.589 GB/node, 3.98x, 84.61 %, a run that differs in more than the messages:
    consensus step 1 there, 0.1 here); ...'."""
    parts = []
    for r in rows:
        if r["acc"] is None:
            parts.append(f"{r['compression']}: {r['status']}")
            continue
        t = f"{r['compression']}: {r['gb_per_node']:.3g} GB/node, accuracy {r['acc']:.2f} %"
        if r.get("fp32_gb_per_node"):
            ratio = r["fp32_gb_per_node"] / r["gb_per_node"]
            t += (
                f" (fp32 messages: {r['fp32_gb_per_node']:.3g} GB/node, {ratio:.2f}x, "
                f"{r['fp32_acc']:.2f} %"
            )
            if r.get("fp32_differs"):
                t += ", a run that differs in more than the messages: " + differs_text(
                    r["fp32_differs"]
                )
            t += ")"
        elif r.get("fp32_ambiguous"):
            t += (
                f" (fp32 messages: {len(r['fp32_ambiguous'])} runs match equally, none shown: "
                f"{', '.join(r['fp32_ambiguous'])})"
            )
        parts.append(t)
    return "runs that send 8-bit messages (one seed): " + "; ".join(parts) if parts else ""
