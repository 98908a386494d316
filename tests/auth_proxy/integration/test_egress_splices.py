"""CONNECT tunnels carried by ``auth_proxy.splices`` on real sockets: flow control both ways, the
byte budget inside a tunnel, a ClientHello pipelined with the head, and a closing listener.

The client sends a real first flight (OpenSSL's ClientHello, no server name: the tunnels go to
127.0.0.1), then raw bytes; the origin counts what it reads and streams what it is asked for.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

from ironflow import egress
from ironflow.auth_proxy import AdminClient, AuthProxyConfig, Credential, run_auth_proxy
from ironflow.auth_proxy.app import RunningProxy
from ironflow.secrets import Secret
from ironflow.testing import tls_hello

ADMIN = "admin-key-" + "s" * 40
MIB = 1 << 20


HELLO = tls_hello.client_hello()


class _Origin:
    """Reads the ClientHello and ``upload`` bytes after it, then sends ``download`` bytes and closes."""

    def __init__(self, *, upload: int, download: int) -> None:
        self.upload, self.download = upload, download
        self.received = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            await reader.readexactly(len(HELLO))
            while self.received < self.upload and (data := await reader.read(MIB)):
                self.received += len(data)
            chunk = b"d" * MIB
            for at in range(0, self.download, MIB):
                writer.write(chunk[: min(MIB, self.download - at)])
                await writer.drain()
        writer.close()


@contextlib.asynccontextmanager
async def _setup(origin: _Origin, *, max_bytes: int | None = None) -> AsyncIterator[tuple[RunningProxy, str, int]]:
    server = await asyncio.start_server(origin.serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    config = AuthProxyConfig(
        admin_key=Secret(ADMIN), upstream="http://127.0.0.1:9", egress_host="127.0.0.1", egress_port=0,
        egress_max_bytes=max_bytes,
    )  # fmt: skip
    try:
        async with run_auth_proxy(config) as running, AdminClient(running.url, ADMIN) as admin:
            policy = egress.EgressPolicy(allow=(egress.parse_allow_host(f"127.0.0.1:{port}"),))
            credential = Credential("api_key", Secret("sk-ant-api03-" + "k" * 20))
            issued = await admin.issue("run-s", "tunnel", int(time.time()) + 600, credential=credential, egress=policy)
            yield running, issued.token.reveal(), port
    finally:
        server.close()


async def _open(proxy: RunningProxy) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    assert proxy.egress is not None
    host, _, port = proxy.egress.removeprefix("http://").rpartition(":")
    return await asyncio.open_connection(host, int(port))


def _connect(port: int, token: str) -> bytes:
    return f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nProxy-Authorization: Bearer {token}\r\n\r\n".encode()


async def test_megabytes_go_both_ways_whole_past_a_client_that_reads_slowly() -> None:
    origin = _Origin(upload=8 * MIB, download=16 * MIB)
    async with _setup(origin) as (proxy, token, port):
        reader, writer = await _open(proxy)
        writer.write(_connect(port, token) + HELLO)  # the ClientHello right behind the head
        assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200 ")
        block = b"u" * MIB
        for _ in range(8):
            writer.write(block)
            await writer.drain()
        received = 0
        while data := await asyncio.wait_for(reader.read(64 * 1024), 10):
            received += len(data)
            if received < 2 * MIB:
                await asyncio.sleep(0.01)  # slow at first: the proxy must hold the origin back, not buffer it all
        writer.close()
    assert origin.received == 8 * MIB
    assert received == 16 * MIB


async def test_a_tunnel_past_its_byte_budget_is_cut_and_the_next_refused() -> None:
    origin = _Origin(upload=0, download=4 * MIB)
    async with _setup(origin, max_bytes=MIB) as (proxy, token, port):
        reader, writer = await _open(proxy)
        writer.write(_connect(port, token))
        assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200 ")
        writer.write(HELLO)
        received = 0
        with contextlib.suppress(ConnectionError):
            while data := await asyncio.wait_for(reader.read(MIB), 10):
                received += len(data)
        writer.close()
        reader, writer = await _open(proxy)
        writer.write(_connect(port, token))
        refused = await asyncio.wait_for(reader.read(), 10)
        writer.close()
    assert received <= MIB
    assert refused.startswith(b"HTTP/1.1 429 ")


async def test_a_head_still_coming_is_closed_with_the_listener() -> None:
    origin = _Origin(upload=0, download=0)
    async with contextlib.AsyncExitStack() as stack:
        proxy, _, port = await stack.enter_async_context(_setup(origin))
        reader, writer = await _open(proxy)
        writer.write(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n".encode())  # and no more
        await asyncio.sleep(0.1)
    started = time.monotonic()
    with contextlib.suppress(ConnectionError):
        assert await asyncio.wait_for(reader.read(), 5) == b""
    writer.close()
    assert time.monotonic() - started < 2  # not the 10 s header timeout
