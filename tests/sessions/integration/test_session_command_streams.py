"""A session command's round trip: its pipes in the runtime's one poll loop (stdin fed while stdout
and stderr are drained, neither stream reordered, under real bubblewrap), and the client's kept
connection to the runtime's socket."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from tests.sessions.unit.runtime_files import runtime_module

from ironflow.local import LocalSandboxProvider
from ironflow.local.sessions.local_sessions import LocalSessions
from ironflow.sessions import AsyncSandbox, OpenOptions, Output
from ironflow.sessions.client import AsyncCommands, RuntimeClient

#: Well past a pipe's 64 KiB on every one of the three pipes.
LINES = 30000
STDIN_BYTES = 4 << 20
#: Part of stdin read, then output (both pipes fill while stdin waits, part-read), then the rest
#: of stdin counted, then output again: a feeder that blocks on stdin would stall all three.
HEAD_BYTES = 100000
SCRIPT = (
    f"head -c {HEAD_BYTES} >/dev/null; "
    'i=1; while [ $i -le {n} ]; do echo "o$i"; echo "e$i" >&2; i=$((i+1)); done; '
    "wc -c; "
    'while [ $i -le {m} ]; do echo "o$i"; echo "e$i" >&2; i=$((i+1)); done'
)


@pytest.fixture
async def sandbox(state: Path) -> AsyncIterator[AsyncSandbox]:
    async with (
        LocalSessions(LocalSandboxProvider(), state_dir=str(state)) as sessions,
        await sessions.open(OpenOptions(ttl=120)) as opened,
    ):
        yield opened


@pytest.mark.bwrap
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")
async def test_large_interleaved_output_with_stdin_fed_at_once_neither_stalls_nor_reorders(
    sandbox: AsyncSandbox,
) -> None:
    half = LINES // 2
    script = SCRIPT.format(n=half, m=LINES)
    result = await sandbox.commands.run(["sh", "-c", script], stdin=b"x" * STDIN_BYTES, timeout=120, keep_bytes=1 << 20)
    assert (result.exit_code, result.timed_out) == (0, False), result.stderr[-300:]
    numbers = [f"o{i}" for i in range(1, LINES + 1)]
    assert result.stdout.splitlines() == [*numbers[:half], str(STDIN_BYTES - HEAD_BYTES), *numbers[half:]]
    assert result.stderr.splitlines() == [f"e{i}" for i in range(1, LINES + 1)]


@pytest.mark.bwrap
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")
async def test_a_stream_of_pieces_keeps_each_stream_in_order(sandbox: AsyncSandbox) -> None:
    """The events as they come (not the collected result): each stream's pieces, joined, in order."""
    script = SCRIPT.format(n=LINES // 2, m=LINES)
    pieces: dict[str, list[str]] = {"stdout": [], "stderr": []}
    events = sandbox.commands.stream(["sh", "-c", script], stdin=b"y" * STDIN_BYTES, timeout=120)
    async for event in events:
        if isinstance(event, Output):
            pieces[event.stream].append(event.text)
    assert "".join(pieces["stderr"]).splitlines() == [f"e{i}" for i in range(1, LINES + 1)]
    assert "".join(pieces["stdout"]).splitlines()[LINES // 2] == str(STDIN_BYTES - HEAD_BYTES)


@pytest.fixture
async def closing_runtime(tmp_path: Path) -> AsyncIterator[tuple[str, list[int]]]:
    """A fake runtime that drops an idle kept connection after 50 ms; the number of connections it saw."""
    seen: list[int] = []

    async def command(request: web.Request) -> web.StreamResponse:
        assert request.transport is not None
        seen.append(id(request.transport))
        response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await response.prepare(request)
        await response.write(b'{"id": "c1", "pid": 7}\n{"stdout": "hi"}\n{"exit_code": 0}\n')
        return response

    app = web.Application()
    app.router.add_post("/ironflow/v1/commands", command)
    runner = web.AppRunner(app, keepalive_timeout=0.05)
    await runner.setup()
    path = str(tmp_path / "rt.sock")
    await web.UnixSite(runner, path).start()
    try:
        yield path, seen
    finally:
        await runner.cleanup()


async def test_commands_reuse_a_kept_connection_and_not_one_the_runtime_closed(
    closing_runtime: tuple[str, list[int]],
) -> None:
    path, seen = closing_runtime
    client = RuntimeClient(headers={"Authorization": "Bearer t"}, unix_path=path)
    try:
        first = [await AsyncCommands(client).run(["x"]) for _ in range(2)]
        await asyncio.sleep(0.3)  # the runtime drops the idle connection
        later = await AsyncCommands(client).run(["x"])
    finally:
        await client.aclose()
    assert [r.stdout for r in [*first, later]] == ["hi"] * 3
    assert seen[0] == seen[1] != seen[2]


@pytest.mark.parametrize("pidfds", [True, False], ids=["pidfd", "no-pidfd"])
def test_a_command_that_closes_its_output_and_reads_stdin_still_ends(
    pidfds: bool, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Its exit is seen from a pidfd, or (a kernel without them, gVisor's say) by polling for it."""
    if not pidfds:
        monkeypatch.delattr(os, "pidfd_open", raising=False)
    script = "echo before; exec >&- 2>&-; sleep 0.3; wc -c > count"
    with runtime_module("streams") as streams, runtime_module("popen") as popen:
        command = streams.Command(
            ["sh", "-c", script], dict(os.environ), str(tmp_path), b"z" * 300000, 1 << 20, popen.spawn
        )
        assert (command.pidfd is not None) == pidfds
        events = list(command.follow(30, drive=True))
    assert events == [{"stdout": "before\n"}, {"exit_code": 0, "timed_out": False}]
    assert (tmp_path / "count").read_text().strip() == "300000"
