"""The ``served`` fixture: a real ``ironflow sandbox serve`` (:mod:`tests.sessions.integration.serving`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.sessions.integration.serving import TOKEN, Served, cli_env, start_serve


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
