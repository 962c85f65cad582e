"""`lpdt ui`'s training view rests on facts of the installed MLflow UI's JavaScript
(lpdt.tracking.cli's and lpdt.tracking.webapp's docstrings): if a release changes them, these
tests say so; and `python -m lpdt.tracking`'s errors."""

from __future__ import annotations

import re
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
