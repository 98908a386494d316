"""``sandbox exec --env`` keeps the rule a session's own env keeps: a name that steers the loader or
libc, or one no environment carries, is one line and exit 2 before any server is reached (issue 34 M1)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from ironflow.cli.app import app


@pytest.mark.parametrize(
    ("pair", "words"),
    [
        ("LD_PRELOAD=/tmp/x.so", "env LD_PRELOAD is refused"),
        ("GLIBC_TUNABLES=glibc.malloc.check=3", "env GLIBC_TUNABLES is refused"),
        ("GCONV_PATH=/tmp", "env GCONV_PATH is refused"),
        ("1A=x", "invalid env name '1A'"),
    ],
)
def test_sandbox_exec_refuses_a_loader_variable_in_one_line(pair: str, words: str) -> None:
    result = CliRunner().invoke(
        app,
        ["sandbox", "exec", "sbx-0000000000000000", "--env", pair, "--", "true"],
        env={"IRONFLOW_SANDBOX_SERVER": ""},
    )
    assert result.exit_code == 2, result.stderr
    assert result.stderr.startswith("error: ")
    assert result.stderr.count("\n") == 1
    assert words in result.stderr
    assert "/tmp/x.so" not in result.stderr
