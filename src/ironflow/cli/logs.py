"""``ironflow logs RUN [STEP] [-f]``: the stored transcripts of a run's agent steps.

The store holds every attempt's stream-json lines, stderr and the engine's notes, redacted
and capped (:mod:`ironflow.engine.transcripts`). ``-o text`` condenses them into turns
(:mod:`ironflow.claude.turns`) under a header per step attempt; ``-o json`` prints each stored
line as one JSON object (JSON lines). ``-f`` polls the store until the run is finished, so
it also waits for a pending run. A sub-workflow's steps are in its own run: the command says
which (``ironflow logs CHILD``). Never creates a store; exit codes are :mod:`ironflow.cli.exits`'s.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Sequence
from typing import Annotated, Final

import typer

from ironflow.claude import turns
from ironflow.cli import exits
from ironflow.cli.formats import TextFormat, printable
from ironflow.cli.shared_options import RunArgument, StoreOption
from ironflow.cli.stores import find_run, opened, run_async
from ironflow.engine import model
from ironflow.engine.store import Store

__all__ = ["chunk_lines_json", "chunk_lines_text", "register", "step_position"]

#: Seconds between two reads of a followed run.
FOLLOW_POLL_S: Final = 0.5
#: Chunks read from the store at a time.
_PAGE: Final = 500


# --- what is printed (pure) ---------------------------------------------------------------


def chunk_lines_text(chunk: model.TranscriptChunk, previous: model.TranscriptChunk | None) -> list[str]:
    """The condensed lines of a chunk, after a header when its step attempt is not the previous chunk's;
    control characters shown as escapes (:func:`~ironflow.cli.formats.printable`)."""
    out = []
    if previous is None or (previous.position, previous.attempt) != (chunk.position, chunk.attempt):
        out.append(f"── step {chunk.position} {chunk.step!r}, attempt {chunk.attempt}")
    for line in chunk.lines:
        if chunk.stream is model.TranscriptStream.STDOUT:
            out += [f"  {said}" for said in turns.describe(line)]
        elif chunk.stream is model.TranscriptStream.STDERR:
            out.append(f"  stderr: {line}")
        else:
            out.append(f"  [ironflow] {line}")
    return [printable(line) for line in out]


def chunk_lines_json(chunk: model.TranscriptChunk) -> list[str]:
    """One JSON object per stored line of a chunk, as ``-o json`` prints them."""
    head = {"run_id": chunk.run_id, "position": chunk.position, "step": chunk.step, "attempt": chunk.attempt,
            "seq": chunk.seq, "stream": str(chunk.stream), "at": chunk.at}  # fmt: skip
    return [json.dumps({**head, "line": line}) for line in chunk.lines]


# --- the command ---------------------------------------------------------------------------


def step_position(steps: Sequence[model.StepRecord], ref: str, run_id: str) -> int:
    """The position ``ref`` names among a run's steps: a step's name, else its position; exits 2
    when it names none, or a name several steps share."""
    named = [s.position for s in steps if s.name == ref]
    if len(named) == 1:
        return named[0]
    if named:
        exits.fail(f"run {run_id} has {len(named)} steps named {ref!r} (positions {', '.join(map(str, named))}); "
                   "give the position")  # fmt: skip
    if ref.isdigit() and any(s.position == int(ref) for s in steps):
        return int(ref)
    known = ", ".join(f"{s.position} {s.name!r}" for s in steps) or "none yet"
    exits.fail(f"run {run_id} has no step {ref!r}; its steps: {known}")


class _Printer:
    """Prints chunks as they are read, remembering the last one for the next header."""

    def __init__(self, output: TextFormat) -> None:
        self.output = output
        self.last: model.TranscriptChunk | None = None

    def print(self, chunk: model.TranscriptChunk) -> None:
        text = chunk_lines_json(chunk) if self.output is TextFormat.JSON else chunk_lines_text(chunk, self.last)
        if text:
            sys.stdout.write("\n".join(text) + "\n")
        self.last = chunk


async def _drain(store: Store, run_id: str, position: int | None, after: int, printer: _Printer) -> int:
    """Print every chunk numbered above ``after``; the last number printed."""
    while True:
        page = await store.transcript(run_id, position=position, after=after, limit=_PAGE)
        for chunk in page:
            printer.print(chunk)
            after = chunk.seq
        sys.stdout.flush()
        if len(page) < _PAGE:
            return after


async def _logs(store_url: str | None, ref: str, step: str | None, follow: bool, output: TextFormat) -> None:
    async with opened(store_url, create=False) as store:
        run = await find_run(store, ref)
        position = None if step is None else step_position(await store.steps(run.id), step, run.id)
        printer = _Printer(output)
        cursor = 0
        while True:
            # Read the state first: a run finished by then has stored all its lines.
            current = await store.get_run(run.id)
            cursor = await _drain(store, run.id, position, cursor, printer)
            if not follow or current is None or current.finished:
                break
            await asyncio.sleep(FOLLOW_POLL_S)
        children = [s for s in await store.steps(run.id) if s.child_run_id and position in (None, s.position)]
        for s in children:
            print(f"step {s.name!r} is a sub-workflow: its transcript is `ironflow logs {s.child_run_id}`",
                  file=sys.stderr)  # fmt: skip
        if printer.last is None and output is TextFormat.TEXT:
            print(f"run {run.id} has no stored transcript{' for that step' if step else ''} ({run.status})",
                  file=sys.stderr)  # fmt: skip


def logs(
    run: RunArgument,
    step: Annotated[
        str | None, typer.Argument(metavar="[STEP]", help="Only this step: its name or position.", show_default=False)
    ] = None,
    follow: Annotated[bool, typer.Option("-f", "--follow", help="Keep printing until the run is finished.")] = False,
    store: StoreOption = None,
    output: Annotated[
        TextFormat, typer.Option("--output", "-o", help="text (condensed turns) or json (each stored line).")
    ] = TextFormat.TEXT,
) -> None:
    """Print the transcripts of a run's agent steps; -f follows the run until it is finished."""
    run_async(_logs(store, run, step, follow, output))


def register(app: typer.Typer) -> None:
    """Add ``logs`` to the ``ironflow`` app."""
    app.command("logs")(logs)
