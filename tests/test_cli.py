"""The `lpdt` command line: every help page prints (argparse %-formats help strings)."""

from __future__ import annotations

import sys

import pytest

from lpdt import cli


@pytest.mark.parametrize("argv", [["--help"], *[[name, "--help"] for name in cli.COMMANDS]])
def test_help_pages_print(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 0
    assert "usage: lpdt" in capsys.readouterr().out


def test_help_pages_say_the_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    """Every option with a default says it, also a nested subcommand's and one without a help
    text (``lpdt report --help`` named none of its eight folders and files); a default of 0.0
    too; a flag or an option whose default is "not given" says nothing."""
    pages = {}
    for argv in (["report"], ["cost", "comm"], ["partition"]):
        with pytest.raises(SystemExit):
            cli.main([*argv, "--help"])
        pages[argv[0]] = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert "workflow manifest (default: results/manifest.json)" in pages["report"]
    assert "(default: results/plateau_check.csv config/plateau_check.csv)" in pages["report"]
    assert "keeps 1%) (default: 0.0)" in pages["cost"]  # the % of a help text is kept
    assert "--nodes NODES (default: 8)" in pages["cost"]
    assert "--skew SKEW [SKEW ...] (default: 0.0 0.4 0.8 0.9)" in pages["partition"]
    assert "(default: cifar10)" in pages["partition"]
    assert "(default: None)" not in " ".join(pages.values())
    assert "(default: False)" not in " ".join(pages.values())


def test_the_command_exits_with_mains_code_and_its_output_flushed(tmp_path) -> None:
    """``lpdt`` (``cli.entry``) skips the interpreter's teardown: its exit code is still
    ``main()``'s, what it printed arrives whole, and its exit handlers still run."""
    import subprocess
    import sys

    probe = tmp_path / "probe.py"
    probe.write_text(
        "import atexit, sys\n"
        "from lpdt import cli\n"
        "atexit.register(lambda: print('handler ran', flush=True))\n"
        "sys.argv = ['lpdt', *sys.argv[1:]]\n"
        "print('before', end='')  # unflushed on purpose\n"
        "cli.entry()\n"
    )
    bad = subprocess.run(
        [sys.executable, str(probe), "train", "--config", str(tmp_path / "missing.yaml")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2
    assert bad.stdout == "beforehandler ran\n"
    assert bad.stderr.strip().endswith("does not exist") and bad.stderr.count("\n") == 1
    ok = subprocess.run(
        [sys.executable, "-m", "lpdt.cli"], capture_output=True, text=True, timeout=120
    )
    assert ok.returncode == 0 and "usage: lpdt" in ok.stdout


def test_a_reader_that_stops_early_ends_the_command_without_a_traceback(tmp_path) -> None:
    """``lpdt topology --nodes 5000 | head -1``: a command whose output (here 200 kB, more than
    a pipe holds) meets a closed pipe stops quietly, with SIGPIPE's status as the shell's own
    tools do, and its exit handlers still run. It printed a BrokenPipeError traceback."""
    import subprocess
    import sys

    probe = tmp_path / "probe.py"
    probe.write_text(
        "import atexit, sys, types\n"
        "from lpdt import cli\n"
        "atexit.register(lambda: print('handler ran', file=sys.stderr, flush=True))\n"
        "cmd = types.ModuleType('lpdt_probe_command')\n"
        "cmd.add_arguments = lambda p: None\n"
        "cmd.run = lambda args: [print(f'line {i:06d}') for i in range(20_000)] and 0\n"
        "sys.modules[cmd.__name__] = cmd\n"
        "cli.COMMANDS['probe'] = (cmd.__name__, 'prints 200 kB')\n"
        "sys.argv = ['lpdt', 'probe']\n"
        "cli.entry()\n"
    )
    proc = subprocess.Popen(
        [sys.executable, str(probe)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stderr is not None
    try:
        first = proc.stdout.readline()
        proc.stdout.close()  # the reader goes, as `head -1` does
        err = proc.stderr.read()
        code = proc.wait(timeout=120)
    finally:
        proc.kill()
    assert first == "line 000000\n"
    assert code == 141 and err == "handler ran\n", err


@pytest.mark.parametrize("command", ["train", "topology"])
def test_ctrl_c_is_one_line_and_sigints_status(
    command: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C printed a traceback (38 lines in ``lpdt train``, ending inside ``torch.save``):
    it is one line, with the status of a process SIGINT ended; a run says how it continues."""
    import types

    module = types.ModuleType("lpdt_interrupted_command")

    def interrupted(args: object) -> int:
        raise KeyboardInterrupt

    module.add_arguments = lambda p: None  # type: ignore[attr-defined]
    module.run = interrupted  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(cli.COMMANDS, command, (module.__name__, "interrupted"))
    assert cli.main([command]) == 130
    err = capsys.readouterr().err
    assert err.startswith(f"lpdt {command}: interrupted") and err.count("\n") == 1
    assert ("--resume" in err) == (command == "train")
    monkeypatch.setenv("LPDT_DEBUG", "1")
    with pytest.raises(KeyboardInterrupt):
        cli.main([command])


def test_memory_that_runs_out_is_one_line() -> None:
    assert cli.user_error_line(MemoryError()) == "out of memory"
    assert cli.user_error_line(MemoryError("a 1e6 x 1e6 matrix")) == (
        "out of memory (a 1e6 x 1e6 matrix)"
    )


@pytest.mark.slow  # the retry budget runs out: 6 s of the default suite (2026-12-01)
def test_an_unreachable_mlflow_server_is_a_short_warning_not_a_silent_wait(
    tmp_path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`lpdt train` with tracking.uri a server nobody listens on (a closed loopback port): it
    says it is logging, warns in one line within the workflow's retry budget (MLflow's own, 7
    retries of up to 120 s, had kept it silent for about 4 minutes), exits 0 with the run's
    files complete, and does not print "MLflow: experiment ... at" for a store it never
    reached."""
    import socket
    import time

    from lpdt.tracking import HTTP_WAITS
    from tests.conftest import TINY

    for key in HTTP_WAITS:  # the defaults apply (and are undone after the test)
        monkeypatch.setenv(key, "0")
        monkeypatch.delenv(key)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: connections are refused
    sets = [*TINY, "data.train_subset=64", "data.test_subset=32", "topology.nodes=2"]
    sets += ["train.epochs=1", "tracking.mlflow=true", f"tracking.uri=http://127.0.0.1:{port}"]
    argv = ["train", *sum((["--set", o] for o in sets), []), "--out", str(tmp_path / "run")]
    t0 = time.monotonic()
    assert cli.main(argv) == 0
    elapsed = time.monotonic() - t0
    out = capsys.readouterr().out
    assert f"logging the run to the MLflow server at http://127.0.0.1:{port}" in out
    warnings = [line for line in out.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1 and "could not log the run to MLflow" in warnings[0], out
    assert f"cannot use the MLflow store http://127.0.0.1:{port}" in warnings[0], out
    assert "MLflow: experiment" not in out and (tmp_path / "run" / "metrics.json").exists()
    assert elapsed < 60, elapsed


@pytest.mark.parametrize(
    ("uri", "says"),
    [
        ("results/x.db", "did you mean sqlite:///results/x.db?"),
        ("htp://127.0.0.1:5000", "MLflow has no store for the scheme 'htp'"),
        ("results/mlruns", "a file store (a folder), which MLflow 3 refuses"),
    ],
)
def test_a_tracking_uri_mlflow_cannot_use_stops_lpdt_train_before_it_trains(
    uri: str, says: str, tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    """These trained the whole run, then warned with MLflow's text (a file store's "maintenance
    mode", the registry's list of schemes) and exited 0: now a config error, exit 2, before
    anything is written."""
    from tests.conftest import TINY

    sets = [*TINY, "train.epochs=1", "tracking.mlflow=true", f"tracking.uri={uri}"]
    argv = ["train", *sum((["--set", o] for o in sets), []), "--out", str(tmp_path / "run")]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"lpdt train: config error: tracking.uri={uri}") and says in err, err
    assert not (tmp_path / "run").exists()
    # with tracking off, the key is not read
    assert cli.main([*argv[:-4], "--set", "tracking.mlflow=false", "--print-config"]) == 0


def test_one_out_for_two_configs_is_refused_before_either_trains(
    tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--out a --out ./a`` with two configs: with --force the second run replaced the first
    (both printed "results: a/metrics.json"); without it, it was refused after the first had
    trained."""
    from tests.conftest import TINY

    sets = sum((["--set", o] for o in [*TINY, "train.epochs=1"]), [])
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text("seed: 1\n")
    b.write_text("seed: 2\n")
    out = tmp_path / "run"
    argv = ["train", *sets, "--config", str(a), "--out", str(out), "--config", str(b)]
    assert cli.main([*argv, "--out", f"{tmp_path}/./run", "--force"]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err
        == f"lpdt train: error: --out {tmp_path}/./run is given twice: one run folder per --config (LPDT_DEBUG=1 for a traceback)"
    ), err
    assert not out.exists()
    # printing the configs writes nothing: the same --out twice is no collision there
    assert cli.main([*argv, "--out", str(out), "--print-config"]) == 0


def test_a_misspelt_option_is_the_commands_usage_with_the_closest_option(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`lpdt train --confg x` printed lpdt's own usage ("lpdt [-h] [--version] COMMAND"): now
    the command's usage and error line, with the option meant; an unknown word is named as is."""
    with pytest.raises(SystemExit) as e:
        cli.main(["train", "--confg", "x.yaml"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "usage: lpdt train" in err
    assert (
        "lpdt train: error: unrecognized arguments: --confg (did you mean --config?) x.yaml" in err
    )
    with pytest.raises(SystemExit):
        cli.main(["report", "extra"])
    assert "lpdt report: error: unrecognized arguments: extra" in capsys.readouterr().err


def test_compare_on_a_path_that_does_not_exist_says_so(tmp_path, capsys) -> None:
    argv = ["compare", str(tmp_path / "nope"), "--vary", "precision", "--a", "fp32", "--b", "int8"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{tmp_path / 'nope'} does not exist" in err[0], err
