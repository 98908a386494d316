"""The CLI's bad-input contract, for tests: run a command in-process and check that it failed with
one ``error:`` line, exit 2, no traceback (shared by the bad-input tests of every command)."""

from __future__ import annotations

from typer.testing import CliRunner

from ironflow.cli.app import app


def invoke(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    """The exit code and stderr of ``ironflow ARGS``."""
    result = CliRunner().invoke(app, list(args), env=env)
    return result.exit_code, result.stderr


def assert_one_line(code: int, err: str, words: str) -> None:
    """Exit 2 with exactly one ``error:`` line naming ``words``, and no traceback."""
    assert code == 2, err
    assert err.startswith("error: ")
    assert err.count("\n") == 1, err
    assert "Traceback" not in err
    assert words in err
