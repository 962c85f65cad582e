"""The report's text follows the results: two result sets that differ in every number and setup
give reports whose numbers and setups differ accordingly; nothing about our runs is a literal.

Set A is the fake tree of conftest.py. Set B is the same tree with other setups (Figure 1's
model, graph and skew; the tables' graph; the seed; the partition; the graphs; the cost model's
batch and energy table; the scale's name), other numbers (every accuracy, paired effect, epoch
count, training time and cost-model output) and a few more runs. The PDF's text (pdftotext):

- names each set's own setups in the figure and table captions, never the other set's;
- where the two reports read the same (a common run of words), holds only numbers that do not
  come from our runs: the paper's (config/paper_results.csv, the cost model's copies of Tables 3
  and 10, the claims' paper effects), the claims' statements and thresholds, the paper's
  formulas, references to tables / figures / sections / pages, versions, commit and date.
"""

from __future__ import annotations

import difflib
import json
import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from lpdt.record import read as read_record
from lpdt.report import cli
from lpdt.report.claims import CLAIMS
from lpdt.report.cost_tables import FORMULAS
from lpdt.report.paper import load_paper
from tests.fake_records import fake_record
from tests.report.conftest import PAPER_CSV, make_tree, report_args, write_cost

pytestmark = pytest.mark.skipif(not shutil.which("pdftotext"), reason="poppler-utils not installed")

COST_PAPER = [
    Path(__file__).resolve().parents[2] / "src" / "lpdt" / "cost" / f
    for f in ("paper_table3_data.csv", "paper_table10.csv")
]

# The setups and numbers of the two sets: each is what the report must say about that set.
SETUPS = {
    "A": {
        "scale": "testscale",
        "fig1": {"model": "resnet20", "nodes": 8, "skew": 0.8},
        "table_nodes": 8,
        "seed": None,
        "partition": {"nodes": 4, "seed": 1},
        "ring_nodes": 4,
        "torus_nodes": 4,
        "batch": 32,
        "energy": {"fp32_add": 0.9, "fp32_mult": 3.7, "int8_add": 0.03, "int8_mult": 0.2},
        "cost": {},
        "cost_scale": 1.0,
        "int8_memory": 1.0,
        "epochs": 3,
        "time_s": 60.0,
        "acc": {},
        "extra_runs": False,
    },
    "B": {
        "scale": "otherscale",
        "fig1": {"model": "resnet54", "nodes": 16, "skew": 0.9},
        "table_nodes": 16,
        "seed": 4321,
        "partition": {"nodes": 5, "seed": 77},
        "ring_nodes": 6,
        "torus_nodes": 9,
        "batch": 48,
        "energy": {"fp32_add": 1.1, "fp32_mult": 4.4, "int8_add": 0.05, "int8_mult": 0.3},
        "cost": {"comm_ratio": 3.7, "energy_eff": 17.3, "mem_eff": 3.3},
        "cost_scale": 1.7,
        "int8_memory": 1.13,
        "epochs": 5,
        "time_s": 97.0,
        "extra_runs": True,
        # accuracy += shift + per-coordinate terms, so that every paired effect changes too
        "acc": {
            "shift": -3.37,
            "int8": 0.71,
            "deepsqueeze": -1.13,
            "skew": -2.9,
            "qgm": 0.83,
            "compressed": -0.61,
            "batchnorm": -1.47,  # Figure 1's norm claims
        },
    },
}


def _acc_change(a: dict, coords: dict) -> float:
    if not a:
        return 0.0
    return (
        a["shift"]
        + a["int8"] * (coords.get("precision") == "int8")
        + a["deepsqueeze"] * (coords.get("algorithm") == "deepsqueeze")
        + a["skew"] * float(coords.get("skew", 0.0))
        + a["qgm"] * bool(coords.get("qgm"))
        + a["compressed"] * (float(coords.get("compression", 0)) > 0)
        + a["batchnorm"] * (coords.get("norm") == "batchnorm")
    )


# Runs set B adds (study, run id, coords, accuracy): cells of Tables 2, 4, 5 and 6, so that
# no count of runs or cells is the same in both sets.
EXTRA_RUNS = [
    (
        "table2",
        "x2",
        {
            "dataset": "cifar10",
            "model": "resnet54",
            "nodes": 1,
            "topology": "directed_ring",
            "algorithm": "choco",
            "compression": 0,
            "skew": 0.0,
            "precision": "fp32",
        },
        83.3,
    ),
    (
        "table4",
        "x4",
        {
            "dataset": "cifar10",
            "model": "resnet20",
            "topology": "directed_ring",
            "nodes": 8,
            "algorithm": "choco",
            "qgm": True,
            "compression": 99,
            "skew": 0.9,
            "precision": "int8",
        },
        66.6,
    ),
    (
        "table4",
        "x4b",
        {
            "dataset": "cifar10",
            "model": "resnet20",
            "topology": "directed_ring",
            "nodes": 8,
            "algorithm": "choco",
            "qgm": True,
            "compression": 0,
            "skew": 0.0,
            "precision": "fp32",
        },
        79.4,
    ),
    (
        "table5",
        "x5",
        {
            "dataset": "imagenette",
            "model": "resnet18",
            "topology": "torus",
            "nodes": 8,
            "compression": 0,
            "skew": 0.0,
            "algorithm": "choco",
            "precision": "fp32",
        },
        61.3,
    ),
    (
        "table5",
        "x5b",
        {
            "dataset": "imagenette",
            "model": "resnet18",
            "topology": "torus",
            "nodes": 8,
            "compression": 90,
            "skew": 0.6,
            "algorithm": "choco",
            "precision": "int8",
        },
        57.2,
    ),
    (
        "table6",
        "x6",
        {
            "dataset": "agnews",
            "model": "distilbert",
            "topology": "directed_ring",
            "nodes": 4,
            "compression": 99,
            "skew": 0.5,
            "algorithm": "choco",
            "precision": "int8",
        },
        71.9,
    ),
]


def _runs(root: Path, manifest: dict, s: dict) -> None:
    """Every listed run again with set ``s``'s numbers, epochs, time and seed; plus its extra runs."""
    runs = root / "results" / "runs"
    for study, spec in manifest["studies"].items():
        for e in spec["runs"]:
            d = runs / e["run_id"]
            if (d / "metrics.json").exists():
                old = read_record(d / "metrics.json")
                acc = old.final.acc_node_mean if old.final else 85.0
                config = old.config | ({"seed": s["seed"]} if s["seed"] else {})
                fake_record(
                    old.run_id,
                    acc + _acc_change(s["acc"], e["coords"]),
                    status=old.status,
                    epochs=s["epochs"],
                    total_s=s["time_s"],
                    config=config,
                ).write(d)
            if study == "fig1":
                e["coords"].update(s["fig1"])
            elif e["coords"].get("nodes") == 8:  # the decentralized table runs
                e["coords"]["nodes"] = s["table_nodes"]
    if not s["extra_runs"]:
        return
    for study, rid, coords, acc in EXTRA_RUNS:
        config = {"model": {"name": coords["model"]}} | ({"seed": s["seed"]} if s["seed"] else {})
        fake_record(rid, acc, epochs=s["epochs"], total_s=s["time_s"], config=config).write(
            runs / rid
        )
        manifest["studies"].setdefault(study, {"kind": "grid", "runs": []})["runs"].append(
            {"run_id": rid, "dir": f"results/runs/{rid}", "coords": coords}
        )


def _analyses(an: Path, s: dict) -> None:
    nodes = s["partition"]["nodes"]
    (an / "partition.json").write_text(
        json.dumps(
            {
                "dataset": "cifar10",
                "nodes": nodes,
                "seed": s["partition"]["seed"],
                "skews": {"0.0": [[4, 4, 4]] * nodes, "0.9": [[10, 1, 1]] * nodes},
            }
        )
    )
    for f in an.glob("topology*.json"):
        f.unlink()
    for name, n in (("directed_ring", s["ring_nodes"]), ("torus", s["torus_nodes"])):
        (an / f"topology_{name}.json").write_text(
            json.dumps(
                {
                    "name": name,
                    "nodes": n,
                    "edges": [[i, (i + 1) % n] for i in range(n)],
                    "spectral_gap": 1.0 / n,
                    "directed": name == "directed_ring",
                }
            )
        )


def _cost(cost: Path, s: dict) -> None:
    """The conftest cost outputs with set ``s``'s batch and sizes (every count, memory, energy
    and volume times cost_scale; 8-bit memory times int8_memory) and its energy table."""
    write_cost(cost, **s["cost"])
    f = s["cost_scale"]
    for path in cost.glob("*.csv"):
        c = pd.read_csv(path)
        if "batch" in c:
            c["batch"] = s["batch"]
        for col in (
            "additions",
            "multiplications",
            "energy_mj",
            "mib",
            "memory_fp32_mib",
            "memory_int8_mib",
            "energy_fp32_mj",
            "energy_int8_mj",
            "gb_fp32",
            "gb_int8",
        ):
            if col in c:
                c[col] = c[col] * f
        if "layers" in c:
            c["layers"] = (c["layers"] * f).round().astype(int)
        if "memory_int8_mib" in c:
            c["memory_int8_mib"] *= s["int8_memory"]
            c["memory_efficiency"] = c["memory_fp32_mib"] / c["memory_int8_mib"]
        c.to_csv(path, index=False)
    (cost / "summary.json").write_text(
        json.dumps({"batch": s["batch"], "energy_table_pj": s["energy"] | {"source": "test table"}})
    )


def build_set(root: Path, s: dict) -> dict[str, Path]:
    """The conftest tree, then set ``s``'s setups and numbers written into it."""
    tree = make_tree(root)
    m = json.loads(tree["manifest"].read_text())
    m["scale"] = s["scale"]
    _runs(root, m, s)
    tree["manifest"].write_text(json.dumps(m))
    _analyses(tree["analysis"], s)
    _cost(tree["cost"], s)
    return tree


def report_text(tree: dict, out: Path) -> str:
    assert cli.run(report_args(tree, out)) == 0
    text = subprocess.run(
        ["pdftotext", "-layout", str(out / "report.pdf"), "-"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return re.sub(r"[ \t]+", " ", text)


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    out = {}
    for key, s in SETUPS.items():
        root = tmp_path_factory.mktemp(f"set{key}")
        text = report_text(build_set(root, s), root / "out")
        claims = json.loads((root / "out" / "claims.json").read_text())["claims"]
        out[key] = {"text": text, "claims": claims}
    return out


# --- each report names its own setups ------------------------------------------------------------


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def _between(text: str, start: str, end: str) -> str:
    """The flattened text from ``start`` up to ``end`` (both plain strings)."""
    flat = _flat(text)
    i = flat.index(start)
    j = flat.find(end, i + len(start))
    return flat[i : j if j > 0 else len(flat)]


def _has(text: str, phrase: str) -> bool:
    """``phrase`` as a whole: not inside a longer number or word ('6-node' is not '16-node')."""
    return re.search(rf"(?<![\w.]){re.escape(phrase)}(?![\w])", text) is not None


def places(s: dict) -> dict[tuple[str, str], list[str]]:
    """(start, end) of a part of the report -> what that part must say about set ``s``, built
    from the set's own values."""
    f1, e = s["fig1"], s["energy"]
    return {
        ("Low Precision Decentralized Training", "Claim (paper)"): [f"scale {s['scale']}"],
        ("Figure 1.", "Figure 2."): [
            f"model {f1['model']}",
            f"nodes {f1['nodes']}",
            f"skew {f1['skew']:g}",
            f"{s['epochs']} epochs",
        ],
        ("Figure 2.", "Figure 3."): [
            f"{s['partition']['nodes']} nodes",
            f"partition seed {s['partition']['seed']}",
        ],
        ("Figure 3.", "Figure 4."): [
            f"{s['ring_nodes']}-node directed ring",
            f"{s['torus_nodes']}-node torus",
        ],
        ("Figure 4.", "Figure 5."): [f"nodes {s['table_nodes']}"],
        ("Figure 7.", "lpdt report"): [f"batch {s['batch']}"],
        ("Table 10: memory and energy", "Phase"): [f"(our batch: {s['batch']})"],
        (
            "Table 7: operations per layer type, training (forward + backward) - our counts",
            "Table 9",
        ): [
            f"b={s['batch']}",
            f"fp32 add {e['fp32_add']:g}, mult {e['fp32_mult']:g}; "
            f"int8 add {e['int8_add']:g}, mult {e['int8_mult']:g} pJ",
        ],
    }


@pytest.mark.parametrize("key", ["A", "B"])
def test_each_report_names_its_own_setups(reports: dict[str, dict], key: str) -> None:
    other = "B" if key == "A" else "A"
    text = reports[key]["text"]
    for (start, end), phrases in places(SETUPS[key]).items():
        part = _between(text, start, end)
        theirs = places(SETUPS[other])[(start, end)]
        for mine, their in zip(phrases, theirs):
            assert _has(part, mine), (start, mine, part)
            assert not _has(part, their), (start, their, part)


# --- where both reports read the same, no number is ours -----------------------------------------


def _numbers(text: str) -> list[str]:
    """Number tokens (unsigned) that are not part of a name (resnet20, fp32, 8-bit, ...)."""
    return [
        n.lstrip("+-")
        for n in re.findall(r"(?<![A-Za-z_\d.])[-+]?\d+(?:\.\d+)*(?![\d]*-bit)", text)
    ]


def _formats(v: float) -> set[str]:
    return {f"{abs(v):.2f}", f"{abs(v):g}", f"{abs(v):.4g}", f"{abs(v):.3f}"}


def _paper_numbers(claims: list[dict]) -> set[str]:
    """Every number the report may print from the paper, in the formats it uses: its values
    (config/paper_results.csv, notes included; the cost model's copies of Tables 3 and 10) and
    the claims' paper effects."""
    p = load_paper(PAPER_CSV)
    out = set().union(*(_formats(v) for v in p["value"].dropna()))
    out |= set(_numbers(" ".join(p["note"])))
    for path in COST_PAPER:
        c = pd.read_csv(path, comment="#")
        for col in c.select_dtypes("number"):
            out = out.union(*(_formats(float(v)) for v in c[col].dropna()))
    out |= {f"{abs(c['paper_effect']):.2f}" for c in claims if c.get("paper_effect") is not None}
    return out


def _paper_coordinates() -> set[str]:
    """The coordinates of the paper's cells (nodes, compression, skew) as the tables print them:
    allowed only in a table row."""
    p = load_paper(PAPER_CSV)
    out = set()
    for col in ("nodes", "compression", "skew"):
        for v in p[col].dropna():
            out |= {str(v), f"{float(v):g}", f"{float(v):.1f}"}
    return out


def _constants() -> set[str]:
    """Numbers of the method, fixed before any result: the claims' statements, definitions and
    thresholds and the paper's operation-count formulas."""
    out = {
        f"{x:g}"
        for c in CLAIMS
        if c.threshold is not None
        for x in (c.threshold if isinstance(c.threshold, tuple) else (c.threshold,))
    }
    out |= set(_numbers(" ".join(f"{a} {m}" for t in FORMULAS.values() for a, m in t.values())))
    out |= set(_numbers(" ".join(f"{c.statement} {c.definition} {c.effect}" for c in CLAIMS)))
    return out


# Text that reads the same whatever the results: the paper's citation, references to the paper's
# tables and figures and to sections of docs, page numbers, versions, commit and date, the
# interval's level and the detectable effect's power.
INVARIANT = [
    r"Neural Networks \d{4}|arXiv \d{4}\.\d{5}",
    r"(Tables?|Figure|Fig\.|page|§)\s*\d+(\.\d+)*((\s*(-|–|,|and)\s*)\d+)*",
    r"Git commit \S+",
    r"Generated \d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC",
    r"(Version: )?[a-z]+ \d+\.\d+(\.\d+)*",
    r"\d+ % (Student|CI|interval|t-interval|power)",
    r"n - 1",
]
# A table row: a cell "ours / paper", "not run / paper" or "missing / paper".
# A table row, or a claim's cell named as left out of it (its coordinates, not our numbers).
TABLE_ROW = re.compile(r"(\d|not run|missing) / (\d|-)| left out:")


def _tokens(text: str, allowed: set[str], coordinates: set[str]) -> list[tuple[str, bool, str]]:
    """(token, is it a number of ours, its line) for every word of ``text``; invariant text
    becomes one placeholder token, and a number is "ours" unless ``allowed`` (or, in a table
    row, ``coordinates``) contains it."""
    out = []
    for line in text.splitlines():
        rest = line
        for pat in INVARIANT:
            rest = re.sub(pat, " <invariant> ", rest)
        ok = allowed | coordinates if TABLE_ROW.search(line) else allowed
        for tok in rest.split():
            ours = any(n not in ok for n in _numbers(tok))
            out.append((tok, ours, line.strip()))
    return out


def test_numbers_shared_by_both_reports_are_not_ours(reports: dict[str, dict]) -> None:
    """Where the two reports read the same (a common run of words), every number in that text
    must be one that does not come from our runs."""
    allowed = _paper_numbers(reports["A"]["claims"]) | _constants()
    coordinates = _paper_coordinates()
    a, b = (_tokens(reports[k]["text"], allowed, coordinates) for k in ("A", "B"))
    sm = difflib.SequenceMatcher(None, [t for t, _, _ in a], [t for t, _, _ in b], autojunk=False)
    bad = []
    for block in sm.get_matching_blocks():
        for tok, ours, line in a[block.a : block.a + block.size]:
            if ours:
                bad.append(f"{tok!r} in: {line}")
    assert not bad, "the same numbers of ours in both reports:\n" + "\n".join(dict.fromkeys(bad))
