"""A session's command output cannot grow the host: the client keeps a bounded head and tail of
each stream and says how much it cut, whatever the session's side sends (issue 34, H4). The
runtime in the sandbox is not trusted for this: a command that took it over answers for it.

The flood runs in a subprocess that does only that, so its peak RSS is the client's own.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from ironflow import errors
from ironflow.local.sandbox_provider import LocalSandboxProvider
from ironflow.local.sessions.local_sessions import LocalSessions
from ironflow.sessions import OpenOptions
from ironflow.sessions.client import AsyncCommands, RuntimeClient

#: The defaults, as documented (not imported: the test must run, and fail, on code without them).
KEEP = 1 << 20
_PEAK_KIB = 200 * 1024

#: A fake runtime on a unix socket that answers a command with ``size`` bytes of stdout in 64 KiB
#: events, then its exit; the client in the same process collects them.
_FLOOD = textwrap.dedent(
    """
    import asyncio, json, resource, sys, tempfile, os
    from aiohttp import web
    from ironflow.sessions.client import AsyncCommands, RuntimeClient

    size = int(sys.argv[1])
    line = (json.dumps({"stdout": "a" * 65536}) + "\\n").encode()

    async def command(request):
        response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await response.prepare(request)
        await response.write(b'{"id": "c1", "pid": 7}\\n' + json.dumps({"stdout": "HEAD"}).encode() + b"\\n")
        for _ in range(size // 65536):
            await response.write(line)
        await response.write(json.dumps({"stdout": "TAIL"}).encode() + b'\\n{"exit_code": 0}\\n')
        return response

    async def main():
        app = web.Application()
        app.router.add_post("/ironflow/v1/commands", command)
        runner = web.AppRunner(app)
        await runner.setup()
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "rt.sock")
            await web.UnixSite(runner, path).start()
            client = RuntimeClient(headers={}, unix_path=path)
            try:
                result = await AsyncCommands(client).run(["x"])
            finally:
                await client.aclose()
                await runner.cleanup()
        print(json.dumps({
            "peak_kib": int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM:")).split()[1]),
            "stdout_bytes": getattr(result, "stdout_bytes", None),
            "stdout_cut": getattr(result, "stdout_cut", None),
            "length": len(result.stdout),
            "head": result.stdout[:8],
            "tail": result.stdout[-8:],
        }))

    asyncio.run(main())
    """
)


def test_a_session_that_sends_gigabytes_keeps_the_client_small() -> None:
    size = 2 << 30
    done = subprocess.run(
        [sys.executable, "-c", _FLOOD, str(size)], capture_output=True, text=True, timeout=300, env=dict(os.environ)
    )
    assert done.returncode == 0, f"the client died ({done.returncode}): {done.stderr[-2000:]}"
    found = json.loads(done.stdout)
    assert found["peak_kib"] < _PEAK_KIB, f"the client grew to {found['peak_kib'] // 1024} MiB"
    written = size + len("HEADTAIL")
    assert (found["stdout_bytes"], found["stdout_cut"]) == (written, written - 2 * KEEP)
    assert (found["head"], found["tail"]) == ("HEADaaaa", "aaaaTAIL")
    assert found["length"] < 2 * KEEP + 100


@pytest.fixture
async def endless_line(tmp_path: Path) -> AsyncIterator[str]:
    """A fake runtime whose command stream is one line that never ends (until 64 MiB)."""

    async def command(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await response.prepare(request)
        await response.write(b'{"stdout": "')
        for _ in range(1024):
            await response.write(b"a" * 65536)
        return response

    app = web.Application()
    app.router.add_post("/ironflow/v1/commands", command)
    runner = web.AppRunner(app)
    await runner.setup()
    path = str(tmp_path / "rt.sock")
    await web.UnixSite(runner, path).start()
    try:
        yield path
    finally:
        await runner.cleanup()


async def test_an_event_line_that_never_ends_is_refused_in_one_line(endless_line: str) -> None:
    client = RuntimeClient(headers={}, unix_path=endless_line)
    try:
        with pytest.raises(errors.SandboxError, match="sent an event line over"):
            await AsyncCommands(client).run(["x"])
    finally:
        await client.aclose()


@pytest.mark.bwrap
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")
async def test_a_session_command_that_floods_stdout_returns_a_cut_result(state: Path) -> None:
    """The runtime keeps 16 MiB of a stream; of that the client keeps its head and tail."""
    async with (
        LocalSessions(LocalSandboxProvider(), state_dir=str(state)) as sessions,
        await sessions.open(OpenOptions(ttl=60)) as sandbox,
    ):
        result = await sandbox.commands.run(["sh", "-c", "printf HEAD; head -c 64M /dev/zero; printf TAIL"])
    assert result.exit_code == 0
    assert result.stdout.startswith("HEAD\0")
    assert result.stdout_bytes > 16 << 20
    assert result.stdout_cut == result.stdout_bytes - 2 * KEEP
    assert f"[ironflow: {result.stdout_cut} bytes of stdout cut here, {result.stdout_bytes} in all]" in result.stdout
    assert len(result.stdout.encode()) < 2 * KEEP + 100
