"""``lpdt``: train | cost | partition | topology | report | compare | ui.

Each subcommand lives in the package of its concern and exposes ``add_arguments(parser)`` and
``run(args) -> int``; they are imported lazily so that ``lpdt --help`` stays fast.
"""

from __future__ import annotations

import argparse
import atexit
import copy
import importlib
import os
import re
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import lpdt
from lpdt import plugins
from lpdt.config import ConfigError, RunConfig
from lpdt.errors import LpdtError
from lpdt.io import no_space, output_dir, reader_gone

# subcommand -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("lpdt.cli", "run an experiment from a config file (or several, one after another)"),
    "cost": ("lpdt.cost.cli", "operation counts, energy, memory and communication volume"),
    "partition": ("lpdt.data.cli", "per-node class histograms of the skew partitioner"),
    "topology": ("lpdt.decentral.topology", "mixing matrix and spectral gap of a graph"),
    "report": ("lpdt.report.cli", "tables, figures, claims check and the PDF report"),
    "compare": (
        "lpdt.report.compare",
        "condition a vs b over finished runs: paired by seed, 95 % CI",
    ),
    "ui": ("lpdt.tracking.cli", "open the MLflow UI on the results store"),
}


# --- lpdt train --------------------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config",
        "-c",
        action="append",
        default=[],
        help="run config YAML (default: built-ins); repeat it, each with its --out, to train "
        "several runs one after another in this process (they share its start-up and compiled "
        "step)",
    )
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config value (dotted key or unique leaf name, e.g. skew=0.9); repeatable",
    )
    p.add_argument(
        "--out",
        type=output_dir,
        action="append",
        default=[],
        help="output directory (default: results/runs/<run_id>); one per --config",
    )
    p.add_argument("--resume", action="store_true", help="continue from the last epoch checkpoint")
    p.add_argument(
        "--force",
        action="store_true",
        help="run again even if complete, or if --out holds a run of another config",
    )
    p.add_argument("--print-config", action="store_true", help="print the resolved config and exit")


def run(args: argparse.Namespace) -> int:
    """Train one run, or several one after another (repeated ``--config`` / ``--out``). Exit
    0: every run ok; 3: every run complete, one or more diverged (a result, not a failure); 2:
    one or more runs failed with a user-facing error (each said in one line; the others still
    ran, and their files are complete)."""
    from lpdt.config import dump_config, load_config

    paths = args.config or [None]
    if args.resume and args.force and not args.print_config:  # --force discarded it, silently
        raise ValueError(
            "--resume continues a run from its checkpoint and --force trains it again from its "
            "start, discarding the checkpoint: pass one of them"
        )
    if len(paths) > 1 and len(args.out) != len(paths) and not args.print_config:
        raise ValueError(
            f"{len(paths)} --config need as many --out (got {len(args.out)}), in the same order"
        )
    resolved = [Path(o).resolve() for o in args.out]
    twice = [o for i, o in enumerate(args.out) if resolved[i] in resolved[:i]]
    if twice and not args.print_config:  # with --force the second run replaced the first
        raise ValueError(f"--out {twice[0]} is given twice: one run folder per --config")
    nested = [
        (args.out[j], args.out[i])  # (inner, outer)
        for i, a in enumerate(resolved)
        for j, b in enumerate(resolved)
        if i != j and b.is_relative_to(a)
    ]
    if nested and not args.print_config:  # the second run's files inside the first's folder
        inner, outer = nested[0]
        raise ValueError(
            f"--out {inner} lies inside --out {outer}: one run folder may not hold another"
        )
    if len(args.out) > len(paths):
        raise ValueError(
            f"{len(args.out)} --out for {len(paths)} config(s): one --out per --config"
        )
    cfgs = [load_config(path, args.overrides) for path in paths]  # every config checked first
    if args.print_config:  # writes nothing: no --out needed
        for i, cfg in enumerate(cfgs):
            print(("---\n" if i else "") + dump_config(cfg), end="")  # one YAML document each
        return 0
    for cfg in cfgs:  # a URI MLflow cannot use failed only after the training, as a warning
        if cfg.tracking.mlflow:
            _check_tracking_uri(cfg.tracking.uri)
    from lpdt.engine import train

    outs = [Path(o) for o in args.out] or [Path("results/runs") / cfgs[0].run_id()]
    for path, out in zip(paths, outs, strict=True):
        _refuse_own_config_file(path, out)
    codes, logged = [], []
    for i, (cfg, out) in enumerate(zip(cfgs, outs, strict=True)):
        if len(cfgs) > 1:
            print(f"--- run {i + 1} of {len(cfgs)}: {out}", flush=True)
        try:
            rec = train(cfg, out, resume=args.resume, force=args.force)
        except Exception as e:
            line = user_error_line(e)
            if line is None or len(cfgs) == 1 or os.environ.get("LPDT_DEBUG"):
                raise
            print(f"lpdt train: error in run {out}: {line}", file=sys.stderr, flush=True)
            codes.append(2)
            continue
        if cfg.tracking.mlflow:
            logged.append(_log_to_mlflow(cfg, out))
        print(f"results: {out}/metrics.json (status {rec.status}, run_id {rec.run_id})")
        codes.append(0 if rec.status == "ok" else 3)
    if any(logged):  # only where a run was logged there (not after the warning alone)
        print(
            f"MLflow: experiment {cfgs[0].tracking.experiment!r} at {cfgs[0].tracking.uri} (lpdt ui)"
        )
    if len(cfgs) > 1 and any(codes):
        failed = codes.count(2)
        print(
            f"lpdt train: {len(cfgs) - failed} of {len(cfgs)} runs complete"
            f"{f', {failed} failed' if failed else ''}"
            f"{f', {codes.count(3)} diverged' if 3 in codes else ''}",
            file=sys.stderr,
        )
    return 2 if 2 in codes else max(codes)


def _refuse_own_config_file(path: str | None, out: Path) -> None:
    """A ``--config`` that is ``<out>/config.yaml``, where the run writes its whole resolved
    config, must be such a file already: a hand-written one (its comments, its short form) was
    overwritten without a word (``--config config.yaml --out .``)."""
    import yaml

    from lpdt.config import dump_config, is_run_config_tree, load_config
    from lpdt.record import CONFIG_FILE

    if path is None or path == "-":
        return
    target = out / CONFIG_FILE
    if not (target.exists() and Path(path).resolve() == target.resolve()):
        return
    try:
        text = target.read_text()
        tree = yaml.safe_load(text)
        # a dump this lpdt writes, or one an earlier lpdt wrote (every section, no comment)
        written = dump_config(load_config(path, [])) == text or (
            is_run_config_tree(tree) and "#" not in text
        )
    except (OSError, ValueError, ConfigError, yaml.YAMLError):
        written = False
    if not written:
        raise ValueError(
            f"--config {path} is the file the run writes its resolved config to "
            f"({target}): keep your config outside --out {out}"
        )


def _check_tracking_uri(uri: str) -> None:
    """``tracking.uri`` as MLflow can use it (``lpdt.tracking.check_uri``), else a config error."""
    from lpdt.tracking import TrackingError, check_uri

    try:
        check_uri(uri, "tracking.uri=")
    except TrackingError as e:
        raise ConfigError(str(e)) from None


def _log_to_mlflow(cfg: RunConfig, out: Path) -> bool:
    """Log the finished run in ``out`` to MLflow (``tracking.mlflow``): the engine returns the
    run and writes its files; logging is its caller's, here. A failure is a warning of one line
    (False): the run's files are complete, and tracking is a convenience (``python -m
    lpdt.tracking log`` retries)."""
    from lpdt.tracking import bound_http_waits, log_run, store_error_line

    uri = cfg.tracking.uri
    if uri.startswith(("http://", "https://")):  # a server: say what the wait is, and bound it
        bound_http_waits()
        print(f"logging the run to the MLflow server at {uri} ...", flush=True)
    try:
        log_run(out, uri, cfg.tracking.experiment, cfg.tracking.tags)
    except Exception as e:
        if no_space(e):
            why = f"no space left on device while writing the MLflow store {uri}"
        else:
            why = store_error_line(e, uri) or " ".join(str(e).split())
        print(f"warning: could not log the run to MLflow: {why}", flush=True)
        return False
    return True


# --- entry point -------------------------------------------------------------------------------


class DefaultsFormatter(argparse.HelpFormatter):
    """Help that says each option's default (``--nodes NODES  (default: 8)``), also for an
    option without a help text, unless its text already names one. Options whose default is
    "not given" (None, False: a flag) say nothing: their help says what leaving them out does."""

    def _format_action(self, action: argparse.Action) -> str:
        default = action.default
        shown = action.option_strings and action.help != argparse.SUPPRESS
        unset = default is None or default is False or default in (argparse.SUPPRESS, [])
        # by identity: a default of 0 or 0.0 is shown
        if shown and not unset and "default" not in (action.help or ""):
            text = " ".join(map(str, default)) if isinstance(default, list) else str(default)
            action = copy.copy(action)  # the parser's own action stays as it was
            action.help = f"{action.help or ''} (default: {text.replace('%', '%%')})".strip()
        return super()._format_action(action)


class Parser(argparse.ArgumentParser):
    """``lpdt``'s parsers, its subcommands' and theirs (``lpdt cost comm``): argparse makes a
    subcommand's parser of its parent's class, so all of them show their defaults."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", DefaultsFormatter)
        super().__init__(*args, **kwargs)


def build_parser() -> tuple[Parser, dict[str, Parser]]:
    parser = Parser(
        prog="lpdt",
        description="Low precision decentralized training: experiments, cost model and report.",
    )
    parser.add_argument("--version", action="version", version=f"lpdt {lpdt.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    subs = {
        # argparse %-formats help strings ("95 % CI" would break --help)
        name: sub.add_parser(name, help=help_.replace("%", "%%"), description=help_)
        for name, (_, help_) in COMMANDS.items()
    }
    return parser, subs


def _unrecognized(parser: argparse.ArgumentParser, extra: list[str]) -> None:
    """Exit 2 with ``parser``'s usage, naming the arguments it does not know and, for a
    misspelt option, the closest of its own (``--confg``: ``--config``)."""
    import difflib

    known = re.findall(r"--[\w-]+", parser.format_help())  # argparse lists them nowhere else
    shown = []
    for arg in extra:
        close = difflib.get_close_matches(arg.split("=")[0], known, n=1) if arg[:2] == "--" else []
        shown.append(f"{arg} (did you mean {close[0]}?)" if close else arg)
    parser.error(f"unrecognized arguments: {' '.join(shown)}")


# A list of numbers that starts with a negative one (``--threshold -1,1``): argparse takes only a
# plain number such as -1 for a value, and anything else that starts with "-" for an option.
_NEGATIVE_LIST = re.compile(r"-\d*\.?\d+(?:[eE][-+]?\d+)?(?:,-?\d*\.?\d+(?:[eE][-+]?\d+)?)+")


def attach_negative_lists(argv: list[str]) -> list[str]:
    """``argv`` with each negative number list that follows a long option attached to it
    (``--threshold -1,1`` -> ``--threshold=-1,1``); no option looks like one."""
    out: list[str] = []
    for a in argv:
        if out and out[-1].startswith("--") and "=" not in out[-1] and _NEGATIVE_LIST.fullmatch(a):
            out[-1] = f"{out[-1]}={a}"
        else:
            out.append(a)
    return out


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    argv = attach_negative_lists(sys.argv[1:] if argv is None else argv)
    parser, subs = build_parser()
    # Only the chosen subcommand's module is imported (and only it adds its arguments).
    command = next((a for a in argv if not a.startswith("-")), None)
    if command in COMMANDS:
        module = importlib.import_module(COMMANDS[command][0])
        module.add_arguments(subs[command])
    args, extra = parser.parse_known_args(argv)
    if extra:  # the command's own usage, not lpdt's (`lpdt train --confg x`)
        _unrecognized(subs.get(args.command) or parser, extra)
    if args.command is None:
        parser.print_help()
        return 0
    before = _stop_on_sigterm()
    try:
        # $LPDT_PLUGINS and the installed plugins (lpdt.plugins), before any name is read; a
        # config's own `plugins` are imported where it is read (lpdt.config.config_from_dict)
        plugins.load()
        return int(module.run(args) or 0)
    except (ConfigError, plugins.PluginError) as e:
        print(f"lpdt {args.command}: config error: {e}", file=sys.stderr)
        return 2
    except Exception as e:
        line = user_error_line(e)  # None: a bug, shown with its traceback
        if line is None or os.environ.get("LPDT_DEBUG"):
            raise
        print(f"lpdt {args.command}: error: {line} (LPDT_DEBUG=1 for a traceback)", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM (Terminated): one line, and the
        if os.environ.get("LPDT_DEBUG"):  # status of a process that signal ended
            raise
        # a run's files are written atomically: its last checkpoint is whole
        resume = " (--resume continues a run from its last checkpoint)"
        what = "stopped by SIGTERM" if isinstance(e, Terminated) else "interrupted"
        print(f"lpdt {args.command}: {what}{resume * (args.command == 'train')}", file=sys.stderr)
        return 128 + (signal.SIGTERM if isinstance(e, Terminated) else signal.SIGINT)
    finally:
        if before is not None:
            signal.signal(signal.SIGTERM, before)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Python next checks for signals, as Ctrl-C's KeyboardInterrupt is:
    what SLURM, Snakemake and ``kill`` send. It ended ``lpdt train`` with status 143 and no
    word (the run's files were whole, as after Ctrl-C)."""


def _terminate(signum: int, frame: object) -> None:
    raise Terminated()


def _stop_on_sigterm() -> Any:
    """Turn SIGTERM into ``Terminated`` while a command runs; the handler it replaces, to put
    back (None off the main thread, where Python cannot set one)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    before = signal.signal(signal.SIGTERM, _terminate)
    return signal.SIG_DFL if before is None else before  # None: one set outside Python


def user_error_line(e: BaseException) -> str | None:
    """The one line a user-facing error prints; None for any other exception (a bug: its
    traceback is shown). User-facing: lpdt's own errors (``lpdt.errors.LpdtError``: bad files,
    missing datasets, a full disk, ...), the built-in ones raised for bad names and values, and
    an OS error about a path (a directory where a file goes, a file where a directory goes, no
    permission) or a full disk from any writer (lpdt.io names the file; others, e.g. a figure's
    savefig, give their filename if they know it); and memory that ran out."""
    if isinstance(e, LpdtError | ValueError | KeyError | FileNotFoundError | RuntimeError):
        return error_text(e)
    if isinstance(e, MemoryError):  # e.g. a mixing matrix of 10^6 nodes
        return f"out of memory{f' ({e})' if str(e) else ''}"
    if isinstance(e, OSError):
        if no_space(e):  # (lpdt.io's NoSpaceError is an LpdtError: above)
            return _no_space_line(e)
        if e.filename is not None:
            other = f" -> {e.filename2}" if e.filename2 is not None else ""
            return f"{e.filename}{other}: {e.strerror or e}"
    return None


def error_text(e: BaseException) -> str:
    """A user-facing error's one line (a KeyError's message without the quotes repr adds)."""
    return str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)


def _no_space_line(e: OSError) -> str:
    """One line for a full device met outside ``lpdt.io`` (the file if the error names it)."""
    where = f" while writing {e.filename}" if e.filename else ""
    return f"no space left on device{where} ({e.strerror or e})"


def entry() -> None:
    """The ``lpdt`` command: ``main()``, then an exit that skips the interpreter's teardown.

    Once ``main()`` has returned, every file it wrote is closed (lpdt writes through ``with``
    blocks and ``lpdt.io``'s atomic renames), so what is left is Python freeing torch's modules
    one by one: 1.1 s of an 8.5 s one-epoch run, measured on the 2-core reference VM
    (2026-11-27), paid by every training job and every ``lpdt`` a test starts. The exit
    handlers (logging, worker pools) still run, and the standard streams are flushed; an
    exception that escapes ``main()`` exits the ordinary way, with its traceback, except a
    closed pipe on the output (``lpdt ... | head``), which ends the command quietly.
    """
    try:
        code = main()
    except BrokenPipeError:
        code = reader_gone()
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        code = reader_gone()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    entry()
