"""Atomic writes (lpdt.io): a full disk is one line naming the file, and the file's previous
version survives. The full disk is Linux's /dev/full (every write: ENOSPC) put where the write's
temporary file would be, so the real writers (json, text, torch.save) meet a real ENOSPC."""

from __future__ import annotations

import csv
import errno
import json
import os
import sqlite3
import stat
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest
import torch

from lpdt import io, record
from lpdt.cli import main
from tests.fake_records import fake_record


def fill_disk(monkeypatch: pytest.MonkeyPatch, only: str = "") -> list[str]:
    """Temporary files of lpdt.io (of files whose name contains ``only``) open /dev/full;
    returns their names (to check they are gone)."""
    if not os.path.exists("/dev/full"):
        pytest.fail("this test needs Linux's /dev/full")
    made: list[str] = []
    real = tempfile.mkstemp

    def mkstemp(*args, **kwargs):
        fd, name = real(*args, **kwargs)
        if only not in Path(name).name:
            return fd, name
        os.close(fd)
        made.append(name)
        return os.open("/dev/full", os.O_WRONLY), name

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    return made


@pytest.fixture
def full_disk(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    return fill_disk(monkeypatch)


@pytest.mark.parametrize(
    "write",
    [
        lambda p: io.write_text_atomic(p, "x" * 100_000),
        lambda p: io.write_json_atomic(p, {"x": list(range(20_000))}),
        lambda p: io.torch_save_atomic(p, {"x": torch.randn(100_000)}),
    ],
    ids=["text", "json", "torch.save"],
)
def test_a_full_disk_names_the_file_and_keeps_the_old_one(tmp_path, full_disk, write):
    path = tmp_path / "out" / "file"
    path.parent.mkdir()
    path.write_text("the previous version")
    with pytest.raises(io.NoSpaceError) as caught:
        write(path)
    assert str(caught.value) == f"no space left on device while writing {path}"
    assert caught.value.errno == errno.ENOSPC
    assert path.read_text() == "the previous version"
    assert full_disk and not any(os.path.exists(t) for t in full_disk)  # no temporary left


def test_torch_save_on_a_full_disk_is_not_torchs_unexpected_pos(tmp_path, full_disk):
    """torch.save meets ENOSPC inside its zip writer and raises "unexpected pos": the chain
    still holds the OSError, and that is what is reported."""
    with pytest.raises(io.NoSpaceError) as caught:
        io.torch_save_atomic(tmp_path / "checkpoint.pt", {"x": torch.randn(1000)})
    assert "unexpected pos" not in str(caught.value)


def test_run_record_and_history_on_a_full_disk(tmp_path, full_disk):
    rec = fake_record()
    with pytest.raises(io.NoSpaceError, match=f"while writing {tmp_path / record.HISTORY_FILE}$"):
        rec.write(tmp_path)
    assert not (tmp_path / record.METRICS_FILE).exists()  # the run does not look complete


def test_no_space_finds_the_cause_in_the_chain():
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError:
            raise RuntimeError(
                "[enforce fail at inline_container.cc:672] . unexpected pos"
            ) from None
    except RuntimeError as e:
        assert io.no_space(e)  # from None hides it from tracebacks, not from __context__
    assert io.no_space(OSError(errno.EDQUOT, "Disk quota exceeded"))
    assert io.no_space(sqlite3.OperationalError("database or disk is full"))
    assert not io.no_space(OSError(errno.EACCES, "Permission denied"))
    assert not io.no_space(RuntimeError("unexpected pos 704 vs 598"))


def test_lpdt_train_on_a_full_disk_says_so_in_one_line(tmp_path, full_disk, capsys):
    """The run's first write (its config.yaml) fails: exit 2 and one line naming the file."""
    out = tmp_path / "run"
    rc = main(
        [
            "train",
            "--set",
            "data.dataset=synthetic",
            "--set",
            "model.name=tiny_cnn",
            "--out",
            str(out),
        ]
    )
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"lpdt train: error: no space left on device while writing {out / 'config.yaml'} "
        "(LPDT_DEBUG=1 for a traceback)"
    ]


def test_a_checkpoint_on_a_full_disk_loses_nothing_written(tmp_path, monkeypatch, capsys):
    """The disk fills at the first epoch's checkpoint: one line naming it, exit 2, and the
    files written before (config.yaml, the epoch's history row) are whole."""
    fill_disk(monkeypatch, only="checkpoint")
    out = tmp_path / "run"
    argv = [
        "data.dataset=synthetic",
        "data.train_subset=256",
        "data.test_subset=64",
        "model.name=tiny_cnn",
        "topology.nodes=2",
        "train.epochs=2",
        "threads=1",
    ]
    rc = main(["train", *sum((["--set", o] for o in argv), []), "--out", str(out)])
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"lpdt train: error: no space left on device while writing {out / 'checkpoint.pt'} "
        "(LPDT_DEBUG=1 for a traceback)"
    ]
    with (out / record.HISTORY_FILE).open(newline="") as f:
        assert [row["epoch"] for row in csv.DictReader(f)] == ["0"]
    assert (out / "config.yaml").read_text().strip()
    assert not (out / "checkpoint.pt").exists() and not (out / record.METRICS_FILE).exists()


def test_other_os_errors_are_not_called_a_full_disk(tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", str(tmp_path))

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    with pytest.raises(PermissionError):
        io.write_text_atomic(tmp_path / "f", "x")
    assert Path(tmp_path).exists()


def test_an_atomic_write_keeps_a_link_and_writes_through_a_fifo(tmp_path):
    """The rename onto the asked-for path replaced a symbolic link by a file (the link's
    target kept its old text) and a FIFO or a device (``--json /dev/null`` as root) by a
    regular file: the link's target is written, atomically, and a FIFO is written through."""
    import threading

    from lpdt.io import write_json_atomic, write_text_atomic

    target, link = tmp_path / "target.json", tmp_path / "link.json"
    target.write_text("old")
    link.symlink_to(target.name)
    write_json_atomic(link, {"a": 1})
    assert link.is_symlink() and json.loads(target.read_text()) == {"a": 1}

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    write_text_atomic(fifo, "through")
    reader.join(timeout=30)
    assert got == ["through"] and stat.S_ISFIFO(fifo.stat().st_mode)
    # /dev/stdout onto a pipe: a link to /proc/<pid>/fd/pipe:[N], which cannot be opened by
    # that name (it was resolved first: FileNotFoundError)
    code = "import sys; from lpdt.io import write_text_atomic; write_text_atomic(sys.argv[1], 'x')"
    piped = subprocess.run(
        [sys.executable, "-c", code, "/dev/stdout"], capture_output=True, text=True, timeout=60
    )
    assert (piped.returncode, piped.stdout) == (0, "x"), piped.stderr


def test_an_atomic_write_gives_the_file_the_mode_open_would(tmp_path):
    """mkstemp creates 0600; the renamed file must have what the umask gives a new file (here
    022: 0644), so a results tree is readable by the group as files open() writes are."""
    code = (
        "import os, sys; os.umask(0o022); from lpdt.io import write_text_atomic; "
        "write_text_atomic(sys.argv[1], 'x')"
    )
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "a.txt")], check=True, timeout=60)
    assert stat.S_IMODE((tmp_path / "a.txt").stat().st_mode) == 0o644


@pytest.mark.parametrize(
    ("content", "says"),
    [(b"a,b\n1,2\n3,4,5,6\n", "Expected 2 fields"), (b"", "No columns"), (b"\xff\xfe\x00a", "")],
)
def test_a_csv_that_cannot_be_read_is_named(tmp_path, content, says):
    """Rows of the wrong width (a README passed as --paper), an empty file, bytes that are not
    text: one line naming the file (pandas' messages name none)."""
    from lpdt.io import CsvError, read_csv

    path = tmp_path / "t.csv"
    path.write_bytes(content)
    with pytest.raises(CsvError, match=rf"t\.csv: not a CSV file that can be read \(.*{says}"):
        read_csv(path)
    path.write_text("a,b\n1,2\n")
    assert read_csv(path)["b"].tolist() == [2]


def test_a_csv_cut_in_its_last_row_is_an_error(tmp_path):
    """pandas read a file cut off in the middle of a row as whole, its missing fields NaN (a
    cost table cut short gave a report with blanks). Comment lines are skipped as pandas skips
    them, and a quoted field may hold a comma or a line break."""
    from lpdt.io import CsvError, read_csv

    path = tmp_path / "t.csv"
    path.write_text('# a comment\na,b,c\n"x, y",2,3\n"two\nlines",5,6\n7,8')
    with pytest.raises(CsvError, match=r"t\.csv: .*\(line 6 has 2 of the header's 3 fields"):
        read_csv(path, comment="#")
    path.write_text('# a comment\na,b,c\n"x, y",2,3\n"two\nlines",5,6\n7,8,9')
    assert read_csv(path, comment="#")["c"].tolist() == [3, 6, 9]
    path.write_text('a,b\n"x\n#y",2\n3,4\n')  # a "#" inside a quoted field is no comment
    assert read_csv(path, comment="#")["b"].tolist() == [2, 4]


def test_an_output_file_option_refuses_a_directory(tmp_path, capsys):
    """``--claims out/`` wrote a file named ``out``; a directory given for a file is refused by
    the option itself, in every command that writes one file."""
    from lpdt.cli import main

    for argv in (
        ["report", "--claims", f"{tmp_path}/new/"],
        ["report", "--pdf", str(tmp_path)],
        ["topology", "--name", "ring", "--nodes", "4", "--json", str(tmp_path)],
        ["partition", "--class-sizes", "cifar10", "--json", f"{tmp_path}/x/"],
        ["cost", "model", "--model", "tiny_cnn", "--json", str(tmp_path)],
    ):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2
        assert "is a directory; give the file's name" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()


def test_an_unwritable_directory_is_named_not_the_temporary_file(tmp_path, monkeypatch):
    """mkstemp's error named the temporary name beside the file
    (``.x.json.hk7iakaf.tmp: Permission denied``); it names the file asked for."""

    def refuse(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", str(tmp_path / ".x.json.abc.tmp"))

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    with pytest.raises(PermissionError) as e:
        io.write_json_atomic(tmp_path / "x.json", {})
    assert e.value.filename == str(tmp_path / "x.json")


def test_a_file_where_a_directory_goes_is_named(tmp_path, capsys):
    """``lpdt topology --json afile/x.json`` said "afile: File exists"; every writer through
    lpdt.io names the file in the way, and the commands refuse an empty path (an unset $OUT:
    the files landed in the working directory) or a file given for a directory."""
    from lpdt.cli import main

    blocker = tmp_path / "afile"
    blocker.write_text("x")
    with pytest.raises(io.OutputPathError, match=rf"^{blocker} is a file, not a directory$"):
        io.write_text_atomic(blocker / "sub" / "x.txt", "x")
    code = main(["topology", "--nodes", "3", "--json", str(blocker / "x.json")])
    assert code == 2 and f"{blocker} is a file, not a directory" in capsys.readouterr().err
    for argv, says in (
        (["topology", "--nodes", "3", "--json", ""], "an empty path; give the file's name"),
        (["train", "--out", ""], "an empty path; give the directory's name"),
        (["cost", "all", "--out", ""], "an empty path; give the directory's name"),
        (["train", "--out", str(blocker)], f"'{blocker}' is a file, not a directory"),
        (["cost", "all", "--out", str(blocker)], f"'{blocker}' is a file, not a directory"),
    ):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2
        assert says in capsys.readouterr().err, argv
    assert blocker.read_text() == "x"


def test_a_yaml_error_is_one_line_without_the_carets_padding(tmp_path):
    """PyYAML's message spans lines, with the line's text and a caret line under it: the one
    line keeps single spaces (it kept the caret line's padding: ``column 1:          ^``)."""
    path = tmp_path / "bad.yaml"
    path.write_text("a: [1\nb: 2\n")
    with pytest.raises(ValueError, match="is not valid YAML") as e:
        io.read_yaml_mapping(path, ValueError, "config file")
    assert "\n" not in str(e.value) and "  " not in str(e.value), str(e.value)


def test_a_key_written_twice_is_an_error_but_a_merge_may_be_overridden(tmp_path):
    """PyYAML keeps the last of two equal keys without a word (a config with ``epochs:``
    twice trained the second's); a merged mapping's keys are meant to be overridden."""
    path = tmp_path / "c.yaml"
    path.write_text("train:\n  epochs: 3\n  lr: 0.1\n  epochs: 5\n")
    with pytest.raises(ValueError, match=r"the key 'epochs' is written twice, on lines 2 and 4"):
        io.read_yaml_mapping(path, ValueError, "config file")
    path.write_text("base: &b {epochs: 3, lr: 0.1}\nrun:\n  <<: *b\n  epochs: 5\n")
    assert io.read_yaml_mapping(path, ValueError, "config file")["run"] == {"epochs": 5, "lr": 0.1}


def test_a_csv_without_a_column_its_reader_takes_names_the_file_and_the_column(tmp_path):
    """``lpdt report`` on a cost folder whose table3_data.csv lacks ``model``: "error: model"."""
    path = tmp_path / "t.csv"
    path.write_text("x,y\n1,2\n")
    with pytest.raises(io.CsvError) as e:
        io.read_csv(path, ("x", "model", "reading"))
    assert str(e.value) == f"{path}: no column model, reading (its columns: x, y)"
    assert list(io.read_csv(path, ("y",)).columns) == ["x", "y"]


def test_a_key_that_is_a_list_or_a_mapping_is_one_line(tmp_path):
    """``{[a]: 1}`` or ``? {a: 1}``: a TypeError ("unhashable type: 'list'") with its traceback."""
    path = tmp_path / "c.yaml"
    for text, kind in (("{[a]: 1}\n", "list"), ("? {a: 1}\n: 2\n", "dict")):
        path.write_text(text)
        with pytest.raises(ValueError, match=f"the key on line 1 is a {kind}, not a name"):
            io.read_yaml_mapping(path, ValueError, "config file")


@pytest.mark.parametrize(
    ("text", "value"),
    [
        # YAML 1.1's base-60, octal and binary forms stay text (PyYAML: 90, 8, 3, 90.5)
        ("1:30", "1:30"),
        ("010", "010"),
        ("0b11", "0b11"),
        ("1:30.5", "1:30.5"),
        # what stays a number
        ("10", 10),
        ("-3", -3),
        ("1_000", 1000),
        ("0x10", 16),
        ("0", 0),
        ("0.5", 0.5),
        (".5", 0.5),
        ("1.5e+3", 1500.0),
        ("-.inf", float("-inf")),
        ("true", True),
        ("null", None),
    ],
)
def test_numbers_are_read_without_yaml_11s_surprises(text, value):
    assert io.load_yaml(text) == value
    assert type(io.load_yaml(text)) is type(value)


def test_a_pipe_whose_reader_has_gone_is_told_without_writing(tmp_path, monkeypatch):
    """``io.output_reader_gone``: what a distributed run's workers ask before calling a lost
    peer a failure (``lpdt.engine.worker``); a file or a capture without a descriptor is never
    a gone reader."""
    import io as stdio

    r, w = os.pipe()
    with os.fdopen(w, "w") as pipe, open(tmp_path / "file", "w") as file:
        monkeypatch.setattr(sys, "stdout", pipe)
        assert not io.output_reader_gone()
        os.close(r)  # the reader goes
        assert io.output_reader_gone()
        monkeypatch.setattr(sys, "stdout", file)
        assert not io.output_reader_gone()
        monkeypatch.setattr(sys, "stdout", stdio.StringIO())
        assert not io.output_reader_gone()


def test_a_config_from_a_pipe_is_read_and_a_dash_points_to_stdin(tmp_path):
    """``lpdt train --config <(...)``: "config file '/dev/fd/63' does not exist" (a pipe is no
    regular file), before 2026-12-01; ``--config -`` says where standard input is."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    done = threading.Event()

    def feed() -> None:
        with open(fifo, "w") as f:
            f.write("seed: 7\n")
        done.set()

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    assert io.read_yaml_mapping(fifo, ValueError, "config file") == {"seed": 7}
    writer.join(timeout=10)
    assert done.is_set()
    with pytest.raises(ValueError) as e:
        io.read_yaml_mapping("-", ValueError, "config file '-'")
    assert str(e.value) == "config file '-' does not exist (standard input is /dev/stdin)"
    # a device is no file: /dev/zero was read until memory ran out (a review found it)
    with pytest.raises(ValueError) as e:
        io.read_yaml_mapping("/dev/zero", ValueError, "config file")
    assert str(e.value) == "config file is not a file (a device or a socket)"
