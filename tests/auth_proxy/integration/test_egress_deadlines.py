"""The egress proxy's deadlines: a silent resolver costs the client one ``connect_timeout_s`` and a
502, a closing listener ends a waiting lookup (cancelled, never answered as a timeout), and a
tunnel's one timer is first the ClientHello's deadline, then its idle limit, whichever of the two
is shorter."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Sequence

from tests.fakes.loopback import serving

from ironflow import egress
from ironflow.auth_proxy import AdminClient, AuthProxyConfig, Credential, run_auth_proxy
from ironflow.auth_proxy.app import RunningProxy
from ironflow.secrets import Secret
from ironflow.testing import tls_hello

ADMIN = "admin-key-" + "d" * 40
CREDENTIAL = Credential("api_key", Secret("sk-ant-api03-" + "d" * 20))
TIMEOUT_S = 0.5
HELLO = tls_hello.client_hello()  # no server name: the tunnels go to 127.0.0.1


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
async def _proxy(
    allow: str, *, resolver: Silent | None = None, hello_s: float = 10.0, idle_s: float = 300.0
) -> AsyncIterator[tuple[RunningProxy, str]]:
    config = AuthProxyConfig(
        admin_key=Secret(ADMIN),
        upstream="http://127.0.0.1:9",
        egress_host="127.0.0.1",
        egress_port=0,
        connect_timeout_s=TIMEOUT_S,
        header_timeout_s=hello_s,
        egress_idle_timeout_s=idle_s,
    )
    async with run_auth_proxy(config, egress_resolver=resolver) as running, AdminClient(running.url, ADMIN) as admin:
        policy = egress.EgressPolicy(allow=(egress.parse_allow_host(allow),))
        issued = await admin.issue("run-1", "build", int(time.time()) + 600, credential=CREDENTIAL, egress=policy)
        yield running, issued.token.reveal()


@contextlib.asynccontextmanager
async def _echo() -> AsyncIterator[int]:
    """A plain TCP origin that sends back what it reads (a tunnel's bytes need no TLS to move)."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                writer.write(data)
        writer.close()

    async with serving(serve) as port:
        yield port


async def _connect(running: RunningProxy, token: str, target: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    assert running.egress is not None
    host, _, port = running.egress.removeprefix("http://").rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(f"CONNECT {target} HTTP/1.1\r\nProxy-Authorization: Bearer {token}\r\n\r\n".encode())
    return reader, writer


async def _closed_after(reader: asyncio.StreamReader, started: float) -> float:
    """Seconds from ``started`` until the proxy closed the tunnel (everything read on the way dropped)."""
    with contextlib.suppress(ConnectionError):
        while await asyncio.wait_for(reader.read(65536), 10):
            pass
    return time.monotonic() - started


async def test_a_lookup_that_never_answers_is_a_502_after_the_connect_timeout() -> None:
    resolver = Silent()
    async with _proxy("silent.example:443", resolver=resolver) as (running, token):
        reader, writer = await _connect(running, token, "silent.example:443")
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
    async with _proxy("silent.example:443", resolver=resolver) as (running, token):
        reader, writer = await _connect(running, token, "silent.example:443")
        await asyncio.wait_for(resolver.started.wait(), 10)
    # the proxy is closed now, well before the lookup's deadline
    answer = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    assert answer == b""  # closed, not answered "cannot resolve"
    assert resolver.endings == ["cancelled"]


async def test_a_tunnel_without_a_client_hello_is_closed_at_its_deadline() -> None:
    async with _echo() as port, _proxy(f"127.0.0.1:{port}", hello_s=0.4) as (running, token):
        reader, writer = await _connect(running, token, f"127.0.0.1:{port}")
        assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200 ")
        waited = await _closed_after(reader, time.monotonic())
        writer.close()
    assert 0.3 <= waited < 5


async def test_an_idle_limit_longer_than_the_hello_deadline_is_kept_and_moving_bytes_reset_it() -> None:
    """The timer fires at the hello's deadline (0.2 s) first: a relaying tunnel is set again, not cut,
    and is cut only once nothing moved for the idle limit (0.8 s)."""
    async with _echo() as port, _proxy(f"127.0.0.1:{port}", hello_s=0.2, idle_s=0.8) as (running, token):
        reader, writer = await _connect(running, token, f"127.0.0.1:{port}")
        await reader.readuntil(b"\r\n\r\n")
        writer.write(HELLO)
        assert await reader.readexactly(len(HELLO)) == HELLO  # the origin echoes it: relaying
        for _ in range(6):  # 1.5 s of traffic, a chunk every 0.25 s: never idle for 0.8 s
            await asyncio.sleep(0.25)
            writer.write(b"ping")
            assert await asyncio.wait_for(reader.readexactly(4), 5) == b"ping"
        waited = await _closed_after(reader, time.monotonic())
        writer.close()
    assert 0.7 <= waited < 5
