"""`lpdt partition` (lpdt.data.cli): paper class sizes offline, JSON output, clear errors."""

import argparse
import json

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


def test_missing_dataset_is_an_error_not_a_synthesis(tmp_path, capsys):
    args = parse("--dataset", "cifar10", "--data-root", str(tmp_path / "none"))
    assert cli.run(args) == 2
    assert "cifar10 not found" in capsys.readouterr().err


def test_bad_skew(capsys):
    assert cli.run(parse("--class-sizes", "cifar10", "--skew", "1.5")) == 2
    assert "skew" in capsys.readouterr().err
