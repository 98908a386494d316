"""The ``served`` fixture: a real ``ironflow sandbox serve`` (:mod:`tests.sessions.integration.serving`); ``state``:
a short private directory for sessions' state (a unix socket path holds at most 107 bytes);
``local_sessions``: local sessions under bubblewrap, and under gVisor where runsc is installed."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from tests.sessions.integration.serving import TOKEN, Served, cli_env, start_serve

from ironflow.local import LocalSandboxProvider
from ironflow.local.sessions.local_sessions import LocalSessions


@pytest.fixture
def served() -> Iterator[Served]:
    """A server with the token in its environment (its sessions' sockets in the system temp dir)."""
    server = start_serve(cli_env(IRONFLOW_SANDBOX_TOKEN=TOKEN))
    try:
        yield server
    finally:
        server.stop()
        for stream in (server.proc.stdout, server.proc.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture
def state() -> Iterator[Path]:
    """A short directory: a unix socket path holds at most 107 bytes."""
    short = Path(tempfile.mkdtemp(prefix="ifs-test-"))
    try:
        yield short
    finally:
        shutil.rmtree(short, ignore_errors=True)


@pytest.fixture(
    params=[
        "bwrap",
        pytest.param(
            "gvisor",
            marks=[pytest.mark.gvisor, pytest.mark.skipif(shutil.which("runsc") is None, reason="runsc not installed")],
        ),
    ]
)
async def local_sessions(request: pytest.FixtureRequest, state: Path) -> AsyncIterator[LocalSessions]:
    async with LocalSessions(LocalSandboxProvider(isolation=request.param), state_dir=str(state)) as opened:
        yield opened
