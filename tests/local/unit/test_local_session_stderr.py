"""A session's stderr lines: an over-long one is dropped, the reading goes on (a command that
reaches the runtime's stderr under gVisor must not end its session by writing a long line)."""

from __future__ import annotations

import asyncio

from ironflow.local.sessions import starter


async def test_a_line_past_the_limit_is_dropped_and_the_next_one_read() -> None:
    stream = asyncio.StreamReader(limit=1024)
    stream.feed_data(b"x" * 200_000 + b"\nironflow-runtime: ready\n")
    stream.feed_eof()
    lines = []
    while line := await starter.stderr_line(stream):
        lines.append(line)
    assert lines[-1] == b"ironflow-runtime: ready\n"
    assert all(len(line) <= 1024 for line in lines)


async def test_the_end_of_the_stream_is_an_empty_line() -> None:
    stream = asyncio.StreamReader(limit=1024)
    stream.feed_data(b"a\n")
    stream.feed_eof()
    assert await starter.stderr_line(stream) == b"a\n"
    assert await starter.stderr_line(stream) == b""
