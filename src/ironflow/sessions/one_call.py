"""One command in a session of an ``ironflow sandbox serve``, blocking, on one connection: what
``ironflow sandbox exec`` does, without an event loop.

A command typed at a shell pays for its client's start-up every time: asyncio (with ssl) costs
more than the runtime's whole answer to ``true``, and :mod:`~ironflow.sessions.remote` loads a
session's every value. So this client writes one streamed ``POST /ironflow/v1/commands`` over a
plain socket (the server routes it by ``X-Sandbox-ID``), reads the reply with
:class:`~ironflow.sessions.replies.ReplyParser`, and hands each piece of output on as it arrives.
Ctrl-C kills the command (by the id the stream's first line names) before it leaves: a command
never outlives its caller. An ``https://`` server is reached with the standard library's default
TLS context (the system's trust, as aiohttp's default), loaded for it alone. The token is a header
value only: never in a message or a repr.
"""

from __future__ import annotations

import json
import socket
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from typing import Final

from ironflow import errors
from ironflow.secrets import Secret
from ironflow.sessions import replies
from ironflow.sessions.ids import SessionNotFound

__all__ = ["run"]

_COMMANDS: Final = "/ironflow/v1/commands"
_CHUNK: Final = 65536
#: Seconds a connect may take (the server answers at once or not at all).
_CONNECT_TIMEOUT_S: Final = 30.0

#: Where a piece of output goes: ``(stream, text)``, stream "stdout" or "stderr".
OnOutput = Callable[[str, str], object]


class _Call:
    """One request on its own connection; the reply read as it arrives."""

    def __init__(self, server: str, headers: Mapping[str, str]) -> None:
        parts = urllib.parse.urlsplit(server)
        self._tls = parts.scheme == "https"
        self._address = (parts.hostname or "", parts.port or (443 if self._tls else 80))
        self._prefix = parts.path.rstrip("/")
        self._name = f"the sandbox server at {server}"
        self._headers = replies.header_lines(*self._address, headers)

    def __repr__(self) -> str:
        return "_Call()"  # never the headers: they hold the token

    def send(self, method: str, target: str, doc: object) -> tuple[socket.socket, replies.ReplyParser, list[bytes]]:
        """Send the request; the socket, the parser with the reply's head read, and the body read so far.

        Raises: SandboxError (unreachable, or no HTTP), and the error of an answer other than 2xx
        (:func:`~ironflow.sessions.replies.refusal`)."""
        body = json.dumps(doc).encode()
        head = f"{method} {self._prefix}{target} HTTP/1.1\r\nContent-Type: application/json\r\n"
        head += f"Content-Length: {len(body)}\r\nConnection: close\r\n"
        try:
            sock = socket.create_connection(self._address, timeout=_CONNECT_TIMEOUT_S)
            if self._tls:
                import ssl  # an https server's alone

                sock = ssl.create_default_context().wrap_socket(sock, server_hostname=self._address[0])
        except OSError as exc:
            raise errors.SandboxError(f"{self._name} could not be reached: {type(exc).__name__}: {exc}") from None
        try:
            sock.settimeout(None)  # a command runs as long as it runs; its own --timeout ends it
            sock.sendall(head.encode("latin-1") + self._headers + b"\r\n" + body)
            parser = replies.ReplyParser()
            pieces: list[bytes] = []
            while parser.status is None:
                pieces += parser.feed(self.read(sock))
            if parser.status >= 300:
                while not parser.done and sum(map(len, pieces)) < replies.MAX_ERROR_BYTES:
                    pieces += parser.feed(self.read(sock))
                text = b"".join(pieces)[: replies.MAX_ERROR_BYTES].decode(errors="replace")[:500]
                raise replies.refusal(parser.status, text, self._name)
        except BaseException:
            sock.close()
            raise
        return sock, parser, pieces

    def read(self, sock: socket.socket) -> bytes:
        try:
            data = sock.recv(_CHUNK)
        except OSError as exc:
            raise errors.SandboxError(f"{self._name} broke off its answer: {type(exc).__name__}") from None
        if not data:
            raise errors.SandboxError(f"{self._name} broke off its answer: the connection closed")
        return data


def run(
    server: str,
    token: Secret,
    session_id: str,
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    timeout: float | None = None,
    on_output: OnOutput,
) -> tuple[int, bool]:
    """Run ``argv`` in the session to its end, each piece of output to ``on_output`` as it comes;
    its exit code and whether its ``timeout`` ended it.

    Raises:
        SessionNotFound: the server has no such open session. ConfigError: the server refused the
        request or the token. SandboxError: the server or the session failed, or sent no event
        stream. KeyboardInterrupt: after the command was killed.
    """
    call = _Call(server, {"Authorization": f"Bearer {token.reveal()}", "X-Sandbox-ID": session_id})
    spec = {"argv": list(argv), "env": dict(env or {}), "cwd": cwd, "timeout_seconds": timeout, "stdin": None}
    try:
        sock, parser, pieces = call.send("POST", _COMMANDS, {**spec, "background": False})
    except SessionNotFound:
        raise SessionNotFound(f"no open sandbox session '{session_id}'") from None
    command_id: str | None = None
    try:
        lines = replies.LineSplitter(replies.MAX_EVENT_LINE_BYTES)
        while True:
            for piece in pieces:
                for line in lines.feed(piece):
                    event = _event(line)
                    if event is None:
                        command_id = command_id or _command_id(line)
                        continue
                    kind, value, timed_out = event
                    if kind == "exit":
                        return int(value), timed_out
                    on_output(kind, str(value))
            if parser.done:
                raise errors.SandboxError("the command's stream ended without its exit")
            pieces = parser.feed(call.read(sock))
    except KeyboardInterrupt:
        if command_id is not None:
            _kill(call, command_id)
        raise
    finally:
        sock.close()


def _command_id(line: bytes) -> str | None:
    """The id a line that is no event names (the stream's first: its kill names it), if any."""
    value = json.loads(line).get("id")  # an object: command_event read it already
    return value if isinstance(value, str) else None


def _event(line: bytes) -> replies.Event | None:
    try:
        return replies.command_event(line)
    except (ValueError, TypeError, OverflowError) as exc:
        raise errors.SandboxError(f"the sandbox sent a malformed command event: {type(exc).__name__}") from None


def _kill(call: _Call, command_id: str) -> None:
    """Kill the command on a connection of its own; a failure here leaves the first error standing."""
    try:
        sock, _, _ = call.send("POST", f"{_COMMANDS}/{urllib.parse.quote(command_id, safe='')}/kill", {})
        sock.close()
    except (errors.IronflowError, OSError):
        pass
