"""Command groups that import a command's module only when that command runs.

A group lists its commands from a table (name -> (module, one-line help)); ``--help`` draws
the table's lines without importing anything, and a command's module is imported when the
command is looked up to run. ``ironflow`` itself is such a group, and so is ``ironflow
sandbox`` (its session client must not pay for the Kubernetes modules of its pattern commands).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import typer
from typer.core import TyperCommand

from ironflow.cli import exits, groups

__all__ = ["LazyGroup", "lazy_group", "registered"]

#: Command name -> (module whose ``register(group)`` adds it, the line ``--help`` shows).
Table = Mapping[str, tuple[str, str]]


def _group() -> None:
    """A scratch group's callback (Typer collapses a one-command app without one)."""


def registered(module: str) -> dict[str, Any]:
    """The commands ``module`` registers (``module.register(group)``), by name."""
    scratch = groups.new_app()
    scratch.callback()(_group)
    importlib.import_module(module).register(scratch)
    return dict(getattr(groups.plain(typer.main.get_command(scratch)), "commands", {}))


class LazyGroup(groups.Group):
    """Lists :attr:`table`; imports a command's module when the command is used.

    While the group's own help is drawn, each command is a stand-in carrying its table line.
    """

    table: ClassVar[Table] = {}
    _listing = False

    def list_commands(self, ctx: Any) -> list[str]:
        return list(self.table)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        entry = self.table.get(cmd_name)
        if entry is None:
            return None
        if self._listing:
            return TyperCommand(cmd_name, help=entry[1])
        return registered(entry[0]).get(cmd_name)

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        """Click's main, but a parse error anywhere below is one ``error:`` line, exit 2."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        except typer.TyperException as exc:  # every parse error (typer's own click)
            print(f"error: {exits.usage_line(exc)}", file=sys.stderr)
            sys.exit(getattr(exc, "exit_code", exits.EXIT_BAD_INPUT))
        except typer.Abort:
            print("error: aborted", file=sys.stderr)
            sys.exit(exits.EXIT_INTERRUPTED)
        sys.exit(code if isinstance(code, int) else 0)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


def lazy_group(table: Table) -> type[LazyGroup]:
    """A :class:`LazyGroup` class over ``table`` (Typer takes the class, ``cls=``)."""
    return type("LazyGroup", (LazyGroup,), {"table": table})
