"""The ``ironflow`` command: Typer commands, thin over the library, loaded when they run.

Each topic module (``cli/<topic>.py``) exposes ``register(app)``. A command's module imports
its backend, and a backend the Kubernetes client or aiohttp (about a second), so the app
imports a topic only when one of its commands runs or shows its own help (the CLI's one
deferred import, :mod:`ironflow.cli.lazy`), and ``ironflow --help`` lists :data:`COMMANDS`
without loading any of them. :func:`main` first offers the call to :mod:`ironflow.cli.quick`
(the common call of a hot command, read without Typer); the Typer app is
:mod:`ironflow.cli.root`'s, and ``app`` here loads it on first use. Results go to stdout, progress
and errors to stderr; bad input exits 2 with one line.
"""

from __future__ import annotations

import atexit
import gc
import sys
from typing import TYPE_CHECKING, Any

from ironflow.cli import quick
from ironflow.cli.command_table import COMMANDS

if TYPE_CHECKING:
    from ironflow.cli.root import app

__all__ = ["COMMANDS", "app", "load_command", "main", "registered_commands"]


def load_command(name: str) -> Any:
    """The command ``name`` as its topic module registers it (a Typer-built click command), or
    None for an unknown name."""
    entry = COMMANDS.get(name)
    if entry is None:
        return None
    from ironflow.cli import lazy

    return lazy.registered(entry[0]).get(name)


def registered_commands() -> set[str]:
    """Every command the topic modules register (each must be listed in :data:`COMMANDS`)."""
    from ironflow.cli import lazy

    return {name for module in dict.fromkeys(m for m, _ in COMMANDS.values()) for name in lazy.registered(module)}


def main() -> None:
    """The console script; the name is fixed so help, errors and shell completion say
    ``ironflow`` however the program was started (``python -m``, a wrapper).

    Start-up makes tens of thousands of objects (modules, classes, functions) and no cyclic
    garbage, so the cycle collector is off until the command's own code runs (:func:`quick.run`
    turns it back on before its command; here, before Typer's); and at the exit every object is
    frozen first, so the interpreter's last collections do not walk them all again. Together
    they were a tenth of ``ironflow exec -- true`` and of ``--help`` (``benchmarks/cli.py``)."""
    gc.disable()
    atexit.register(gc.freeze)
    try:
        quick.run(sys.argv[1:])
        from ironflow.cli.root import app
    finally:
        gc.enable()
    app(prog_name="ironflow")


def __getattr__(name: str) -> Any:
    """``app``: the Typer app (:mod:`ironflow.cli.root`), built on first use."""
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from ironflow.cli.root import app

    return app
