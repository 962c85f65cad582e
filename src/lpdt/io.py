"""Atomic file writes: an interrupted job never leaves a file that looks complete.

Each file is written to a temporary file beside it, flushed to disk and then renamed over the
old one, so a write that fails (a full disk, a killed process) leaves the previous version
intact. A full device is reported as ``NoSpaceError``: one line naming the file ("no space left
on device while writing <path>"), whatever the writer made of it (``torch.save`` turns it into
"[enforce fail at inline_container.cc:672] . unexpected pos ..."; the ``OSError`` is in the
exception's context).

Standard output whose reader has gone (``lpdt ... | head``): ``output_reader_gone`` tells,
``reader_gone`` makes it lead nowhere and gives the exit status (the command line's, and a
distributed run's workers', quiet stop).
"""

from __future__ import annotations

import errno
import functools
import json
import os
import pickle
import select
import signal
import sqlite3
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from lpdt.errors import LpdtError


def _file_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


_FILE_MODE = _file_mode()  # a new file's mode under this process's umask (read once, at import)
# errno values of a device or quota that is full
_FULL = (errno.ENOSPC, errno.EDQUOT)


class NoSpaceError(LpdtError, OSError):
    """A write that found its device (or the user's quota) full; ``str``: one line naming the
    file."""

    def __init__(self, path: str | Path) -> None:
        super().__init__(errno.ENOSPC, "no space left on device", str(path))

    def __str__(self) -> str:
        return f"no space left on device while writing {self.filename}"


def no_space(exc: BaseException) -> bool:
    """Whether ``exc`` or an exception in its chain (``__cause__``, ``__context__``) is a full
    device: an ``OSError`` ENOSPC / EDQUOT, or SQLite's "database or disk is full" (an MLflow
    store)."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in _FULL:
            return True
        if isinstance(e, sqlite3.OperationalError) and "disk is full" in str(e):
            return True
        e = e.__cause__ or e.__context__
    return False


class OutputPathError(LpdtError, ValueError):
    """An output path that cannot be written: empty, or under a file where a directory goes."""


def make_dirs(directory: Path) -> None:
    """``directory.mkdir(parents=True, exist_ok=True)``, with a file in the way an
    ``OutputPathError`` that names it (mkdir says "File exists" or "Not a directory")."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        blocker = next(
            (p for p in (directory, *directory.parents) if p.exists() and not p.is_dir()),
            directory,
        )
        raise OutputPathError(f"{blocker} is a file, not a directory") from None


# The exit status of a process that stopped because its output's reader went away: that of one
# ended by SIGPIPE, as the shell's own tools give (`yes | head -1`).
READER_GONE = 128 + signal.SIGPIPE


def output_reader_gone() -> bool:
    """Whether standard output is a pipe whose reader has gone (a write would raise
    ``BrokenPipeError``). Asked without writing: a pipe with no reader polls ``POLLERR``
    (Linux, macOS); a terminal, a file or ``/dev/null`` never does. ``False`` where it cannot be
    told (no ``poll``, no file descriptor)."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, ValueError, OSError):  # None, closed, or not a file (a capture)
        return False
    if not hasattr(select, "poll"):
        return False
    poller = select.poll()
    poller.register(fd, 0)  # errors are reported whatever the events asked for
    return any(events & select.POLLERR for _, events in poller.poll(0))


def reader_gone() -> int:
    """The reader of standard output has gone (``lpdt topology --nodes 500 | head``): point
    standard output at ``/dev/null``, so that no later write or flush (the interpreter's own, at
    exit, of what a failed write left in the buffer) raises again, and return ``READER_GONE``,
    the status to exit with, quietly."""
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, sys.stdout.fileno())
    os.close(null)
    return READER_GONE


def _atomic(path: Path, write: Callable[[IO[Any]], object], mode: str) -> None:
    path = Path(path)
    if path.exists() and not path.is_file() and not path.is_dir():  # (following links)
        # a FIFO or a device (/dev/null, /dev/stdout onto a pipe): written through, never
        # replaced (a rename onto it swapped the device node for a regular file); opened by the
        # name given, as /dev/stdout's target (/proc/<pid>/fd/pipe:[N]) cannot be
        try:
            with open(path, mode) as f:
                write(f)
        except OSError as e:
            if no_space(e):
                raise NoSpaceError(path) from e
            raise
        return
    if path.is_symlink():  # write the file it points to; the link stays a link
        path = Path(os.path.realpath(path))
    make_dirs(path.parent)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        if no_space(e):
            raise NoSpaceError(path) from e
        # the error names the file asked for, not the temporary name beside it
        raise type(e)(e.errno, e.strerror, str(path)) from None
    try:
        with os.fdopen(fd, mode) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, _FILE_MODE)  # mkstemp's 0600 -> what open() would give (umask)
        os.replace(tmp, path)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if no_space(e):
            raise NoSpaceError(path) from e
        raise


def write_atomic(path: Path, write: Callable[[IO[bytes]], object]) -> None:
    """Write ``path`` through ``write(f)`` (a binary file) at once or not at all: readers never
    see half a file, and a failure (a full disk: ``NoSpaceError``) leaves nothing behind."""
    _atomic(path, write, "wb")


def write_text_atomic(path: Path, text: str) -> None:
    _atomic(path, lambda f: f.write(text), "w")


def write_json_atomic(path: Path, obj: Any) -> None:
    _atomic(path, lambda f: json.dump(obj, f, indent=2, allow_nan=True, default=str), "w")


def torch_save_atomic(path: Path, obj: Any) -> None:
    import torch

    _atomic(path, lambda f: torch.save(obj, f), "wb")


# What ``torch.load`` raises for a file cut short, emptied, a directory or not written by
# ``torch.save`` (a checkpoint, a token cache): the callers' "cannot be read". A text file raises
# ValueError ("invalid literal for int() with base 10", from its legacy-format reader).
TORCH_LOAD_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    EOFError,
    RuntimeError,
    ValueError,
    pickle.UnpicklingError,
)


class CsvError(LpdtError, ValueError):
    """A CSV file that pandas cannot read (cut short, not text, rows of the wrong width)."""


def read_csv(path: str | Path, columns: Sequence[str] = (), **kwargs: Any) -> Any:
    """``pandas.read_csv(path, **kwargs)``, with a file it cannot parse a ``CsvError`` naming
    the file (pandas' own message names none: "Error tokenizing data. C error: ..."), and so is
    a file without one of the ``columns`` its reader takes (a ``KeyError`` said only "model")."""
    import pandas as pd

    try:
        frame = pd.read_csv(path, **kwargs)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        detail = " ".join(str(e).split())  # pandas' message may span lines
        raise CsvError(f"{path}: not a CSV file that can be read ({detail})") from None
    if not {"sep", "delimiter", "header", "names"} & set(kwargs):  # a plain CSV with a header
        short = _short_row(Path(path), kwargs.get("comment"))
        if short:
            raise CsvError(f"{path}: not a CSV file that can be read ({short})")
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise CsvError(
            f"{path}: no column {', '.join(missing)} (its columns: {', '.join(map(str, frame.columns))})"
        )
    return frame


def _short_row(path: Path, comment: str | None) -> str | None:
    """What is wrong with the first row of ``path`` that has fewer fields than its header, or
    None. pandas fills such a row's missing fields with NaN without a word: a file cut off in
    the middle of its last row read as a whole one."""
    import csv

    rows = csv.reader(path.read_text().splitlines())  # a quoted field may span lines
    header: list[str] | None = None
    for row in rows:
        if not row or (comment and row[0].lstrip().startswith(comment)):
            continue  # a blank or comment line (a record's start: not inside a quoted field)
        if header is None:
            header = row
        elif len(row) < len(header):
            n = rows.line_num
            return f"line {n} has {len(row)} of the header's {len(header)} fields: cut short?"
    return None


# YAML 1.1's integers and floats without its base-60, octal and binary forms (PyYAML read
# `epochs: 1:30` as 90, `seed: 010` as 8, `0b11` as 3): such a value stays text, and a key that
# takes a number says "expected int". Decimal (with `_`), hexadecimal, and the floats of YAML 1.1.
_INT = r"^(?:[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+)$"
_FLOAT = (
    r"^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?"
    r"|\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?"
    r"|[-+]?\.(?:inf|Inf|INF)"
    r"|\.(?:nan|NaN|NAN))$"
)


class YamlKeyError(LpdtError, ValueError):
    """A YAML mapping with a key written twice, or a key that is a list or a mapping (one line
    that says which, with its line numbers)."""


@functools.cache  # one class: a loader class per file read was made again each time
def _unique_key_loader() -> Any:
    """PyYAML's ``SafeLoader``, refusing a key written twice in one mapping (``epochs:`` twice
    in a config: PyYAML keeps the last without a word) and a key that is a list or a mapping
    (a TypeError's traceback), and reading numbers without YAML 1.1's base-60, octal and
    binary forms (``_INT``, ``_FLOAT``). Keys a merge (``<<: *anchor``) brings in may be
    overridden, as YAML means them to be."""
    import re

    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=deep)
                line = key_node.start_mark.line + 1
                try:
                    hash(key)
                except TypeError:  # a list or a mapping as a key: a TypeError's traceback
                    raise YamlKeyError(
                        f"the key on line {line} is a {type(key).__name__}, not a name"
                    ) from None
                if key in seen:
                    raise YamlKeyError(
                        f"the key {key!r} is written twice, on lines {seen[key]} and {line} "
                        "(one of them would be ignored)"
                    )
                seen.setdefault(key, line)
            return super().construct_mapping(node, deep)

    numbers = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")
    UniqueKeyLoader.yaml_implicit_resolvers = {
        first: [(tag, rx) for tag, rx in resolvers if tag not in numbers]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    UniqueKeyLoader.add_implicit_resolver(numbers[0], re.compile(_INT), list("-+0123456789"))
    UniqueKeyLoader.add_implicit_resolver(numbers[1], re.compile(_FLOAT), list("-+0123456789."))
    return UniqueKeyLoader


def load_yaml(text: str) -> Any:
    """``text`` read as YAML by the loader of ``read_yaml_mapping`` (``yaml.YAMLError`` as
    PyYAML's): a ``--set`` value as a config file's would be read."""
    import yaml

    return yaml.load(text, Loader=_unique_key_loader())  # noqa: S506 (a SafeLoader)


def read_yaml_mapping(path: str | Path, error: type[Exception], what: str) -> dict[str, Any]:
    """The mapping in the YAML file ``path``; ``error`` with one line starting with ``what`` when
    the file is missing, a directory, not text, not YAML, empty (nothing but comments or
    blanks: a file cut off or not yet written, which would otherwise read as "change nothing":
    an empty scale file made its scale the paper's grid) or not a mapping (a run config, a
    studies or scale file). An explicit ``{}`` is an empty mapping."""
    import yaml

    p = Path(path)
    if p.is_dir():
        raise error(f"{what} is a directory, not a file")
    if not p.exists():
        stdin = " (standard input is /dev/stdin)" if str(path) == "-" else ""
        raise error(f"{what} does not exist{stdin}")
    if not (p.is_file() or p.is_fifo()):  # a pipe (<(...), /dev/stdin) is read as a file is
        raise error(f"{what} is not a file (a device or a socket)")
    try:
        data = load_yaml(p.read_text())
        if data is None:
            raise error(f"{what} is empty (no settings in it: nothing, comments or null)")
    except UnicodeDecodeError:
        raise error(f"{what} is not text (UTF-8)") from None
    except (yaml.YAMLError, YamlKeyError) as e:
        detail = " ".join(str(e).split())  # PyYAML's message spans lines, with a caret line
        raise error(f"{what} is not valid YAML: {detail}") from None
    if not isinstance(data, dict):
        raise error(f"{what} must contain a mapping")
    return data


def output_file(text: str) -> str:
    """An ``argparse`` type for an option that names a file to write: an empty name (an unset
    ``$OUT``) and a name that ends in a slash or is an existing directory are refused
    (``--claims out/`` wrote a file named ``out``). ``-``, standard output, passes: the options
    that take it say so."""
    import argparse

    if not text:
        raise argparse.ArgumentTypeError("an empty path; give the file's name")
    if text.endswith(("/", os.sep)) or Path(text).is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a directory; give the file's name")
    return text


def output_dir(text: str) -> str:
    """An ``argparse`` type for an option that names a directory to write in: an empty name (an
    unset ``$OUT``: the files landed in the working directory) and an existing file are
    refused."""
    import argparse

    if not text:
        raise argparse.ArgumentTypeError("an empty path; give the directory's name")
    if Path(text).exists() and not Path(text).is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a file, not a directory")
    return text


def emit_json(obj: Any, target: str) -> None:
    """``obj`` as JSON to ``target``: standard output for ``-``, else the file (atomically,
    then a ``wrote`` line)."""
    if target == "-":
        json.dump(obj, sys.stdout, indent=2, default=str)
        print()
    else:
        write_json_atomic(Path(target), obj)
        print(f"wrote {target}")
