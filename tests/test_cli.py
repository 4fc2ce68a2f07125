"""The `popvision` command line as a whole: every command documented, errors as one line."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from popvision_py.cli import COMMANDS, main


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_help_documents_every_option(name: str) -> None:
    # GIVEN a registered command, WHEN asked for --help
    command = main.get_command(click.Context(main), name)
    result = CliRunner().invoke(main, [name, "--help"])
    # THEN it exits 0 with a description, and every option has help text shown on the page
    assert result.exit_code == 0, result.output
    assert command.help, f"{name} has no description"
    for param in command.params:
        if isinstance(param, click.Option) and not param.hidden:
            assert param.help, f"{name} {param.opts[0]} has no help text"
            assert param.opts[-1] in result.output


def test_top_level_help_lists_every_command() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    for name in COMMANDS:
        assert name in result.output


def test_an_unknown_command_is_a_usage_error() -> None:
    result = CliRunner().invoke(main, ["profile-me"])
    assert result.exit_code == 2
    assert "No such command 'profile-me'" in result.output


def test_the_console_script_runs_as_a_subprocess(tmp_path) -> None:
    # The installed entry point, not just the click object: a missing file is one line, exit 2.
    result = subprocess.run(
        [sys.executable, "-m", "popvision_py.cli", "info", str(tmp_path / "none.pop")],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"Error: {tmp_path / 'none.pop'} does not exist."]
