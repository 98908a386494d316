"""The transcript of one attempt of an agent step: the lines its provider streams, redacted,
size-capped and written to the store in batches.

A :class:`StepTranscript` is the :class:`~ironflow.provider.LogSink` the runner hands the
provider for one attempt. ``log`` (called for every line, from the provider's reader) only
redacts and buffers; a flusher task writes what waits every ``flush_every_s``, or sooner once
:data:`FLUSH_BYTES` wait, one row per run of same-stream lines, and writes the rest when the
attempt ends, however it ends (success, failure, timeout, cancellation). Lines past
``cap_bytes`` are dropped, and everything after them: the stored transcript is the attempt's
beginning, then one note saying how much was not stored. Invariant: no line reaches the store
before :func:`ironflow.secrets.redact` has seen it; the debug turns a verbose step's result
carries (the same tool inputs and results) are redacted alike (:func:`redacted_turns`). Writing is
best effort: lines a failing store refuses are lost (a warning says how many); the step is not
failed for them.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import Final

from ironflow import errors, secrets
from ironflow.engine import model
from ironflow.engine.store import Store
from ironflow.provider import LogSink
from ironflow.results import AgentResult

__all__ = [
    "CHUNK_BYTES",
    "DEFAULT_CAP_BYTES",
    "FLUSH_BYTES",
    "StepTranscript",
    "chunk_lines",
    "dropped_note",
    "ending_note",
    "redacted_turns",
]

log = logging.getLogger("ironflow.engine")

#: Most transcript bytes one attempt of a step stores (the runner's ``transcript_cap_bytes``).
DEFAULT_CAP_BYTES: Final = 4 << 20
#: Bytes waiting that make the flusher write before its interval is up.
FLUSH_BYTES: Final = 64 << 10
#: Most bytes of one stored chunk (a longer single line is a chunk of its own).
CHUNK_BYTES: Final = 256 << 10
#: Longest error line an ending note keeps.
_NOTE_CHARS: Final = 500

#: One buffered line: its stream, its redacted text, when it arrived.
Line = tuple[model.TranscriptStream, str, float]


# --- pure parts ----------------------------------------------------------------------------


def chunk_lines(lines: Sequence[Line], max_bytes: int = CHUNK_BYTES) -> list[Line]:
    """Consecutive lines of one stream joined by newlines, each join at most ``max_bytes``; a
    chunk is stamped with its first line's time."""
    out: list[Line] = []
    size = 0
    for stream, text, at in lines:
        length = len(text.encode()) + 1
        if out and out[-1][0] is stream and size + length <= max_bytes:
            out[-1] = (stream, f"{out[-1][1]}\n{text}", out[-1][2])
            size += length
        else:
            out.append((stream, text, at))
            size = length
    return out


def _size(count: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} B"


def dropped_note(cap_bytes: int, lines: int, size: int) -> str:
    """The note that ends a capped transcript.

    >>> dropped_note(4 << 20, 3, 5 << 20)
    'transcript cap of 4.0 MiB reached: 3 more lines (5.0 MiB) not stored'
    """
    more = f"{lines} more line{'s' * (lines != 1)}"
    return f"transcript cap of {_size(cap_bytes)} reached: {more} ({_size(size)}) not stored"


def ending_note(attempt: int, exc: BaseException | None) -> str | None:
    """The note an attempt's end adds: how it failed or that it was cancelled; None on success.

    >>> ending_note(2, errors.AgentTimeout(60))
    'attempt 2 failed: AgentTimeout: agent timed out after 60s'
    """
    if exc is None:
        return None
    if isinstance(exc, asyncio.CancelledError):
        return f"attempt {attempt} cancelled"
    message = (exc.message if isinstance(exc, errors.IronflowError) else str(exc)).strip()
    said = f": {errors.truncate(message.splitlines()[0], _NOTE_CHARS)}" if message else ""
    return f"attempt {attempt} failed: {type(exc).__name__}{said}"


def redacted_turns(result: AgentResult, known: Iterable[str] = ()) -> AgentResult:
    """``result`` with its debug turns redacted as its transcript is: they hold the same tool inputs
    and results. The answer itself (``value``) is the workflow's and stays as it is."""
    if not result.debug_messages:
        return result
    data = model.result_to_dict(dataclasses.replace(result, workspace=None))
    try:
        data["debug_messages"] = json.loads(secrets.redact(json.dumps(data["debug_messages"]), known))
    except json.JSONDecodeError:  # a known value that cut a JSON escape in two: keep no turns, not a secret
        return dataclasses.replace(result, debug_messages=None)
    return dataclasses.replace(result, debug_messages=model.result_from_dict(data).debug_messages)


def _error_output(exc: BaseException) -> str:
    """The output an error carries (``ProcessFailed.stderr``, a timed-out command's stderr), or ``""``."""
    carried = getattr(exc, "stderr", None)
    if isinstance(carried, bytes):
        return carried.decode(errors="replace")
    return carried if isinstance(carried, str) else ""


# --- the sink --------------------------------------------------------------------------------


#: A provider's streams as a transcript keeps them (anything else is the agent's stdout).
_STREAMS: Final = {"stderr": model.TranscriptStream.STDERR, "ironflow": model.TranscriptStream.IRONFLOW}


class StepTranscript:
    """The sink of one attempt of one step; use it as ``async with`` around ``provider.run``.

    ``secrets`` are values to redact besides the credential shapes (the attempt's account
    credential); ``forward`` also gets every line, as it arrived (the runner's own sink).
    """

    def __init__(
        self,
        store: Store,
        *,
        run_id: str,
        position: int,
        step: str,
        attempt: int,
        cap_bytes: int = DEFAULT_CAP_BYTES,
        secrets: Iterable[str] = (),
        forward: LogSink | None = None,
        flush_every_s: float = 0.5,
    ) -> None:
        self._store = store
        self.run_id, self.position, self.step, self.attempt = run_id, position, step, attempt
        self._cap = cap_bytes
        self._secrets = tuple(secrets)
        self._forward = forward
        self._flush_every_s = flush_every_s
        self._pending: list[Line] = []
        self._pending_bytes = 0
        self._kept_bytes = 0
        self._dropped_lines = 0
        self._dropped_bytes = 0
        self._received = 0
        self._wake = asyncio.Event()
        self._closing = False
        self._flusher: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"StepTranscript(run={self.run_id!r}, step={self.step!r}, attempt={self.attempt})"

    def log(self, stream: str, line: str) -> None:
        """A line from the provider: kept (redacted) while the cap allows."""
        if self._forward is not None:
            self._forward.log(stream, line)
        self._received += 1
        kind = _STREAMS.get(stream, model.TranscriptStream.STDOUT)
        self._keep(kind, line)

    def _keep(self, stream: model.TranscriptStream, line: str) -> None:
        text = secrets.redact(line, self._secrets)
        size = len(text.encode()) + 1
        if self._dropped_lines or self._kept_bytes + size > self._cap:
            self._dropped_lines += 1
            self._dropped_bytes += size
            return
        self._kept_bytes += size
        self._buffer(stream, text)

    def _buffer(self, stream: model.TranscriptStream, text: str) -> None:
        self._pending.append((stream, text, time.time()))
        self._pending_bytes += len(text) + 1
        if self._pending_bytes >= FLUSH_BYTES:
            self._wake.set()

    def _note(self, text: str) -> None:
        """An engine note: redacted like any line, never dropped by the cap (it is one short line)."""
        self._buffer(model.TranscriptStream.IRONFLOW, secrets.redact(text, self._secrets))

    def _finish(self, exc: BaseException | None) -> None:
        """What the attempt's end adds: the error's output when the provider streamed nothing (it
        failed before its process wrote, or it does not stream), the cap's note, the ending note."""
        if exc is not None and self._received == 0:
            for line in _error_output(exc).splitlines():
                self._keep(model.TranscriptStream.STDERR, line)
        if self._dropped_lines:
            self._note(dropped_note(self._cap, self._dropped_lines, self._dropped_bytes))
        ending = ending_note(self.attempt, exc)
        if ending is not None:
            self._note(ending)

    async def _write(self) -> None:
        batch, self._pending, self._pending_bytes = self._pending, [], 0
        if not batch:
            return
        chunks = [
            model.TranscriptChunk(self.run_id, self.position, self.step, self.attempt, stream, text, at)
            for stream, text, at in chunk_lines(batch)
        ]
        try:
            await self._store.append_transcript(chunks)
        except Exception as exc:  # best effort: the step goes on without these lines
            log.warning("%d transcript lines of step %r in run %s not stored: %s", len(batch), self.step, self.run_id,
                        exc)  # fmt: skip

    async def _flush_loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._flush_every_s)
            self._wake.clear()
            closing = self._closing
            await self._write()
            if closing:
                return

    async def __aenter__(self) -> StepTranscript:
        self._flusher = asyncio.create_task(self._flush_loop(), name=f"ironflow-transcript-{self.step}")
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._finish(exc)
        self._closing = True
        self._wake.set()
        if self._flusher is not None:
            # Shielded: cancelled again while waiting, the last write still happens, in its task.
            await asyncio.shield(self._flusher)
