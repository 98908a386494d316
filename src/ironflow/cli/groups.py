"""The CLI's Typer apps: click's plain help, with each subcommand's whole line.

Typer draws help with rich when rich is installed, and loading that renderer (rich's markdown,
traceback and table modules) was about 60 ms of a 120 ms ``ironflow --help``. Every app of the
CLI is made by :func:`new_app`, which asks for click's plain help; :class:`Group` lists each
subcommand's whole first sentence, wrapped, where click would cut it at the terminal's width.
"""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperGroup

__all__ = ["Group", "new_app"]

#: Long enough that click never shortens a command's line (it still stops at the first sentence).
_WHOLE_LINE = 10_000


class Group(TyperGroup):
    """A group whose help lists every command with its whole first sentence."""

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
