"""The HTTP body plumbing of the session runtime (:mod:`ironflow.sandbox_runtime.server`).

Standard library only and nothing of ironflow, like the server beside it, which imports
this file by path: a request body read in bounded pieces (Content-Length or chunked), a
chunked response writer, and a streaming multipart/form-data reader. Nothing here buffers
a whole body; and the lingering close of a connection whose request body went unread.
"""

from __future__ import annotations

import contextlib
import socket
import time
import urllib.parse
from typing import BinaryIO

__all__ = ["Body", "Chunked", "HttpError", "Multipart", "linger", "response_head"]

_CHUNK = 65536
_MAX_HEADER_BYTES = 65536
_MAX_JSON_BYTES = 8 << 20
#: How long a connection closed with its request's body unread still takes (and drops) bytes.
_LINGER_S = 5.0
_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 413: "Too Large"}


def response_head(status: int, ctype: str, *, length: int | None, chunked: bool, keep: bool) -> bytes:
    """An answer's status line and headers, framed by Content-Length or chunked."""
    lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}", f"Content-Type: {ctype}"]
    lines.append("Transfer-Encoding: chunked" if chunked else f"Content-Length: {length or 0}")
    lines.append("Connection: keep-alive" if keep else "Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def linger(conn: socket.socket, wfile: BinaryIO, seconds: float = _LINGER_S) -> None:
    """Let the client read an answer sent before its request's body was read (a 413, a 401).

    Closing a socket with bytes still unread resets the connection, and a client still sending
    may then lose the answer for the broken connection. As a web server's lingering close: end
    our side, then read and drop what still comes, for ``seconds`` at most.
    """
    with contextlib.suppress(OSError, ValueError):
        wfile.flush()
        conn.shutdown(socket.SHUT_WR)
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            conn.settimeout(min(left, 1.0))
            if not conn.recv(_CHUNK):
                return


class HttpError(Exception):
    """An answer other than 200: status and the JSON message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


class Body:
    """A request body read in pieces (Content-Length or chunked), never more than ``limit``."""

    def __init__(self, rfile: BinaryIO, headers: dict[str, str], limit: int) -> None:
        self.rfile, self.limit, self.seen = rfile, limit, 0
        self.chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        self.left = 0 if self.chunked else int(headers.get("content-length") or 0)
        self.done = not self.chunked and self.left == 0
        if self.left > limit:
            raise HttpError(413, f"Request body exceeds the limit of {limit} bytes")

    def read(self, n: int = _CHUNK) -> bytes:
        if self.done:
            return b""
        if self.chunked and self.left == 0:
            size = int(self.rfile.readline(1024).split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                    pass
                self.done = True
                return b""
            self.left = size
        data = self.rfile.read(min(n, self.left))
        if not data:
            raise ConnectionError("client went away")
        self.left -= len(data)
        self.seen += len(data)
        if self.seen > self.limit:
            raise HttpError(413, f"Request body exceeds the limit of {self.limit} bytes")
        if self.left == 0:
            if self.chunked:
                self.rfile.readline(8)
            else:
                self.done = True
        return data

    def all(self, limit: int = _MAX_JSON_BYTES) -> bytes:
        """The whole body, for a JSON document: at most ``limit`` bytes in memory."""
        parts, size = [], 0
        while data := self.read():
            size += len(data)
            if size > limit:
                raise HttpError(413, f"Request body exceeds the limit of {limit} bytes")
            parts.append(data)
        return b"".join(parts)


class Chunked:
    """A file-like writer of one chunked response body."""

    def __init__(self, wfile: BinaryIO) -> None:
        self.wfile = wfile

    def write(self, data: bytes) -> int:
        if data:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
        return len(data)

    def end(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


class Multipart:
    """A streaming multipart/form-data reader: part headers, then the part's bytes in pieces."""

    def __init__(self, body: Body, boundary: bytes) -> None:
        self.body, self.delim = body, b"\r\n--" + boundary
        self.buf, self.in_part, self.ended = b"\r\n", False, False

    def _fill(self) -> bool:
        data = self.body.read()
        self.buf += data
        return bool(data)

    def next_part(self) -> tuple[str, str | None] | None:
        """The next part's field name and file name, or None after the last."""
        if self.ended:
            return None
        while (at := self.buf.find(self.delim)) < 0:
            self.buf = self.buf[-len(self.delim) :]  # what may be the start of a delimiter
            if not self._fill():
                return None
        self.buf = self.buf[at + len(self.delim) :]
        while len(self.buf) < 2 and self._fill():
            pass
        if self.buf.startswith(b"--"):
            self.ended = True
            return None
        while b"\r\n\r\n" not in self.buf:
            if len(self.buf) > _MAX_HEADER_BYTES or not self._fill():
                raise HttpError(400, "malformed multipart body")
        raw, self.buf = self.buf.split(b"\r\n\r\n", 1)
        self.in_part = True
        disposition = next(
            (h for h in raw.decode("utf-8").split("\r\n") if h.lower().startswith("content-disposition")), ""
        )
        params: dict[str, str] = {}
        for item in disposition.split(";")[1:]:
            key, _, value = item.strip().partition("=")
            params[key.lower()] = value.strip('"')
        filename = params.get("filename")
        if "filename*" in params:
            filename = urllib.parse.unquote(params["filename*"].split("''", 1)[-1])
        elif filename is not None:
            filename = filename.replace("%22", '"').replace("%0D", "\r").replace("%0A", "\n")
        return params.get("name", ""), filename

    def read(self, n: int = _CHUNK) -> bytes:
        """The current part's next bytes; b"" at its end (the delimiter stays in the buffer)."""
        if not self.in_part:
            return b""
        while self.delim not in self.buf and len(self.buf) < n + len(self.delim):
            if not self._fill():
                raise HttpError(400, "malformed multipart body")
        at = self.buf.find(self.delim)
        if at == 0:
            self.in_part = False
            return b""
        cut = at if at > 0 else len(self.buf) - len(self.delim)
        data, self.buf = self.buf[:cut], self.buf[cut:]
        return data

    def skip(self) -> None:
        while self.read():
            pass

    def skip_rest(self) -> None:
        while self.next_part() is not None:
            self.skip()
        while self.body.read():
            pass
