"""Piped tables are laid out by hand (rich stays unloaded): the same columns rich draws, checked here
against rich itself, and the same escapes."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ironflow.cli import tables
from ironflow.cli.formats import printable

#: Cell text without control characters or tabs (whose widths rich counts as the raw characters,
#: and this module as their shown escapes): ASCII, accents, combining marks, wide CJK, newlines.
_TEXT = st.text(alphabet=st.sampled_from([*"ab -:/.…é", "\u0301", "漢", "字", "\n"]), max_size=12)


def _by_rich(*items: tables.Table | str) -> str:
    """What the plain rendering was when rich drew it (10,000 columns, every box dropped), with
    every trailing blank line gone (rich's kept one when its last row was blank) and no emoji codes
    (rich showed a cell's ``:a:`` as an emoji)."""
    from rich.console import Console

    console = Console(width=10_000, file=io.StringIO(), record=True, color_system=None, emoji=False)
    for item in items:
        drawn: object = item
        if isinstance(item, tables.Table):
            drawn = tables._rich(item)
            drawn.box = None
        console.print(drawn, highlight=False, markup=False)
    lines = console.export_text().rstrip("\n").splitlines()
    return printable("\n".join(line.rstrip() for line in lines).rstrip("\n"))


@st.composite
def _tables(draw: st.DrawFn) -> tables.Table:
    columns = draw(st.integers(1, 4))
    # A title no wider than the narrowest table (rich wrapped a wider one to the table's width).
    table = tables.new(title=draw(st.none() | st.text(alphabet="ab c", min_size=1, max_size=3).map(str.strip)))
    for index in range(columns):
        table.add_column(f"H{index}" + draw(_TEXT).replace("\n", ""), justify=draw(st.sampled_from(["left", "right"])))
    for _ in range(draw(st.integers(0, 4))):
        table.add_row(*(draw(_TEXT) for _ in range(columns)))
    return table


@settings(max_examples=300, deadline=None)
@given(table=_tables(), before=st.text(alphabet="ab \n", max_size=6))
def test_piped_tables_are_the_columns_rich_draws(table: tables.Table, before: str) -> None:
    assert tables.render(before, table, width=None) == _by_rich(before, table)


def test_a_piped_row_is_one_line_however_long() -> None:
    table = tables.new("RUN", "RESULT")
    table.add_row("r-1", "x" * 500)
    table.add_row("r-22", "short")
    assert tables.render(table, width=None).splitlines() == [
        " RUN   RESULT",
        " r-1   " + "x" * 500,
        " r-22  short",
    ]


def test_a_cells_control_characters_are_escaped_and_counted_as_shown() -> None:
    table = tables.new("A", "B")
    table.add_row("\x1b[2J", "x")
    table.add_row("long cell", "y")
    assert tables.render(table, width=None).splitlines() == [" A          B", " \\x1b[2J    x", " long cell  y"]


def test_a_row_of_the_wrong_length_is_refused() -> None:
    table = tables.new("A", "B")
    with pytest.raises(ValueError, match="1 cells in a table of 2 columns"):
        table.add_row("only one")


def test_a_piped_title_wider_than_its_table_is_one_line() -> None:
    table = tables.new("A", title="ironflow check agents")
    table.add_row("1")
    assert tables.render(table, width=None).splitlines() == ["ironflow check agents", " A", " 1"]


def test_a_cells_emoji_code_is_shown_as_written() -> None:
    table = tables.new("A")
    table.add_row(":smile: :a:")
    for width in (None, 80):
        assert ":smile: :a:" in tables.render(table, width=width)


def test_a_terminal_table_is_boxed_and_wrapped_at_its_width() -> None:
    table = tables.new(title="ironflow check ns", boxed=True)
    for header in ("check", "result", "why"):
        table.add_column(header)
    table.add_row("pod hardening", "pass", "every setting is as the profile says, and more words to wrap")
    text = tables.render(table, width=50)
    assert text.splitlines()[0] == "ironflow check ns"
    assert "━" in text
    assert max(len(line) for line in text.splitlines()) <= 50
    assert len(text.splitlines()) > 5


def test_piped_rendering_loads_no_rich() -> None:
    probe = (
        "import sys\n"
        "from ironflow.cli import tables\n"
        "t = tables.new('A', 'B'); t.add_row('1', '2')\n"
        "tables.render(t, 'x', width=None)\n"
        "print(sorted(m for m in sys.modules if m == 'rich' or m.startswith('rich.')))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"
