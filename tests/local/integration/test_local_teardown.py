"""A sandbox's teardown reaps it even when what it wrote was never read. asyncio's ``wait()``
returns only once the pipes are closed too, and a pipe whose unread output filled the reader's
buffer is paused: it never reaches its end unless someone reads it (the teardown does, and drops it)."""

from __future__ import annotations

import asyncio

from tests.fakes.unclosed import unclosed_after_collect

from ironflow.local.sandbox import launch

#: More than the reader's buffer holds before it pauses (2 x 64 KiB), less than that and a pipe (64 KiB).
_UNREAD = 180 * 1024


async def test_a_teardown_reads_past_unread_output_and_closes_the_pipes() -> None:
    proc = await asyncio.create_subprocess_exec(
        "sh",
        "-c",
        f"head -c {_UNREAD} /dev/zero; echo written >&2; exec sleep 60",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    assert proc.stdout is not None
    assert proc.stderr is not None
    assert await proc.stderr.readline() == b"written\n"  # all of it is in the reader's buffer or the pipe
    await launch.teardown(proc, None)
    assert proc.returncode == -9
    assert proc.stdout.at_eof()
    assert proc.stderr.at_eof()
    assert unclosed_after_collect() == []
