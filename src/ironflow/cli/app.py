"""The ``ironflow`` command: Typer commands, thin over the library.

Each topic registers its commands from its own module (``cli/<topic>.py`` exposes
``register(app)``), so this file only assembles them. Results go to stdout, progress
and errors to stderr; bad input exits 2 with one line that names the problem.
"""

from __future__ import annotations

import typer

__all__ = ["app", "main"]

app = typer.Typer(
    name="ironflow",
    help="Run AI-agent steps in hardened, single-use sandboxes.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _register_all() -> None:
    # One line per topic module; each adds its commands to the app.
    from ironflow.cli import render

    render.register(app)
    from ironflow.cli import dev; dev.register(app)  # noqa: E702, I001
    from ironflow.cli import manifests; manifests.register(app)  # noqa: E702, I001
    from ironflow.cli import check; check.register(app)  # noqa: E702, I001
    from ironflow.cli import reap; reap.register(app)  # noqa: E702, I001
    from ironflow.cli import agent; agent.register(app)  # noqa: E702, I001
    from ironflow.cli import run; run.register(app)  # noqa: E702, I001
    from ironflow.cli import runs; runs.register(app)  # noqa: E702, I001
    from ironflow.cli import auth_proxy; auth_proxy.register(app)  # noqa: E702, I001
    from ironflow.cli import sandbox; sandbox.register(app)  # noqa: E702, I001
    pass


_register_all()


def main() -> None:
    app()
