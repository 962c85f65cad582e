"""lpdt's error classes: each derives from ``lpdt.errors.LpdtError`` (so the command line prints
it as one line), and from the built-in error it has always been."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import lpdt
from lpdt.errors import LpdtError

SRC = Path(lpdt.__file__).resolve().parent


def _error_classes() -> list[tuple[str, str]]:
    """(module, class name) of every class in src/lpdt that derives from an exception class by
    name (its bases end in Error, Exception or Timeout), read from the source."""
    found = []
    for f in sorted(SRC.rglob("*.py")):
        module = ".".join(f.relative_to(SRC.parent).with_suffix("").parts).removesuffix(".__init__")
        for node in ast.walk(ast.parse(f.read_text())):
            if not isinstance(node, ast.ClassDef):
                continue
            bases = [
                b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases
            ]
            if any(b.endswith(("Error", "Exception", "Timeout")) for b in bases):
                found.append((module, node.name))
    return found


def test_every_error_class_of_lpdt_is_an_lpdt_error():
    classes = _error_classes()
    assert len(classes) >= 13  # ConfigError, GridError, RecordError, TrackingError, ...
    outside = []
    for module, name in classes:
        cls = getattr(importlib.import_module(module), name)
        if not issubclass(cls, LpdtError):
            outside.append(f"{module}.{name}")
    assert not outside, f"not derived from lpdt.errors.LpdtError: {', '.join(outside)}"


def test_the_command_line_prints_an_lpdt_error_as_one_line(tmp_path, capsys):
    from lpdt.cli import main

    bad = tmp_path / "metrics.json"
    bad.write_text("{ not json")
    # lpdt compare on a tree whose only run record is damaged: an LpdtError, one line, exit 2
    (tmp_path / "runs" / "x").mkdir(parents=True)
    (tmp_path / "runs" / "x" / "metrics.json").write_text("{ not json")
    rc = main(["compare", str(tmp_path), "--vary", "precision", "--a", "fp32", "--b", "int8"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("lpdt compare: ")


def test_a_path_of_the_wrong_kind_is_one_line_naming_it(tmp_path, capsys):
    """An OS error about a path (here a directory given where a file is read) is the user's to
    fix: one line naming the path, exit 2. An OS error about no path is a bug: its traceback."""
    from lpdt.cli import main, user_error_line

    rc = main(["report", "--manifest", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("lpdt report: error: "), err
    assert str(tmp_path) in err[0] and "Traceback" not in err[0]
    assert user_error_line(IsADirectoryError(21, "Is a directory", "x.json")) == (
        "x.json: Is a directory"
    )
    assert user_error_line(OSError(5, "Input/output error")) is None
    assert user_error_line(TypeError("a bug")) is None
