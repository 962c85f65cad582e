"""A small fake results tree in the documented formats (docs/architecture.md, docs/report.md)."""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import pytest

from lpdt.report import cli
from tests.fake_records import fake_record

PAPER_CSV = Path(__file__).resolve().parents[2] / "config" / "paper_results.csv"
# The claims' cell of the constructed trees (ResNet-20, ring of 4, Choco, uncompressed); each test
# adds its own skew, precision, ...
CLAIM_CELL = {
    "dataset": "cifar10",
    "model": "resnet20",
    "topology": "directed_ring",
    "nodes": 4,
    "compression": 0,
    "algorithm": "choco",
}


# (study, coords, accuracy or "diverged" / "missing")
BASE = {"dataset": "cifar10", "model": "resnet20", "topology": "directed_ring", "nodes": 8}
RUNS = [
    (
        "table2",
        {
            "dataset": "cifar10",
            "model": "resnet20",
            "nodes": 1,
            "topology": "directed_ring",
            "algorithm": "choco",
            "compression": 0,
            "skew": 0.0,
            "precision": "fp32",
        },
        90.0,
    ),
    (
        "table2",
        {
            "dataset": "cifar10",
            "model": "resnet20",
            "nodes": 1,
            "topology": "directed_ring",
            "algorithm": "choco",
            "compression": 0,
            "skew": 0.0,
            "precision": "int8",
        },
        "diverged",
    ),
    *[
        (
            "table3",
            BASE | {"compression": c, "skew": s, "algorithm": a, "precision": p},
            80.0 + (1.0 if a == "choco" else 0) - (0.5 if p == "int8" else 0) - 5 * s - c / 99,
        )
        for c in (0, 99)
        for s in (0.0, 0.8)
        for a in ("deepsqueeze", "choco")
        for p in ("fp32", "int8")
    ],
    (
        "table3",
        BASE | {"compression": 0, "skew": 0.4, "algorithm": "choco", "precision": "fp32"},
        "missing",
    ),
    (
        "table4",
        BASE
        | {"algorithm": "choco", "qgm": True, "compression": 0, "skew": 0.8, "precision": "fp32"},
        77.5,
    ),
    (
        "fig1",
        BASE
        | {
            "skew": 0.8,
            "algorithm": "choco",
            "compression": 0,
            "precision": "fp32",
            "norm": "batchnorm",
        },
        70.0,
    ),
    (
        "fig1",
        BASE
        | {
            "skew": 0.8,
            "algorithm": "choco",
            "compression": 0,
            "precision": "fp32",
            "norm": "evonorm",
        },
        76.0,
    ),
]


@pytest.fixture
def tree(tmp_path: Path) -> dict[str, Path]:
    return make_tree(tmp_path)


def report_argv(tree: dict, out: Path, only: str | None = None) -> list[str]:
    """``lpdt report``'s command-line arguments for a tree of ``make_tree`` (its ``plateau`` too,
    if set), writing every output under ``out``; ``only``: one part (``--only``)."""
    return [
        "--manifest",
        str(tree["manifest"]),
        "--cost",
        str(tree["cost"]),
        "--analysis",
        str(tree["analysis"]),
        "--paper",
        str(tree["paper"]),
        "--tables",
        str(out / "tables"),
        "--figures",
        str(out / "figures"),
        "--claims",
        str(out / "claims.json"),
        "--pdf",
        str(out / "report.pdf"),
        "--plateau",
        str(tree.get("plateau", "none")),
        *(["--only", only] if only else []),
    ]


def report_args(tree: dict, out: Path, only: str | None = None) -> argparse.Namespace:
    """``report_argv`` parsed by ``lpdt report``'s own parser."""
    p = argparse.ArgumentParser()
    cli.add_arguments(p)
    return p.parse_args(report_argv(tree, out, only))


@pytest.fixture(scope="module")
def shared_tree(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One tree for the tests that only read the report outputs (the pipeline takes seconds)."""
    return make_tree(tmp_path_factory.mktemp("tree"))


@pytest.fixture(scope="module")
def seeded_tree(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The same cells, each run with seeds 1, 2, 3."""
    return make_tree(tmp_path_factory.mktemp("seeded"), seeds=(1, 2, 3))


def make_tree(root: Path, seeds: tuple[int, ...] | None = None) -> dict[str, Path]:
    """The fake tree; with ``seeds``, every cell is run once per seed (manifest ``seed``) and the
    8-bit runs' accuracy moves by 0.2 * (k - (K - 1) / 2) for the k-th of K seeds."""
    studies: dict = {}
    for i, (study, coords, acc) in enumerate(RUNS):
        for k, seed in enumerate(seeds or (None,)):
            rid = f"run{i:02d}" if seed is None else f"run{i:02d}s{seed}"
            d = root / "results" / "runs" / rid
            if acc != "missing":
                config = {"model": {"name": "resnet20"}}
                if seed is not None:
                    config["seed"] = seed
                if acc == "diverged":
                    rec = fake_record(rid, 85.0, status="diverged", config=config, total_s=60.0)
                else:
                    jitter = 0.2 * (k - (len(seeds) - 1) / 2) if seeds else 0.0
                    a = float(acc) + (jitter if coords.get("precision") == "int8" else 0.0)
                    rec = fake_record(rid, a, config=config, total_s=60.0)
                rec.write(d)
            entry = {"run_id": rid, "dir": f"results/runs/{rid}", "coords": coords}
            if seed is not None:
                entry["seed"] = seed
            studies.setdefault(study, {"kind": "grid", "runs": []})["runs"].append(entry)
    studies["fig4"] = {"kind": "grid", "same_as": "table3", "runs": studies["table3"]["runs"]}
    manifest = root / "results" / "manifest.json"
    manifest.write_text(json.dumps({"scale": "testscale", "studies": studies}))
    cost = root / "results" / "cost"
    cost.mkdir(parents=True)
    write_cost(cost)
    an = root / "results" / "analysis"
    an.mkdir(parents=True)
    (an / "partition.json").write_text(
        json.dumps(
            {
                "dataset": "cifar10",
                "nodes": 4,
                "seed": 1,
                "skews": {
                    "0.0": [[5, 5, 5]] * 4,
                    "0.8": [[12, 2, 1], [1, 12, 2], [2, 1, 12], [5, 5, 5]],
                },
            }
        )
    )
    ring = {
        "name": "directed_ring",
        "nodes": 4,
        "W": [[0.5, 0, 0, 0.5], [0.5, 0.5, 0, 0], [0, 0.5, 0.5, 0], [0, 0, 0.5, 0.5]],
        "edges": [[0, 1], [1, 2], [2, 3], [3, 0]],
        "spectral_gap": 0.29,
    }
    (an / "topology_ring.json").write_text(json.dumps(ring))
    torus = {
        "name": "torus",
        "nodes": 4,
        "W": [[0.25] * 4] * 4,
        "spectral_gap": 1.0,
        "edges": [[a, b] for a in range(4) for b in range(4) if a != b],
        "positions": [[0, 0], [1, 0], [0, -1], [1, -1]],
    }
    (an / "topology_torus.json").write_text(json.dumps(torus))
    return {"root": root, "manifest": manifest, "cost": cost, "analysis": an, "paper": PAPER_CSV}


def _write(path: Path, rows: list[dict]) -> None:
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def write_cost(
    cost: Path,
    comm_ratio: float = 4.0,
    energy_eff: float = 19.9,
    mem_eff: float = 3.6,
    topk_ratio: float = 2.0,
) -> None:
    """The cost model's files; ``wire_bytes.csv`` with a dense message ``comm_ratio`` times and a
    top-k message (uint16 indices: the claim implies 2x) ``topk_ratio`` times smaller at 8 bits."""
    _write(
        cost / "wire_bytes.csv",
        [
            {
                "model": "resnet20",
                "norm": "evonorm",
                "format": fmt,
                "compression": c,
                "index_bytes": b,
                "bytes_fp32": fp,
                "bytes_int8": fp / r,
                "ratio": r,
                "implied_ratio": (4 + b) / (1 + b),
                "paper_ratio": 4.0,
            }
            for fmt, c, b, fp, r in (
                ("dense", 0.0, 0, 1093036, comm_ratio),
                ("top-k", 0.99, 2, 16606, topk_ratio),
            )
        ],
    )
    _write(
        cost / "table3_data.csv",
        [
            {
                "model": "resnet20",
                "reading": "paper configuration",
                "topology": "directed_ring",
                "nodes": 8,
                "compression": 0.0,
                "gb_fp32": 42.85,
                "gb_fp32_paper": 42.85,
                "gb_int8": 42.85 / comm_ratio,
                "gb_int8_paper": 10.71,
                "agrees_printed": True,
            }
        ],
    )
    rows = []
    for phase in ("training", "inference"):
        for model in ("resnet20", "vgg11"):
            for norm in ("rangebn", "rangeen"):
                me = mem_eff if model.startswith("resnet") else 1.3
                rows.append(
                    {
                        "model": model,
                        "norm": norm,
                        "phase": phase,
                        "batch": 32,
                        "memory_fp32_mib": 100.0,
                        "memory_int8_mib": 100.0 / me,
                        "memory_efficiency": me,
                        "energy_fp32_mj": 20.0,
                        "energy_int8_mj": 20.0 / energy_eff,
                        "energy_efficiency": energy_eff,
                    }
                )
    _write(cost / "table10.csv", rows)
    for n in (7, 9):
        _write(
            cost / f"table{n}.csv",
            [
                {
                    "model": "resnet20",
                    "batch": 32,
                    "norm": norm,
                    "precision": p,
                    "layer_type": t,
                    "label": lbl,
                    "layers": 21,
                    "additions": 1e9,
                    "multiplications": 2e9,
                    "energy_mj": 5.0 if p == "fp32" else 0.25,
                    "energy_share": 0.5,
                }
                for norm in ("rangebn", "rangeen")
                for p in ("fp32", "int8")
                for t, lbl in (("conv", "Conv"), ("total", "Total"))
            ],
        )
    _write(
        cost / "fig7_memory.csv",
        [
            {
                "model": "resnet20",
                "norm": "rangeen",
                "precision": p,
                "batch": 32,
                "kind": k,
                "mib": v,
                "share": 0.5,
            }
            for p in ("fp32", "int8")
            for k, v in (("activations", 80.0 if p == "fp32" else 20.0), ("weights", 1.0))
        ],
    )
    _write(
        cost / "fig7_compute.csv",
        [
            {
                "mode": "training",
                "model": "resnet20",
                "batch": 32,
                "norm": "rangeen",
                "precision": p,
                "layer_type": "conv",
                "label": "Conv",
                "layers": 21,
                "additions": 1,
                "multiplications": 1,
                "energy_mj": 18.0 if p == "fp32" else 0.9,
                "energy_share": 1.0,
            }
            for p in ("fp32", "int8")
        ],
    )
