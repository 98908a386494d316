"""The relay's own HTTP/1.1 client against a raw socket server that answers scripted bytes.

What the relay tests cannot show through aiohttp's well-behaved test upstreams: the body
framings, connection reuse only after a cleanly ended answer, and the refusal of every
head a pooled connection could be desynchronised by.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ironflow.auth_proxy.upstream import UpstreamError, UpstreamPool, UpstreamResponse
from ironflow.testing import _kubeenv_pki as pki


@dataclass
class Scripted:
    """A server answering each request read with the next scripted reply (raw bytes)."""

    replies: list[bytes]
    requests: list[bytes] = field(default_factory=list)
    connections: int = 0
    url: str = ""

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while self.replies:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    (
                        int(line.split(b":")[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length")
                    ),
                    0,
                )
                self.requests.append(head + await reader.readexactly(length))
                reply = self.replies.pop(0)
                writer.write(reply)
                await writer.drain()
                if b"connection: close" in reply.lower():
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@contextlib.asynccontextmanager
async def _scripted(
    *replies: bytes, tls: ssl.SSLContext | None = None, host: str = "127.0.0.1", name: str = "127.0.0.1"
) -> AsyncIterator[Scripted]:
    script = Scripted(list(replies))
    server = await asyncio.start_server(script.serve, host, 0, ssl=tls)
    script.url = f"{'https' if tls else 'http'}://{name}:{server.sockets[0].getsockname()[1]}"
    try:
        yield script
    finally:
        server.close()


def _pool() -> UpstreamPool:
    return UpstreamPool(connect_timeout_s=2.0, idle_timeout_s=2.0)


async def _body(response: UpstreamResponse) -> bytes:
    parts = []
    while chunk := await response.read():
        parts.append(chunk)
    response.release()
    return b"".join(parts)


OK = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Kept: yes\r\n\r\nhello"


async def test_a_cleanly_ended_answer_leaves_its_connection_for_the_next_request() -> None:
    async with _scripted(OK, OK) as server:
        pool = _pool()
        for _ in range(2):
            response = await pool.request("POST", server.url, "/v1/messages?beta=true", [("x-a", "1")], b"{}")
            assert (response.status, await _body(response)) == (200, b"hello")
            assert ("X-Kept", "yes") in response.headers
        await pool.close()
    assert server.connections == 1
    first = server.requests[0]
    assert first.startswith(b"POST /v1/messages?beta=true HTTP/1.1\r\nHost: 127.0.0.1:")
    assert b"\r\nx-a: 1\r\nContent-Length: 2\r\n\r\n{}" in first


async def test_chunked_bodies_are_unframed_and_trailers_dropped() -> None:
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5;ext=1\r\nevent\r\n0C\r\n: one\n\ndata:\r\n0\r\nX-Trailer: t\r\n\r\n"
    )
    async with _scripted(chunked, OK) as server:
        pool = _pool()
        response = await pool.request("GET", server.url, "/v1/models", [], b"")
        assert await _body(response) == b"event: one\n\ndata:"
        assert await _body(await pool.request("GET", server.url, "/v1/models", [], b"")) == b"hello"
        await pool.close()
    assert server.connections == 1
    assert b"Content-Length" not in server.requests[0]  # a GET without a body declares none


async def test_informational_answers_are_skipped_and_bodiless_answers_end_at_once() -> None:
    async with _scripted(
        b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n",
    ) as server:
        pool = _pool()
        response = await pool.request("DELETE", server.url, "/x", [], b"")
        assert (response.status, response.done) == (204, True)
        response.release()
        head = await pool.request("HEAD", server.url, "/x", [], b"")
        assert (head.status, head.done, await _body(head)) == (200, True, b"")
        await pool.close()
    assert server.connections == 1


async def test_an_answer_ending_with_its_connection_is_read_whole_and_not_reused() -> None:
    async with _scripted(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end", OK) as server:
        pool = _pool()
        assert await _body(await pool.request("GET", server.url, "/x", [], b"")) == b"until the end"
        assert await _body(await pool.request("GET", server.url, "/x", [], b"")) == b"hello"
        await pool.close()
    assert server.connections == 2


@pytest.mark.parametrize(
    "head",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length : 5\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX-Folded: a\r\n b\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX-Bad: a\rb\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX-Bad: a\x00b\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/2 200 OK\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n",
    ],
)
async def test_a_head_that_could_desynchronise_the_connection_is_refused(head: bytes) -> None:
    async with _scripted(head + b"hello", OK) as server:
        pool = _pool()
        with pytest.raises(UpstreamError):
            await pool.request("GET", server.url, "/x", [], b"")
        assert await _body(await pool.request("GET", server.url, "/x", [], b"")) == b"hello"
        await pool.close()
    assert server.connections == 2  # the refused answer's connection was closed, not pooled


@pytest.mark.parametrize("chunk", [b"0x5\r\nhello\r\n0\r\n\r\n", b"5\r\nhelloX\r\n0\r\n\r\n", b"-1\r\n\r\n"])
async def test_a_malformed_chunk_breaks_the_body_off(chunk: bytes) -> None:
    async with _scripted(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunk) as server:
        pool = _pool()
        response = await pool.request("GET", server.url, "/x", [], b"")
        with pytest.raises(UpstreamError):
            await _body(response)
        response.release()
        await pool.close()


async def test_a_body_cut_short_raises_and_a_header_with_a_line_break_is_never_sent() -> None:
    async with _scripted(b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\nConnection: close\r\n\r\nshort") as server:
        pool = _pool()
        response = await pool.request("GET", server.url, "/x", [], b"")
        assert await response.read() == b"short"
        with pytest.raises(UpstreamError):
            await response.read()
        response.release()
        with pytest.raises(UpstreamError):
            await pool.request("GET", server.url, "/x", [("x-a", "1\r\nx-injected: 1")], b"")
        await pool.close()
    assert len(server.requests) == 1


async def test_an_unreachable_upstream_is_an_upstream_error() -> None:
    with pytest.raises(UpstreamError):
        await _pool().request("GET", "http://127.0.0.1:9", "/x", [], b"")


@pytest.fixture
def serving_tls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ssl.SSLContext:
    """A server context whose certificate (localhost, 127.0.0.1) is signed by a CA that the
    default trust store of this test holds (``SSL_CERT_FILE``, as OpenSSL reads it)."""
    keys = pki.new_pki()
    (tmp_path / "ca.pem").write_bytes(keys.ca.cert_pem)
    (tmp_path / "cert.pem").write_bytes(keys.admin.cert_pem)
    (tmp_path / "key.pem").write_bytes(keys.admin.key_pem)
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    return context


async def test_an_https_upstream_is_verified_by_name_and_its_connection_reused(serving_tls: ssl.SSLContext) -> None:
    async with _scripted(OK, OK, tls=serving_tls, name="localhost") as script:
        pool = _pool()
        for _ in range(2):
            response = await pool.request("POST", script.url, "/v1/messages", [("content-type", "text/plain")], b"hi")
            assert (response.status, await _body(response)) == (200, b"hello")
    assert script.connections == 1
    assert script.requests[0].startswith(b"POST /v1/messages HTTP/1.1\r\n")
    assert b"\r\nHost: localhost:" in script.requests[0]


async def test_an_https_upstream_with_an_untrusted_certificate_gets_no_request(
    serving_tls: ssl.SSLContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SSL_CERT_FILE")
    async with _scripted(OK, tls=serving_tls) as script:
        with pytest.raises(UpstreamError):
            await _pool().request("POST", script.url, "/v1/messages", [], b"secret body")
    assert script.requests == []


async def test_an_https_upstream_whose_certificate_names_another_host_gets_no_request(
    serving_tls: ssl.SSLContext,
) -> None:
    """Trusted CA, wrong name: 127.0.0.2 is loopback too, but the certificate does not name it."""
    async with _scripted(OK, tls=serving_tls, host="127.0.0.2", name="127.0.0.2") as script:
        with pytest.raises(UpstreamError):
            await _pool().request("POST", script.url, "/v1/messages", [], b"secret body")
    assert script.requests == []
