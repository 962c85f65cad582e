"""lpdt's MLflow app (lpdt.tracking.webapp, issue 53 item 1): a run clicked in the runs table
opens in the Model training view in a fresh browser, with no click.

The fast tests check the facts the app rests on in the installed UI bundle (the stored view's
key and format) and the app itself (MLflow's page gets the script, nothing else changes); the
slow one opens `lpdt ui` in headless Chromium (tools/ui_screenshots.py) and, for contrast,
MLflow's own app, which opens the same run in the GenAI view."""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import mlflow
import pytest

from lpdt import tracking
from lpdt.tracking import webapp
from tests.tracking.conftest import write_run

REPO = Path(__file__).resolve().parents[2]


def _bundle() -> str:
    js = Path(mlflow.__file__).parent / "server" / "js" / "build" / "static" / "js"
    return "".join(f.read_text(errors="ignore") for f in sorted(js.glob("*.js")))


def test_the_keys_are_the_ones_the_installed_ui_stores_its_choices_under():
    text = _bundle()
    w = r"[\w$]+"
    # useLocalStorage keeps a value under `${key}_v${version}`, JSON-encoded
    fmt = re.search(rf"const {w}=\(({w}),({w})\)=>`\$\{{\1\}}_v\$\{{\2\}}`", text)
    assert fmt, "the UI's localStorage key format changed"
    assert re.search(rf"getItem\({w}\);return {w}\?JSON\.parse\({w}\)", text)
    for key in webapp.DEFAULTS:
        name, version = re.fullmatch(r"(.+)_v(\d+)", key).groups()
        assert f'key:"{name}",version:{version},' in text, key
    assert 'MACHINE_LEARNING="machine_learning"' in text
    assert webapp.DEFAULTS[webapp.VIEW_KEY] == "machine_learning"


def _get(app: Any, path: str, headers: list[tuple[bytes, bytes]] | None = None) -> tuple:
    """(status, headers, body) of one GET through an ASGI app."""
    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"127.0.0.1:5000"), *(headers or [])],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 5000),
    }
    asyncio.run(app(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], dict(start["headers"]), body


def test_the_page_runs_the_script_first_and_every_other_answer_is_mlflows():
    app = webapp.create_app()
    status, headers, page = _get(app, "/")
    index = Path(mlflow.__file__).parent / "server" / "js" / "build" / "index.html"
    assert status == 200 and page == webapp.with_view_script(index.read_bytes())
    assert page.index(webapp.view_script().encode()) < page.index(b"<script defer")
    assert int(headers[b"content-length"]) == len(page) and b"etag" not in headers
    # a browser that cached MLflow's page gets this one, not "not modified"
    status, _, again = _get(app, "/", [(b"if-none-match", b"*")])
    assert (status, again) == (200, page)
    status, _, body = _get(app, "/health")
    assert (status, body) == (200, b"OK")
    status, _, js = _get(app, "/static-files/static/js/" + _main_js())
    assert status == 200 and webapp.view_script().encode() not in js


def _main_js() -> str:
    js = Path(mlflow.__file__).parent / "server" / "js" / "build" / "static" / "js"
    return next(js.glob("main.*.js")).name


def test_the_script_stores_only_where_nothing_is_stored():
    script = webapp.view_script()
    body = re.fullmatch(r"<script>(.*)</script>", script).group(1)
    assert "if(s.getItem(k)===null)s.setItem(k,d[k])" in body
    stored = json.loads(re.search(r"var d=(\{.*?\}),s=", body).group(1))
    assert {k: json.loads(v) for k, v in stored.items()} == webapp.DEFAULTS


def test_lpdt_ui_runs_the_registered_app():
    assert tracking.app_registered()
    (entry,) = [e for e in importlib.metadata.entry_points(group="mlflow.app") if e.name == "lpdt"]
    assert entry.load() is webapp.create_app
    cmd = tracking.ui_command("sqlite:///x/mlflow.db", "127.0.0.1", 5001)
    assert cmd[cmd.index("--app-name") + 1] == webapp.APP_NAME


def test_without_the_entry_point_lpdt_ui_says_how_to_install_it(store, monkeypatch):
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [])
    with pytest.raises(tracking.TrackingError, match="make setup"):
        tracking.ui(store, "127.0.0.1", 5123, "lpdt")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs Debian's chromium")
def test_a_run_clicked_in_the_table_opens_in_the_training_view(store, tmp_path):
    """In headless Chromium with a fresh profile: lpdt ui's run page says "lpdt > Runs";
    MLflow's own app, on the same store, "lpdt > Evaluations" (the GenAI view)."""
    sys.path.insert(0, str(REPO / "tools"))
    from ui_screenshots import capture

    tracking.log_run(write_run(tmp_path / "a", "r1", {"seed": 7}, epochs=3), store, "lpdt")
    ours = capture(store, tmp_path / "ours")
    theirs = capture(store, tmp_path / "plain", plain=True)
    assert ours["run_page"]["breadcrumb"][-1] == "Runs", ours
    assert json.loads(ours["run_page"]["stored_view"]) == "machine_learning"
    assert theirs["run_page"]["breadcrumb"][-1] == "Evaluations", theirs
    assert theirs["run_page"]["stored_view"] is None
    assert (tmp_path / "ours" / "mlflow-metrics.png").stat().st_size > 10_000
