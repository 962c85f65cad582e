"""The command lines of the MLflow view: ``lpdt ui`` and ``python -m lpdt.tracking``.

``lpdt ui`` (``add_arguments`` / ``run``, named in ``lpdt.cli.COMMANDS``) opens the MLflow UI on
127.0.0.1. The UI's sidebar (GenAI / Model training) does not follow the experiment's kind tag: it
follows the URL parameter ``workflowType=machine_learning``, else the browser's ``localStorage``
(``mlflow.workflowType``, default GenAI; MLflow issue 24498, still so in 3.18.0), so ``lpdt ui``
prints the experiment's URL with that parameter (``ui_url``). It serves a SQLite store's
artifacts from the folder next to the database (``ui_command``; ``mlflow ui`` without
``--artifacts-destination`` looks in ``./mlartifacts`` instead).

``python -m lpdt.tracking init|log|sync|report ...`` (``main``) is what the workflow runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from lpdt.tracking.runs import log_report, log_run, sync_manifest
from lpdt.tracking.store import (
    DEFAULT_EXPERIMENT,
    DEFAULT_URI,
    TrackingError,
    artifacts_root,
    init_store,
    open_client,
    sqlite_path,
    with_retry,
)

_DESCRIPTION = "Run records in MLflow, for browsing and comparing runs (``lpdt ui``)."

# The UI's sidebar takes its GenAI / Model training switch from this URL parameter (else from the
# browser's localStorage, default GenAI); verified in MLflow 3.17.2's and 3.18.0's JavaScript.
WORKFLOW_PARAM = "workflowType=machine_learning"


def ui_command(uri: str = DEFAULT_URI, host: str = "127.0.0.1", port: int = 5000) -> list[str]:
    """The ``mlflow ui`` command line for a store; for a SQLite store it serves the artifacts
    from the folder next to the database (``artifacts_root``)."""
    cmd = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri]
    root = artifacts_root(uri)
    if root is not None:
        cmd += ["--artifacts-destination", str(root.resolve())]
    return cmd + ["--host", host, "--port", str(port)]


def ui_url(host: str, port: int, experiment_id: str | None = None) -> str:
    """The UI's address: the experiment's training-run table in the Model training view (the
    ``workflowType`` parameter; see the module docstring), else the start page."""
    base = f"http://{host}:{port}"
    if experiment_id is None:
        return base
    return f"{base}/#/experiments/{experiment_id}/runs?{WORKFLOW_PARAM}"


def ui(
    uri: str = DEFAULT_URI,
    host: str = "127.0.0.1",
    port: int = 5000,
    experiment: str = DEFAULT_EXPERIMENT,
) -> int:
    """Serve the MLflow UI for ``uri`` (blocks until interrupted); prints the address of
    ``experiment``'s training runs (``ui_url``)."""
    path = sqlite_path(uri)
    if path is not None and not path.is_file():
        raise TrackingError(
            f"no MLflow store at {path}; run the workflow (snakemake) or `lpdt train` with "
            "tracking.mlflow=true first, or pass --uri"
        )
    try:  # open it under the store lock: the server then finds its schema complete
        client = open_client(uri)
        exp = with_retry(lambda: client.get_experiment_by_name(experiment))
    except TrackingError:
        raise
    except Exception as e:
        raise TrackingError(f"cannot open the MLflow store {uri}: {e}".replace("\n", " ")) from e
    cmd = ui_command(uri, host, port)
    if exp is None:
        print(
            f"MLflow UI for {uri} at {ui_url(host, port)} (no experiment {experiment!r} yet; "
            "Ctrl-C to stop)",
            flush=True,
        )
    else:
        print(
            f"MLflow UI for {uri}; the training runs of {experiment!r}:\n"
            f"  {ui_url(host, port, exp.experiment_id)}\n(Ctrl-C to stop)",
            flush=True,
        )
    # exec: the server replaces this process, so Ctrl-C and kill reach it directly
    os.execv(sys.executable, cmd)
    return 0  # not reached


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--uri", default=DEFAULT_URI, help=f"tracking URI (default {DEFAULT_URI})")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=5000, help="port (default 5000)")
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
        ("log", "log one run directory"),
        ("sync", "log every run of a manifest, refresh study tags"),
        ("report", "attach the report PDF and the figures to the scale's report run"),
    ]:
        s = sub.add_parser(name, help=help_)
        s.add_argument("--uri", default=DEFAULT_URI)
        s.add_argument("--experiment", default=DEFAULT_EXPERIMENT)
        s.add_argument("--out", default=None, help="write a JSON receipt here (atomically)")
        if name == "log":
            s.add_argument("run_dir")
            s.add_argument("--tag", action="append", default=[], metavar="KEY=VALUE")
            s.add_argument(
                "--seed-in-name",
                action="store_true",
                help="the run is one of several seeds of its cell: name it by its seed",
            )
        if name == "sync":
            s.add_argument("--manifest", default="results/manifest.json")
        if name == "report":
            s.add_argument("--scale", required=True)
            s.add_argument("--report", required=True, help="the report PDF")
            s.add_argument("figures", nargs="*", help="figure files (logged under figures/)")
    args = p.parse_args(argv)
    try:
        if args.cmd == "init":
            exp_id = init_store(args.uri, args.experiment)
            receipt: dict[str, Any] = {
                "uri": args.uri,
                "experiment": args.experiment,
                "experiment_id": exp_id,
            }
        elif args.cmd == "log":
            tags = dict(t.split("=", 1) for t in args.tag)
            mid = log_run(args.run_dir, args.uri, args.experiment, tags, args.seed_in_name)
            receipt = {"mlflow_run_id": mid}
        elif args.cmd == "report":
            mid = log_report(args.report, args.figures, args.scale, args.uri, args.experiment)
            receipt = {"mlflow_run_id": mid, "scale": args.scale}
        else:
            runs = sync_manifest(args.manifest, args.uri, args.experiment)
            receipt = {"uri": args.uri, "experiment": args.experiment, "runs": runs}
    except (TrackingError, FileNotFoundError, ValueError) as e:
        print(f"lpdt.tracking {args.cmd}: error: {e}", file=sys.stderr)
        return 2
    _write_json(args.out, receipt)
    print(json.dumps({k: v for k, v in receipt.items() if k != "runs"}))
    return 0
