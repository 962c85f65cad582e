"""What a logged run is called and described as: its name, its cell, its 8-bit recipe version
and its description, all from its record (``lpdt.tracking.runs`` logs them).

- ``run_name``: the grid coordinates, short, those that tell the runs of the studies apart first,
  so that the ~22 characters the MLflow runs table shows of a name differ for every run of the
  quick scale (``fp sk0.9 s1235 choco+qgm rn8 evonorm ring4 fashion_mnist``);
- ``cell_name``: the name without the seed and a digest of the rest of the config (the "Group
  by" of the runs table);
- ``recipe_version`` / ``recipe_tag``: the 8-bit recipe that trained a run, read back from its id;
- ``run_note``: the run's description, one paragraph.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from lpdt.config import PAPER_NORMS
from lpdt.decentral.catalog import ALGORITHMS, COMPRESSORS, TOPOLOGIES
from lpdt.record import RunRecord

# The paper's words for the two precisions (its tables' FP and LP columns, Figures 4-6); another
# precision is named as it is.
PRECISION_TOKENS = {"fp32": "fp", "int8": "lp"}
# A normalisation that is not the paper's for the run's precision, after the precision
# (``fp-bn``); an unlisted one by its name.
NORM_TOKENS = {
    "batchnorm": "bn",
    "groupnorm": "gn",
    "evonorm": "en",
    "rangeen": "ren",
    "rangebn": "rbn",
}
NO_RECIPE = "none for {precision}"  # the recipe_version tag of a precision without recipes
NO_CLAIM = "no claim reads it"  # the claims tag of a run that no claim of the paper reads
UNKNOWN = "unknown"


def _model_token(name: str) -> str:
    """``rn8`` for ``resnet8`` (any ResNet depth), other models by their name."""
    return re.sub(r"^resnet(\d+)$", r"rn\1", name)


def _compression_token(comp: dict[str, Any]) -> str:
    """``dense``, ``top99``, ``random90``; 8-bit messages ``dense-msg8``, ``top90-msg8``: the
    registered compressor's token (``lpdt.decentral.catalog``). A name this process does not
    know (a plugin registered only where the run trained) is used as it is, with its ratio."""
    name, ratio = comp["name"], comp["ratio"]
    spec = COMPRESSORS.find(name)
    if spec is None:
        return f"{name}{round(100 * ratio, 4):g}" if ratio else str(name)
    return spec.token_of(ratio)


def run_name(rec: RunRecord, with_seed: bool = True) -> str:
    """A run's name from its grid coordinates, short, what tells the runs of the studies apart
    first: ``fp sk0.9 s1235 choco+qgm rn8 evonorm ring4 fashion_mnist``, ``lp sk0 s1234 top90
    deepsqueeze rn8 rangeen ring4 fashion_mnist``, ``fp-bn sk0.8 s1234 choco rn8 batchnorm
    ring4 fashion_mnist``.

    In order: the precision in the paper's words (``fp``, ``lp``: ``PRECISION_TOKENS``), with
    the normalisation where it is not the paper's for that precision (``fp-bn``:
    ``NORM_TOKENS``; Figure 1's variants); the data skew (``sk0.9``, or Dirichlet ``dir0.1``);
    the seed (``s1235``; left out when not ``with_seed``); the compression where there is one
    (``_compression_token``: ``top90``, ``top90-msg8``; none for dense fp32 messages); the
    algorithm (``+qgm``); then what sets the studies apart from one another: the model
    (``rn8`` for ResNet-8), its normalisation in full, topology and nodes, dataset used. A
    single-node run has no gossip: ``fp s1234 rn18 fashion_mnist evonorm 1node`` (the dataset
    before the normalisation: Table 2's NLP rows differ in it).

    The MLflow runs table shows about 22 characters of a name at its default width; in that
    many, the quick scale's 89 names all differ (tests/tracking/test_runs.py)."""
    c = rec.config
    model, topo, part = c["model"], c["topology"], c["partition"]
    precision, norm = str(c["precision"]["mode"]), str(model["norm"])
    head = PRECISION_TOKENS.get(precision, precision)
    if norm != PAPER_NORMS.get(precision):
        head += "-" + NORM_TOKENS.get(norm, norm)
    seed = [f"s{c['seed']}"] if with_seed else []
    tail = [_model_token(str(model["name"])), norm]
    if topo["nodes"] == 1:
        return " ".join([head, *seed, tail[0], rec.dataset.name, norm, "1node"])
    dirichlet = part["kind"] == "dirichlet"
    skew = f"dir{part['alpha']:g}" if dirichlet else f"sk{part['skew']:g}"
    comp = _compression_token(c["algorithm"]["compression"])
    algo = c["algorithm"]["name"] + ("+qgm" if c["optim"]["qgm"] else "")
    graph = TOPOLOGIES.find(topo["name"])
    topology = f"{graph.short if graph else topo['name']}{topo['nodes']}"  # directed ring: "ring8"
    parts = [head, skew, *seed, *([comp] if comp != "dense" else []), algo, *tail, topology]
    return " ".join([*parts, rec.dataset.name])


def _config_hash(tree: dict[str, Any]) -> str:
    """``RunConfig.run_id``'s hash of a result tree (``lpdt.config``; a test checks they agree)."""
    return hashlib.sha1(json.dumps(tree, sort_keys=True, default=str).encode()).hexdigest()[:12]


def recipe_version(rec: RunRecord) -> int | None:
    """The recipe version of the record's precision (``lpdt.config.RECIPE_VERSIONS``) that
    trained it, read back from its run id: the record keeps the config but not the recipe, and
    ``RunConfig.run_id`` hashes the config with the recipe version of its day (version 1: before
    the precision had an entry, hashed without one). None for a precision without recipe
    versions (fp32), and for a run id that no version reproduces (a record whose config this
    lpdt hashes differently)."""
    from lpdt.config import RECIPE_VERSIONS, result_dict

    current = RECIPE_VERSIONS.get(str(rec.config["precision"]["mode"]))
    if current is None:
        return None
    tree = result_dict(rec.config)
    if _config_hash(tree) == rec.run_id:
        return 1
    for version in range(current, 1, -1):
        if _config_hash({**tree, "recipe_version": version}) == rec.run_id:
            return version
    return None


def recipe_tag(rec: RunRecord) -> str:
    """``recipe_version``'s tag: the version; ``none for fp32`` for a precision without recipe
    versions (``NO_RECIPE``: not a version missing, none applies); ``unknown`` where the run
    id does not tell it."""
    from lpdt.config import RECIPE_VERSIONS

    precision = str(rec.config["precision"]["mode"])
    if precision not in RECIPE_VERSIONS:
        return NO_RECIPE.format(precision=precision)
    version = recipe_version(rec)
    return UNKNOWN if version is None else str(version)


def cell_name(rec: RunRecord) -> str:
    """The run's cell: its name without the seed (``run_name``) and ``#`` six hex digits of its
    result-affecting config without ``seed`` and ``partition.seed``, and, for a precision with
    recipe versions (8-bit), of the recipe version that trained it (``recipe_version``), so that
    runs differing in a setting the name leaves out (epochs, learning rate, the 8-bit recipe,
    ...) are not one cell. The runs of one cell differ in their seed only. A precision without
    recipe versions (fp32) hashes as before recipe versions existed."""
    from lpdt.config import RECIPE_VERSIONS, result_dict

    tree = result_dict(rec.config)
    tree.pop("seed", None)
    if isinstance(tree.get("partition"), dict):
        tree["partition"].pop("seed", None)
    if str(rec.config["precision"]["mode"]) in RECIPE_VERSIONS:
        tree["recipe_version"] = recipe_tag(rec)  # "unknown": one cell of the unknown recipe
    digest = hashlib.sha1(json.dumps(tree, sort_keys=True).encode()).hexdigest()[:6]
    return f"{run_name(rec, with_seed=False)} #{digest}"


def _list(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def run_note(
    rec: RunRecord, run_dir: str | Path | None = None, studies: str = "", claims: str = ""
) -> str:
    """The run's description (MLflow note): one paragraph saying what was trained (model,
    precision, nodes, topology, algorithm, compression, data split, epochs, seed), on which data
    standing in for which, which studies and claims read it (``studies``, ``claims``: the
    comma-separated tags), its final accuracy, and where its files are."""
    c = rec.config
    topo, part, comp = c["topology"], c["partition"], c["algorithm"]["compression"]
    precision = "8-bit" if c["precision"]["mode"] == "int8" else c["precision"]["mode"]
    # The registered words (lpdt.decentral.catalog); a name this process does not know (a
    # plugin registered only where the run trained) as it is.
    algorithm = ALGORITHMS.find(c["algorithm"]["name"])
    algo = algorithm.title if algorithm else c["algorithm"]["name"]
    if c["optim"]["qgm"]:
        algo += " with quasi-global momentum"
    compressor = COMPRESSORS.find(comp["name"])
    sent = f"{compressor.label if compressor else comp['name']} messages"
    if comp["ratio"]:  # only a sparsifier drops entries (the config refuses a ratio otherwise)
        sent += f", dropping {100 * comp['ratio']:g} % of each"
    split = (
        f"Dirichlet alpha {part['alpha']:g}"
        if part["kind"] == "dirichlet"
        else f"skew {part['skew']:g}"
    )
    d = rec.dataset
    data = f"{d.name} ({d.train_samples:,} training and {d.test_samples:,} test samples"
    data += f", {d.num_classes} classes)"
    subset = c.get("data", {}).get("train_subset")
    unused = subset - d.train_samples if isinstance(subset, int) else 0
    if 0 < unused < 2 * topo["nodes"]:  # at most one sample per node from each of its two pools
        data += (
            f" (of the {subset:,} that data.train_subset keeps, {unused:,} unused: the "
            "partitioner truncates each node's share to whole samples, as the reference code does)"
        )
    if d.stand_in:
        data += f" standing in for {d.stand_in_for or 'the paper dataset'}"
    epochs = c["train"]["epochs"]
    graph = TOPOLOGIES.find(topo["name"])
    text = (
        f"{rec.model.name} ({rec.model.params:,} parameters, {precision}) trained with {algo}"
        f" on {topo['nodes']} nodes in a {graph.words if graph else topo['name']}, "
        f"{sent}, for {epochs} epochs (seed {c['seed']}), on {data}, split over the nodes "
        f"with {split}, by the {rec.engine} engine."
    )
    study_list = [x for x in studies.split(",") if x]
    claim_list = [x for x in claims.split(",") if x and x not in ("none", NO_CLAIM)]
    if study_list:
        text += f" It is a run of the {'study' if len(study_list) == 1 else 'studies'} "
        text += _list(study_list)
        text += (
            f"; the claims {_list(claim_list)} read it."
            if claim_list
            else "; no claim of the paper reads it."
        )
    if rec.final is not None:
        f = rec.final
        text += (
            f" Final accuracy (mean over nodes after the final gossip rounds): "
            f"{f.acc_node_mean:.2f} % (nodes {f.acc_node_min:.2f} to {f.acc_node_max:.2f} %,"
            f" average model {f.acc_avg_model:.2f} %)."
        )
    else:
        text += f" It diverged after {rec.epochs_completed} of {epochs} epochs: no final accuracy."
    if run_dir is not None:
        text += (
            f" Its files are in {Path(run_dir).resolve()} (metrics.json, the run record; "
            "history.csv; config.yaml), copied to this run's artifacts."
        )
    return text
