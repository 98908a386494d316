"""``sandbox.commands`` and the handle of a running command: run, stream, start, and control.

The commands of a session's runtime (:mod:`ironflow.sandbox_runtime.server`) over a
:class:`~ironflow.sessions.client.RuntimeClient`: to the end, as a stream of events, or in the
background, in a terminal if asked (``pty=True``: one output stream, stdin kept open). A running
command takes stdin writes, signals by name and resizes; its handle is only its id on the
session, so another client (a new ``connect``) finds it again with :meth:`AsyncCommands.connect`.
"""

from __future__ import annotations

import base64
import shlex
import time
import urllib.parse
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, Final, Protocol

from ironflow import errors
from ironflow.captured import DEFAULT_KEEP_BYTES, Captured
from ironflow.sessions.values import CommandEvent, CommandResult, Exit, Output

__all__ = ["DEFAULT_TERMINAL", "AsyncCommands", "Callback", "CommandHandle", "RuntimeCalls"]

Callback = Callable[[str], object]
#: A terminal's size (columns, rows) unless the caller gives one.
DEFAULT_TERMINAL: Final = (80, 24)
_COMMANDS: Final = "/ironflow/v1/commands"


class RuntimeCalls(Protocol):
    """What the commands ask of :class:`~ironflow.sessions.client.RuntimeClient` (which holds them)."""

    async def json(self, method: str, path: str, **kwargs: Any) -> Any: ...

    def events(self, method: str, path: str, spec: Mapping[str, Any] | None = None) -> AsyncIterator[CommandEvent]: ...


def _argv(cmd: str | Sequence[str]) -> list[str]:
    """A string is split as the legacy runtime splits it (no shell); a sequence is the argv."""
    argv = shlex.split(cmd) if isinstance(cmd, str) else list(cmd)
    if not argv:
        raise errors.ConfigError("the command is empty")
    return argv


def _bytes(data: bytes | str) -> bytes:
    return data.encode() if isinstance(data, str) else data


class CommandHandle:
    """A background command: follow its events, wait for its result, kill it; write to its stdin,
    signal it, resize its terminal. Only an id on the session: it outlives the client that made it."""

    def __init__(self, client: RuntimeCalls, command_id: str) -> None:
        self._client, self.id = client, command_id

    def __repr__(self) -> str:
        return f"CommandHandle({self.id!r})"

    def events(self, timeout: float | None = None) -> AsyncIterator[CommandEvent]:
        """Every event from its start (output kept in the session, bounded), then the exit."""
        query = "" if timeout is None else f"?timeout={timeout}"
        return self._client.events("GET", f"{_COMMANDS}/{self.id}{query}")

    async def wait(
        self,
        timeout: float | None = None,  # noqa: ASYNC109 - the command's own limit
        *,
        keep_bytes: int = DEFAULT_KEEP_BYTES,
    ) -> CommandResult:
        """Its result, keeping ``keep_bytes`` of each stream's start and end (the rest counted)."""
        return await _collect(self.events(timeout), keep_bytes=keep_bytes)

    async def kill(self) -> bool:
        """True when it was still running."""
        return bool((await self._client.json("POST", f"{_COMMANDS}/{self.id}/kill"))["killed"])

    async def send_stdin(self, data: bytes | str, *, eof: bool = False) -> int:
        """Write to its stdin (started with ``keep_stdin`` or ``pty``); ``eof`` closes it after. In a
        terminal, bytes are keys: ``"\\x03"`` is Ctrl-C, ``"\\x04"`` Ctrl-D.

        Raises:
            ConfigError: it has ended, its stdin is closed, or it leaves 1 MiB unread too long.
        """
        path = f"{_COMMANDS}/{self.id}/stdin" + ("?eof=1" if eof else "")
        return int((await self._client.json("POST", path, data=_bytes(data)))["written"])

    async def close_stdin(self) -> None:
        """End its stdin (a pipe's EOF; a terminal has none: send ``"\\x04"``)."""
        await self.send_stdin(b"", eof=True)

    async def signal(self, name: str) -> bool:
        """Send a signal by name (``TERM``, ``INT``, ``KILL``, ``HUP``, …) to its process group;
        False when it had ended. Raises: ConfigError: no such signal."""
        doc = await self._client.json("POST", f"{_COMMANDS}/{self.id}/signal", json={"signal": name})
        return bool(doc["sent"])

    async def resize(self, cols: int, rows: int) -> None:
        """A new size of its terminal (the command gets SIGWINCH). Raises: ConfigError: no terminal, or ended."""
        await self._client.json("POST", f"{_COMMANDS}/{self.id}/resize", json={"cols": cols, "rows": rows})


async def _collect(
    events: AsyncIterator[CommandEvent],
    on_stdout: Callback | None = None,
    on_stderr: Callback | None = None,
    *,
    keep_bytes: int = DEFAULT_KEEP_BYTES,
) -> CommandResult:
    """The events into a result: each stream's head and tail kept, the rest only counted, so a
    session that sends gigabytes does not grow the host (the callbacks see every piece)."""
    kept = {name: Captured(name, keep_bytes=keep_bytes) for name in ("stdout", "stderr")}
    end = Exit(-1)
    start = time.monotonic()
    async for event in events:
        if isinstance(event, Output):
            kept[event.stream].feed(event.text.encode())
            callback = on_stdout if event.stream == "stdout" else on_stderr
            if callback is not None:
                callback(event.text)
        else:
            end = event
    out, err = kept["stdout"], kept["stderr"]
    return CommandResult(
        end.exit_code,
        out.value().decode(errors="replace"),
        err.value().decode(errors="replace"),
        duration=time.monotonic() - start,
        timed_out=end.timed_out,
        stdout_bytes=out.total,
        stderr_bytes=err.total,
        stdout_cut=out.cut,
        stderr_cut=err.cut,
    )


def _spec(
    cmd: str | Sequence[str],
    env: Mapping[str, str] | None,
    cwd: str | None,
    timeout: float | None,
    stdin: bytes | str | None,
    background: bool,
    *,
    pty: bool = False,
    size: tuple[int, int] = DEFAULT_TERMINAL,
    keep_stdin: bool = False,
) -> dict[str, Any]:
    """The runtime's JSON of one command (pure)."""
    data = None if stdin is None else _bytes(stdin)
    spec: dict[str, Any] = {
        "argv": _argv(cmd),
        "env": dict(env or {}),
        "cwd": cwd,
        "timeout_seconds": timeout,
        "stdin": None if data is None else base64.b64encode(data).decode(),
        "background": background,
    }
    if pty:
        spec.update(pty=True, cols=size[0], rows=size[1])
    if keep_stdin:
        spec["keep_stdin"] = True
    return spec


class AsyncCommands:
    """``sandbox.commands``: run to the end, stream, or start in the background (in a terminal with
    ``pty=True``, ``cols`` by ``rows``; its output is all ``stdout``)."""

    def __init__(self, client: RuntimeCalls) -> None:
        self._client = client

    def stream(
        self,
        cmd: str | Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
        stdin: bytes | str | None = None,
        pty: bool = False,
        cols: int = DEFAULT_TERMINAL[0],
        rows: int = DEFAULT_TERMINAL[1],
    ) -> AsyncIterator[CommandEvent]:
        """The command's events as they come: :class:`Output` pieces, then one :class:`Exit`."""
        spec = _spec(cmd, env, cwd, timeout, stdin, False, pty=pty, size=(cols, rows))
        return self._client.events("POST", _COMMANDS, spec)

    async def run(
        self,
        cmd: str | Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the command's own limit, enforced in the sandbox
        stdin: bytes | str | None = None,
        on_stdout: Callback | None = None,
        on_stderr: Callback | None = None,
        keep_bytes: int = DEFAULT_KEEP_BYTES,
        pty: bool = False,
        cols: int = DEFAULT_TERMINAL[0],
        rows: int = DEFAULT_TERMINAL[1],
    ) -> CommandResult:
        """Run to the end (``timeout``: seconds, then its process group is killed); a non-zero
        exit is a result. A string is split like a shell would, but no shell runs: pass
        ``["sh", "-c", "…"]`` for one. The result keeps ``keep_bytes`` of each stream's start
        and end; the callbacks see every piece as it comes."""
        events = self.stream(cmd, env=env, cwd=cwd, timeout=timeout, stdin=stdin, pty=pty, cols=cols, rows=rows)
        return await _collect(events, on_stdout, on_stderr, keep_bytes=keep_bytes)

    async def start(
        self,
        cmd: str | Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the command's own limit, enforced in the sandbox
        stdin: bytes | str | None = None,
        pty: bool = False,
        cols: int = DEFAULT_TERMINAL[0],
        rows: int = DEFAULT_TERMINAL[1],
        keep_stdin: bool = False,
    ) -> CommandHandle:
        """Start in the background; the handle waits for it, kills it, and, with ``keep_stdin``
        (or ``pty``), writes to its stdin after ``stdin``."""
        spec = _spec(cmd, env, cwd, timeout, stdin, True, pty=pty, size=(cols, rows), keep_stdin=keep_stdin)
        doc = await self._client.json("POST", _COMMANDS, json=spec)
        return CommandHandle(self._client, str(doc["id"]))

    async def connect(self, command_id: str) -> CommandHandle:
        """The handle of a command started earlier, by this client or another (its id).

        Raises:
            FileNotFoundError: the session has no such command (it never ran, or ended long ago).
        """
        doc = await self._client.json("GET", f"{_COMMANDS}/{urllib.parse.quote(command_id, safe='')}/status")
        return CommandHandle(self._client, str(doc["id"]))
