"""`lpdt ui`'s training view rests on facts of the installed MLflow UI's JavaScript
(lpdt.tracking.cli's and lpdt.tracking.webapp's docstrings): if a release changes them, these
tests say so; `lpdt ui`'s refusals before its exec; and `python -m lpdt.tracking`'s errors."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import sqlite3
from pathlib import Path

import mlflow
import pytest

from lpdt.tracking import cli


def _bundle() -> str:
    js = Path(mlflow.__file__).parent / "server" / "js" / "build" / "static" / "js"
    return "".join(f.read_text(errors="ignore") for f in sorted(js.glob("*.js")))


def test_run_pages_follow_the_url_or_the_stored_switch_not_the_experiment_tag():
    text = _bundle()
    # the runs table links a run without the workflowType parameter
    assert re.search(
        r'runs_table\.run_name_link",to:\w+\.\w+\.getRunPageRoute\(\w+,\w+\),', text
    ), "the run link changed: check whether run pages now keep the Model training view"
    # the experiment kind is read from the workflow type while a feature flag is on, and it is
    w = r"[\w$]+"
    assert re.search(
        rf"{w}=>\{{const\{{workflowType:{w}\}}=\(0,{w}\.B\)\(\),{w}=\(0,{w}\.Z0\)\(\);"
        rf"return\(0,{w}\.useMemo\)\(\(\)=>{w}\?{w}\({w}\):",
        text,
    )
    assert "Z0:()=>R" in text and ",R=()=>!0," in text
    # the sidebar switch stores a choice (localStorage) only when it changes the view, so a
    # click on "Model training" stores nothing on a page whose URL already selects it
    assert re.search(
        rf"{w}=\(0,{w}\.useCallback\)\({w}=>\{{if\({w}!=={w}&&\({w}\({w}\),{w}\)\)\{{const "
        rf'{w}=\(\({w},{w}\)=>\{{const {w}=new URLSearchParams;{w}\.set\("workflowType"',
        text,
    )
    assert 'key:"mlflow.workflowType",version:1,initialValue:' in text


def test_a_full_disk_under_the_store_is_one_line_naming_it(tmp_path, monkeypatch, capsys):
    """SQLite's 'database or disk is full' (or an ENOSPC) from MLflow ends `python -m
    lpdt.tracking` with one line naming the store, exit 2, not a traceback."""

    def full(*args, **kwargs):
        try:
            raise sqlite3.OperationalError("database or disk is full")
        except sqlite3.OperationalError as e:
            raise RuntimeError("(sqlite3.OperationalError) database or disk is full") from e

    monkeypatch.setattr(cli, "sync_manifest", full)
    uri = f"sqlite:///{tmp_path}/m.db"
    assert cli.main(["sync", "--manifest", str(tmp_path / "manifest.json"), "--uri", uri]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"lpdt.tracking sync: error: no space left on device while writing the MLflow store {uri}"
    ]


def test_other_errors_still_raise(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("something else")

    monkeypatch.setattr(cli, "sync_manifest", broken)
    with pytest.raises(RuntimeError, match="something else"):
        cli.main(
            ["sync", "--manifest", str(tmp_path / "m.json"), "--uri", f"sqlite:///{tmp_path}/m.db"]
        )


@pytest.mark.parametrize("case", ["not-a-database", "unknown-scheme", "manifest-dir", "tag"])
def test_a_bad_store_path_or_tag_is_one_line(tmp_path, capsys, case):
    """`python -m lpdt.tracking` (the workflow's MLflow jobs) on a store file that is no
    database, a URI of an unknown scheme, a manifest that is a directory, a --tag without
    "=": one line naming it, exit 2 (each was a traceback, the tag a message about a
    "dictionary update sequence")."""
    (tmp_path / "bad.db").write_text("not a database\n")
    (tmp_path / "manifest.json").mkdir()
    good = f"sqlite:///{tmp_path}/ok.db"
    argv, says = {
        "not-a-database": (  # checked before the store's lock file is made beside it
            ["init", "--uri", f"sqlite:///{tmp_path}/bad.db"],
            "bad.db is not a SQLite database (file is not a database)",
        ),
        "unknown-scheme": (
            ["init", "--uri", "htp://x"],
            "--uri htp://x: MLflow has no store for the scheme 'htp'",
        ),
        "manifest-dir": (
            ["sync", "--uri", good, "--manifest", str(tmp_path / "manifest.json")],
            "manifest.json: Is a directory",
        ),
        "tag": (["log", "--uri", good, str(tmp_path), "--tag", "foo"], "--tag 'foo' must look"),
    }[case]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"lpdt.tracking {argv[0]}: error: "), err
    assert says in err[0], err
    assert not (tmp_path / "bad.db.lock").exists()


def test_a_store_without_permission_is_one_line_at_once(tmp_path, monkeypatch, capsys):
    """A SQLite store the user may not read or write (simulated: the tests run as root, whom
    no permission stops): one line at once; MLflow retried it for about 100 s, a warning at
    each try, before `lpdt ui` said anything."""
    import time

    from lpdt.tracking import store

    db = tmp_path / "m.db"
    db.write_bytes(b"")
    real = os.access
    monkeypatch.setattr(store.os, "access", lambda p, mode: Path(p) != db and real(p, mode))
    t0 = time.monotonic()
    assert cli.main(["init", "--uri", f"sqlite:///{db}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"lpdt.tracking init: error: {db}: permission denied (the MLflow store must be readable and writable)"
    ]
    assert time.monotonic() - t0 < 10


def test_the_workflows_mlflow_command_bounds_its_wait_for_a_server(tmp_path, monkeypatch):
    """`python -m lpdt.tracking` (each training job's MLflow log) sets MLflow's HTTP retries and
    timeout to HTTP_WAITS where the environment sets none (MLflow's defaults wait minutes for a
    server it cannot reach, holding the job's GPU), and leaves a value that is set."""
    from lpdt.tracking import HTTP_WAITS

    for key in HTTP_WAITS:
        monkeypatch.setenv(key, "0")
        monkeypatch.delenv(key)  # unset now, as it was before, after the test
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "7")
    assert cli.main(["init", "--uri", f"sqlite:///{tmp_path}/m.db"]) == 0
    assert (
        os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"]
        == HTTP_WAITS["MLFLOW_HTTP_REQUEST_MAX_RETRIES"]
    )
    assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "7"


# --- lpdt ui: refused before the exec ------------------------------------------------------------


def _ui_refuses(argv: list[str], monkeypatch, capsys) -> str:
    """``lpdt ui`` with ``argv``: exit 2, one line on stderr (returned), nothing printed on
    stdout, and no server started (its exec fails the test)."""
    from lpdt.cli import main

    def no_exec(*args):
        raise AssertionError("lpdt ui started the server")

    monkeypatch.setattr(os, "execve", no_exec)
    rc = main(["ui", *argv])
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("lpdt ui: error: "), err
    assert out == ""
    return lines[0]


def test_lpdt_ui_refuses_a_port_in_use(store, monkeypatch, capsys):
    """A port another process listens on: one line naming the address, exit 2 (MLflow's server
    logged 'address already in use' and exited 0)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = _ui_refuses(["--uri", store, "--port", str(port)], monkeypatch, capsys)
    assert f"127.0.0.1:{port}" in line and "in use" in line


@pytest.mark.parametrize("port", ["99999", "65536", "-5", "0"])
def test_lpdt_ui_refuses_a_port_out_of_range(port, tmp_path, monkeypatch, capsys):
    """A port outside 1..65535 (uvicorn's traceback after the printed address, exit 0; 0 would
    let the system choose a port the printed address cannot name), before the store is opened."""
    monkeypatch.chdir(tmp_path)
    line = _ui_refuses(["--port", port], monkeypatch, capsys)
    assert f"port {port} is outside 1..65535" in line
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("host", ["no-such-host.invalid", "192.0.2.1"])
def test_lpdt_ui_refuses_a_host_it_cannot_listen_on(host, store, monkeypatch, capsys):
    """A host that resolves to nothing, or an address of another machine (TEST-NET-1): one line
    naming host:port. (The name's lookup is answered here, as the resolver would answer it:
    the tests talk to nothing beyond this machine.)"""
    import socket

    resolve = socket.getaddrinfo

    def no_such_host(name: str, *args: object, **kwargs: object) -> object:
        if name == "no-such-host.invalid":
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return resolve(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(socket, "getaddrinfo", no_such_host)
    line = _ui_refuses(["--uri", store, "--host", host, "--port", "5000"], monkeypatch, capsys)
    assert f"cannot listen on {host}:5000" in line


@pytest.mark.parametrize("option", ["--uri", "--host"])
def test_lpdt_ui_refuses_an_empty_uri_or_host(option, tmp_path, monkeypatch, capsys):
    """``--uri ""`` opened (and created) ./mlflow.db; ``--host ""`` would listen everywhere."""
    monkeypatch.chdir(tmp_path)
    line = _ui_refuses([option, ""], monkeypatch, capsys)
    says = {"--uri": "--uri: the tracking URI is empty", "--host": "pass --host"}[option]
    assert says in line, line
    assert list(tmp_path.iterdir()) == []


def test_lpdt_ui_leaves_another_programs_database_alone(tmp_path, monkeypatch, capsys):
    """A SQLite file of another program given as the store got MLflow's ~30 tables added (and
    a lock file beside it), even when the port then turned out busy: refused, untouched."""
    import sqlite3

    db = tmp_path / "other.db"
    with contextlib.closing(sqlite3.connect(db)) as c:
        c.execute("CREATE TABLE notes (x)")
        c.commit()
    before = db.read_bytes()
    line = _ui_refuses(["--uri", f"sqlite:///{db}"], monkeypatch, capsys)
    assert "without MLflow's tables" in line
    assert db.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["other.db"]


@pytest.mark.parametrize("command", ["ui", "init"])
def test_a_database_path_without_its_scheme_or_an_empty_uri_says_which(
    command, tmp_path, monkeypatch, capsys
):
    """``--uri results/mlflow.db`` (MLflow's file-store deprecation text) names the URI meant;
    ``python -m lpdt.tracking init --uri ""`` created ./mlflow.db and exited 0."""
    monkeypatch.chdir(tmp_path)
    for uri, says in (
        ("results/mlflow.db", "did you mean sqlite:///results/mlflow.db?"),
        ("", "empty"),
        ("htp://x", "MLflow has no store for the scheme 'htp'"),
        ("file:results/mlruns", "a file store (a folder), which MLflow 3 refuses"),
    ):
        if command == "ui":
            line = _ui_refuses(["--uri", uri], monkeypatch, capsys)
        else:
            assert cli.main(["init", "--uri", uri]) == 2
            line = capsys.readouterr().err.strip()
        assert says in line, line
    assert list(tmp_path.iterdir()) == []


def test_a_manifest_that_is_not_text_is_named(tmp_path, capsys):
    (tmp_path / "m.json").write_bytes(b"\xd0\xff\x00binary")
    argv = ["sync", "--manifest", str(tmp_path / "m.json"), "--uri", f"sqlite:///{tmp_path}/s.db"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert f"manifest {tmp_path / 'm.json'} is not text (UTF-8)" in err, err


def test_a_receipt_path_that_is_a_directory_is_refused_by_its_option(tmp_path, capsys):
    """``--out <a directory>``: an IsADirectoryError that named a temporary file."""
    with pytest.raises(SystemExit):
        cli.main(["init", "--uri", f"sqlite:///{tmp_path}/s.db", "--out", str(tmp_path)])
    assert "is a directory; give the file's name" in capsys.readouterr().err


def test_check_address_accepts_a_free_port_and_leaves_it_free():
    from lpdt.engine.launch import free_port

    port = free_port()
    cli.check_address("127.0.0.1", port)
    cli.check_address("127.0.0.1", port)  # its socket closed: the port is free again


def test_the_servers_own_import_warning_is_not_shown_and_a_users_filters_stay(monkeypatch):
    """MLflow's server printed a ``StarletteDeprecationWarning`` (a UserWarning) with its
    source line among its start-up lines; its environment now filters that one warning, and
    a user's own ``PYTHONWARNINGS`` still applies (after it)."""
    import subprocess
    import sys

    code = (
        "import warnings; "
        "warnings.warn('starlette.middleware.wsgi is deprecated and will be removed', UserWarning); "
        "warnings.warn('another warning', UserWarning)"
    )
    monkeypatch.delenv("PYTHONWARNINGS", raising=False)
    r = subprocess.run(
        [sys.executable, "-c", code], env=cli.ui_env(), capture_output=True, text=True
    )
    assert "starlette" not in r.stderr and "another warning" in r.stderr, r.stderr
    monkeypatch.setenv("PYTHONWARNINGS", "error::UserWarning")
    r = subprocess.run(
        [sys.executable, "-c", code], env=cli.ui_env(), capture_output=True, text=True
    )
    assert r.returncode != 0 and "UserWarning: starlette" in r.stderr, r.stderr
