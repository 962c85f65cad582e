"""`lpdt partition` (lpdt.data.cli): paper class sizes offline, JSON output, clear errors."""

import argparse
import json

import pytest

from lpdt.data import cli


def parse(*argv):
    p = argparse.ArgumentParser()
    cli.add_arguments(p)
    return p.parse_args(list(argv))


def test_class_sizes_json(tmp_path, capsys):
    out = tmp_path / "partition.json"
    args = parse(
        "--class-sizes", "imagenette", "--nodes", "4", "--skew", "0", "0.6", "--json", str(out)
    )
    assert cli.run(args) == 0
    d = json.loads(out.read_text())
    assert d["dataset"] == "imagenette" and d["nodes"] == 4 and d["seed"] == 1234
    assert set(d["skews"]) == {"0.0", "0.6"}
    assert [sum(row) for row in d["skews"]["0.6"]] == [2366, 2366, 2366, 2362]
    assert "node" in capsys.readouterr().out


def _one_line(capsys, *argv: str) -> str:
    """``lpdt partition ARGV``'s exit code 2 and its one line of error."""
    from lpdt.cli import main

    assert main(["partition", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("lpdt partition: error: "), err
    return err[0]


def test_missing_dataset_is_an_error_not_a_synthesis(tmp_path, capsys):
    line = _one_line(capsys, "--dataset", "cifar10", "--data-root", str(tmp_path / "none"))
    assert "cifar10 not found" in line
    assert "pass --download, or copy" in line and "data root = --data-root" in line, line


def test_bad_values_are_one_line_with_the_commands_name(capsys):
    """As every command's (it printed "error: ..." with a KeyError's quotes, and took a seed
    numpy refuses)."""
    assert "skew" in _one_line(capsys, "--class-sizes", "cifar10", "--skew", "1.5")
    assert '"' not in _one_line(capsys, "--dataset", "nope")
    assert "--seed -1" in _one_line(capsys, "--class-sizes", "cifar10", "--seed", "-1")
    # a skew twice: its table printed twice, the JSON held it once (before 2026-12-01)
    line = _one_line(capsys, "--class-sizes", "cifar10", "--skew", "0.5", "0.50")
    assert "--skew 0.5 is given twice" in line
    # an empty name read cifar10 without a word (2026-12-02)
    assert "--dataset '': give a dataset's name" in _one_line(capsys, "--dataset", "")


def test_class_sizes_refuse_the_options_they_ignore(capsys):
    """``--class-sizes cifar10 --dataset fashion_mnist`` printed CIFAR-10's histograms as if
    the dataset had been read; a data root or a download beside them was ignored too."""
    for extra in (["--dataset", "fashion_mnist"], ["--data-root", "x"], ["--download"]):
        line = _one_line(capsys, "--class-sizes", "cifar10", *extra)
        assert f"reads no data: drop {extra[0]}" in line, line


def test_the_labels_source_is_printed_and_recorded(tmp_path, capsys):
    """A dataset may be found outside ``--data-root`` (Debian's Fashion-MNIST is read with a
    data root that does not exist): the tables and the JSON say where the labels came from."""
    out = tmp_path / "p.json"
    assert cli.run(parse("--class-sizes", "cifar10", "--nodes", "2", "--json", str(out))) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert (
        first == "labels: cifar10 training split, 50,000 samples, from the paper's class "
        "counts (--class-sizes)"
    )
    assert json.loads(out.read_text())["source"] == "the paper's class counts (--class-sizes)"


def test_json_to_standard_output(tmp_path, capsys, monkeypatch):
    """``--json -`` prints the JSON instead of the tables (as ``lpdt cost``'s ``--json`` does;
    it wrote a file named ``-``), and so does ``lpdt topology --json -``."""
    from lpdt.cli import main

    monkeypatch.chdir(tmp_path)  # where a file named "-" was written
    written = tmp_path / "p.json"
    assert cli.run(parse("--class-sizes", "cifar10", "--nodes", "2", "--json", str(written))) == 0
    capsys.readouterr()
    assert cli.run(parse("--class-sizes", "cifar10", "--nodes", "2", "--json", "-")) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(written.read_text())
    assert main(["topology", "--name", "ring", "--nodes", "4", "--json", "-"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["name"] == "ring" and d["nodes"] == 4
    assert not (tmp_path / "-").exists()


def test_download_reaches_the_dataset_config(monkeypatch):
    """A missing dataset's error says "set data.download: true": the command has it as
    ``--download`` (it had no way to set it). The reader is stood in for: nothing downloads."""
    import lpdt.data
    from lpdt.data.base import DatasetError

    seen = []

    def reader(cfg):
        seen.append(cfg.download)
        raise DatasetError("stood in")

    monkeypatch.setattr(lpdt.data, "load_dataset", reader)
    for argv in (["--download"], []):
        with pytest.raises(DatasetError, match="stood in"):
            cli.run(parse("--dataset", "cifar10", *argv))
    assert seen == [True, False]
