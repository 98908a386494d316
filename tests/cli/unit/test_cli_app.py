"""The ``ironflow`` app lists its commands from one table and loads a topic only to run it."""

from __future__ import annotations

import subprocess
import sys

import pytest
from typer.testing import CliRunner

from ironflow.cli import app


@pytest.mark.parametrize("name", list(app.COMMANDS))
def test_each_listed_line_is_the_commands_own_help(name: str) -> None:
    command = app.load_command(name)
    assert command is not None, f"{app.COMMANDS[name][0]} does not register {name!r}"
    assert command.get_short_help_str(limit=200) == app.COMMANDS[name][1]


def test_every_registered_command_is_listed() -> None:
    assert app.registered_commands() == set(app.COMMANDS)


def test_help_lists_every_command_without_loading_a_topic() -> None:
    probe = (
        "import sys\n"
        "from ironflow.cli.app import main\n"
        "sys.argv = ['ironflow', '--help']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('ironflow.cli.') and m not in "
        "('ironflow.cli.app',)))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    for name in app.COMMANDS:
        assert name in done.stdout
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_an_unknown_command_is_one_line_and_exit_2() -> None:
    result = CliRunner().invoke(app.app, ["no-such-command"])
    assert result.exit_code == 2
    assert "No such command 'no-such-command'" in result.output
