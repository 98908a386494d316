"""The ``ironflow`` app, and its ``sandbox`` group, list their commands from a table and load a
command's module only to run it."""

from __future__ import annotations

import ast
import re
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from ironflow.cli import app, lazy, sandbox


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
        "('ironflow.cli.app', 'ironflow.cli.command_table', 'ironflow.cli.quick', "
        "'ironflow.cli.root', 'ironflow.cli.groups', 'ironflow.cli.lazy', 'ironflow.cli.exits')))\n"
        "print('logging' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    for name in app.COMMANDS:
        assert name in done.stdout
    assert done.stdout.strip().splitlines()[-2:] == ["[]", "False"], "no topic and no logging for --help"


def test_an_unknown_command_is_one_line_and_exit_2() -> None:
    result = CliRunner().invoke(app.app, ["no-such-command"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: no such command 'no-such-command'; one of: agent, exec, ")
    assert result.stderr.count("\n") == 1


@pytest.mark.parametrize("name", list(sandbox.COMMANDS))
def test_each_sandbox_line_is_the_commands_own_help(name: str) -> None:
    module, line = sandbox.COMMANDS[name]
    command = lazy.registered(module).get(name)
    assert command is not None, f"{module} does not register {name!r}"
    assert command.get_short_help_str(limit=200) == line


def test_every_registered_sandbox_command_is_listed() -> None:
    modules = dict.fromkeys(m for m, _ in sandbox.COMMANDS.values())
    assert {name for module in modules for name in lazy.registered(module)} == set(sandbox.COMMANDS)


def _loaded_by(*argv: str) -> list[str]:
    probe = (
        "import sys\n"
        "from ironflow.cli.app import main\n"
        f"sys.argv = ['ironflow', *{list(argv)!r}]\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith(('ironflow.cli.sandbox_', 'ironflow.k8s', "
        "'ironflow.local', 'ironflow.agent_sandbox', 'ironflow.sandbox_router'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return list(ast.literal_eval(done.stdout.strip().splitlines()[-1]))


def test_a_session_command_loads_neither_the_server_nor_the_cluster_modules() -> None:
    assert _loaded_by("sandbox", "--help") == []
    assert _loaded_by("sandbox", "exec", "--help") == ["ironflow.cli.sandbox_sessions"]


def test_version_prints_the_packages_version_and_loads_no_topic() -> None:
    import ironflow

    result = CliRunner().invoke(app.app, ["--version"])
    assert result.exit_code == 0
    assert result.output == f"ironflow {ironflow.__version__}\n"


@pytest.mark.parametrize("argv", [["-h"], ["exec", "-h"], ["sandbox", "-h"], ["runs", "list", "-h"]])
def test_dash_h_is_help_on_every_level(argv: list[str]) -> None:
    result = CliRunner().invoke(app.app, argv)
    assert result.exit_code == 0, result.output
    assert "Usage: " in result.output
    assert result.output == CliRunner().invoke(app.app, [*argv[:-1], "--help"]).output


def _every_command_path() -> list[list[str]]:
    """``[name]`` for every command, and ``[group, name]`` for every command of a group."""
    import typer

    paths: list[list[str]] = []
    for name in app.COMMANDS:
        command = app.load_command(name)
        paths.append([name])
        if hasattr(command, "list_commands"):  # a group (typer's own click: no click.Group to test against)
            paths += [[name, sub] for sub in command.list_commands(typer.Context(command))]
    return paths


@pytest.mark.parametrize("argv", _every_command_path(), ids=" ".join)
def test_every_commands_help_renders(argv: list[str]) -> None:
    """Every command's help draws (a ``[/WORD]`` in an option's help once crashed rich's; help is plain now)."""
    result = CliRunner().invoke(app.app, [*argv, "--help"])
    assert result.exit_code == 0, (result.output, result.exception)
    assert f"Usage: ironflow {' '.join(argv)} " in " ".join(result.output.split())


def _complete(words: str) -> list[str]:
    """What bash completion offers for ``words`` (the cursor after the last one)."""
    import os

    env = {**os.environ, "_IRONFLOW_COMPLETE": "complete_bash", "COMP_WORDS": words,
           "COMP_CWORD": str(len(words.split()) - 1)}  # fmt: skip
    done = subprocess.run([sys.executable, "-c", "from ironflow.cli.app import main; main()"],
                          env=env, capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_shell_completion_offers_commands_subcommands_and_options() -> None:
    assert _complete("ironflow ex") == ["exec"]
    assert _complete("ironflow sandbox o") == ["open"]
    assert "--workspace" in _complete("ironflow exec --work")


def test_show_completion_prints_the_script_for_the_shell_it_runs_in() -> None:
    """The shell is the calling process's (typer asks shellingham); run under bash here, since a
    test run's own parent may be no shell at all (a detached run: ``Shell  not supported``)."""
    script = f"{sys.executable} -c 'from ironflow.cli.app import main; main()' --show-completion"
    done = subprocess.run(["bash", "-c", f"{script}; exit $?"], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr + done.stdout
    assert "_ironflow_completion()" in done.stdout
    assert "_IRONFLOW_COMPLETE=complete_bash" in done.stdout


@pytest.mark.parametrize("argv", [["agent"], ["manifests"], ["sandbox"], ["exec"]], ids=" ".join)
def test_help_on_a_narrow_terminal_never_breaks_a_flag_or_a_name_at_its_hyphen(argv: list[str]) -> None:
    """``--fake-model`` split over two lines cannot be copied; click's wrapping broke at hyphens."""
    command = app.load_command(argv[0])
    names = {opt for param in command.params for opt in param.opts if "-" in opt.lstrip("-")}
    names |= {name for name in getattr(command, "commands", {}) if "-" in name} | {"agent-sandbox", "single-use"}
    for columns in ("44", "52", "61", "80"):
        env = {"COLUMNS": columns, "PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)}
        done = subprocess.run([sys.executable, "-m", "ironflow", *argv, "--help"], capture_output=True, text=True,
                              env=env, timeout=60, check=True)  # fmt: skip
        for name in names:
            for cut in (i + 1 for i, c in enumerate(name) if c == "-" and name[:i].strip("-")):
                broken = re.escape(name[:cut]) + r"\n\s*" + re.escape(name[cut:])
                assert not re.search(broken, done.stdout), (columns, name, done.stdout)
