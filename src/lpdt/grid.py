"""Studies x scale -> the list of training runs (``lpdt.grid``: used by the Snakefile, the
benchmarks and the tests; plain Python without torch at import, unit-tested in tests/workflow/).

``config/studies.yaml`` describes the paper's experiments; a scale (``config/scales/*.yaml``) is
an *overlay* with the same structure, deep-merged over it: mappings merge, lists and scalars
replace, and ``null`` deletes a key (e.g. a block); a scale may name ``base: <scale>`` to be
that scale plus its own keys. Then every study block's grid is expanded:

    run config = defaults <- coordinate fragments (in the order of ``coordinates``)
                          <- study ``config`` <- block ``config``

A coordinate is either a dotted run-config key (``skew: partition.skew``: the value is used as
is) or a table ``{value: run-config fragment}`` (``precision: {int8: {...}}``). A grid key
``a+b`` takes a list of ``[a, b]`` pairs (zipped axes, e.g. Table 5's (compression, skew) rows).
A study with ``same_as: other`` has exactly the runs of ``other`` (a figure drawn from a table's
runs). Studies with ``kind`` partition / topology / cost need no training runs.

Seeds: ``seeds`` (top level, a study's, or a block's; the innermost wins; default 1) is a count
``N`` (seeds base, base+1, ..., base+N-1, base = the run config's ``seed``) or a list of seeds.
Each seed is its own run: the seed sets ``seed`` (initialisation, data order, augmentation) and
``partition.seed`` (the partition shuffle), so seed ``base`` is the very run of ``seeds: 1``.
The manifest records each entry's ``seed``; the report pairs runs by it.

Runs are identified by ``lpdt.config.config_from_dict(cfg).run_id()``: equal resolved configs
give the same run id, so a run shared by several studies is trained once.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from lpdt.config import ConfigError, config_from_dict, deep_merge, set_path
from lpdt.errors import LpdtError
from lpdt.io import read_yaml_mapping, write_text_atomic
from lpdt.typed import Reader, to_json

TRAINING_KINDS = ("baseline", "grid")
ANALYSIS_KINDS = ("partition", "topology", "cost")


class GridError(LpdtError, ValueError):
    """A study cannot be expanded (unknown coordinate value, invalid run config, ...)."""


@dataclass(frozen=True)
class Membership:
    """One place of a run in a study: the block, the grid coordinates of its cell, its seed."""

    block: str
    coords: dict[str, Any]
    seed: int


@dataclass
class GridRun:
    """One run of the grid: its id, run config and places in the studies (what the workflow
    trains; ``lpdt.engine.run.Run`` is the numerics of training one)."""

    run_id: str
    config: dict[str, Any]  # the run-config tree (RunConfig.to_dict(), tracking excluded)
    studies: dict[str, list[Membership]] = field(default_factory=dict)  # study -> its cells


class ManifestError(LpdtError, ValueError):
    """A manifest file that is not a manifest (one line, naming the file)."""


@dataclass(frozen=True, kw_only=True)
class ManifestRun:
    """One run entry of a study in ``results/manifest.json`` (``to_dict`` is its JSON form).
    ``block`` and ``seed`` may be absent from a manifest that is read (an older or hand-written
    one): "" and None (the report then takes the seed from the run's record)."""

    run_id: str
    dir: str
    block: str = ""
    coords: dict[str, Any]
    seed: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return to_json(self)


@dataclass(frozen=True, kw_only=True)
class ManifestStudy:
    """One training study of the manifest: its kind, title, the study it copies the runs of
    (``same_as``), its runs, and the claims it declares (``claims:`` in the studies file, as
    written there; checked by ``lpdt.report.claims.study_claims``; None: none declared)."""

    kind: Literal["baseline", "grid"]  # TRAINING_KINDS
    title: str = ""
    same_as: str | None = None
    runs: tuple[ManifestRun, ...]
    claims: tuple[dict[str, Any], ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        """Its JSON form: ``claims`` only when the study declares some."""
        d = to_json(self)
        if self.claims is None:
            del d["claims"]
        return d


@dataclass(frozen=True)
class Manifest:
    """``results/manifest.json``: the scale and, per training study, its runs
    (docs/architecture.md, "Workflow outputs"). ``to_dict`` is the file's JSON (``manifest_text``
    writes it), ``read`` / ``from_dict`` read one back."""

    scale: str
    studies: dict[str, ManifestStudy]

    def to_dict(self) -> dict[str, Any]:
        return {"scale": self.scale, "studies": {k: v.to_dict() for k, v in self.studies.items()}}

    @classmethod
    def from_dict(cls, data: Any, source: str = "") -> Manifest:
        """A manifest from its JSON value; ``ManifestError`` (one line, starting with ``source``)
        when a field is missing, unknown or of the wrong type."""
        reader = Reader(error=ManifestError, source=source, root="the manifest")
        return reader.build(cls, data)

    @classmethod
    def read(cls, path: str | Path) -> Manifest:
        """The manifest in ``path``: ``FileNotFoundError`` when there is none, ``ManifestError``
        (one line, naming the file) when it is not JSON or not a manifest."""
        p = Path(path)
        if not p.exists():
            raise FileNotFoundError(
                f"manifest {p} not found (run the workflow, or pass --manifest)"
            )
        try:
            data = json.loads(p.read_text())
        except json.JSONDecodeError as e:
            raise ManifestError(f"manifest {p} is not valid JSON: {e}") from e
        except UnicodeDecodeError:
            raise ManifestError(f"manifest {p} is not text (UTF-8): not a manifest") from None
        return cls.from_dict(data, f"manifest {p}")


# ----------------------------------------------------------------------------------------------
# Loading and merging
# ----------------------------------------------------------------------------------------------


def read_yaml(path: str | Path) -> dict[str, Any]:
    """A studies or scale file's mapping; ``GridError`` (one line) when it cannot be read."""
    return read_yaml_mapping(path, GridError, str(path))


def scale_chain(scale_path: str | Path) -> list[tuple[Path, dict[str, Any]]]:
    """A scale file and its ``base`` scales, the scale first: (path, overlay without ``base``
    and ``description``). A scale that names ``base: other`` is ``other.yaml`` of the same
    folder with its own keys merged over it."""
    chain: list[tuple[Path, dict[str, Any]]] = []
    path = Path(scale_path)
    while True:
        if path.resolve() in [p.resolve() for p, _ in chain]:
            names = " -> ".join(p.stem for p in [*(p for p, _ in chain), path])
            raise GridError(f"scale base chain loops: {names}")
        data = read_yaml(path)
        data.pop("description", None)
        base = data.pop("base", None)
        chain.append((path, data))
        if base is None:
            return chain
        if not isinstance(base, str) or not base:
            raise GridError(f"{path}: base must be the name of another scale, not {base!r}")
        path = path.parent / f"{base}.yaml"
        if not path.is_file():
            scales = sorted(p.stem for p in path.parent.glob("*.yaml"))
            raise GridError(f"{chain[-1][0]}: base scale {base!r} not found (scales: {scales})")


def read_scale(scale_path: str | Path) -> dict[str, Any]:
    """A scale overlay with its ``base`` chain merged in. The chain is merged *before* it meets
    the studies, with ``null`` kept as a value, so a scale can restore (with a mapping) a block
    its base deleted (with ``null``)."""
    merged: dict[str, Any] = {}
    for _, overlay in reversed(scale_chain(scale_path)):
        merged = deep_merge(merged, overlay)
    return merged


def load(studies_path: str | Path, scale_path: str | Path) -> dict[str, Any]:
    """The studies of one scale: ``studies.yaml`` with the scale overlay (``read_scale``)
    merged in; a ``null`` in the overlay deletes the key."""
    return deep_merge(read_yaml(studies_path), read_scale(scale_path), null_deletes=True)


# ----------------------------------------------------------------------------------------------
# Expansion
# ----------------------------------------------------------------------------------------------


def fragment(coordinates: dict[str, Any], name: str, value: Any) -> dict[str, Any]:
    """The run-config fragment for coordinate ``name`` = ``value``."""
    if name not in coordinates:
        raise GridError(f"unknown coordinate {name!r}; defined: {', '.join(coordinates)}")
    spec = coordinates[name]
    if isinstance(spec, str):  # a dotted run-config key
        tree: dict[str, Any] = {}
        set_path(tree, spec, value)
        return tree
    for key in (value, str(value)):
        if key in spec:
            return spec[key] or {}
    raise GridError(
        f"coordinate {name!r} has no value {value!r}; defined: {', '.join(map(str, spec))}"
    )


def grid_points(grid: dict[str, list]) -> list[dict[str, Any]]:
    """Cartesian product of the axes; an ``a+b`` axis holds zipped ``[a, b]`` tuples."""
    axes: list[list[dict[str, Any]]] = []
    for key, values in grid.items():
        names = key.split("+")
        if not isinstance(values, list) or not values:
            raise GridError(f"grid axis {key!r} must be a non-empty list")
        points = []
        for v in values:
            if len(names) == 1:
                points.append({key: v})
            elif isinstance(v, list) and len(v) == len(names):
                points.append(dict(zip(names, v)))
            else:
                raise GridError(f"grid axis {key!r} takes lists of {len(names)} values, got {v!r}")
        axes.append(points)
    return [{k: v for p in combo for k, v in p.items()} for combo in itertools.product(*axes)] or [
        {}
    ]


def blocks_of(study: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A study's blocks; a study without ``blocks`` is one block named ``main``."""
    if "blocks" in study:
        return study["blocks"] or {}
    return {"main": {k: study[k] for k in ("fixed", "grid", "config") if k in study}}


def run_config(
    spec: dict[str, Any], coords: dict[str, Any], extra: list[dict[str, Any] | None]
) -> dict:
    """defaults <- coordinate fragments (in ``coordinates`` order) <- extra fragments (a None
    one, a study or block without ``config``, adds nothing)."""
    cfg = deep_merge({}, spec.get("defaults") or {}, null_deletes=True)
    coordinates = spec.get("coordinates") or {}
    for name in sorted(
        coords, key=lambda n: list(coordinates).index(n) if n in coordinates else -1
    ):
        cfg = deep_merge(cfg, fragment(coordinates, name, coords[name]), null_deletes=True)
    for e in extra:
        cfg = deep_merge(cfg, e or {}, null_deletes=True)
    return cfg


def seed_list(value: Any, base: int) -> list[int]:
    """The seeds of a block: ``N`` -> base, base+1, ..., base+N-1; a list -> those seeds."""
    if isinstance(value, bool) or not isinstance(value, int | list):
        raise GridError(f"seeds must be a count >= 1 or a list of seeds, got {value!r}")
    if isinstance(value, int):
        if value < 1:
            raise GridError(f"seeds must be a count >= 1 or a list of seeds, got {value!r}")
        return [base + i for i in range(value)]
    if not value or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in value):
        raise GridError(f"seeds must be a non-empty list of integers >= 0, got {value!r}")
    if len(set(value)) != len(value):
        raise GridError(f"seeds must not repeat a seed, got {value!r}")
    return list(value)


def with_seed(tree: dict[str, Any], seed: int) -> dict[str, Any]:
    """The run config for one seed: the seed of the run and of its partition shuffle."""
    return deep_merge(tree, {"seed": seed, "partition": {"seed": seed}}, null_deletes=True)


def resolve(tree: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(run id, resolved config without tracking) via lpdt's own config validation."""
    cfg = config_from_dict(tree)
    d = cfg.to_dict()
    d.pop("tracking", None)
    return cfg.run_id(), d


def expand(spec: dict[str, Any]) -> dict[str, GridRun]:
    """All training runs of all studies, keyed by run id (in first-seen order)."""
    runs: dict[str, GridRun] = {}
    studies = spec.get("studies") or {}
    for sname, study in studies.items():
        if study.get("kind") not in TRAINING_KINDS or "same_as" in study:
            continue
        for bname, block in blocks_of(study).items():
            fixed = {**(study.get("fixed") or {}), **(block.get("fixed") or {})}
            n_seeds = block.get("seeds", study.get("seeds", spec.get("seeds", 1)))
            for point in grid_points(block.get("grid") or {}):
                coords = {**fixed, **point}
                try:
                    tree = run_config(spec, coords, [study.get("config"), block.get("config")])
                    for seed in seed_list(n_seeds, int(tree.get("seed", 1234))):
                        rid, cfg = resolve(with_seed(tree, seed))
                        run = runs.setdefault(rid, GridRun(rid, cfg))
                        run.studies.setdefault(sname, []).append(Membership(bname, coords, seed))
                except (GridError, ConfigError) as e:
                    raise GridError(f"study {sname!r}, block {bname!r}, {coords}: {e}") from None
    for sname, study in studies.items():
        if "same_as" not in study:
            continue
        src = study["same_as"]
        if src not in studies or "same_as" in studies[src]:
            raise GridError(f"study {sname!r}: same_as {src!r} is not a study with its own runs")
        for run in runs.values():
            if src in run.studies:
                run.studies[sname] = list(run.studies[src])
    return runs


# Runs longer than this (training samples x epochs) are never batched: the overhead a batch
# shares (about 10 s a process) matters for short runs only, and a batch of long runs would run
# one after another what the job slots could run side by side. The quick scale's longest runs:
# 60,000 (3,000 images x 20 epochs); the paper's shortest: 500,000 (SentLen, 5 epochs).
BATCH_MAX_SAMPLES = 200_000


def train_size(cfg: dict[str, Any]) -> int | None:
    """Training images of a run config: its subset, else the dataset's split (None: unknown)."""
    from lpdt.data import full_train_size

    return cfg["data"].get("train_subset") or full_train_size(cfg["data"]["dataset"])


def train_samples(cfg: dict[str, Any]) -> int | None:
    """Training images x epochs of a run config (None: a dataset of unknown size)."""
    size = train_size(cfg)
    return None if size is None else size * cfg["train"]["epochs"]


def batch_name(kind: str, run_ids: list[str]) -> str:
    """``<kind>-<first run id>-<6 hex digits of all its run ids>``: a batch whose runs change (a
    seed added to a cell, a run to a model) is another batch, so the workflow trains it (its
    finished runs are read back, not trained again) instead of taking the old batch's stamp."""
    digest = hashlib.sha1(" ".join(run_ids).encode()).hexdigest()[:6]
    return f"{kind}-{run_ids[0]}-{digest}"


def run_batches(runs: dict[str, GridRun]) -> dict[str, list[str]]:
    """The runs one training job trains one after another in one process (the workflow's
    ``batch_runs``): batch name -> run ids, in run order, among the short runs (at most
    ``BATCH_MAX_SAMPLES`` training images x epochs):

    - ``seeds-...``: each cell of two or more seeds (runs whose configs differ only in
      ``seed`` and ``partition.seed``);
    - ``runs-...``: the remaining runs (cells of one seed) of one model, where there are
      two or more.

    Why: at the quick scale a claim run trains for about 25 s on the reference CPU, and a process
    pays about 10 s around its training (interpreter and torch imports, data, compiling the step
    with inductor's cache warm, exit, the MLflow log process); the runs of a batch share that once
    (and a compiled graph, where they have one). The runs are the same runs, bit for bit: each
    seeds its own generators (tests/engine/test_loop.py)."""
    cells: dict[str, list[str]] = {}
    for rid, run in runs.items():
        samples = train_samples(run.config)
        if samples is None or samples > BATCH_MAX_SAMPLES:
            continue
        rest = deep_merge(
            run.config, {"seed": None, "partition": {"seed": None}}, null_deletes=True
        )
        cells.setdefault(json.dumps(rest, sort_keys=True), []).append(rid)
    batches = {batch_name("seeds", ids): ids for ids in cells.values() if len(ids) > 1}
    by_model: dict[str, list[str]] = {}
    for ids in cells.values():
        if len(ids) == 1:
            by_model.setdefault(runs[ids[0]].config["model"]["name"], []).extend(ids)
    batches.update({batch_name("runs", ids): ids for ids in by_model.values() if len(ids) > 1})
    return batches


def manifest(runs: dict[str, GridRun], spec: dict[str, Any], scale: str, runs_dir: str) -> Manifest:
    """``results/manifest.json`` (docs/architecture.md): per study, its runs and their coords."""
    studies: dict[str, ManifestStudy] = {}
    for sname, study in (spec.get("studies") or {}).items():
        if study.get("kind") not in TRAINING_KINDS:
            continue
        entries = tuple(
            ManifestRun(
                run_id=r.run_id,
                dir=f"{runs_dir}/{r.run_id}",
                block=m.block,
                coords=m.coords,
                seed=m.seed,
            )
            for r in runs.values()
            for m in r.studies.get(sname, [])
        )
        studies[sname] = ManifestStudy(
            kind=study["kind"],
            title=study.get("title", ""),
            same_as=study.get("same_as"),
            runs=entries,
            # claims the study declares, checked by lpdt report
            claims=tuple(study["claims"]) if study.get("claims") else None,
        )
    return Manifest(scale, studies)


def analyses(spec: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    """The studies of an analysis kind (partition / topology / cost)."""
    return {k: v for k, v in (spec.get("studies") or {}).items() if v.get("kind") == kind}


# ----------------------------------------------------------------------------------------------
# Files and the plan
# ----------------------------------------------------------------------------------------------


def write_if_changed(path: str | Path, text: str) -> bool:
    """Write atomically, only when the content differs (so mtimes trigger no reruns)."""
    p = Path(path)
    if p.is_file() and p.read_text() == text:
        return False
    write_text_atomic(p, text)
    return True


def config_text(run: GridRun) -> str:
    return yaml.safe_dump(run.config, sort_keys=False)


def config_digest(run: GridRun) -> str:
    """A short hash of everything ``config_text`` writes (the config tree, execution keys
    included), from its JSON: the YAML text of the paper grid's 289 configs took 2 s of every
    parse of the workflow."""
    return hashlib.sha1(json.dumps(run.config).encode()).hexdigest()[:12]


def manifest_text(m: Manifest) -> str:
    return json.dumps(m.to_dict(), indent=2, sort_keys=False) + "\n"
