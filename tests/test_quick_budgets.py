"""docs/quick-scale.md's table of the quick scale's budgets is generated from config/scales/quick.yaml:
the runs the grid expands (``lpdt.grid.expand``), each block's model, data, input, epochs, batch
and nodes read from the resolved run configs. The table in the page must be what this prints, so
that a change of the scale that leaves the page stale fails here (docs/workflow.md once said the
illustrative cells train 4 epochs and MiniLM 2 after quick.yaml had made them 2 and 1). On a
failure the message is the new table to paste; ``python -m tests.test_quick_budgets`` prints it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lpdt.data import DATASETS
from lpdt.grid import expand, load

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "quick-scale.md"
BEGIN = (
    "<!-- quick budgets: generated from config/scales/quick.yaml (tests/test_quick_budgets.py) -->"
)
END = "<!-- end of the generated quick budgets -->"
DEFAULT_PX = 32  # lpdt.data.images: the image datasets' own size without data.image_size


def _n(x: int) -> str:
    return f"{x:,}"


def _join(values: list[str]) -> str:
    return " / ".join(dict.fromkeys(values))


def _input(cfg: dict[str, Any]) -> str:
    data = cfg["data"]
    spec = DATASETS.find(data["dataset"])
    if spec is not None and str(spec.impl).startswith("lpdt.data.text"):
        return f"{data['max_length']} tokens"
    return f"{data.get('image_size') or DEFAULT_PX} px"


def _data(cfg: dict[str, Any]) -> str:
    data = cfg["data"]
    name = data["dataset"]
    return f"{name} for {data['stand_in_for']}" if data.get("stand_in_for") else name


def _sizes(cfg: dict[str, Any]) -> str:
    data = cfg["data"]
    spec = DATASETS.find(data["dataset"])
    train = data.get("train_subset") or (spec.train_size if spec else None)
    test = data.get("test_subset") or (spec.test_size if spec else None)
    return f"{_n(train) if train else '?'} / {_n(test) if test else '?'}"


def budget_table(scale: Path = ROOT / "config" / "scales" / "quick.yaml") -> str:
    """One row per (study, block) of the scale's training studies, in the grid's order."""
    runs = expand(load(ROOT / "config" / "studies.yaml", scale))
    blocks: dict[tuple[str, str], list[tuple[dict[str, Any], int]]] = {}
    for run in runs.values():
        for study, places in run.studies.items():
            for m in places:
                blocks.setdefault((study, m.block), []).append((run.config, m.seed))
    rows = [
        "| study: block | runs (seeds) | model | data | train / test | input | epochs | "
        "batch (total) | nodes |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    seen: dict[tuple[str, ...], str] = {}
    for (study, block), members in blocks.items():
        cfgs = [c for c, _ in members]
        seeds = sorted({s for _, s in members})
        cells = [
            f"{len(members)} ({len(seeds)})",
            _join([c["model"]["name"] for c in cfgs]),
            _join([_data(c) for c in cfgs]),
            _join([_sizes(c) for c in cfgs]),
            _join([_input(c) for c in cfgs]),
            _join([str(c["train"]["epochs"]) for c in cfgs]),
            _join([str(c["train"]["batch_size"]) for c in cfgs]),
            _join([str(c["topology"]["nodes"]) for c in cfgs]),
        ]
        key = tuple([block, *cells])
        if key in seen:  # a study that lists another's runs (fig4: table3's): named once
            seen[key] += f", {study}"
            continue
        seen[key] = f"{study}: {block}"
    for key, name in seen.items():
        rows.append(f"| {name} | " + " | ".join(key[1:]) + " |")
    return "\n".join(rows)


def test_the_quick_budgets_in_the_workflow_page_are_the_scales() -> None:
    text = DOC.read_text()
    assert BEGIN in text and END in text, f"{DOC}: no generated budget table"
    shown = text[text.index(BEGIN) + len(BEGIN) : text.index(END)].strip()
    want = budget_table()
    assert shown == want, f"docs/quick-scale.md's quick budgets are stale; paste:\n{want}"


def test_the_table_reads_the_scale() -> None:
    """The generator on the quick scale, checked by hand against quick.yaml's own numbers: the
    claim cells (20 epochs, 3,000 images at 12 px, total batch 32, 4 nodes), the illustrative
    cells (2 epochs; MiniLM 1), the scale's 89 runs."""
    table = budget_table().splitlines()[2:]
    by_name = {r.split(" | ")[0].lstrip("| "): r for r in table}
    assert by_name["table3: claims, fig4"].endswith(
        "| resnet8 | fashion_mnist for cifar10 | 3,000 / 10,000 | 12 px | 20 | 32 | 4 |"
    )
    assert "| 2 | 8 | 1 |" in by_name["table2: cifar_resnet"]
    assert "| 400 / 1,000 | 32 px | 2 | 128 | 1 |" in by_name["table2: cifar_vgg"]
    assert "| 128 / 128 | 32 tokens | 1 | 32 | 1 |" in by_name["table2: nlp"]
    assert sum(int(r.split(" | ")[1].split(" ")[0]) for r in table) == 89  # fig4-6: merged


if __name__ == "__main__":
    print(budget_table())
