"""Tables and text blocks as every report command prints them (``check``, ``reap``, ``runs``, ``ps``).

On a terminal: its width (``COLUMNS`` when set), and a box where the table has one. Piped or
redirected: plain columns (no box characters, no colour) that never wrap, so ``grep`` and ``awk``
see one row per line. Either way a control character in a cell (a step's result, an error a sandbox
wrote) is shown as its escape, never sent to the terminal (:func:`~ironflow.cli.formats.printable`).
The rendering is pure: the caller says which (:func:`stdout_width`). rich loads when a table is
made: a command module imports this one for its listing subcommand, and its others (``sandbox
exec``) must not pay for it.
"""

from __future__ import annotations

import io
import shutil
import sys
from typing import TYPE_CHECKING

from ironflow.cli.formats import printable

if TYPE_CHECKING:
    from rich.console import RenderableType
    from rich.table import Table

__all__ = ["new", "render", "stdout_width"]

#: Piped output is as wide as its longest row: rich is given room enough never to wrap one.
_UNWRAPPED = 10_000


def stdout_width() -> int | None:
    """The terminal's width when stdout is one, else None (piped: plain and unwrapped)."""
    if not sys.stdout.isatty():
        return None
    return shutil.get_terminal_size().columns


def new(*headers: str, title: str | None = None, boxed: bool = False) -> Table:
    """A table with these column headers; ``boxed`` draws a box on a terminal (:func:`render`)."""
    from rich import box
    from rich.table import Table

    return Table(*headers, title=title, title_justify="left", box=box.HEAVY_HEAD if boxed else None)


def render(*items: RenderableType | str, width: int | None) -> str:
    """``items`` as text, one after the other (pure): at ``width`` with boxes, or, for None, plain
    and unwrapped (every box dropped); trailing spaces and the last newline go."""
    from rich.console import Console
    from rich.table import Table

    console = Console(width=width or _UNWRAPPED, file=io.StringIO(), record=True, color_system=None)
    for item in items:
        if width is None and isinstance(item, Table):
            item.box = None
        console.print(item, highlight=False, markup=False)
    text = "\n".join(line.rstrip() for line in console.export_text().rstrip("\n").splitlines())
    return printable(text)
