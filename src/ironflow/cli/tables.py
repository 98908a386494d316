"""Tables and text blocks as every report command prints them (``check``, ``reap``, ``runs``, ``ps``).

On a terminal: its width (``COLUMNS`` when set), cells wrapped to fit, and a box where the table
has one (drawn by rich, loaded only then). Piped or redirected: plain columns (no box characters,
no colour) that never wrap, so ``grep`` and ``awk`` see one row per line; these are laid out here,
without rich, which cost about 20 ms of a 90 ms ``runs list`` (the same columns rich draws, checked
against it in the tests). Either way a control character in a cell (a step's result, an error a
sandbox wrote) is shown as its escape, never sent to the terminal
(:func:`~ironflow.cli.formats.printable`). The rendering is pure: the caller says which
(:func:`stdout_width`).
"""

from __future__ import annotations

import io
import shutil
import sys
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from ironflow.cli.formats import printable

if TYPE_CHECKING:
    from rich.table import Table as RichTable

__all__ = ["Table", "new", "render", "stdout_width"]

#: Between two columns, and before the first: rich's one cell of padding on each side.
_GAP = "  "
_MARGIN = " "

Justify = Literal["left", "right"]


@dataclass
class Table:
    """Headers, rows and how they are shown; :func:`render` draws it."""

    headers: list[str] = field(default_factory=list)
    title: str | None = None
    boxed: bool = False
    justify: list[Justify] = field(default_factory=list)
    rows: list[tuple[str, ...]] = field(default_factory=list)

    def add_column(self, header: str, *, justify: Justify = "left") -> None:
        self.headers.append(header)
        self.justify.append(justify)

    def add_row(self, *cells: str) -> None:
        if len(cells) != len(self.headers):
            raise ValueError(f"a row of {len(cells)} cells in a table of {len(self.headers)} columns")
        self.rows.append(cells)


def stdout_width() -> int | None:
    """The terminal's width when stdout is one, else None (piped: plain and unwrapped)."""
    if not sys.stdout.isatty():
        return None
    return shutil.get_terminal_size().columns


def new(*headers: str, title: str | None = None, boxed: bool = False) -> Table:
    """A table with these column headers; ``boxed`` draws a box on a terminal (:func:`render`)."""
    return Table(list(headers), title, boxed, ["left"] * len(headers))


def render(*items: Table | str, width: int | None) -> str:
    """``items`` as text, one after the other (pure): at ``width`` wrapped and with boxes, or, for
    None, plain and unwrapped; trailing spaces and the last newline go."""
    lines = [line for item in items for line in _plain(item)] if width is None else _drawn(items, width)
    return "\n".join(line.rstrip() for line in lines).rstrip("\n")


def _plain(item: Table | str) -> list[str]:
    """One item's lines, piped: a string as it is, a table in padded columns."""
    if isinstance(item, str):
        return printable(item).split("\n")
    lines = printable(item.title).split("\n") if item.title else []
    rows = [tuple(_cell_lines(cell) for cell in row) for row in [tuple(item.headers), *item.rows]]
    widths = [max((_width(line) for row in rows for line in row[i]), default=0) for i in range(len(item.headers))]
    for row in rows:
        for depth in range(max((len(cell) for cell in row), default=1)):
            cells = (cell[depth] if depth < len(cell) else "" for cell in row)
            shown = (_pad(text, w, how) for text, w, how in zip(cells, widths, item.justify, strict=True))
            lines.append(_MARGIN + _GAP.join(shown))
    return lines


def _cell_lines(cell: str) -> list[str]:
    return printable(cell.expandtabs(8)).split("\n")


def _pad(text: str, width: int, justify: Justify) -> str:
    """``text`` padded to ``width`` (right-justified text keeps no spaces of its own at its end)."""
    if justify == "right":
        text = text.rstrip()
        return " " * (width - _width(text)) + text
    return text + " " * (width - _width(text))


def _width(text: str) -> int:
    """Columns ``text`` takes on a terminal: wide East Asian characters two, combining marks none."""
    if text.isascii():
        return len(text)
    return sum(0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def _drawn(items: Sequence[Table | str], width: int) -> list[str]:
    """The items as rich draws them at ``width`` (a terminal's): cells wrapped, boxes drawn."""
    from rich.console import Console

    console = Console(width=width, file=io.StringIO(), record=True, color_system=None, emoji=False)
    for item in items:
        console.print(item if isinstance(item, str) else _rich(item), highlight=False, markup=False)
    return printable(console.export_text()).split("\n")


def _rich(table: Table) -> RichTable:
    from rich import box
    from rich.table import Table as RichTable

    drawn = RichTable(title=table.title, title_justify="left", box=box.HEAVY_HEAD if table.boxed else None)
    for header, justify in zip(table.headers, table.justify, strict=True):
        drawn.add_column(header, justify=justify)
    for row in table.rows:
        drawn.add_row(*row)
    return drawn
