"""``ironflow sandbox serve`` as a process: its token, its socket, its end.

The token is ``$IRONFLOW_SANDBOX_TOKEN``, else the one in
:func:`~ironflow.sessions.remote.token_file`, where the clients on this machine read it
(:class:`SharedToken`): once bound, a server holds a shared lock on the file for its life and
makes a new token (0600, replaced atomically) only when no live server holds it, else takes
the live one's, so a second server never locks the first one's clients out. Only the path is
ever printed. SIGINT and SIGTERM close every
session before the process ends, so no sandbox outlives it (a SIGKILL takes local ones down
too: each sandbox dies with its parent). Cluster sessions live in the cluster: with
``keep_sessions`` the server lets go of them instead (they live to their TTL), and the next
server routes them (:class:`~ironflow.sessions.backend.ClusterSessionBackend`); local
bubblewrap sessions opened to be kept do the same by a record each
(:mod:`ironflow.local.sessions.adoption`; :class:`~ironflow.sessions.backend.KeepingSessionBackend`). The backend
comes from the caller (the CLI builds it from the provider): this module imports none.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import ipaddress
import os
import secrets
import signal
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

from aiohttp import web

from ironflow import errors
from ironflow.sandbox_router.app import DEFAULT_MAX_SESSIONS, build_app
from ironflow.secrets import Secret
from ironflow.sessions.backend import (
    ClusterSessionBackend,
    KeepingSessionBackend,
    PooledSessionBackend,
    SessionBackend,
)
from ironflow.sessions.remote import TOKEN_ENV, token_file

__all__ = [
    "MIN_TOKEN_CHARS",
    "SharedToken",
    "bind",
    "env_token",
    "is_loopback",
    "listening_url",
    "serve",
    "until_signalled",
]

#: The shortest ``$IRONFLOW_SANDBOX_TOKEN`` accepted: a guessable token is no lock.
MIN_TOKEN_CHARS: Final = 16


def is_loopback(host: str) -> bool:
    """Whether ``host`` only this machine can reach (pure)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def env_token() -> Secret | None:
    """``$IRONFLOW_SANDBOX_TOKEN``, or None when it is unset (then the token file's is used).

    Raises:
        ConfigError: it is too short.
    """
    if value := os.environ.get(TOKEN_ENV, "").strip():
        if len(value) < MIN_TOKEN_CHARS:
            raise errors.ConfigError(f"{TOKEN_ENV} is too short: use at least {MIN_TOKEN_CHARS} random characters")
        return Secret(value)
    return None


class SharedToken:
    """The token file the clients on this machine read, shared by every live server.

    A server holds a shared ``flock`` on ``PATH.lock`` while it runs. The file is written only
    under the exclusive lock, which a server gets only when no live one holds the shared lock:
    so a new token replaces only a dead server's, and a server started beside a live one takes
    that one's token (a SIGKILLed server's lock goes with it).
    """

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or token_file()
        #: Whether this server made the token (False: a live server's, read).
        self.written = False

    @contextlib.contextmanager
    def held(self) -> Iterator[Secret]:
        """The token, locked for as long as the block runs.

        Raises:
            ConfigError: the file or its lock cannot be made, or a live server holds the file
                but the token in it is gone.
        """
        lock = self._lock()
        try:
            yield self._read()
        finally:
            os.close(lock)

    def _lock(self) -> int:
        """The lock's fd, held shared, the file written first when no live server held it."""
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            lock = os.open(self.path.with_name(self.path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise errors.ConfigError(f"cannot write the token file {self.path}: {exc.strerror or exc}") from None
        try:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                self.written = False
            else:
                self._write(Secret(secrets.token_urlsafe(32)))
                self.written = True
            # Not atomic after LOCK_EX: another server may write in between, so the token is read
            # back under the shared lock, which no writer holds and none can take while it is held.
            fcntl.flock(lock, fcntl.LOCK_SH)
        except BaseException as exc:
            os.close(lock)
            if isinstance(exc, OSError):
                raise errors.ConfigError(f"cannot write the token file {self.path}: {exc.strerror or exc}") from None
            raise
        return lock

    def _write(self, token: Secret) -> None:
        temp = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(token.reveal() + "\n")
        os.replace(temp, self.path)

    def _read(self) -> Secret:
        try:
            value = self.path.read_text().strip()
        except (OSError, UnicodeDecodeError):
            value = ""
        if not value:
            raise errors.ConfigError(
                f"a running `ironflow sandbox serve` holds {self.path} but the token in it is gone: "
                f"stop that server, or set {TOKEN_ENV} for this one"
            )
        return Secret(value)


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port``, or a ConfigError naming why not."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family, backlog=128)
    except OSError as exc:
        raise errors.ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def listening_url(host: str, sock: socket.socket) -> str:
    """``http://host:port`` of a bound socket (an IPv6 host in brackets)."""
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{sock.getsockname()[1]}"


async def until_signalled() -> None:
    """Return at SIGINT or SIGTERM; the loop's handlers go again however the wait ends."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)


async def serve(
    host: str,
    port: int,
    token: Secret | SharedToken,
    *,
    ready: Callable[[str], None],
    sessions: SessionBackend,
    keep_sessions: bool = False,
    max_sessions: int = DEFAULT_MAX_SESSIONS,
) -> None:
    """Serve ``sessions`` until SIGINT or SIGTERM, then close every one of
    them (``keep_sessions``: let go of cluster sessions, which live on to their TTL); ``ready``
    gets the URL once listening. At most ``max_sessions`` are open at once.

    Raises:
        ConfigError: the address cannot be bound,
            ``keep_sessions`` for sessions that live in this process, or a live server holds
            the token file but its token is gone.
        OSError: the token file or its lock cannot be made.
    """
    owned = sessions
    if keep_sessions and not isinstance(owned, ClusterSessionBackend | KeepingSessionBackend):
        raise errors.ConfigError(f"--keep-sessions: {owned.backend} sessions die with serve")
    runner: web.AppRunner | None = None
    with contextlib.ExitStack() as held:  # the token file's lock: released last, once nothing answers
        try:
            sock = bind(host, port)
            try:
                secret = held.enter_context(token.held()) if isinstance(token, SharedToken) else token
            except BaseException:
                sock.close()
                raise
            app = build_app(owned, secret, max_sessions=max_sessions)
            runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=2)
            await runner.setup()
            await web.SockSite(runner, sock).start()
            if isinstance(owned, PooledSessionBackend):
                owned.prewarm()
            ready(listening_url(host, sock))
            await until_signalled()
        finally:
            if keep_sessions and isinstance(owned, ClusterSessionBackend):
                await owned.release()  # the sessions stay in the cluster for the next server
            elif keep_sessions and isinstance(owned, KeepingSessionBackend):
                await owned.keep()  # the kept ones live on for the next server
            else:
                await owned.aclose()  # first: a streaming answer ends with its sandbox, and the runner stops at once
            if runner is not None:
                await runner.cleanup()
