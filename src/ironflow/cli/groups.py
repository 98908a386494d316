"""The CLI's Typer apps: click's plain help, with each subcommand's whole line.

Typer draws help with rich when rich is installed, and loading that renderer (rich's markdown,
traceback and table modules) was about 60 ms of a 120 ms ``ironflow --help``. Every app of the
CLI is made by :func:`new_app`, which asks for click's plain help; :class:`Group` lists each
subcommand's whole first sentence, wrapped, where click would cut it at the terminal's width.
Every command's help is drawn by :class:`Context`'s formatter, which never breaks a line at a
hyphen: ``--fake-model`` or ``agent-sandbox`` stay whole, as a reader copies them.
"""

from __future__ import annotations

from typing import Any

import typer
from typer._click.formatting import HelpFormatter  # typer carries its own click: no public name
from typer.core import TyperGroup

__all__ = ["Context", "Group", "new_app", "plain"]

#: A hyphen goes through the wrapping as a non-breaking one (which textwrap keeps in its word).
_KEEP = str.maketrans("-", "\u2011")
_BACK = str.maketrans("\u2011", "-")

#: Long enough that click never shortens a command's line (it still stops at the first sentence).
_WHOLE_LINE = 10_000


class _Formatter(HelpFormatter):
    """click's help formatter, wrapping only at spaces."""

    def write_usage(self, prog: str, args: str = "", prefix: str | None = None) -> None:
        super().write_usage(prog, args.translate(_KEEP), prefix)

    def write_text(self, text: str) -> None:
        super().write_text(text.translate(_KEEP))

    def write_dl(self, rows: Any, col_max: int = 30, col_spacing: int = 2) -> None:
        super().write_dl([(term, text.translate(_KEEP)) for term, text in rows], col_max, col_spacing)

    def getvalue(self) -> str:
        return super().getvalue().translate(_BACK)


class Context(typer.Context):
    """A command's context, whose help never breaks a line at a hyphen."""

    formatter_class = _Formatter


def plain(command: Any) -> Any:
    """``command`` (and a group's commands, all the way down) drawing its help with :class:`Context`."""
    command.context_class = Context
    for sub in getattr(command, "commands", {}).values():
        plain(sub)
    return command


class Group(TyperGroup):
    """A group whose help lists every command with its whole first sentence."""

    context_class = Context

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit=_WHOLE_LINE)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def new_app(**options: Any) -> typer.Typer:
    """A Typer app with plain help (its groups are :class:`Group` unless ``cls`` says otherwise)."""
    options.setdefault("cls", Group)
    return typer.Typer(rich_markup_mode=None, **options)
