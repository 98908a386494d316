"""What a sandbox or a model wrote reaches a terminal shown, never obeyed (issue 34, L7): an OSC 52
clipboard write, a screen clear, a C1 CSI are printed as escapes; newline and tab stay. A pipe
gets a command's own bytes; ``-o json`` stays exact JSON."""

from __future__ import annotations

import asyncio
import io
import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ironflow.cli import exits, formats, logs, tables
from ironflow.cli.app import app
from ironflow.engine import model
from ironflow.engine.store import open_store
from ironflow.results import AgentResult

#: Writes "hi" to the clipboard, clears the screen, and CSI in its one-character C1 form.
HOSTILE = "ok \x1b]52;c;aGk=\x07 \x1b[2J \u009b31m\r\x00\x7f end\tx\n"
SHOWN = "ok \\x1b]52;c;aGk=\\x07 \\x1b[2J \\x9b31m\\x0d\\x00\\x7f end\tx\n"


class _Terminal(io.TextIOWrapper):
    """A text stream over bytes that says it is a terminal."""

    def __init__(self) -> None:
        super().__init__(io.BytesIO(), encoding="utf-8")

    def isatty(self) -> bool:
        return True

    def shown(self) -> bytes:
        self.flush()
        return self.buffer.getvalue()  # type: ignore[attr-defined, no-any-return]


def _pipe() -> io.TextIOWrapper:
    return io.TextIOWrapper(io.BytesIO(), encoding="utf-8")


def test_control_characters_are_shown_as_escapes_and_newline_and_tab_kept() -> None:
    assert formats.printable(HOSTILE) == SHOWN
    assert formats.printable("plain, ünïcode ✓\n") == "plain, ünïcode ✓\n"


def test_a_terminal_gets_the_bytes_shown_even_when_a_sequence_is_cut_between_pieces() -> None:
    raw = HOSTILE.encode()
    terminal, pipe = _Terminal(), _pipe()
    for stream in (formats.TerminalStream(terminal), formats.TerminalStream(pipe)):
        cut = raw.index(b"\xc2\x9b") + 1  # inside the two bytes of U+009B
        stream.write(raw[:cut])
        stream.write(raw[cut:], final=True)
    assert terminal.shown() == SHOWN.encode()
    pipe.flush()
    assert pipe.buffer.getvalue() == raw  # type: ignore[attr-defined]


def test_for_terminal_leaves_a_pipe_its_text() -> None:
    assert formats.for_terminal(HOSTILE, _Terminal()) == SHOWN
    assert formats.for_terminal(HOSTILE, _pipe()) == HOSTILE


def test_a_table_shows_a_cells_escapes_on_a_terminal_and_piped() -> None:
    table = tables.new("STEP", "RESULT")
    table.add_row("a", HOSTILE.strip())
    for width in (None, 200):
        text = tables.render(table, f"error: {HOSTILE}", width=width)
        assert "\x1b" not in text
        assert "\\x1b]52;c;aGk=" in text
        assert "\\x1b[2J" in text
        assert "\\x9b31m" in text


def test_logs_text_shows_escapes_and_json_keeps_the_line_exact() -> None:
    chunk = model.TranscriptChunk("r1", 0, "s", 1, model.TranscriptStream.STDERR, HOSTILE.strip(), time.time())
    text = logs.chunk_lines_text(chunk, None)
    assert not any(c in line for line in text for c in "\x1b\x07\x9b")
    assert f"  stderr: {SHOWN.strip()}" in text
    assert json.loads(logs.chunk_lines_json(chunk)[0])["line"] == HOSTILE.strip()


def test_an_error_line_shows_escapes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        exits.fail(f"git failed: {HOSTILE}")
    assert capsys.readouterr().err == f"error: git failed: {SHOWN.rstrip()}\n"


def test_runs_show_text_has_no_escape_and_json_has_the_value(tmp_path: Path) -> None:
    """``runs show`` of a step whose result holds escapes: the table shows them, -o json is exact."""
    url = f"sqlite:///{tmp_path}/engine.db"

    async def seed() -> str:
        store = open_store(url)
        await store.open()
        try:
            run = await store.create_run(model.RunRecord(id=model.new_id(), workflow="w.py:flow", input={}))
            done, said = model.StepStatus.SUCCEEDED, AgentResult(value=HOSTILE, duration_ms=1)
            await store.save_step(model.StepRecord(run.id, 0, "ask", model.StepKind.AGENT, status=done, result=said))
            return run.id
        finally:
            await store.close()

    run_id = asyncio.run(seed())
    shown = CliRunner().invoke(app, ["runs", "show", run_id, "--store", url])
    assert shown.exit_code == 0, shown.output
    assert "\x1b" not in shown.stdout
    assert "\\x1b]52;c;aGk=" in shown.stdout  # (rich drops the BEL itself)
    as_json = CliRunner().invoke(app, ["runs", "show", run_id, "--store", url, "-o", "json"])
    assert json.loads(as_json.stdout)["steps"][0]["result"]["value"] == HOSTILE
