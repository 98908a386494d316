"""The egress proxy's lookup and connect deadlines: a silent resolver costs the client one
``connect_timeout_s`` and a 502, and a closing listener ends a waiting lookup (cancelled, never
answered as a timeout)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Sequence

from ironflow import egress
from ironflow.auth_proxy import AdminClient, AuthProxyConfig, Credential, run_auth_proxy
from ironflow.auth_proxy.app import RunningProxy
from ironflow.secrets import Secret

ADMIN = "admin-key-" + "d" * 40
CREDENTIAL = Credential("api_key", Secret("sk-ant-api03-" + "d" * 20))
TIMEOUT_S = 0.5


class Silent:
    """A resolver that never answers; it records how each lookup ended."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.endings: list[str] = []

    async def resolve(self, host: str, port: int) -> Sequence[egress.IPAddress]:
        self.started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.endings.append("cancelled")
            raise
        raise AssertionError("unreachable")


@contextlib.asynccontextmanager
async def _proxy(resolver: Silent) -> AsyncIterator[tuple[RunningProxy, str]]:
    config = AuthProxyConfig(
        admin_key=Secret(ADMIN),
        upstream="http://127.0.0.1:9",
        egress_host="127.0.0.1",
        egress_port=0,
        connect_timeout_s=TIMEOUT_S,
    )
    async with run_auth_proxy(config, egress_resolver=resolver) as running, AdminClient(running.url, ADMIN) as admin:
        policy = egress.EgressPolicy(allow=(egress.parse_allow_host("silent.example:443"),))
        issued = await admin.issue("run-1", "build", int(time.time()) + 600, credential=CREDENTIAL, egress=policy)
        yield running, issued.token.reveal()


async def _connect(running: RunningProxy, token: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    assert running.egress is not None
    host, _, port = running.egress.removeprefix("http://").rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(f"CONNECT silent.example:443 HTTP/1.1\r\nProxy-Authorization: Bearer {token}\r\n\r\n".encode())
    return reader, writer


async def test_a_lookup_that_never_answers_is_a_502_after_the_connect_timeout() -> None:
    resolver = Silent()
    async with _proxy(resolver) as (running, token):
        reader, writer = await _connect(running, token)
        started = time.monotonic()
        answer = await asyncio.wait_for(reader.read(), 10)
        waited = time.monotonic() - started
        writer.close()
    assert answer.startswith(b"HTTP/1.1 502 "), answer
    assert b"cannot resolve silent.example" in answer
    assert waited >= TIMEOUT_S * 0.9
    assert resolver.endings == ["cancelled"]


async def test_a_closing_listener_cancels_a_waiting_lookup_without_answering() -> None:
    resolver = Silent()
    async with _proxy(resolver) as (running, token):
        reader, writer = await _connect(running, token)
        await asyncio.wait_for(resolver.started.wait(), 10)
    # the proxy is closed now, well before the lookup's deadline
    answer = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    assert answer == b""  # closed, not answered "cannot resolve"
    assert resolver.endings == ["cancelled"]
