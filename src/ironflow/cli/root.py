"""The ``ironflow`` Typer app: the group over :data:`ironflow.cli.command_table.COMMANDS` (each command's
module loads when it runs, :mod:`ironflow.cli.lazy`) and the root options, ``--version``, ``-v``
and ``-q``. Built when a call is Typer's to read (:func:`ironflow.cli.app.main`).
"""

from __future__ import annotations

import typer

from ironflow import __version__
from ironflow.cli import exits, groups, lazy
from ironflow.cli.command_table import COMMANDS

__all__ = ["app"]

app = groups.new_app(
    name="ironflow",
    cls=lazy.lazy_group(COMMANDS),
    help="Run AI-agent steps in hardened, single-use sandboxes.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"ironflow {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
    ),
    verbose: int = typer.Option(
        0,
        "--verbose",
        "-v",
        count=True,
        show_default=False,
        help="ironflow's info logs on stderr (-vv: debug); before the command.",
    ),
    quiet: bool = typer.Option(
        False, "--quiet", "-q", help="Results and errors only: no spinner, notes or warnings; before the command."
    ),
) -> None:
    """Run AI-agent steps in hardened, single-use sandboxes."""
    if verbose and quiet:
        exits.fail("-v and -q pull opposite ways: give one of them")
    from ironflow.cli import verbosity  # logging's set-up: a command's, never --help's

    verbosity.configure(verbose, quiet)
