"""An HTTP/1.1 request's header lines, its reply read piece by piece as it arrives (and joined up
to a bound), its NDJSON events cut into lines, what a command's event line says, and the error
an answer other than 2xx means (pure).

The client side of a session runtime's answer where no HTTP library reads it: a Kubernetes
session's exec frames (:mod:`ironflow.k8s.sessions.wire`), a local session's kept-open
unix socket (:mod:`ironflow.sessions.socket_link`) and a one-shot call
(:mod:`ironflow.sessions.one_call`). Bytes in, values out: no I/O here.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Final

from ironflow import errors
from ironflow.sessions.ids import SessionNotFound

__all__ = [
    "MAX_ERROR_BYTES",
    "MAX_EVENT_LINE_BYTES",
    "MAX_HEAD_BYTES",
    "LineSplitter",
    "ReplyParser",
    "at_most",
    "command_event",
    "header_lines",
    "refusal",
]

#: A command's event: ``("stdout" | "stderr", text, False)``, or ``("exit", exit code, timed out)``.
Event = tuple[str, str | int, bool]
#: The longest event line a client reads from a session: the runtime sends at most 64 KiB of output
#: per event (JSON-escaped, six times that at worst); anything longer is not the runtime speaking.
MAX_EVENT_LINE_BYTES: Final = 1 << 20
#: The most of an error answer's body read for its message (only its first 500 characters are said).
MAX_ERROR_BYTES: Final = 64 << 10
#: The longest reply head read from a session's side (the runtime's heads are a few hundred bytes).
MAX_HEAD_BYTES: Final = 64 << 10
_MAX_CHUNK_LINE: Final = 4096


def header_lines(host: str, port: int | None, headers: Mapping[str, str]) -> bytes:
    """A request's ``Host`` (an IPv6 address in brackets) and ``headers``, each line CRLF-ended.

    Raises: ConfigError: a value holds a line break (it would start a header, or a request, of its own).

    >>> header_lines("::1", 8080, {"X-Sandbox-ID": "s1"})
    b'Host: [::1]:8080\\r\\nX-Sandbox-ID: s1\\r\\n'
    """
    name = f"[{host}]" if ":" in host else host
    lines = [f"{k}: {v}" for k, v in {"Host": name if port is None else f"{name}:{port}", **headers}.items()]
    if any(c in line for line in lines for c in "\r\n"):
        raise errors.ConfigError("a header holds a line break")
    return ("\r\n".join(lines) + "\r\n").encode("latin-1")


async def at_most(pieces: AsyncIterator[bytes], limit: int, *, cut: bool = False) -> bytes | None:
    """An answer's pieces joined; past ``limit`` bytes None (``cut``: its first ``limit`` bytes),
    read no further: a session's side is not trusted to bound what it sends."""
    parts: list[bytes] = []
    size = 0
    async for piece in pieces:
        parts.append(piece)
        size += len(piece)
        if size > limit:
            return b"".join(parts)[:limit] if cut else None
    return b"".join(parts)


def command_event(line: bytes) -> Event | None:
    """One line of a command's event stream; None for a line that is no output and no end (its
    id). Raises: ValueError (or TypeError, OverflowError): it is not an event; the session's side
    is not trusted, so the caller makes it a SandboxError."""
    doc = json.loads(line)
    if not isinstance(doc, Mapping):
        raise TypeError("not an object")
    if "exit_code" in doc:
        return "exit", int(doc["exit_code"]), bool(doc.get("timed_out"))
    for name in ("stdout", "stderr"):
        if name in doc:
            return name, str(doc[name]), False
    return None


def refusal(status: int, text: str, name: str) -> Exception:
    """The error of an answer other than 2xx from ``name`` (the runtime, or a server), by its status.

    FileNotFoundError: 404 on a path. PermissionError: 403 (the path leaves the workspace).
    SessionNotFound: the server knows no such session. ConfigError: 400, 401, 409, 413.
    SandboxError: anything else.
    """
    try:
        doc = json.loads(text)
        message = str(doc.get("message") or doc.get("detail") or text) if isinstance(doc, dict) else text
    except ValueError:
        message = text
    if status == 404:
        return FileNotFoundError(message)
    if status == 403:
        return PermissionError(message)
    if status == 502 and "Could not connect to the backend sandbox" in message:
        return SessionNotFound(message)
    if status in (400, 409, 413):
        return errors.ConfigError(message)
    if status == 401:
        return errors.ConfigError(f"the sandbox server refused the token: {message}")
    return errors.SandboxError(f"{name} answered {status}: {message}")


class ReplyParser:
    """An HTTP/1.1 reply, fed as it arrives: ``status`` and ``headers`` once the head is in,
    then each :meth:`feed` returns the body's next pieces (Content-Length or chunked);
    ``done`` once the body ended.

    The session's side is not trusted to speak HTTP: a head past :data:`MAX_HEAD_BYTES`, a chunk
    line past 4 KiB, or a status, length or chunk size that is not one is a SandboxError, never
    a buffer that grows or a ValueError from deep inside."""

    def __init__(self) -> None:
        self.status: int | None = None
        self.headers: dict[str, str] = {}
        self.done = False
        self._buf = b""
        self._left = 0
        self._chunked = False
        self._state = "head"

    def feed(self, data: bytes) -> list[bytes]:
        self._buf += data
        out: list[bytes] = []
        while not self.done and self._step(out):
            pass
        if not self.done and len(self._buf) > (MAX_HEAD_BYTES if self._state == "head" else _MAX_CHUNK_LINE):
            raise _malformed(f"a line over {len(self._buf)} bytes long is still open")  # it waits for a line
        return [piece for piece in out if piece]

    def _step(self, out: list[bytes]) -> bool:
        """One step of the reply's grammar; False when it needs more bytes."""
        if self._state == "head":
            end = self._buf.find(b"\r\n\r\n")
            if end < 0:
                return False
            self._head(self._buf[:end].decode("latin-1"))
            self._buf = self._buf[end + 4 :]
            return True
        if self._state == "size":
            end = self._buf.find(b"\r\n")
            if end < 0:
                return False
            self._left = _number(self._buf[:end].split(b";")[0].strip() or b"0", 16, "chunk size")
            self._buf = self._buf[end + 2 :]
            self._state = "data" if self._left else "trailer"
            return True
        if self._state == "trailer":
            end = self._buf.find(b"\r\n")
            if end < 0:
                return False
            self.done = end == 0
            self._buf = self._buf[end + 2 :]
            return True
        if self._state == "crlf":
            if len(self._buf) < 2:
                return False
            self._buf, self._state = self._buf[2:], "size"
            return True
        piece, self._buf = self._buf[: self._left], self._buf[self._left :]
        self._left -= len(piece)
        out.append(piece)
        if self._left == 0:
            if self._chunked:
                self._state = "crlf"
            else:
                self.done = True
        return bool(self._buf) and not self.done

    def _head(self, text: str) -> None:
        status_line, *header_lines = text.split("\r\n")
        version, _, rest = status_line.partition(" ")
        status = _number(rest.partition(" ")[0].encode("latin-1"), 10, "status") if version.startswith("HTTP/1.") else 0
        if not 100 <= status <= 599:
            raise _malformed(f"the status line is {status_line[:40]!r}")
        self.status = status
        for line in header_lines:
            name, _, value = line.partition(":")
            self.headers[name.strip().lower()] = value.strip()
        self._chunked = "chunked" in self.headers.get("transfer-encoding", "").lower()
        if self._chunked:
            self._state = "size"
        else:
            self._left = _number((self.headers.get("content-length") or "0").encode("latin-1"), 10, "length")
            self._state = "data"
            self.done = self._left == 0


def _number(text: bytes, base: int, what: str) -> int:
    """A non-negative number of at most 16 digits (``int`` alone takes signs, spaces and ``_``)."""
    digits = b"0123456789abcdefABCDEF"[: 10 if base == 10 else 22]
    if not text or len(text) > 16 or text.strip(digits):
        raise _malformed(f"the {what} is {text[:20]!r}")
    return int(text, base)


def _malformed(what: str) -> errors.SandboxError:
    return errors.SandboxError(f"the sandbox sent a malformed reply: {what}")


class LineSplitter:
    """Whole non-blank lines out of pieces that cut them anywhere (a command reply's NDJSON events).

    With ``max_line_bytes``, a line still open past that many bytes is a SandboxError: the session's
    side is not trusted to end its lines."""

    def __init__(self, max_line_bytes: int | None = None) -> None:
        self._buf = b""
        self._max = max_line_bytes

    def feed(self, data: bytes) -> list[bytes]:
        self._buf += data
        *lines, self._buf = self._buf.split(b"\n")
        if self._max is not None and len(self._buf) > self._max:
            raise errors.SandboxError(f"the sandbox sent an event line over {self._max} bytes")
        return [line for line in lines if line.strip()]

    def rest(self) -> list[bytes]:
        """The last line, when the stream ended without its line break."""
        rest, self._buf = self._buf, b""
        return [rest] if rest.strip() else []
