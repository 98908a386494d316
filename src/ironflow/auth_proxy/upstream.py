"""The relay's HTTP/1.1 client: one request in one write, the answer handed back as it arrives.

aiohttp's ``ClientSession`` cost more CPU per relayed request than all of the proxy's
own policy (a request object, a payload object, a write task, timers and trace hooks
each time). A relay needs less: write the request, parse the status line and headers,
and pass the body on as it comes, framed by ``Content-Length``, ``chunked`` or the
connection's end.

Strict by design, since a pooled connection must never carry one answer into another
request: a head with a bare CR or LF, a control byte, a folded line, a bad name, both
``Transfer-Encoding`` and ``Content-Length``, two different lengths, or a coding other
than ``chunked`` is refused (:class:`UpstreamError`) and its connection closed. A
connection goes back to its pool only after an answer whose end was seen exactly.

Never follows a redirect, never decompresses. Timeouts: the connect, and a read silent
for ``idle_timeout_s`` (no total: a live stream may run long). Errors carry fixed texts,
never a URL, a header or a body.
"""

from __future__ import annotations

import asyncio
import re
import socket
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, cast
from urllib.parse import urlsplit

__all__ = ["Upstream", "UpstreamError", "UpstreamPool", "UpstreamResponse"]

#: Largest response head read (aiohttp's own limits allow about as much).
_MAX_HEAD: Final = 64 * 1024
_MAX_CHUNK_LINE: Final = 4096
#: Buffered answer bytes at which reading from the upstream pauses (the pod reads slower).
_HIGH_WATER: Final = 1 << 20
#: An idle pooled connection older than this is closed (the far end may be about to).
_KEEPALIVE_S: Final = 15.0
#: Base URLs kept parsed (one per proxied-secret host in use, plus the API's).
_MAX_PARSED: Final = 1024
_BODY_METHODS: Final = frozenset({"POST", "PUT", "PATCH"})
_STATUS_LINE: Final = re.compile(rb"HTTP/1\.([01]) ([1-9][0-9][0-9])(?: [^\r\n]*)?")
#: Header lines: a token name, a colon, a value without CR or LF (no folding, no space before the colon).
_FIELDS: Final = re.compile(rb"(?:[!#$%&'*+.^_`|~0-9A-Za-z-]+:[^\r\n]*\r\n)*")
_FIELD: Final = re.compile(r"([^:]+):[ \t]*(.*?)[ \t]*\r\n")
_FRAMING: Final = frozenset({"content-length", "transfer-encoding", "connection"})
#: Any control byte but HT, CR and LF (those two are checked to come only as CRLF).
_CONTROL: Final = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_CHUNK_SIZE: Final = re.compile(rb"([0-9A-Fa-f]{1,15})[ \t]*(?:;[^\r\n]*)?")


class UpstreamError(Exception):
    """The upstream was unreachable, broke HTTP/1.1 framing, or fell silent; the text is safe to log."""


@dataclass(frozen=True)
class Upstream:
    """Where a base URL points: the pool key, plus the path prefix put before each target."""

    tls: bool
    host: str
    port: int
    host_header: str
    prefix: str

    @classmethod
    def parse(cls, base_url: str) -> Upstream:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("an upstream must be an http(s) URL with a host")
        tls = parts.scheme == "https"
        default = 443 if tls else 80
        port = parts.port or default
        shown = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
        host_header = shown if port == default else f"{shown}:{port}"
        return cls(tls, parts.hostname, port, host_header, parts.path.rstrip("/"))


class _Connection(asyncio.Protocol):
    """One upstream connection: a byte buffer, one waiting reader, a lazily re-armed idle timer."""

    def __init__(self, loop: asyncio.AbstractEventLoop, idle_timeout_s: float) -> None:
        self._loop = loop
        self._idle_timeout_s = idle_timeout_s
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.eof = False
        self.idle_since = 0.0
        self._waiter: asyncio.Future[None] | None = None
        self._drain: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._last_activity = 0.0
        self._paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses
        sock = self.transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self.buffer = self.buffer + data if self.buffer else data
        self._last_activity = self._loop.time()
        if len(self.buffer) > _HIGH_WATER and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self.eof = True
        self._wake()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.eof = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._wake()
        self.resume_writing()  # a writer waiting to drain learns of the end from its next read

    def pause_writing(self) -> None:
        self._drain = self._loop.create_future()

    def resume_writing(self) -> None:
        if self._drain is not None and not self._drain.done():
            self._drain.set_result(None)
        self._drain = None

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def take(self, count: int | None = None) -> bytes:
        """Up to ``count`` buffered bytes (all of them by default), resuming a paused read."""
        if count is None or count >= len(self.buffer):
            data, self.buffer = self.buffer, b""
        else:
            data, self.buffer = self.buffer[:count], self.buffer[count:]
        if self._paused and len(self.buffer) < _HIGH_WATER // 2 and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return data

    async def wait(self) -> None:
        """Until more bytes (or the end) arrive; :class:`UpstreamError` after ``idle_timeout_s`` of silence."""
        if self.eof:
            raise UpstreamError("the upstream closed the connection")
        waiter = self._waiter = self._loop.create_future()
        self._last_activity = now = self._loop.time()
        if self._timer is None:
            self._timer = self._loop.call_at(now + self._idle_timeout_s, self._check_idle)
        try:
            await waiter
        finally:
            self._waiter = None

    def _check_idle(self) -> None:
        self._timer = None
        if self._waiter is None or self._waiter.done():
            return
        deadline = self._last_activity + self._idle_timeout_s
        if self._loop.time() >= deadline:
            self._waiter.set_exception(UpstreamError("the upstream fell silent"))
        else:
            self._timer = self._loop.call_at(deadline, self._check_idle)

    async def send(self, data: bytes, body: bytes) -> None:
        assert self.transport is not None
        if body and len(body) > 65_536:
            self.transport.write(data)
            self.transport.write(body)
        else:
            self.transport.write(data + body if body else data)
        if self._drain is not None:
            await asyncio.shield(self._drain)

    def close(self) -> None:
        self.eof = True
        if self.transport is not None:
            self.transport.close()


class UpstreamResponse:
    """An answer's status and headers; :meth:`read` its body piece by piece, then :meth:`release`."""

    def __init__(self, pool: UpstreamPool, upstream: Upstream, conn: _Connection, status: int) -> None:
        self.status = status
        self.headers: list[tuple[str, str]] = []
        #: The whole body has been read (its framing says where it ends).
        self.done = False
        self._pool = pool
        self._upstream = upstream
        self._conn: _Connection | None = conn
        self._keep_alive = True
        self._remaining = -1  # bytes left: -1 read until close, -2 chunked
        self._chunk_left = 0  # chunked: payload bytes left in the current chunk (-1: its CRLF)

    async def read(self) -> bytes:
        """The next piece of the body, ``b""`` at its end; :class:`UpstreamError` if it breaks off."""
        conn = self._conn
        if conn is None:
            return b""
        while not self.done:
            if self._remaining == -2:
                data = self._dechunk()
            elif conn.buffer:
                data = conn.take(self._remaining if self._remaining >= 0 else None)
                if self._remaining >= 0:
                    self._remaining -= len(data)
                    self.done = self._remaining == 0
            else:
                data = b""
            if data or self.done:
                return data
            if conn.eof and self._remaining == -1:
                self.done = True
                self._keep_alive = False
                return b""
            await conn.wait()
        return b""

    def _dechunk(self) -> bytes:
        """Every whole piece of chunked payload already buffered (framing bytes dropped)."""
        conn = self._conn
        assert conn is not None
        pieces: list[bytes] = []
        while conn.buffer:
            if self._chunk_left > 0:
                piece = conn.take(self._chunk_left)
                self._chunk_left -= len(piece)
                pieces.append(piece)
                if self._chunk_left == 0:
                    self._chunk_left = -1
                continue
            line_end = conn.buffer.find(b"\r\n")
            if line_end < 0:
                if len(conn.buffer) > _MAX_CHUNK_LINE:
                    raise UpstreamError("the upstream sent a malformed chunk")
                break
            line = conn.take(line_end + 2)[:-2]
            if self._chunk_left == -1:  # the CRLF after a chunk's payload
                if line:
                    raise UpstreamError("the upstream sent a malformed chunk")
                self._chunk_left = 0
                continue
            if self._chunk_left == -3:  # trailer section: lines until an empty one
                if not line:
                    self.done = True
                    break
                continue
            size = _CHUNK_SIZE.fullmatch(line)
            if size is None:
                raise UpstreamError("the upstream sent a malformed chunk")
            self._chunk_left = int(size.group(1), 16) or -3
        return b"".join(pieces) if len(pieces) != 1 else pieces[0]

    def release(self) -> None:
        """Hand the connection back when its answer ended cleanly, else close it (idempotent)."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self.done and self._keep_alive and not conn.buffer and not conn.eof:
            self._pool.put_back(self._upstream, conn)
        else:
            conn.close()


class UpstreamPool:
    """Kept-alive connections per upstream (host, port, TLS), reused newest first."""

    def __init__(self, *, connect_timeout_s: float, idle_timeout_s: float) -> None:
        self.connect_timeout_s = connect_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self._idle: dict[Upstream, list[_Connection]] = {}
        self._parsed: dict[str, Upstream] = {}
        self._tls: ssl.SSLContext | None = None
        self._sweeper: asyncio.TimerHandle | None = None

    def upstream(self, base_url: str) -> Upstream:
        """The parsed base URL (parsed once per distinct base)."""
        found = self._parsed.get(base_url)
        if found is None:
            if len(self._parsed) >= _MAX_PARSED:
                self._parsed.clear()
            found = self._parsed[base_url] = Upstream.parse(base_url)
        return found

    async def request(
        self, method: str, base_url: str, target: str, headers: Sequence[tuple[str, str]], body: bytes
    ) -> UpstreamResponse:
        """Send one request and read its answer's head; :class:`UpstreamError` when that fails."""
        upstream = self.upstream(base_url)
        head = _request_head(method, upstream, upstream.prefix + target, headers, body)
        conn = self._reused(upstream) or await self._connect(upstream)
        try:
            await conn.send(head, body)
            return await self._read_head(upstream, conn, method)
        except BaseException:
            conn.close()
            raise

    def _reused(self, upstream: Upstream) -> _Connection | None:
        idle = self._idle.get(upstream)
        now = asyncio.get_running_loop().time()
        while idle:
            conn = idle.pop()
            if not conn.eof and not conn.buffer and now - conn.idle_since < _KEEPALIVE_S:
                return conn
            conn.close()
        return None

    async def _connect(self, upstream: Upstream) -> _Connection:
        loop = asyncio.get_running_loop()
        tls: ssl.SSLContext | None = None
        if upstream.tls:
            tls = self._tls = self._tls or ssl.create_default_context()
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                _, conn = await loop.create_connection(
                    lambda: _Connection(loop, self.idle_timeout_s),
                    upstream.host,
                    upstream.port,
                    ssl=tls,
                    server_hostname=upstream.host if tls else None,
                )
        except (OSError, TimeoutError) as exc:
            raise UpstreamError("the upstream is unreachable") from exc
        return conn

    async def _read_head(self, upstream: Upstream, conn: _Connection, method: str) -> UpstreamResponse:
        while True:
            end = conn.buffer.find(b"\r\n\r\n")
            while end < 0:
                if len(conn.buffer) > _MAX_HEAD:
                    raise UpstreamError("the upstream sent a response head too large")
                await conn.wait()
                end = conn.buffer.find(b"\r\n\r\n")
            response = _parse_head(self, upstream, conn, conn.take(end + 4)[:-2], method)
            if response is not None:
                return response

    def put_back(self, upstream: Upstream, conn: _Connection) -> None:
        loop = asyncio.get_running_loop()
        conn.idle_since = loop.time()
        self._idle.setdefault(upstream, []).append(conn)
        if self._sweeper is None:
            self._sweeper = loop.call_later(_KEEPALIVE_S, self._sweep)

    def _sweep(self) -> None:
        """Close connections idle past the keep-alive, while any stay pooled."""
        self._sweeper = None
        now = asyncio.get_running_loop().time()
        for upstream, idle in list(self._idle.items()):
            keep = [c for c in idle if not c.eof and now - c.idle_since < _KEEPALIVE_S]
            for conn in idle:
                if conn not in keep:
                    conn.close()
            if keep:
                self._idle[upstream] = keep
            else:
                del self._idle[upstream]
        if self._idle:
            self._sweeper = asyncio.get_running_loop().call_later(_KEEPALIVE_S, self._sweep)

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()


def _request_head(
    method: str, upstream: Upstream, target: str, headers: Sequence[tuple[str, str]], body: bytes
) -> bytes:
    """The request line and headers as bytes; ``ValueError`` if a name or value holds CR or LF."""
    lines = [f"{method} {target} HTTP/1.1\r\n", f"Host: {upstream.host_header}\r\n"]
    lines += [f"{name}: {value}\r\n" for name, value in headers]
    if body or method in _BODY_METHODS:
        lines.append(f"Content-Length: {len(body)}\r\n")
    lines.append("\r\n")
    text = "".join(lines)
    if text.count("\n") != len(lines) or text.count("\r") != len(lines):
        raise UpstreamError("a request header holds a line break")
    try:
        return text.encode()
    except UnicodeEncodeError as exc:
        raise UpstreamError("a request header cannot be encoded") from exc


def _parse_head(
    pool: UpstreamPool, upstream: Upstream, conn: _Connection, head: bytes, method: str
) -> UpstreamResponse | None:
    """The answer a head (each line ending CRLF) announces, with its body framing; ``None`` for a 1xx."""
    pairs = head.count(b"\r\n")
    if head.count(b"\r") != pairs or head.count(b"\n") != pairs or _CONTROL.search(head):
        raise UpstreamError("the upstream sent a malformed response head")
    status_line, _, block = head.partition(b"\r\n")
    matched = _STATUS_LINE.fullmatch(status_line)
    if matched is None:
        raise UpstreamError("the upstream sent a malformed status line")
    status = int(matched.group(2))
    if 100 <= status < 200:
        if status == 101:
            raise UpstreamError("the upstream switched protocols")
        return None
    response = UpstreamResponse(pool, upstream, conn, status)
    length, chunked, close = _read_headers(block, response.headers)
    response._keep_alive = matched.group(1) == b"1" and not close
    if method == "HEAD" or status in (204, 304):
        response._remaining = 0
    elif chunked:
        response._remaining = -2
    elif length is not None:
        response._remaining = length
    else:
        response._keep_alive = False  # the body ends with the connection
    response.done = response._remaining == 0
    return response


def _read_headers(block: bytes, into: list[tuple[str, str]]) -> tuple[int | None, bool, bool]:
    """Append each header of ``block`` (lines ending CRLF) to ``into``; the body length,
    whether chunked, whether ``Connection: close``. Two regular expressions do the
    parsing; only the three framing headers are looked at one by one."""
    if not _FIELDS.fullmatch(block):
        raise UpstreamError("the upstream sent a malformed header")
    fields = _FIELD.findall(block.decode("utf-8", "surrogateescape"))
    into += fields
    lengths: set[int] = set()
    chunked = close = False
    for name, value in fields:
        low = name.lower()
        if low not in _FRAMING:
            continue
        if low == "content-length":
            if not (value.isascii() and value.isdigit()) or len(value) > 18:
                raise UpstreamError("the upstream sent a malformed content-length")
            lengths.add(int(value))
        elif low == "transfer-encoding":
            if value.lower() != "chunked" or chunked:
                raise UpstreamError("the upstream sent a transfer coding the proxy does not relay")
            chunked = True
        elif "close" in value.lower():
            close = True
    if (chunked and lengths) or len(lengths) > 1:
        raise UpstreamError("the upstream sent conflicting body lengths")
    return (lengths.pop() if lengths else None), chunked, close
