"""The command lines of the MLflow view: ``lpdt ui`` and ``python -m lpdt.tracking``.

``lpdt ui`` (``add_arguments`` / ``run``, named in ``lpdt.cli.COMMANDS``) opens the MLflow UI on
127.0.0.1, as one server process (``ui_command``: one uvicorn worker; ``ui_env``: no job runner,
which only GenAI features use), and serves a SQLite store's artifacts from the folder next to
the database (``mlflow ui`` without ``--artifacts-destination`` looks in ``./mlartifacts``).

The server is MLflow's own, run as lpdt's MLflow app (``--app-name lpdt``,
``lpdt.tracking.webapp``): MLflow 3.17.2 and 3.18.0 open an experiment's pages, run pages
clicked in the runs table included, in the GenAI view unless the URL or the browser's stored
choice says "Model training" (they do not read the experiment's kind tag; MLflow issue 24498),
and the app stores that choice in a browser that has stored none, before the UI starts. So a
fresh browser needs no click. ``lpdt ui`` prints the address of the experiment's runs table
(``ui_url``; with the ``workflowType`` parameter as well, so that the address shows the
training view from any MLflow server).

``python -m lpdt.tracking init|log|sync|report ...`` (``main``) is what the workflow runs.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

from lpdt.io import no_space, output_file
from lpdt.tracking.runs import log_report, log_run, report_experiment, sync_manifest
from lpdt.tracking.store import (
    DEFAULT_EXPERIMENT,
    DEFAULT_URI,
    TrackingError,
    artifacts_root,
    bound_http_waits,
    check_uri,
    init_store,
    open_client,
    sqlite_path,
    store_error_line,
    with_retry,
)
from lpdt.tracking.webapp import APP_NAME

_DESCRIPTION = "Run records in MLflow, for browsing and comparing runs (``lpdt ui``)."

# The ports ``lpdt ui`` listens on. Not 0: the system would choose the port after lpdt has
# printed the address, so the address printed could not name it.
PORTS = range(1, 65536)

# The UI's sidebar takes its GenAI / Model training switch from this URL parameter (else from the
# browser's localStorage, default GenAI); verified in MLflow 3.17.2's and 3.18.0's JavaScript.
WORKFLOW_PARAM = "workflowType=machine_learning"


def app_registered() -> bool:
    """Whether lpdt's MLflow app (``lpdt.tracking.webapp``) is installed as an MLflow app plugin:
    the entry point ``lpdt`` of the group ``mlflow.app`` that ``pyproject.toml`` declares (an
    environment installed from an older checkout lacks it until it is installed again)."""
    import importlib.metadata

    return any(e.name == APP_NAME for e in importlib.metadata.entry_points(group="mlflow.app"))


def ui_command(uri: str = DEFAULT_URI, host: str = "127.0.0.1", port: int = 5000) -> list[str]:
    """The ``mlflow ui`` command line for a store: lpdt's MLflow app (``--app-name lpdt``: pages
    in the training view, ``lpdt.tracking.webapp``), one worker process (MLflow starts four by
    default; one serves a local browser), and for a SQLite store the artifacts from the folder
    next to the database (``artifacts_root``)."""
    cmd = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri]
    root = artifacts_root(uri)
    if root is not None:
        cmd += ["--artifacts-destination", str(root.resolve())]
    return cmd + ["--app-name", APP_NAME, "--workers", "1", "--host", host, "--port", str(port)]


# What MLflow's server warns about its own imports (mlflow 3.x on starlette 1.x: a Python warning
# with its source line, in the middle of the server's start-up lines); nothing a user can act on.
SERVER_WARNINGS = "ignore:starlette.middleware.wsgi is deprecated:UserWarning"


def ui_env() -> dict[str, str]:
    """The server's environment: this one, without MLflow's job runner (a separate process
    that runs GenAI jobs such as judges; lpdt has none) and ``SERVER_WARNINGS`` (a user's own
    ``PYTHONWARNINGS`` after it, so that it wins)."""
    own = os.environ.get("PYTHONWARNINGS")
    warnings = f"{SERVER_WARNINGS},{own}" if own else SERVER_WARNINGS
    return {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "PYTHONWARNINGS": warnings}


def ui_url(host: str, port: int, experiment_id: str | None = None) -> str:
    """The UI's address: the experiment's training-run table in the Model training view (the
    ``workflowType`` parameter; see the module docstring), else the start page."""
    base = f"http://{host}:{port}"
    if experiment_id is None:
        return base
    return f"{base}/#/experiments/{experiment_id}/runs?{WORKFLOW_PARAM}"


def check_arguments(uri: str, host: str, port: int) -> None:
    """Refuse what the server would fail on after lpdt printed its address (an exit status 0
    and a uvicorn traceback, MLflow's status being lpdt's after the exec), or would take the
    wrong way: an empty URI (MLflow opened ``./mlflow.db``, creating it), an empty host (every
    interface), a port outside ``PORTS``."""
    check_uri(uri)
    if not host.strip():
        raise TrackingError("the host is empty; pass --host (default 127.0.0.1)")
    if port not in PORTS:
        raise TrackingError(f"port {port} is outside {PORTS.start}..{PORTS.stop - 1} (--port)")


def check_address(host: str, port: int) -> None:
    """Refuse an address the server cannot listen on (a port in use, a host that is no address
    of this machine or resolves to none), before the exec: MLflow's server logs such an error
    and exits 0. Binds as the server's ``asyncio`` ``create_server`` binds (every address
    ``host`` resolves to, with ``SO_REUSEADDR``, IPv6 sockets IPv6-only), then closes the
    sockets: a port that another process takes in between still fails in the server."""
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        for family, kind, proto, _, addr in set(found):
            with socket.socket(family, kind, proto) as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                s.bind(addr)
    except OSError as e:
        why = e.strerror or str(e)
        if e.errno == errno.EADDRINUSE:
            why += " (another process listens there; pass another --port)"
        elif e.errno == errno.EADDRNOTAVAIL:
            why += " (not an address of this machine; --host)"
        raise TrackingError(f"cannot listen on {host}:{port}: {why}") from e


def ui(
    uri: str = DEFAULT_URI,
    host: str = "127.0.0.1",
    port: int = 5000,
    experiment: str = DEFAULT_EXPERIMENT,
) -> int:
    """Serve the MLflow UI for ``uri`` (blocks until interrupted); prints the address of
    ``experiment``'s training runs (``ui_url``) and of its report runs (``report_experiment``).
    Bad arguments (``check_arguments``, before the store is opened) and an address the server
    cannot listen on (``check_address``) are a ``TrackingError`` before anything is printed."""
    check_arguments(uri, host, port)
    if not app_registered():
        raise TrackingError(
            "lpdt's MLflow app is not installed in this environment (the entry point "
            f"{APP_NAME!r} of the group mlflow.app, pyproject.toml): run `make setup`, or "
            "`pip install --no-deps -e .` in the checkout"
        )
    path = sqlite_path(uri)
    if path is not None and not path.is_file():
        raise TrackingError(
            f"no MLflow store at {path}; run the workflow (snakemake) or `lpdt train` with "
            "tracking.mlflow=true first, or pass --uri"
        )
    check_address(host, port)  # before the store is opened (and written to), and again below
    try:  # open it under the store lock: the server then finds its schema complete
        client = open_client(uri)
        exp = with_retry(lambda: client.get_experiment_by_name(experiment))
        reports = with_retry(lambda: client.get_experiment_by_name(report_experiment(experiment)))
    except TrackingError:
        raise
    except Exception as e:
        raise TrackingError(f"cannot open the MLflow store {uri}: {e}".replace("\n", " ")) from e
    check_address(host, port)  # last before the exec: the shortest time for another to take it
    cmd = ui_command(uri, host, port)
    if exp is None:
        print(
            f"MLflow UI for {uri} at {ui_url(host, port)} (no experiment {experiment!r} yet; "
            "Ctrl-C to stop)",
            flush=True,
        )
    else:
        lines = [
            f"MLflow UI for {uri}; the training runs of {experiment!r}:",
            f"  {ui_url(host, port, exp.experiment_id)}",
        ]
        if reports is not None:
            lines.append(f"The report of each scale: {ui_url(host, port, reports.experiment_id)}")
        print("\n".join([*lines, "(Ctrl-C to stop)"]), flush=True)
    # exec: the server replaces this process, so Ctrl-C and kill reach it directly
    os.execve(sys.executable, cmd, ui_env())
    return 0  # not reached


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--uri", default=DEFAULT_URI, help=f"tracking URI (default {DEFAULT_URI})")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=5000, help="port, 1..65535 (default 5000)")
    p.add_argument(
        "--experiment",
        default=DEFAULT_EXPERIMENT,
        help=f"experiment whose runs the printed address opens (default {DEFAULT_EXPERIMENT})",
    )


def run(args: argparse.Namespace) -> int:
    try:
        return ui(args.uri, args.host, args.port, args.experiment)
    except TrackingError as e:
        print(f"lpdt ui: error: {e}", file=sys.stderr)
        return 2


def _write_json(path: str | None, obj: Any) -> None:
    if path:
        from lpdt.io import write_json_atomic

        write_json_atomic(Path(path), obj)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lpdt.tracking", description=_DESCRIPTION)
    sub = p.add_subparsers(dest="cmd", required=True)
    for name, help_ in [
        ("init", "create the store and the experiment"),
        ("log", "log run directories (one or more)"),
        ("sync", "log every run of a manifest, refresh study tags"),
        ("report", "attach the report PDF and the figures to the scale's report run"),
    ]:
        s = sub.add_parser(name, help=help_)
        s.add_argument("--uri", default=DEFAULT_URI)
        s.add_argument("--experiment", default=DEFAULT_EXPERIMENT)
        s.add_argument(
            "--out", type=output_file, default=None, help="write a JSON receipt here (atomically)"
        )
        if name == "log":
            s.add_argument("run_dir", nargs="+")
            s.add_argument("--tag", action="append", default=[], metavar="KEY=VALUE")
        if name == "sync":
            s.add_argument("--manifest", default="results/manifest.json")
        if name == "report":
            s.add_argument("--scale", required=True)
            s.add_argument("--report", required=True, help="the report PDF")
            s.add_argument("figures", nargs="*", help="figure files (logged under figures/)")
    args = p.parse_args(argv)
    bound_http_waits()
    try:
        check_uri(args.uri)
        if args.cmd == "init":
            exp_id = init_store(args.uri, args.experiment)
            receipt: dict[str, Any] = {
                "uri": args.uri,
                "experiment": args.experiment,
                "experiment_id": exp_id,
            }
        elif args.cmd == "log":
            bad = [t for t in args.tag if not t.partition("=")[0] or "=" not in t]
            if bad:
                raise TrackingError(f"--tag {bad[0]!r} must look like KEY=VALUE")
            tags = dict(t.split("=", 1) for t in args.tag)
            ids = [log_run(d, args.uri, args.experiment, tags) for d in args.run_dir]
            # one run: {"mlflow_run_id": id}; several: their ids in the order given
            receipt = {"mlflow_run_id": ids[0]} if len(ids) == 1 else {"mlflow_run_ids": ids}
        elif args.cmd == "report":
            mid = log_report(args.report, args.figures, args.scale, args.uri, args.experiment)
            receipt = {"mlflow_run_id": mid, "scale": args.scale}
        else:
            runs = sync_manifest(args.manifest, args.uri, args.experiment)
            receipt = {"uri": args.uri, "experiment": args.experiment, "runs": runs}
    except (TrackingError, FileNotFoundError, ValueError) as e:
        print(f"lpdt.tracking {args.cmd}: error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # a full disk, however MLflow or SQLite wrapped it: one line
        line: str | None = store_error_line(e, args.uri)
        if no_space(e):
            line = f"no space left on device while writing the MLflow store {args.uri}"
        if line is None:
            raise
        print(f"lpdt.tracking {args.cmd}: error: {line}", file=sys.stderr)
        return 2
    _write_json(args.out, receipt)
    print(json.dumps({k: v for k, v in receipt.items() if k != "runs"}))
    return 0
