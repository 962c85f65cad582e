"""An algorithm, a compressor, a model and a dataset defined only here, registered with their
specs, run through ``lpdt train``, the cost model (the compressor's bytes on the wire), MLflow's run names,
the planner and the GPU slots (the model's, the dataset's sizes), and the report's comparison
table and coordinates, with nothing in ``src/`` changed: what docs/extending.md promises a
newcomer."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch import nn

from lpdt import cli, gpus
from lpdt.config import ConfigError, load_config
from lpdt.cost.wire import message_nbytes
from lpdt.data import DATASETS, DatasetSpec
from lpdt.data.base import TensorDataset, dataset_info
from lpdt.decentral.algorithms import Gossip, Message
from lpdt.decentral.catalog import ALGORITHMS, COMPRESSORS, AlgorithmSpec, CompressorSpec
from lpdt.models import MODELS, ModelSpec
from lpdt.plan import runtime
from lpdt.record import read as read_record
from lpdt.tracking.runs import run_name, run_note
from tests.conftest import TINY
from tests.fake_records import fake_record


class HalfPrecision:
    """Every value sent as a 16-bit float (dense): a compressor in twenty lines."""

    compression = "fp16"

    def __init__(self, segments, ratio: float, levels: int, generator) -> None:
        self.p_total = sum(m for _, m in segments)

    def message_bytes(self) -> int:
        return 4 + 2 * self.p_total  # the push-sum weight, then the values

    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        dense = x.to(torch.float16).to(x.dtype)
        return dense, dense

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.encode(x)[0]

    def wire_fields(self) -> list[tuple[torch.dtype, int]]:
        return [(torch.float16, self.p_total)]

    def wire_pack(self, dense: torch.Tensor, payload, out: list[torch.Tensor]) -> None:
        out[0].copy_(dense[0])

    def wire_unpack(self, fields: list[torch.Tensor], copy: torch.Tensor, accumulate: bool) -> None:
        values = fields[0].to(copy.device, torch.float32)
        copy.add_(values) if accumulate else copy.copy_(values)


# Its report coordinate ("half" + the percentage dropped) differs from its name, so that a test
# can tell a run read through the spec ("half0") from one read by a process that does not know
# it (the name, "fp16": compression_key's fallback).
SPEC = CompressorSpec(
    HalfPrecision, label="16-bit", sparse=False, token="dense-msg16", coordinate="half{pct}"
)


@pytest.fixture
def fp16() -> Iterator[CompressorSpec]:
    COMPRESSORS.add("fp16", SPEC)
    yield SPEC
    COMPRESSORS.remove("fp16")


RUN = [*TINY, "topology.nodes=4", "train.epochs=1", "train.final_gossip_rounds=2"]


def test_an_unregistered_compressor_is_a_config_error_naming_the_choices() -> None:
    with pytest.raises(ConfigError, match="fp16.*topk"):
        load_config(None, [*RUN, "algorithm.compression.name=fp16"])


def test_a_registered_compressor_trains_and_is_counted_named_and_described(fp16, tmp_path) -> None:
    out = tmp_path / "run"
    sets = [*RUN, "algorithm.compression.name=fp16", "algorithm.name=choco"]
    assert cli.main(["train", *sum((["--set", s] for s in sets), []), "--out", str(out)]) == 0
    rec = read_record(out)
    assert rec.status == "ok" and rec.config["algorithm"]["compression"]["name"] == "fp16"
    params = rec.model.params  # the gossiped state: this model's parameters (no 8-bit ranges)
    assert rec.communication.bytes_per_message == 4 + 2 * params
    assert "dense-msg16 choco" in run_name(rec)
    assert "16-bit messages" in run_note(rec)
    # The cost model: the engine's wire format packs the weight and P 16-bit values.
    segments = [(0, params)]
    assert message_nbytes(segments, torch.randn(1, params), "fp16") == (4 + 2 * params, params, 0)


def _half_precision_runs(root: Path) -> None:
    """Seeds 1-3 of uncompressed runs (80 + seed) and 16-bit-message runs (79.5 + seed)."""
    for seed in (1, 2, 3):
        for name, acc in (("none", 80.0 + seed), ("fp16", 79.5 + seed)):
            config = {"seed": seed, "partition": {"seed": seed}}
            config["algorithm"] = {"compression": {"name": name, "ratio": 0.0}}
            fake_record(f"{name}{seed}", acc, config=config).write(root / "runs" / f"{name}{seed}")


def test_a_registered_compressor_is_a_coordinate_of_the_report_tables(
    fp16, tmp_path, capsys
) -> None:
    """``lpdt compare`` pairs runs by seed across the compressors and names the new one by the
    coordinate its spec gives (``coordinate="half{pct}"``: "half0"), which only the registration
    can produce: without it the runs read as "fp16" (the next test)."""
    _half_precision_runs(tmp_path)
    argv = ["compare", str(tmp_path), "--vary", "compression", "--a", "0", "--b", "half0"]
    assert cli.main(argv) == 0
    assert "compression 0 - half0" in capsys.readouterr().out
    assert cli.main([*argv, "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
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
        assert runtime.full_train_size("stripes") == 64 and runtime.full_test_size("stripes") == 32
    finally:
        DATASETS.remove("stripes")
    assert runtime.full_train_size("stripes") is None  # unknown here: no size, no estimate


class HalfStep(Gossip):
    """Y = C = comp(Z + E) as Deep-Squeeze, but the error fed back at half weight: an algorithm
    in a dozen lines (one model-sized buffer)."""

    def __init__(self, exchange, compressor, eta, z0):
        super().__init__(exchange, compressor, eta, z0)
        self.error = torch.zeros_like(z0)

    def encode(self, z):
        v = torch.add(z, self.error, alpha=0.5, out=self.scratch)
        c, payload = self.compress.encode(v)
        torch.sub(v, c, out=self.error)
        return c, Message(c, payload, accumulate=False)

    def buffers(self):
        return {"error": self.error}


def test_a_registered_algorithm_trains_and_is_priced_named_and_tabled(tmp_path) -> None:
    from lpdt.cost.memory import training_memory
    from lpdt.report.tables import variant

    spec = AlgorithmSpec(
        HalfStep, label="Half-Step", short="HS", title="Half-Step SGD", state_buffers=1
    )
    ALGORITHMS.add("halfstep", spec)
    try:
        out = tmp_path / "run"
        sets = [*RUN, "algorithm.name=halfstep", "algorithm.compression.name=topk"]
        sets.append("algorithm.compression.ratio=0.5")
        assert cli.main(["train", *sum((["--set", s] for s in sets), []), "--out", str(out)]) == 0
        rec = read_record(out)
        assert rec.status == "ok" and rec.config["algorithm"]["name"] == "halfstep"
        assert " halfstep " in f" {run_name(rec)} " and "Half-Step SGD" in run_note(rec)
        # The cost model's memory: one model-sized buffer, as Deep-Squeeze's
        mem = training_memory([], 1000, 1, 1, "fp32", algorithm="halfstep")
        assert mem["algorithm_buffers"] == 4 * 1000
        assert variant("halfstep", "int8") == "LP-HS (8-bit)"  # its table column
    finally:
        ALGORITHMS.remove("halfstep")
