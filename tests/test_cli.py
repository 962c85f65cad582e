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
