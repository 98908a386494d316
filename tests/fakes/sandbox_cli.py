"""``ironflow sandbox …`` in-process, as its tests call it: the exit code, stdout and stderr of one command;
and ``ironflow …`` as a process of its own, as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys

import typer
from typer.testing import CliRunner

from ironflow.cli import sandbox

__all__ = ["ironflow_process", "run_sandbox"]


def _app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        pass

    sandbox.register(app)
    return app


def run_sandbox(*args: str) -> tuple[int, str, str]:
    """Run ``ironflow sandbox ARGS…``; its exit code, stdout and stderr."""
    result = CliRunner().invoke(_app(), ["sandbox", *args])
    return result.exit_code, result.stdout, result.stderr


def ironflow_process(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``ironflow ARGS`` in a process of its own with this one's environment (no model credential) and
    ``env``; its stdin is empty (``exec`` forwards a piped one: never the test runner's)."""
    base = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN")}
    return subprocess.run(
        [sys.executable, "-c", "from ironflow.cli.app import main; main()", *args],
        capture_output=True,
        text=True,
        env={**base, **(env or {})},
        timeout=120,
        stdin=subprocess.DEVNULL,
        check=False,
    )
