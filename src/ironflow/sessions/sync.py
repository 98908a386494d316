"""The blocking face of a session: :class:`Sandbox`, the shape of :class:`AsyncSandbox`.

For code without an event loop (as E2B pairs ``Sandbox`` with ``AsyncSandbox``): each
:class:`Sandbox` runs the async handle on an event loop in a private thread and waits for
each call, so the two faces share every line of the wire code. ``with Sandbox.open(...)``
closes the session at the end of the block; ``disconnect()`` leaves it to its TTL. The
session lives in an ``ironflow sandbox serve`` (:class:`~ironflow.sessions.remote.RemoteSessions`).
Callbacks (``on_stdout``) run on that private thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator, Mapping, Sequence
from typing import Any, BinaryIO, TypeVar

from ironflow.captured import DEFAULT_KEEP_BYTES
from ironflow.secrets import Secret
from ironflow.sessions.client import DEFAULT_MAX_TREE_BYTES, AsyncSandbox, Callback, CommandHandle
from ironflow.sessions.commands import DEFAULT_TERMINAL
from ironflow.sessions.remote import RemoteSessions
from ironflow.sessions.untar import DEFAULT_MAX_ENTRIES
from ironflow.sessions.values import (
    CommandEvent,
    CommandResult,
    FileEntry,
    OpenOptions,
    SessionInfo,
    SnapshotInfo,
    WatchEvent,
    legacy_options,
)

__all__ = ["Commands", "Files", "Sandbox", "SyncCommandHandle"]

T = TypeVar("T")


class _Loop:
    """An event loop on a daemon thread; ``run`` waits for one coroutine on it."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="ironflow-sandbox", daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def iterate(self, events: AsyncIterator[T]) -> Iterator[T]:
        """The items of ``events``; left early, its stream is closed (no response left open)."""
        try:
            while True:
                try:
                    yield self.run(_next(events))
                except StopAsyncIteration:
                    return
        finally:
            close = getattr(events, "aclose", None)
            if close is not None:
                self.run(close())

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()


async def _next(events: AsyncIterator[T]) -> T:
    return await events.__anext__()


class SyncCommandHandle:
    """A background command: its events, its result, a kill; stdin writes, signals, resize."""

    def __init__(self, loop: _Loop, handle: CommandHandle) -> None:
        self._loop, self._handle, self.id = loop, handle, handle.id

    def events(self, timeout: float | None = None) -> Iterator[CommandEvent]:
        return self._loop.iterate(self._handle.events(timeout))

    def wait(self, timeout: float | None = None, *, keep_bytes: int = DEFAULT_KEEP_BYTES) -> CommandResult:
        return self._loop.run(self._handle.wait(timeout, keep_bytes=keep_bytes))

    def kill(self) -> bool:
        return self._loop.run(self._handle.kill())

    def send_stdin(self, data: bytes | str, *, eof: bool = False) -> int:
        return self._loop.run(self._handle.send_stdin(data, eof=eof))

    def close_stdin(self) -> None:
        self._loop.run(self._handle.close_stdin())

    def signal(self, name: str) -> bool:
        return self._loop.run(self._handle.signal(name))

    def resize(self, cols: int, rows: int) -> None:
        self._loop.run(self._handle.resize(cols, rows))


class Commands:
    """``sandbox.commands``: as :class:`~ironflow.sessions.client.AsyncCommands`, blocking."""

    def __init__(self, loop: _Loop, handle: AsyncSandbox) -> None:
        self._loop, self._commands = loop, handle.commands

    def run(
        self,
        cmd: str | Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
        stdin: bytes | str | None = None,
        on_stdout: Callback | None = None,
        on_stderr: Callback | None = None,
        keep_bytes: int = DEFAULT_KEEP_BYTES,
        pty: bool = False,
        cols: int = DEFAULT_TERMINAL[0],
        rows: int = DEFAULT_TERMINAL[1],
    ) -> CommandResult:
        coro = self._commands.run(
            cmd,
            env=env,
            cwd=cwd,
            timeout=timeout,
            stdin=stdin,
            on_stdout=on_stdout,
            on_stderr=on_stderr,
            keep_bytes=keep_bytes,
            pty=pty,
            cols=cols,
            rows=rows,
        )
        return self._loop.run(coro)

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
    ) -> Iterator[CommandEvent]:
        events = self._commands.stream(
            cmd, env=env, cwd=cwd, timeout=timeout, stdin=stdin, pty=pty, cols=cols, rows=rows
        )
        return self._loop.iterate(events)

    def start(
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
        keep_stdin: bool = False,
    ) -> SyncCommandHandle:
        coro = self._commands.start(
            cmd, env=env, cwd=cwd, timeout=timeout, stdin=stdin, pty=pty, cols=cols, rows=rows, keep_stdin=keep_stdin
        )
        return SyncCommandHandle(self._loop, self._loop.run(coro))

    def connect(self, command_id: str) -> SyncCommandHandle:
        """The handle of a command started earlier, by this client or another. Raises: FileNotFoundError."""
        return SyncCommandHandle(self._loop, self._loop.run(self._commands.connect(command_id)))


class Files:
    """``sandbox.files``: as :class:`~ironflow.sessions.client.AsyncFiles`, blocking."""

    def __init__(self, loop: _Loop, handle: AsyncSandbox) -> None:
        self._loop, self._files = loop, handle.files

    def write(self, path: str, data: bytes | str | BinaryIO) -> int:
        return self._loop.run(self._files.write(path, data))

    def read(self, path: str, *, max_bytes: int = DEFAULT_MAX_TREE_BYTES) -> bytes:
        return self._loop.run(self._files.read(path, max_bytes=max_bytes))

    def read_to(self, path: str, dest: BinaryIO) -> int:
        return self._loop.run(self._files.read_to(path, dest))

    def list(self, path: str = ".") -> list[FileEntry]:
        return self._loop.run(self._files.list(path))

    def exists(self, path: str) -> bool:
        return self._loop.run(self._files.exists(path))

    def watch(self, path: str = ".", *, recursive: bool = False, max_events: int | None = None) -> Iterator[WatchEvent]:
        """The changes under ``path`` as they happen; leaving the loop ends the watch."""
        return self._loop.iterate(self._files.watch(path, recursive=recursive, max_events=max_events))

    def remove(self, path: str, *, recursive: bool = False) -> None:
        self._loop.run(self._files.remove(path, recursive=recursive))

    def mkdir(self, path: str) -> None:
        self._loop.run(self._files.mkdir(path))

    def upload_dir(self, local_dir: str, path: str, *, max_bytes: int = DEFAULT_MAX_TREE_BYTES) -> int:
        return self._loop.run(self._files.upload_dir(local_dir, path, max_bytes=max_bytes))

    def download_dir(
        self,
        path: str,
        local_dir: str,
        *,
        max_bytes: int = DEFAULT_MAX_TREE_BYTES,
        max_entries: int = DEFAULT_MAX_ENTRIES,
    ) -> int:
        return self._loop.run(self._files.download_dir(path, local_dir, max_bytes=max_bytes, max_entries=max_entries))


class Sandbox:
    """An open session, blocking: ``commands``, ``files``; ``with`` closes it."""

    def __init__(self, loop: _Loop, sessions: RemoteSessions, handle: AsyncSandbox) -> None:
        self._loop, self._sessions, self._handle = loop, sessions, handle
        self._ended = False
        self.info: SessionInfo = handle.info
        self.id = handle.id
        self.commands = Commands(loop, handle)
        self.files = Files(loop, handle)

    def __repr__(self) -> str:
        return f"Sandbox(id={self.id!r}, backend={self.info.backend!r})"

    @classmethod
    def _start(
        cls,
        server: str | None,
        token: Secret | str | None,
        make: Callable[..., Awaitable[AsyncSandbox]],
        *args: Any,
        **kwargs: Any,
    ) -> Sandbox:
        loop = _Loop()

        async def build() -> tuple[RemoteSessions, AsyncSandbox]:
            sessions = RemoteSessions(server, token=token)
            try:
                return sessions, await make(sessions, *args, **kwargs)
            except BaseException:
                await sessions.aclose()
                raise

        try:
            sessions, handle = loop.run(build())
        except BaseException:
            loop.close()
            raise
        return cls(loop, sessions, handle)

    @classmethod
    def open(
        cls,
        options: OpenOptions | None = None,
        *,
        server: str | None = None,
        token: Secret | str | None = None,
        **legacy: Any,
    ) -> Sandbox:
        """A new session on the server (``server``/``token`` default as :class:`RemoteSessions`'s);
        the old keywords (``ttl=``, ...) still work for one release, with a DeprecationWarning."""
        return cls._start(server, token, RemoteSessions.open, legacy_options(options, legacy, caller="Sandbox.open"))

    @classmethod
    def connect(cls, session_id: str, *, server: str | None = None, token: Secret | str | None = None) -> Sandbox:
        """A handle on an open session. Raises: SessionNotFound."""
        return cls._start(server, token, RemoteSessions.connect, session_id)

    def snapshot(self, *, name: str | None = None) -> SnapshotInfo:
        """The session's files as a new snapshot (``Sandbox.open(OpenOptions(from_snapshot=...))`` starts from it)."""
        return self._loop.run(self._sessions.snapshot(self.id, name=name))

    def fork(self, count: int = 1) -> list[Sandbox]:
        """``count`` new sessions from one snapshot of this one, each its own :class:`Sandbox`."""
        handles = self._loop.run(self._sessions.fork(self.id, count=count))
        for handle in handles:
            self._loop.run(handle.disconnect())
        token = self._sessions._token
        return [Sandbox.connect(h.id, server=self._sessions.server, token=token) for h in handles]

    def pause(self) -> SessionInfo:
        """Freeze the session's processes (its files stay); the next request resumes it."""
        return self._loop.run(self._sessions.pause(self.id))

    def resume(self) -> SessionInfo:
        return self._loop.run(self._sessions.resume(self.id))

    def extend(self, ttl: float) -> SessionInfo:
        """The session now ends ``ttl`` seconds from now."""
        self.info = self._loop.run(self._sessions.extend(self.id, ttl))
        return self.info

    def _end(self, close: bool) -> None:
        if self._ended:
            return
        self._ended = True

        async def end() -> None:
            try:
                await (self._handle.close() if close else self._handle.disconnect())
            finally:
                await self._sessions.aclose()

        try:
            self._loop.run(end())
        finally:
            self._loop.close()

    def close(self) -> None:
        """End the session (every process in it dies) and this handle; twice is no error."""
        self._end(True)

    def disconnect(self) -> None:
        """Drop this handle only; the session lives on until its TTL or a close."""
        self._end(False)

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
