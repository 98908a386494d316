"""``ironflow sandbox …`` in-process, as its tests call it: the exit code, stdout and stderr of one command."""

from __future__ import annotations

import typer
from typer.testing import CliRunner

from ironflow.cli import sandbox

__all__ = ["run_sandbox"]


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
