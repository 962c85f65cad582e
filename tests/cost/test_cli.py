import json

import pytest

from lpdt.cli import main


def test_cost_model_json(capsys):
    rc = main(
        [
            "cost",
            "model",
            "--model",
            "resnet20",
            "--norm",
            "rangeen",
            "--precision",
            "int8",
            "--batch",
            "32",
            "--json",
        ]
    )
    assert rc == 0
    d = json.loads(capsys.readouterr().out)
    assert d["params"] == 273_258 and d["precision"] == "int8"
    assert d["training"]["memory_mib"] == pytest.approx(35.15, abs=0.01)
    assert "quant_act" in d["training"]["by_layer_type"]
    assert "note" not in d  # Range-EvoNorm is what lpdt train builds at 8 bits


@pytest.mark.parametrize("norm", ["batchnorm", "rangebn"])
def test_an_8bit_norm_lpdt_train_would_not_build_is_said(capsys, norm):
    """BN priced at 8 bits is what the paper's Table 10 does for its own norms, but lpdt train
    builds 8-bit Range-EvoNorm for every norm but Range-BN: the output says so."""
    argv = ["cost", "model", "--model", "resnet8", "--norm", norm, "--precision", "int8"]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert main([*argv, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    if norm == "rangebn":  # lpdt train's 8-bit Range-BN
        assert not any(x.startswith("note: ") for x in lines) and "note" not in d
        return
    assert lines[1] == (
        "note: priced with batchnorm's operations at 8 bits; lpdt train at 8 bits trains "
        "model.norm=batchnorm as 8-bit Range-EvoNorm (--norm rangeen prices that)"
    )
    assert d["note"] == lines[1].removeprefix("note: ")
    # a model without a norm layer is priced the same with any --norm
    assert main(["cost", "model", "--model", "tiny_cnn", "--norm", norm]) == 0
    line = capsys.readouterr().out.splitlines()[1]
    assert line == f"note: tiny_cnn has no norm layer: --norm {norm} changes nothing"


def test_cost_model_text_and_energy_override(capsys):
    assert main(["cost", "model", "--model", "resnet20", "--energy", "fp32_mult=0"]) == 0
    out = capsys.readouterr().out
    assert "Conv" in out and "memory, training" in out and "overridden" in out


def test_cost_comm_json(capsys, tmp_path):
    out = tmp_path / "comm.json"
    rc = main(
        [
            "cost",
            "comm",
            "--model",
            "resnet20",
            "--norm",
            "evonorm",
            "--nodes",
            "16",
            "--topology",
            "directed_ring",
            "--compression",
            "0.99",
            "--epochs",
            "200",
            "--train-size",
            "50000",
            "--batch",
            "256",
            "--json",
            str(out),
        ]
    )
    assert rc == 0
    d = json.loads(out.read_text())
    assert d["kept"] == 2767 and f"{d['gb_per_node']:.3f}" == "0.651"


@pytest.mark.parametrize(
    "argv, msg",
    [
        (["cost", "model", "--model", "nope"], "unknown model"),
        (["cost", "comm", "--topology", "hexagon"], "unknown topology"),
        (["cost", "model", "--energy", "fp32_add"], "KEY=PJ"),
        (["cost", "model", "--energy", "fp32_add=1", "--energy", "fp32_add=2"], "given twice"),
        (["cost", "model", "--input-shape", "3,x,32"], "input-shape"),
        # torch's "expected input[1, 1, 3, 32] to have 3 channels" before 2026-11-30
        (["cost", "model", "--input-shape", "3,32"], "takes images, channels,height,width"),
        (["cost", "model", "--classes", "0"], "at least one class"),
        # the allocator's "can't allocate memory: you tried to allocate 120000000000 bytes"
        (["cost", "model", "--input-shape", "3,100000,100000"], "30,000,000,000 values per"),
        # "layer ... (Embedding) ... is not a priced kind; teach lpdt.cost.trace about it"
        (["cost", "model", "--model", "distilbert_tiny"], "is a text model"),
        (["cost", "comm", "--topology", "ring", "--rows", "2"], "apply only to a graph laid"),
        (["cost"], "choose a cost subcommand"),
    ],
)
def test_user_errors_are_one_line(capsys, argv, msg):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert msg in err and err.count("\n") == 1


def test_an_8bit_table_of_zero_energy_has_no_efficiency_ratio(tmp_path, capsys):
    """What-if energy tables may be 0 pJ; the FP/8-bit ratio is then no number (it raised
    ZeroDivisionError)."""
    argv = [
        "cost",
        "all",
        "--out",
        str(tmp_path),
        "--energy",
        "int8_add=0",
        "--energy",
        "int8_mult=0",
    ]
    assert main(argv) == 0, capsys.readouterr().err
    # what it computes is said before the ~10 s of work, then each file written (8)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("counting the models' operations")
    assert lines[1].startswith("measuring the messages")
    assert len(lines) == 10 and all(line.startswith(f"wrote {tmp_path}") for line in lines[2:])
    # strict JSON: the ratios that are no number are null (it held NaN)
    text = (tmp_path / "summary.json").read_text()
    summary = json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} in summary.json"))
    assert set(summary["energy_efficiency_training"].values()) == {None}
    assert summary["energy_efficiency_range"] is None


def test_comm_train_size_defaults_to_the_cifar10_size_of_the_runtime_table():
    import argparse

    from lpdt.cost.cli import add_arguments
    from lpdt.data import DATASETS

    p = argparse.ArgumentParser()
    add_arguments(p)
    args = p.parse_args(["comm"])
    assert args.train_size == DATASETS.get("cifar10").train_size == 50000


def test_cost_all_checks_its_folder_before_counting(tmp_path, capsys, monkeypatch):
    """A folder that cannot be made failed only after about ten seconds of counting."""
    from lpdt.cost import cost_tables

    def counted(**kwargs):
        raise AssertionError("counted before the folder was checked")

    monkeypatch.setattr(cost_tables, "compute_costs", counted)
    (tmp_path / "file").write_text("x")
    assert main(["cost", "all", "--out", str(tmp_path / "file" / "sub")]) == 2
    assert "is a file, not a directory" in capsys.readouterr().err


def test_cost_comm_says_a_torus_on_a_prime_node_count_is_a_ring(capsys):
    """lpdt topology and lpdt train say so; cost comm counted a ring silently."""
    argv = ["cost", "comm", "--topology", "torus", "--nodes", "7"]
    assert main(argv) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("note: torus on 7 nodes is 1 x 7, a ring: 7 is prime")
    assert main([*argv, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["note"] == first.removeprefix("note: ")
    assert main(["cost", "comm", "--topology", "torus", "--nodes", "8", "--json"]) == 0
    assert "note" not in json.loads(capsys.readouterr().out)
