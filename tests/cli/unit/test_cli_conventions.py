"""The habits every command shares (issue 17): --version, tables that fit a terminal and are
plain when piped, -v/-q, and ``agent -`` reading its prompt from stdin."""

from __future__ import annotations

import io
import logging

import pytest
from typer.testing import CliRunner

from ironflow import __version__
from ironflow.cli import agent, check, reap, tables, verbosity
from ironflow.cli.app import app
from ironflow.cli.formats import OutputFormat
from ironflow.cluster import checks
from ironflow.k8s.reaper import ReapReport

BOX = set("┏┓┗┛━┃│─╇╈┡┩┳┻╋┼")
LONG = "a reason long enough that an eighty-column terminal must wrap it: " + "x" * 60


def test_version_prints_the_package_version() -> None:
    done = CliRunner().invoke(app, ["--version"])
    assert (done.exit_code, done.stdout) == (0, f"ironflow {__version__}\n")


def test_a_piped_reap_table_has_no_box_and_one_line_per_row() -> None:
    report = ReapReport(pods_deleted=2, pods=("old-a", "old-b"))
    piped = reap.render_report(report, "agents", OutputFormat.TABLE, width=None)
    assert not BOX & set(piped), piped
    assert [line.split()[:2] for line in piped.splitlines()[2:]] == [
        ["Job", "0"],
        ["Pod", "2"],
        ["ConfigMap", "0"],
        ["PersistentVolumeClaim", "0"],
    ]
    on_terminal = reap.render_report(report, "agents", OutputFormat.TABLE, width=80)
    assert BOX & set(on_terminal)


def test_a_check_table_fits_the_terminal_and_is_unwrapped_when_piped() -> None:
    results = [checks.CheckResult("security context", checks.Outcome.FAIL, LONG)]
    on_terminal = check.render_results(results, "agents", OutputFormat.TABLE, width=80)
    assert max(len(line) for line in on_terminal.splitlines()) <= 80
    assert BOX & set(on_terminal)
    piped = check.render_results(results, "agents", OutputFormat.TABLE, width=None).splitlines()
    assert not BOX & set("".join(piped))
    assert [line for line in piped if LONG in line], "the row stays on one line"
    assert all(line == line.rstrip() for line in piped)


def test_tables_render_follows_stdout(monkeypatch: pytest.MonkeyPatch) -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr("sys.stdout", io.StringIO())
    assert tables.stdout_width() is None
    monkeypatch.setattr("sys.stdout", Terminal())
    monkeypatch.setenv("COLUMNS", "100")
    assert tables.stdout_width() == 100


def test_quiet_drops_notes_and_verbose_shows_info_logs(capsys: pytest.CaptureFixture[str]) -> None:
    try:
        verbosity.configure(0, True)
        verbosity.note("ignored locally: x")
        assert verbosity.quiet()
        assert logging.getLogger("ironflow").getEffectiveLevel() == logging.ERROR
        verbosity.configure(1, False)
        logging.getLogger("ironflow.probe").info("hello from -v")
        verbosity.configure(0, False)
        verbosity.note("ignored locally: y")
        logging.getLogger("ironflow.probe").info("not shown without -v")
    finally:
        verbosity.configure(0, False)
    err = capsys.readouterr().err
    assert "ignored locally: x" not in err
    assert "info hello from -v" in err
    assert "note: ignored locally: y\n" in err
    assert "not shown without -v" not in err


def test_agent_dash_reads_the_prompt_from_stdin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("Review this change\n"))
    assert agent._prompt("-") == "Review this change\n"
    assert agent._prompt("a literal prompt") == "a literal prompt"


@pytest.mark.parametrize(
    ("words", "cword", "expected"),
    [("ironflow ag", "1", "agent"), ("ironflow agent --iso", "2", "--isolation"), ("ironflow runs l", "2", "list")],
)
def test_shell_completion_completes_commands_subcommands_and_options(words: str, cword: str, expected: str) -> None:
    import os
    import subprocess
    import sys

    env = {**os.environ, "_IRONFLOW_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": cword}
    probe = "from ironflow.cli.app import main; main()"
    done = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert expected in done.stdout.split(), done.stdout


def test_verbosity_levels_are_loggings() -> None:
    """verbosity names logging's levels by number (it loads logging only for -v or -q): the same numbers."""
    import logging

    from ironflow.cli import verbosity

    assert verbosity._LEVELS == {-1: logging.ERROR, 0: logging.WARNING, 1: logging.INFO}
    assert verbosity._DEBUG == logging.DEBUG
    verbosity.configure(2, False)
    try:
        assert verbosity.log_level() == logging.DEBUG
        assert logging.getLogger("ironflow").level == logging.DEBUG
    finally:
        verbosity.configure(0, False)
    assert verbosity.log_level() == logging.WARNING
