"""The `lpdt` command line: every help page prints (argparse %-formats help strings)."""

from __future__ import annotations

import pytest

from lpdt import cli


@pytest.mark.parametrize("argv", [["--help"], *[[name, "--help"] for name in cli.COMMANDS]])
def test_help_pages_print(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 0
    assert "usage: lpdt" in capsys.readouterr().out


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
