"""Grid expansion (lpdt.grid): overlays, axes, run sharing, the paper's grid."""

import json
from pathlib import Path

import pytest
import yaml

from lpdt import grid
from lpdt.plan import samples

REPO = Path(__file__).resolve().parents[2]

# A small spec on generated data, so that every run config resolves with the built-in registries.
SPEC = {
    "defaults": {"device": "cpu", "data": {"dataset": "synthetic"}, "train": {"epochs": 1}},
    "coordinates": {
        "model": "model.name",
        "norm": "model.norm",
        "skew": "partition.skew",
        "compression": {
            "0": {"algorithm": {"compression": {"name": "none", "ratio": 0.0}}},
            "99": {"algorithm": {"compression": {"name": "topk", "ratio": 0.99}}},
        },
        "precision": {
            "fp32": {"precision": {"mode": "fp32"}},
            "int8": {"precision": {"mode": "int8"}, "model": {"norm": "rangeen"}},
        },
    },
    "studies": {
        "tab": {
            "kind": "grid",
            "fixed": {"model": "tiny_cnn"},
            "grid": {"compression": [0, 99], "skew": [0.0, 0.8], "precision": ["fp32"]},
        },
        "fig": {"kind": "grid", "same_as": "tab"},
        "norms": {
            "kind": "grid",
            "fixed": {"model": "tiny_cnn", "compression": 0, "skew": 0.8},
            "blocks": {
                "fp": {"fixed": {"precision": "fp32"}, "grid": {"norm": ["batchnorm", "evonorm"]}},
                "lp": {"fixed": {"precision": "int8", "norm": "evonorm"}},
            },
        },
        "parts": {
            "kind": "partition",
            "class_sizes": "cifar10",
            "nodes": 8,
            "skews": [0.0],
            "out": "partition.json",
        },
    },
}


def test_deep_merge_merges_mappings_replaces_lists_and_null_deletes():
    base = {"a": {"b": 1, "c": [1, 2]}, "d": {"e": 1}, "f": "key.path"}
    over = {"a": {"c": [3], "x": 0}, "d": None, "f": {"v": {}}}
    merged = grid.deep_merge(base, over, null_deletes=True)  # lpdt.config.deep_merge
    assert merged == {"a": {"b": 1, "c": [3], "x": 0}, "f": {"v": {}}}
    assert base["a"]["c"] == [1, 2]  # inputs untouched


def test_grid_points_product_and_zipped_axes():
    pts = grid.grid_points({"a": [1, 2], "b+c": [[3, 4], [5, 6]]})
    assert pts == [
        {"a": 1, "b": 3, "c": 4},
        {"a": 1, "b": 5, "c": 6},
        {"a": 2, "b": 3, "c": 4},
        {"a": 2, "b": 5, "c": 6},
    ]
    assert grid.grid_points({}) == [{}]
    with pytest.raises(grid.GridError, match="b\\+c"):
        grid.grid_points({"b+c": [[1, 2, 3]]})


def test_fragment_key_or_table_and_clear_errors():
    c = SPEC["coordinates"]
    assert grid.fragment(c, "skew", 0.4) == {"partition": {"skew": 0.4}}
    assert grid.fragment(c, "compression", 99)["algorithm"]["compression"]["ratio"] == 0.99
    with pytest.raises(grid.GridError, match="no value 50"):
        grid.fragment(c, "compression", 50)
    with pytest.raises(grid.GridError, match="unknown coordinate 'nodez'"):
        grid.fragment(c, "nodez", 8)


def test_a_studies_file_that_cannot_be_read_is_one_line(tmp_path):
    """A directory, text that is not YAML, bytes that are not text, an empty file: one
    ``GridError`` each (the directory "did not exist"; the next two were tracebacks; an empty
    or comments-only scale file read as "change nothing", and made its scale the paper's grid
    of 289 runs)."""
    with pytest.raises(grid.GridError, match="is a directory, not a file"):
        grid.read_yaml(tmp_path)
    bad = tmp_path / "s.yaml"
    for content, says in (
        (b"a: [1,\n", "is not valid YAML"),
        (b"\xff\xfe", "is not text"),
        (b"", "is empty"),
        (b"# the quick scale\n\n", "is empty"),
        (b"null\n", "is empty"),
    ):
        bad.write_bytes(content)
        with pytest.raises(grid.GridError, match=rf"s\.yaml {says}") as e:
            grid.read_yaml(bad)
        assert "\n" not in str(e.value)


def test_expand_shares_runs_and_same_as_copies_them():
    runs = grid.expand(SPEC)
    tab = [r for r in runs.values() if "tab" in r.studies]
    assert len(tab) == 4
    assert all(r.studies["fig"] == r.studies["tab"] for r in tab)
    # norms/fp/evonorm at 0 %, skew 0.8 is the very same config as tab's (0, 0.8) cell
    shared = [r for r in runs.values() if {"tab", "norms"} <= set(r.studies)]
    assert len(shared) == 1 and shared[0].config["partition"]["skew"] == 0.8
    assert len(runs) == 4 + 3 - 1
    assert all(len(r.run_id) == 12 for r in runs.values())


def test_coordinates_apply_in_declared_order():
    # precision comes after norm in `coordinates`, so int8 forces Range-EvoNorm
    runs = grid.expand(SPEC)
    lp = [r for r in runs.values() if r.config["precision"]["mode"] == "int8"]
    assert len(lp) == 1 and lp[0].config["model"]["norm"] == "rangeen"


def test_manifest_lists_runs_per_study_with_coords():
    runs = grid.expand(SPEC)
    m = grid.manifest(runs, SPEC, "smoke", "results/runs")
    assert m.scale == "smoke" and set(m.studies) == {"tab", "fig", "norms"}
    entry = m.studies["tab"].runs[0]
    assert entry.dir == f"results/runs/{entry.run_id}"
    assert entry.coords == {
        "model": "tiny_cnn",
        "compression": 0,
        "skew": 0.0,
        "precision": "fp32",
    }
    assert len(m.studies["norms"].runs) == 3


def test_the_manifest_reads_back_and_a_bad_one_is_one_line_naming_the_file(tmp_path):
    spec = grid.deep_merge(SPEC, {"studies": {"tab": {"seeds": 2}}})
    m = grid.manifest(grid.expand(spec), spec, "smoke", "results/runs")
    p = tmp_path / "manifest.json"
    p.write_text(grid.manifest_text(m))
    assert grid.Manifest.read(p) == m and grid.manifest_text(grid.Manifest.read(p)) == p.read_text()
    assert list(json.loads(p.read_text())["studies"]["tab"]["runs"][0]) == [
        "run_id",
        "dir",
        "block",
        "coords",
        "seed",
    ]
    for change, says in (
        (("seed", "1"), "field 'studies.tab.runs[0].seed' must be int, not \"1\""),
        (("sede", 1), "unknown field 'studies.tab.runs[0].sede'"),
    ):
        data = json.loads(p.read_text())
        data["studies"]["tab"]["runs"][0][change[0]] = change[1]
        p.write_text(json.dumps(data))
        with pytest.raises(grid.ManifestError) as e:
            grid.Manifest.read(p)
        assert str(e.value) == f"manifest {p}: {says}"
    p.write_text('{"scale": "smoke", "studies": {"tab": {"kind": "sweep", "runs": []}}}')
    with pytest.raises(grid.ManifestError, match="'studies.tab.kind' must be 'baseline' or 'grid'"):
        grid.Manifest.read(p)
    p.write_text("{")
    with pytest.raises(grid.ManifestError, match=f"^manifest {p} is not valid JSON"):
        grid.Manifest.read(p)
    with pytest.raises(FileNotFoundError, match="not found"):
        grid.Manifest.read(tmp_path / "nope.json")


def test_invalid_run_config_names_study_block_and_key():
    bad = grid.deep_merge(SPEC, {"studies": {"tab": {"config": {"train": {"epoch": 3}}}}})
    with pytest.raises(grid.GridError, match="study 'tab', block 'main'.*'train.epoch'"):
        grid.expand(bad)


def test_write_if_changed_keeps_mtime(tmp_path):
    p = tmp_path / "a" / "c.yaml"
    assert grid.write_if_changed(p, "x: 1\n")
    t = p.stat().st_mtime_ns
    assert not grid.write_if_changed(p, "x: 1\n") and p.stat().st_mtime_ns == t
    assert grid.write_if_changed(p, "x: 2\n") and p.read_text() == "x: 2\n"


def _cells(spec: dict, study: str) -> int:
    s = spec["studies"][study]
    return sum(len(grid.grid_points(b.get("grid") or {})) for b in grid.blocks_of(s).values())


def test_paper_grid_matches_reference_13():
    """Cells per study in the paper scale, as reference §13 counts them."""
    spec = grid.load(REPO / "config/studies.yaml", REPO / "config/scales/paper.yaml")
    counts = {
        s: _cells(spec, s) for s in ("table2", "table3", "table4", "table5", "table6", "fig1")
    }
    # Table 3 is the superset: {R20, R54} x ring {8, 16} x {0, 99} x 4 skews x 4 variants
    # + VGG-11 x {torus16, ring16} x {0, 99} x 4 skews x 4 variants
    assert counts == {
        "table2": 14,
        "table3": 128 + 64,
        "table4": 16,
        "table5": 16,
        "table6": 48,
        "fig1": 5,
    }
    for fig, table in (("fig4", "table3"), ("fig5", "table4"), ("fig6", "table5")):
        assert spec["studies"][fig]["same_as"] == table


SCALES = sorted(p.stem for p in (REPO / "config/scales").glob("*.yaml"))
# The scales that cover every table and figure; quick-claims keeps the claims' studies only.
COMPLETE = {"smoke", "quick", "paper"}


def test_the_scales_are_the_ones_named_here():
    assert set(SCALES) == COMPLETE | {"quick-claims"}


@pytest.mark.parametrize("scale", SCALES)
def test_every_scale_overlay_merges_into_a_valid_spec(scale):
    import jsonschema

    scale_schema = yaml.safe_load((REPO / "workflow/schemas/scale.schema.yaml").read_text())
    for path, _ in grid.scale_chain(REPO / f"config/scales/{scale}.yaml"):
        jsonschema.validate(yaml.safe_load(path.read_text()), scale_schema)
    spec = grid.load(REPO / "config/studies.yaml", REPO / f"config/scales/{scale}.yaml")
    schema = yaml.safe_load((REPO / "workflow/schemas/studies.schema.yaml").read_text())
    jsonschema.validate(spec, schema)
    studies = ("table2", "table3", "table4", "fig1")
    if scale in COMPLETE:
        studies += ("table5", "table6")
    for s in studies:
        assert _cells(spec, s) >= 1, s


def test_quick_claims_is_quick_without_the_illustrative_cells():
    def runs(scale: str) -> dict:
        spec = grid.load(REPO / "config/studies.yaml", REPO / f"config/scales/{scale}.yaml")
        return grid.expand(spec)

    claims, full = runs("quick-claims"), runs("quick")
    assert set(claims) < set(full)  # every quick-claims run, with its run id, is a quick run
    extra = [full[r] for r in set(full) - set(claims)]
    assert {s for r in extra for s in r.studies} == {
        "table2",
        "table5",
        "fig6",
        "table6",
        "messages",
    }
    assert all(m.seed == 1234 for r in extra for ms in r.studies.values() for m in ms)


def test_an_empty_scale_file_is_an_error_not_the_paper_grid(tmp_path):
    """An empty scale overlay stops grid.load with one line naming the file; ``{}`` (an
    explicit empty mapping) is still the studies as they are."""
    scale = tmp_path / "quick.yaml"
    scale.write_text("# cut off after its header\n")
    with pytest.raises(grid.GridError, match=r"quick\.yaml is empty"):
        grid.load(REPO / "config/studies.yaml", scale)
    scale.write_text("{}\n")
    assert grid.load(REPO / "config/studies.yaml", scale) == grid.read_yaml(
        REPO / "config/studies.yaml"
    )


def test_a_scale_base_chain_merges_before_the_studies(tmp_path):
    (tmp_path / "a.yaml").write_text(
        "studies: {s: {blocks: {x: null, y: {grid: {k: [1]}}}}, t: null}\n"
    )
    (tmp_path / "b.yaml").write_text("base: a\nstudies: {s: {blocks: {x: {}}}, t: {}}\n")
    assert [p.name for p, _ in grid.scale_chain(tmp_path / "b.yaml")] == ["b.yaml", "a.yaml"]
    # b restores what a deleted: the mapping replaces a's null before the studies are met
    assert grid.read_scale(tmp_path / "b.yaml") == {
        "studies": {"s": {"blocks": {"x": {}, "y": {"grid": {"k": [1]}}}}, "t": {}}
    }
    studies = tmp_path / "studies.yaml"
    studies.write_text("studies: {s: {blocks: {x: {a: 1}, y: {a: 2}}}, t: {a: 3}}\n")
    assert grid.load(studies, tmp_path / "a.yaml")["studies"] == {
        "s": {"blocks": {"y": {"a": 2, "grid": {"k": [1]}}}}
    }
    assert grid.load(studies, tmp_path / "b.yaml")["studies"] == {
        "s": {"blocks": {"x": {"a": 1}, "y": {"a": 2, "grid": {"k": [1]}}}},
        "t": {"a": 3},
    }


@pytest.mark.parametrize(
    ("files", "match"),
    [
        ({"a.yaml": "base: b\n", "b.yaml": "base: a\n"}, "loops: a -> b -> a"),
        ({"a.yaml": "base: nope\n"}, "base scale 'nope' not found"),
        ({"a.yaml": "base: 3\n"}, "base must be the name of another scale"),
    ],
)
def test_a_bad_scale_base_is_a_one_line_error(tmp_path, files, match):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(grid.GridError, match=match):
        grid.read_scale(tmp_path / "a.yaml")


# --- seeds ---------------------------------------------------------------------------------------


def _seeded(**where) -> dict:
    """SPEC with `seeds` set at the given places: top=..., study=..., block=..."""
    over: dict = {"studies": {"norms": {}}}
    if "top" in where:
        over["seeds"] = where["top"]
    if "study" in where:
        over["studies"]["norms"]["seeds"] = where["study"]
    if "block" in where:
        over["studies"]["norms"]["blocks"] = {"fp": {"seeds": where["block"]}}
    return grid.deep_merge(SPEC, over)


def test_seeds_expand_each_cell_into_runs_with_distinct_ids():
    runs = grid.expand(_seeded(study=3))
    norms = [r for r in runs.values() if "norms" in r.studies]
    assert len(norms) == 3 * 3 and len({r.run_id for r in norms}) == 9
    for r in norms:
        seed = r.studies["norms"][0].seed
        assert r.config["seed"] == seed and r.config["partition"]["seed"] == seed
    # seeds base, base+1, base+2 from the run config's seed (the default 1234 here)
    assert {r.config["seed"] for r in norms} == {1234, 1235, 1236}
    # each (block, coords) cell has one run per seed
    cells = {}
    for r in norms:
        for m in r.studies["norms"]:
            cells.setdefault((m.block, tuple(sorted(m.coords.items()))), set()).add(m.seed)
    assert len(cells) == 3 and all(s == {1234, 1235, 1236} for s in cells.values())


def test_one_seed_is_the_run_of_no_seeds_key_and_the_first_of_several():
    plain = grid.expand(SPEC)
    assert set(grid.expand(_seeded(top=1))) == set(plain)
    assert set(plain) < set(grid.expand(_seeded(top=2)))


def test_seeds_from_the_run_config_seed():
    spec = grid.deep_merge(_seeded(study=2), {"defaults": {"seed": 7}})
    norms = [r for r in grid.expand(spec).values() if "norms" in r.studies]
    assert {r.config["seed"] for r in norms} == {7, 8}


def test_block_seeds_override_study_and_top_level():
    runs = grid.expand(_seeded(top=2, study=3, block=[5, 9]))
    seeds = {(m.block, m.seed) for r in runs.values() for m in r.studies.get("norms", [])}
    assert {s for b, s in seeds if b == "fp"} == {5, 9}
    assert {s for b, s in seeds if b == "lp"} == {1234, 1235, 1236}
    assert {m.seed for r in runs.values() for m in r.studies.get("tab", [])} == {1234, 1235}


def test_manifest_records_the_seed_and_same_as_copies_every_seed():
    spec = grid.deep_merge(SPEC, {"studies": {"tab": {"seeds": 2}}})
    m = grid.manifest(grid.expand(spec), spec, "smoke", "results/runs")
    tab, fig = m.studies["tab"].runs, m.studies["fig"].runs
    assert len(tab) == 8 and sorted({e.seed for e in tab}) == [1234, 1235]
    assert tab == fig
    # runs of one cell differ only by seed: same coords, different ids
    by_cell: dict = {}
    for e in tab:
        by_cell.setdefault(tuple(sorted(e.coords.items())), []).append((e.seed, e.run_id))
    assert all(len({rid for _, rid in v}) == 2 for v in by_cell.values())
    assert m.studies["norms"].runs[0].seed == 1234  # default: one seed, recorded
    assert all("seed" in r for r in samples.plan_rows(grid.expand(spec)))


@pytest.mark.parametrize("bad", [0, -1, [], [1, 1], "3", [1, "a"], True, 1.5])
def test_bad_seeds_are_one_line_errors(bad):
    import jsonschema

    spec = _seeded(study=bad)
    with pytest.raises(grid.GridError, match="study 'norms', block 'fp'.*seeds") as e:
        grid.expand(spec)
    assert "\n" not in str(e.value)
    schema = yaml.safe_load((REPO / "workflow/schemas/studies.schema.yaml").read_text())
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(spec, schema)


def test_paper_scale_has_one_seed_and_one_value_raises_it():
    spec = grid.load(REPO / "config/studies.yaml", REPO / "config/scales/paper.yaml")
    assert spec["seeds"] == 1
    assert _cells(spec, "table4") == 16
    spec["studies"]["table4"]["seeds"] = 3
    runs = grid.expand(spec)
    assert sum(len(r.studies.get("table4", [])) for r in runs.values()) == 48


SMALL = {"defaults": {"data": {"train_subset": 256}}}  # short runs: batched


def test_run_batches_group_the_seeds_of_a_cell_then_single_runs_by_model():
    runs = grid.expand(grid.deep_merge(_seeded(top=2, study=3, block=[5, 9]), SMALL))
    batches = grid.run_batches(runs)
    batched = [r for ids in batches.values() for r in ids]
    assert len(batched) == len(set(batched))  # a run is in one batch at most
    seeds = {b: ids for b, ids in batches.items() if b.startswith("seeds-")}
    assert seeds and all(name == grid.batch_name("seeds", ids) for name, ids in seeds.items())
    assert all(name.startswith(f"seeds-{ids[0]}-") for name, ids in seeds.items())
    for ids in seeds.values():  # one cell: the same config but for the seeds
        assert len(ids) >= 2
        cells = {
            json.dumps(grid.deep_merge(runs[r].config, {"seed": 0, "partition": {"seed": 0}}))
            for r in ids
        }
        assert len(cells) == 1 and len({runs[r].config["seed"] for r in ids}) == len(ids)
    # one seed everywhere: no batch of seeds; the runs of each model with several runs are one
    single = grid.expand(grid.deep_merge(SPEC, SMALL))
    by_model = grid.run_batches(single)
    assert by_model and all(b.startswith("runs-") for b in by_model)
    for name, ids in by_model.items():
        assert (
            name == grid.batch_name("runs", ids)
            and len({single[r].config["model"]["name"] for r in ids}) == 1
        )
    models = [r.config["model"]["name"] for r in single.values()]
    left = {
        single[r].config["model"]["name"]
        for r in single
        if r not in {x for v in by_model.values() for x in v}
    }
    assert all(models.count(m) == 1 for m in left)  # a model's only run stays a job of its own
    # runs of a dataset of unknown size (no DatasetSpec.train_size), or long ones, are never
    # batched; the generated dataset's size is known (its reader's 512 images)
    from lpdt.data import DATASETS, DatasetSpec

    DATASETS.add("unsized", DatasetSpec("lpdt.data.synthetic:load_synthetic"))  # images
    try:
        unknown = {"defaults": {"data": {"dataset": "unsized"}}}
        assert grid.run_batches(grid.expand(grid.deep_merge(SPEC, unknown))) == {}
    finally:
        DATASETS.remove("unsized")
    assert grid.run_batches(grid.expand(SPEC)) != {}
    long = {"defaults": {"data": {"train_subset": 50000}, "train": {"epochs": 200}}}
    assert grid.run_batches(grid.expand(grid.deep_merge(SPEC, long))) == {}


def test_a_batch_whose_runs_change_is_another_batch():
    """A seed added to a cell gives its batch another name (the workflow then trains it rather
    than take the old batch's stamp as done)."""
    spec = grid.deep_merge(_seeded(top=2, study=3, block=[5, 9]), SMALL)
    more = grid.deep_merge(spec, {"studies": {"norms": {"blocks": {"fp": {"seeds": [5, 9, 11]}}}}})
    before, after = grid.run_batches(grid.expand(spec)), grid.run_batches(grid.expand(more))
    grown = [b for b in after if b not in before]  # the block's cells, each with one more seed
    assert grown
    for b in grown:  # the same first run, so the same prefix; one run more, another name
        old = [n for n in before if n.startswith(f"seeds-{after[b][0]}-")]
        assert len(old) == 1 and old[0] != b and len(after[b]) == len(before[old[0]]) + 1
    kept = set(before) & set(after)  # the cells whose seeds did not change keep their names
    assert all(before[b] == after[b] for b in kept)
