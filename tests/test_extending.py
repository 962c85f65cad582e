"""An algorithm, a compressor, a model and a dataset defined outside ``src/``, registered with
their specs, run through ``lpdt train``, the cost model (the compressor's bytes on the wire),
MLflow's run names, the planner and the GPU slots (the model's, the dataset's sizes), and the
report's comparison table and coordinates: what docs/extending.md promises a newcomer.

The compressor and the algorithm are a plugin module (``tests/plugins/lpdt_half.py``), copied
into a folder of its own and named as docs/extending.md says (the config key ``plugins``,
``$LPDT_PLUGINS``, an entry point of ``lpdt.plugins``) to ``lpdt`` commands run as processes of
their own, as a user runs them; the plugin counts its ``encode`` calls per process, so a test
sees where its code ran."""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch
from torch import nn

from lpdt import cli, gpus, grid
from lpdt.config import EXECUTION_KEYS, ConfigError, load_config
from lpdt.cost.wire import message_nbytes
from lpdt.data import DATASETS, DatasetSpec, full_test_size, full_train_size
from lpdt.data.base import TensorDataset, dataset_info
from lpdt.decentral.catalog import ALGORITHMS, COMPRESSORS
from lpdt.models import MODELS, ModelSpec
from lpdt.plan import runtime
from lpdt.record import read as read_record
from lpdt.tracking.runs import run_name, run_note
from tests.conftest import TINY
from tests.fake_records import fake_record

REPO = Path(__file__).resolve().parents[1]
LPDT = str(Path(sys.executable).parent / "lpdt")  # the console script
PLUGIN = Path(__file__).with_name("plugins") / "lpdt_half.py"  # the fp16 compressor, halfstep


@pytest.fixture
def half_plugin(monkeypatch, tmp_path: Path) -> Iterator[ModuleType]:
    """The plugin imported in this process (as a plugin is: by its module name, from a copy in
    a folder of its own, so that its count files stay out of the repository), and its
    registrations taken out again afterwards."""
    folder = tmp_path / "inprocess"
    folder.mkdir()
    shutil.copy(PLUGIN, folder / PLUGIN.name)
    monkeypatch.syspath_prepend(str(folder))
    module = importlib.import_module("lpdt_half")
    yield module
    COMPRESSORS.remove("fp16")
    ALGORITHMS.remove("halfstep")
    sys.modules.pop("lpdt_half")


def plugin_dir(tmp_path: Path, entry_point: bool = False) -> Path:
    """A folder of its own holding a copy of the plugin (what a newcomer writes), and with
    ``entry_point`` the metadata of an installed package naming it in ``lpdt.plugins``."""
    folder = tmp_path / "myplugins"
    folder.mkdir()
    shutil.copy(PLUGIN, folder / PLUGIN.name)
    if entry_point:
        info = folder / "halfplugin-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: halfplugin\nVersion: 0.1\n")
        (info / "entry_points.txt").write_text("[lpdt.plugins]\nhalf = lpdt_half\n")
    return folder


def lpdt(*argv: str, path: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """The ``lpdt`` console script in a fresh process, with ``path`` on its PYTHONPATH."""
    full = {k: v for k, v in os.environ.items() if k not in ("LPDT_PLUGINS", "PYTHONPATH")}
    full.update(PYTHONPATH=str(path), **(env or {}))
    return subprocess.run(
        [LPDT, *argv], env=full, capture_output=True, text=True, timeout=300, cwd=path.parent
    )


def encodes(folder: Path, kind: str) -> dict[int, int]:
    """The plugin's count of ``kind`` calls per process id."""
    files = (folder / "counts").glob(f"{kind}.*")
    return {int(f.suffix[1:]): int(f.read_text()) for f in files}


RUN = [*TINY, "topology.nodes=4", "train.epochs=1", "train.final_gossip_rounds=2"]


def test_an_unregistered_compressor_is_a_config_error_naming_the_choices() -> None:
    with pytest.raises(ConfigError, match="fp16.*topk"):
        load_config(None, [*RUN, "algorithm.compression.name=fp16"])


def test_a_plugin_compressor_and_algorithm_train_through_lpdt_train(half_plugin, tmp_path) -> None:
    """``lpdt train`` in a process of its own, the plugin named by the config key ``plugins``
    only: its compressor's and its algorithm's ``encode`` ran there (their counts, in the train
    process), the record counts its 16-bit messages, and the key leaves the run id alone."""
    folder = plugin_dir(tmp_path)
    out = tmp_path / "run"
    sets = [*RUN, "algorithm.compression.name=fp16", "algorithm.name=halfstep"]
    argv = sum((["--set", s] for s in [*sets, "plugins=[lpdt_half]"]), [])
    done = lpdt("train", *argv, "--out", str(out), path=folder)
    assert done.returncode == 0, done.stderr
    rec = read_record(out)
    assert rec.status == "ok" and rec.config["plugins"] == ["lpdt_half"]
    assert rec.config["algorithm"] == {
        **rec.config["algorithm"],
        "name": "halfstep",
        "compression": {**rec.config["algorithm"]["compression"], "name": "fp16"},
    }
    comp, algo = encodes(folder, "encode"), encodes(folder, "halfstep")
    assert len(comp) == 1 and list(comp) == list(algo) and os.getpid() not in comp
    assert min(comp.values()) > 0 and min(algo.values()) > 0  # one encode per gossip round
    params = rec.model.params  # the gossiped state: this model's parameters (no 8-bit ranges)
    assert rec.communication.bytes_per_message == 4 + 2 * params
    assert rec.run_id == load_config(None, sets).run_id()  # plugins: an execution key
    # Here, where the plugin is imported too: its run name and description, and its wire cost.
    assert "dense-msg16 halfstep" in run_name(rec)
    assert "16-bit messages" in run_note(rec) and "Half-Step SGD" in run_note(rec)
    segments = [(0, params)]
    assert message_nbytes(segments, torch.randn(1, params), "fp16") == (4 + 2 * params, params, 0)


def test_a_plugin_trains_in_the_distributed_engines_workers(tmp_path) -> None:
    """``engine=distributed`` with 2 nodes: each node's worker (``python -m lpdt.engine.worker``)
    imports the plugin from the config it is given, and encodes with it."""
    folder = plugin_dir(tmp_path)
    out = tmp_path / "run"
    sets = [*TINY, "topology.nodes=2", "train.epochs=1", "train.final_gossip_rounds=1"]
    sets += ["train.max_iters_per_epoch=2", "data.train_subset=64", "data.test_subset=32"]
    sets += ["algorithm.compression.name=fp16", "algorithm.name=halfstep", "engine=distributed"]
    argv = sum((["--set", s] for s in [*sets, "plugins=[lpdt_half]"]), [])
    done = lpdt("train", *argv, "--out", str(out), path=folder)
    assert done.returncode == 0, done.stderr
    assert read_record(out).status == "ok"
    comp, algo = encodes(folder, "encode"), encodes(folder, "halfstep")
    assert len(comp) == 2 and set(comp) == set(algo)  # the two workers, each its node's rows
    assert min(comp.values()) > 0


def test_a_plugin_that_cannot_be_imported_is_a_one_line_config_error(tmp_path) -> None:
    """Named but absent (a subprocess: the config key and $LPDT_PLUGINS), or failing as it is
    imported (here): one line naming the module, where it was named and why; exit 2."""
    folder = plugin_dir(tmp_path)
    done = lpdt("train", "--set", "plugins=[lpdt_missing]", "--print-config", path=folder)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "'lpdt_missing' (config key plugins)" in done.stderr
    assert "ModuleNotFoundError: No module named 'lpdt_missing'" in done.stderr
    argv = ["compare", str(tmp_path), "--vary", "compression", "--a", "0", "--b", "half0"]
    done = lpdt(*argv, path=folder, env={"LPDT_PLUGINS": "lpdt_half, gone"})
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "'gone' ($LPDT_PLUGINS) cannot be imported" in done.stderr
    (folder / "lpdt_broken.py").write_text("raise RuntimeError('no GPU here\\nsecond line')\n")
    sys.path.insert(0, str(folder))
    try:
        with pytest.raises(ConfigError) as e:
            load_config(None, ["plugins=[lpdt_broken]"])
    finally:
        sys.path.remove(str(folder))
    assert str(e.value) == (
        "plugin 'lpdt_broken' (config key plugins) cannot be imported: RuntimeError: no GPU here"
    )


# The quick scale's run ids (89; sha1 of the sorted ids), as before the key ``plugins``.
QUICK_IDS = (89, "12e35e283759f39b95e564e9bb0477763aaa3ff9")


def test_the_plugins_key_leaves_the_run_ids_alone() -> None:
    spec = grid.load(REPO / "config/studies.yaml", REPO / "config/scales/quick.yaml")
    ids = sorted(grid.expand(spec))
    assert (len(ids), hashlib.sha1(" ".join(ids).encode()).hexdigest()) == QUICK_IDS
    assert "plugins" in EXECUTION_KEYS
    assert load_config(None, ["plugins=[lpdt.models]"]).run_id() == load_config(None, []).run_id()


def _half_precision_runs(root: Path) -> None:
    """Seeds 1-3 of uncompressed runs (80 + seed) and 16-bit-message runs (79.5 + seed)."""
    for seed in (1, 2, 3):
        for name, acc in (("none", 80.0 + seed), ("fp16", 79.5 + seed)):
            config = {"seed": seed, "partition": {"seed": seed}}
            config["algorithm"] = {"compression": {"name": name, "ratio": 0.0}}
            fake_record(f"{name}{seed}", acc, config=config).write(root / "runs" / f"{name}{seed}")


@pytest.mark.parametrize("named_by", ["LPDT_PLUGINS", "entry point"])
def test_a_plugin_compressor_is_a_coordinate_of_the_report_tables(named_by, tmp_path) -> None:
    """``lpdt compare`` in a process of its own pairs runs by seed across the compressors and
    names the plugin's by the coordinate its spec gives (``coordinate="half{pct}"``: "half0"),
    which only the plugin's import can produce (without it the runs read as "fp16": the next
    test), the plugin named by $LPDT_PLUGINS or by an installed package's entry point."""
    folder = plugin_dir(tmp_path, entry_point=named_by == "entry point")
    env = {"LPDT_PLUGINS": "lpdt_half"} if named_by == "LPDT_PLUGINS" else {}
    _half_precision_runs(tmp_path)
    argv = ["compare", str(tmp_path), "--vary", "compression", "--a", "0", "--b", "half0"]
    done = lpdt(*argv, "--json", path=folder, env=env)
    assert done.returncode == 0, done.stderr
    res = json.loads(done.stdout)
    assert res["b"] == "half0" and res["effect"] == "0 - half0"
    assert res["overall"]["n"] == 3 and res["overall"]["mean"] == pytest.approx(0.5)


def test_without_the_registration_the_runs_read_by_their_name(tmp_path, capsys) -> None:
    """The same runs where the compressor is not registered: compression "fp16", not "half0"."""
    assert "fp16" not in COMPRESSORS
    _half_precision_runs(tmp_path)
    argv = ["compare", str(tmp_path), "--vary", "compression", "--a", "0"]
    assert cli.main([*argv, "--b", "half0"]) == 2
    assert "no run has compression=half0" in capsys.readouterr().err
    assert cli.main([*argv, "--b", "fp16", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["overall"]["mean"] == pytest.approx(0.5)


def test_a_process_that_does_not_know_the_compressor_still_names_and_compares_its_runs() -> None:
    """The MLflow log process and `lpdt compare` run where a plugin may not be registered: its
    runs keep their compressor's name (no spec here: the fixture is not used)."""
    from lpdt.report.aggregate import compression_key

    assert "fp16" not in COMPRESSORS
    config = {"algorithm": {"compression": {"name": "fp16", "ratio": 0.0}}}
    rec = fake_record("r0", 80.0, config=config)
    assert " fp16 " in f" {run_name(rec)} " and "fp16 messages" in run_note(rec)
    assert compression_key("fp16", 0.0) == "fp16"


def linear(cfg, num_classes: int, input_shape: tuple[int, ...]) -> nn.Module:
    """A model in one line: a linear classifier of the flattened image."""
    return nn.Sequential(
        nn.Flatten(), nn.Linear(int(torch.tensor(input_shape).prod()), num_classes)
    )


@pytest.fixture
def linear_model() -> Iterator[ModelSpec]:
    spec = ModelSpec(linear, stands_in_for="resnet20", jobs_per_gpu=4, gossiped=1_000)
    MODELS.add("linear", spec)
    yield spec
    MODELS.remove("linear")


def test_a_registered_model_trains_is_planned_and_stands_in_for_its_paper_model(
    linear_model, tiny_config, tmp_path
) -> None:
    from lpdt.report.aggregate import BY_NAME

    out = tmp_path / "run"
    sets = [*RUN, "model.name=linear"]
    assert cli.main(["train", *sum((["--set", s] for s in sets), []), "--out", str(out)]) == 0
    rec = read_record(out)
    assert rec.status == "ok" and rec.model.name == "linear"
    assert rec.model.params == rec.model.gossiped  # no 8-bit ranges: the parameters
    assert " linear " in f" {run_name(rec)} "
    # The report's model coordinate is the paper's model it stands in for.
    assert BY_NAME["model"].canonical("linear") == "resnet20"
    # The GPU slots and the planner read its spec.
    assert gpus.jobs_per_gpu("auto", "linear") == 4
    cfg = tiny_config(*RUN[len(TINY) :], "model.name=linear").to_dict()
    assert runtime.gossip_units(cfg, 4000) > 0
    MODELS.remove("linear")
    try:  # the same run without the spec: no gossip term, k = 1, its own name as coordinate
        assert runtime.gossip_units(cfg, 4000) == 0
        assert gpus.jobs_per_gpu("auto", "linear") == 1
        assert BY_NAME["model"].canonical("linear") == "linear"
    finally:
        MODELS.add("linear", linear_model)


def stripes(cfg) -> TensorDataset:
    """A dataset in a few lines: 8x8 grey images whose class is the one bright row (2 classes),
    generated; ``dataset_info`` records it as a stand-in when the config says so."""
    g = torch.Generator().manual_seed(0)
    n_train, n_test = cfg.train_subset or 64, cfg.test_subset or 32

    def draw(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.randint(0, 2, (n,), generator=g)
        x = torch.zeros(n, 1, 8, 8, dtype=torch.uint8)
        x[torch.arange(n), 0, 2 + 4 * y] = 255
        return x, y

    info = dataset_info(cfg, "stripes", "generated (tests)", 2, (1, 8, 8))
    (xa, ya), (xb, yb) = draw(n_train), draw(n_test)
    return TensorDataset(info, xa, ya, xb, yb, lambda x, augment, gen: x.float() / 255)


def test_a_registered_dataset_trains_and_gives_the_plan_its_size(tmp_path) -> None:
    DATASETS.add("stripes", DatasetSpec(stripes, train_size=64, test_size=32))
    try:
        out = tmp_path / "run"
        sets = [*RUN, "data.dataset=stripes", "data.stand_in_for=cifar10"]
        assert cli.main(["train", *sum((["--set", s] for s in sets), []), "--out", str(out)]) == 0
        rec = read_record(out)
        assert rec.status == "ok" and rec.dataset.name == "stripes"
        assert rec.dataset.stand_in_for == "cifar10"  # never a silent substitution
        assert full_train_size("stripes") == 64 and full_test_size("stripes") == 32
    finally:
        DATASETS.remove("stripes")
    assert full_train_size("stripes") is None  # unknown here: no size, no estimate


def test_a_plugin_algorithm_is_priced_and_tabled(half_plugin) -> None:
    """The plugin's algorithm (trained above, through ``lpdt train``) in the cost model's memory
    and the tables' columns."""
    from lpdt.cost.memory import training_memory
    from lpdt.report.tables import variant

    assert ALGORITHMS.get("halfstep").impl is half_plugin.HalfStep
    mem = training_memory([], 1000, 1, 1, "fp32", algorithm="halfstep")
    assert mem["algorithm_buffers"] == 4 * 1000  # one model-sized buffer, as Deep-Squeeze's
    assert variant("halfstep", "int8") == "LP-HS (8-bit)"  # its table column


# A study of the plugin's compressor and algorithm (the workflow's studies file format): one cell,
# the plugin named in the studies' defaults, so every run config carries it to its job.
PLUGIN_STUDIES = {
    "seeds": 1,
    "defaults": {
        "seed": 1234,
        "device": "cpu",
        "plugins": ["lpdt_half"],
        "data": {"dataset": "synthetic", "train_subset": 64, "test_subset": 32},
        "model": {"name": "tiny_cnn"},
        "schedule": {"warmup_epochs": 0, "milestones": []},
        "topology": {"nodes": 2},
        "train": {"batch_size": 16, "epochs": 1, "max_iters_per_epoch": 2},
    },
    "coordinates": {
        "algorithm": "algorithm.name",
        "compression": {"fp16": {"algorithm": {"compression": {"name": "fp16", "ratio": 0.0}}}},
    },
    "studies": {
        "plugin": {
            "kind": "grid",
            "title": "a plugin's compressor and algorithm",
            "blocks": {"half": {"grid": {"algorithm": ["halfstep"], "compression": ["fp16"]}}},
        }
    },
}


@pytest.mark.slow
def test_a_plugin_trains_through_the_workflow(half_plugin, tmp_path) -> None:
    """A Snakemake run of a study that names the plugin in its defaults (the config key
    ``plugins``, carried by each run config to its training job): the job, a process Snakemake
    starts, imports the plugin from ``PYTHONPATH`` and encodes with its compressor and algorithm.
    (``half_plugin``: imported here too, from a copy of its own, to expand the study.)"""
    import yaml

    folder = plugin_dir(tmp_path)
    wd = tmp_path / "wf"
    shutil.copytree(REPO / "config", wd / "config")
    (wd / "config" / "plugin-studies.yaml").write_text(yaml.safe_dump(PLUGIN_STUDIES))
    (wd / "config" / "scales" / "plugin.yaml").write_text("description: the plugin's one cell\n")
    spec = grid.load(
        wd / "config" / "plugin-studies.yaml", wd / "config" / "scales" / "plugin.yaml"
    )
    (run_id,) = grid.expand(spec)
    env = {k: v for k, v in os.environ.items() if k not in ("LPDT_PLUGINS", "PYTHONPATH")}
    env.update(PYTHONPATH=str(folder), MLFLOW_DISABLE_TELEMETRY="true")
    snakemake = Path(sys.executable).parent / "snakemake"
    argv = [str(snakemake), "-s", str(REPO / "Snakefile"), "--directory", str(wd), "--cores", "1"]
    argv += [f"results/runs/{run_id}/metrics.json"]
    argv += ["--config", "scale=plugin", "studies=config/plugin-studies.yaml", "mlflow=False"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rec = read_record(wd / "results" / "runs" / run_id)
    assert rec.status == "ok" and rec.config["plugins"] == ["lpdt_half"]
    assert rec.config["algorithm"]["name"] == "halfstep"
    comp, algo = encodes(folder, "encode"), encodes(folder, "halfstep")
    assert len(comp) == 1 and list(comp) == list(algo) and os.getpid() not in comp
    assert min(comp.values()) > 0
