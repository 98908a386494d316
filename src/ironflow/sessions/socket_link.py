"""Requests over kept-open connections to a session runtime's unix socket or a plain-HTTP sandbox
server, HTTP/1.1 by hand.

A command in an open local session should cost little more than the command: aiohttp's
request machinery costs more than the runtime's whole answer to ``true``, and importing it
more than a whole ``ironflow sandbox exec`` should. So the client writes the request itself on
a connection it keeps (one per concurrent stream, a few kept idle) and reads the reply with
:class:`~ironflow.sessions.replies.ReplyParser`. It never puts the headers (they hold the
token) in a message or a repr, and never reuses a connection whose answer it did not read to the end.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Mapping
from typing import Final

from ironflow.sessions import replies

__all__ = ["LinkError", "Refused", "SocketLink"]

_CHUNK: Final = 65536
#: Idle connections kept for the next stream; more are closed once their answer is read.
_KEEP_IDLE: Final = 8
#: Seconds a TCP connect may take (a unix socket answers at once or not at all).
_CONNECT_TIMEOUT_S: Final = 30.0


class LinkError(Exception):
    """The socket failed: ``reached`` says whether the request got an answer's first byte."""

    def __init__(self, cause: BaseException, *, reached: bool) -> None:
        super().__init__(type(cause).__name__)
        self.cause, self.reached = cause, reached


class Refused(Exception):
    """An answer other than 2xx: its status and (bounded) body, for the caller to map."""

    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(status)
        self.status, self.body = status, body


_Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class _ClosedAtEof(asyncio.StreamReaderProtocol):
    """A connection closed as soon as the runtime ends it (what it sent is still read): a kept one,
    in a handle left open after its session was closed, holds no socket."""

    def eof_received(self) -> bool:
        super().eof_received()
        return False  # HTTP/1.1 writes nothing after the peer's end: no half-open connection


class SocketLink:
    """Requests to one unix socket (``path``), or to ``host:port`` over TCP (``path`` a pair), each on
    a connection of its own, kept open for the next."""

    def __init__(self, path: str | tuple[str, int], headers: Mapping[str, str]) -> None:
        host, port = ("sandbox", None) if isinstance(path, str) else path
        self._path, self._headers = path, replies.header_lines(host, port, headers)
        self._idle: list[_Conn] = []

    def __repr__(self) -> str:
        return "SocketLink()"  # never the headers: they hold the token

    async def aclose(self) -> None:
        idle, self._idle = self._idle, []
        for _, writer in idle:
            writer.close()

    async def _connect(self) -> _Conn:
        while self._idle:
            reader, writer = self._idle.pop()
            if not reader.at_eof() and not writer.is_closing():  # the runtime may have ended it
                return reader, writer
            writer.close()
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=_CHUNK, loop=loop)
        protocol = _ClosedAtEof(reader, loop=loop)
        try:
            if isinstance(self._path, str):
                transport, _ = await loop.create_unix_connection(lambda: protocol, self._path)
            else:
                made = loop.create_connection(lambda: protocol, *self._path)
                transport, _ = await asyncio.wait_for(made, _CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError) as exc:
            raise LinkError(exc, reached=False) from None
        return reader, asyncio.StreamWriter(transport, protocol, reader, loop)

    async def stream(self, method: str, target: str, body: bytes, *, content_type: str) -> AsyncGenerator[bytes, None]:
        """The answer's body in pieces as they arrive.

        Raises:
            Refused: the runtime answered other than 2xx. LinkError: the socket failed.
            SandboxError: the answer is not HTTP, or not bounded as the runtime's are.
        """
        reader, writer = await self._connect()
        done, reached = False, False
        try:
            head = f"{method} {target} HTTP/1.1\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
            writer.write(head.encode("latin-1") + self._headers + b"\r\n" + body)
            parser = replies.ReplyParser()
            pieces: list[bytes] = []
            while parser.status is None:
                pieces += parser.feed(await _read(reader))
                reached = True
            if parser.status >= 300:
                size = sum(map(len, pieces))
                while not parser.done and size < replies.MAX_ERROR_BYTES:
                    pieces += (more := parser.feed(await _read(reader)))
                    size += sum(map(len, more))
                raise Refused(parser.status, b"".join(pieces)[: replies.MAX_ERROR_BYTES])
            for piece in pieces:
                yield piece
            while not parser.done:
                for piece in parser.feed(await _read(reader)):
                    yield piece
            done = parser.headers.get("connection", "").lower() != "close"
        except OSError as exc:  # a reply that is not HTTP is the parser's SandboxError, as it is
            raise LinkError(exc, reached=reached) from None
        finally:
            if done and len(self._idle) < _KEEP_IDLE:
                self._idle.append((reader, writer))
            else:  # an answer not read to its end: the connection cannot carry another
                with contextlib.suppress(RuntimeError):  # a loop already closed
                    writer.close()


async def _read(reader: asyncio.StreamReader) -> bytes:
    data = await reader.read(_CHUNK)
    if not data:
        raise ConnectionResetError("the runtime closed the connection")
    return data
