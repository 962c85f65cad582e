"""lpdt's MLflow app: MLflow's own server, whose pages open in the Model training view.

MLflow 3's UI (3.17.2, 3.18.0) shows an experiment's pages, run pages included, in its GenAI
view unless the URL has ``workflowType=machine_learning`` or the browser has stored "Model
training" in ``localStorage`` (the key ``mlflow.workflowType_v1``, a JSON string; written by the
sidebar's switch only when a click changes the view). The experiment's ``mlflow.experimentKind``
tag, which lpdt sets, is not read for it (MLflow issue 24498), and the runs table links its runs
without the parameter, so a fresh browser opened a run clicked in the table in the GenAI view.

This app is MLflow's FastAPI app (``mlflow.server.fastapi_app.app``, every route and middleware
unchanged) behind one ASGI layer (``TrainingView``) that adds a few lines to the page MLflow
serves at ``/`` (its ``index.html``, the whole single-page UI): before MLflow's script runs,
they store "Model training" in ``localStorage`` where the browser has stored no view yet (and
that the GenAI assistant panel has opened itself once, so that it does not cover a third of the
first page; ``DEFAULTS``). So every page, in a fresh profile, opens in the training view with no
click, and a choice the user makes with the sidebar's switch (GenAI included) is kept, as
before.

It is registered as an MLflow app plugin (``pyproject.toml``: the entry point ``lpdt`` in the
group ``mlflow.app``), and ``lpdt ui`` runs ``mlflow ui --app-name lpdt`` (``lpdt.tracking.cli``):
MLflow starts its server as usual and uvicorn calls ``create_app`` in the worker.
tests/tracking/test_webapp.py checks the key and its format in the installed bundle, and serves
the page; tools/ui_screenshots.py opens a run from the table in headless Chromium.
"""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

# The UI's stored choices: useLocalStorage({key, version}) keeps one under f"{key}_v{version}",
# JSON-encoded. "machine_learning" is the Model training view; the assistant's flag says that it
# has opened itself once already (MLflow opens its GenAI assistant panel, a third of the window,
# on a local server's first page load otherwise; its button still opens it).
VIEW_KEY = "mlflow.workflowType_v1"
TRAINING_VIEW = "machine_learning"
ASSISTANT_KEY = "mlflow.assistant.fab.autoOpenedOnFirstLoad_v1"
DEFAULTS: dict[str, object] = {VIEW_KEY: TRAINING_VIEW, ASSISTANT_KEY: True}
APP_NAME = "lpdt"  # the entry point's name: mlflow ui --app-name lpdt

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def view_script() -> str:
    """The lines added to the UI's page: store each of ``DEFAULTS`` where the browser has
    stored nothing under its key (a browser without storage, or one that refuses it, gets
    MLflow's defaults, as before)."""
    pairs = json.dumps({k: json.dumps(v) for k, v in DEFAULTS.items()})
    return (
        f"<script>try{{var d={pairs},s=window.localStorage;"
        "for(var k in d){if(s.getItem(k)===null)s.setItem(k,d[k])}}catch(e){}</script>"
    )


def with_view_script(html: bytes) -> bytes:
    """``html`` with ``view_script`` as the first element of its head, so that it runs before
    any script of the page (MLflow's bundle is a deferred script in the head)."""
    script = view_script().encode()
    head = html.find(b"<head>")
    if head < 0:
        return script + html
    at = head + len(b"<head>")
    return html[:at] + script + html[at:]


# Headers that describe the page MLflow sent, not the one this layer sends.
_DROPPED = {b"content-length", b"etag", b"last-modified"}
# Request headers that would let MLflow answer "not modified" with the page the browser cached
# before, without the script.
_CONDITIONAL = {b"if-none-match", b"if-modified-since"}


class TrainingView:
    """An ASGI layer over MLflow's app: the GET of ``index_path`` (MLflow's page) gets
    ``view_script``; every other request passes through unchanged."""

    def __init__(self, app: ASGIApp, index_path: str = "/") -> None:
        self.app = app
        self.index_path = index_path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope.get("method") != "GET"
            or scope.get("path") != self.index_path
        ):
            await self.app(scope, receive, send)
            return
        scope = dict(scope)
        scope["headers"] = [(k, v) for k, v in scope["headers"] if k.lower() not in _CONDITIONAL]
        start: Message = {}
        body: list[bytes] = []

        async def capture(message: Message) -> None:
            if message["type"] == "http.response.start":
                start.update(message)
                return
            if message["type"] != "http.response.body":
                await send(message)
                return
            body.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            page = b"".join(body)
            headers = list(start.get("headers", []))
            html = any(
                k.lower() == b"content-type" and v.startswith(b"text/html") for k, v in headers
            )
            if start.get("status") == 200 and html:
                page = with_view_script(page)
                headers = [(k, v) for k, v in headers if k.lower() not in _DROPPED]
                headers += [
                    (b"content-length", str(len(page)).encode()),
                    (b"cache-control", b"no-cache"),
                ]
            await send({**start, "headers": headers})
            await send({"type": "http.response.body", "body": page, "more_body": False})

        await self.app(scope, receive, capture)


def create_app() -> TrainingView:
    """The app uvicorn serves (``mlflow ui --app-name lpdt``; a factory: called in the worker):
    MLflow's FastAPI app, its page at MLflow's static prefix (``--static-prefix``), if any."""
    from mlflow.server.fastapi_app import app
    from mlflow.server.handlers import STATIC_PREFIX_ENV_VAR

    prefix = os.environ.get(STATIC_PREFIX_ENV_VAR, "").rstrip("/")
    return TrainingView(app, prefix + "/")
