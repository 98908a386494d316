"""A sandbox's teardown reaps it even when what it wrote was never read. asyncio's ``wait()``
returns only once the pipes are closed too, and a pipe whose unread output filled the reader's
buffer is paused: it never reaches its end unless someone reads it (the teardown does, and drops it)."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

from tests.fakes.unclosed import unclosed_after_collect

from ironflow.local.sandbox import docker_engine, launch

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


async def test_a_container_client_past_its_limit_is_reaped_though_a_child_holds_its_pipe(tmp_path: Path) -> None:
    """The Docker engine's own calls (``inspect``, ``rm``) end at their limit: the killed client is
    reaped within the teardown's grace even while something it started still holds its stdout open
    (before, the call waited for that pipe's end: as long as the child lived)."""
    held = tmp_path / "child.pid"
    client = tmp_path / "docker"
    client.write_text(f"#!/bin/sh\nsleep 60 &\necho $! > {held}\nexec sleep 60\n")
    client.chmod(0o755)
    engine = docker_engine.DockerEngine(str(client), {"PATH": "/usr/bin:/bin"})
    try:
        async with asyncio.timeout(launch.KILL_GRACE_S + 10):  # before: the child's 60 s
            assert await engine._output("inspect", "x", limit_s=0.5) == (-1, "")
    finally:
        os.kill(int(held.read_text()), signal.SIGKILL)
    assert unclosed_after_collect() == []
