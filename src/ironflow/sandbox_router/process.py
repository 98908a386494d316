"""``ironflow sandbox serve`` as a process: its token, its socket, its end.

The token is ``$IRONFLOW_SANDBOX_TOKEN``, else one made here and written (0600, replaced
atomically) to :func:`~ironflow.sandbox_runtime.remote.token_file`, where the clients on
this machine read it; only the path is ever printed. SIGINT and SIGTERM close every
session before the process ends, so no sandbox outlives it (a SIGKILL takes local ones down
too: each sandbox dies with its parent). Cluster sessions live in the cluster: with
``keep_sessions`` the server lets go of them instead (they live to their TTL), and the next
server routes them (:class:`~ironflow.sandbox_router.app.ClusterSessions`).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import secrets
import signal
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Final

from aiohttp import web

from ironflow import errors
from ironflow.local.sessions import LocalSessions
from ironflow.sandbox_router.app import ClusterSessions, SessionHost, build_app
from ironflow.sandbox_runtime.remote import TOKEN_ENV, token_file
from ironflow.secrets import Secret

__all__ = ["MIN_TOKEN_CHARS", "is_loopback", "serve", "server_token"]

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


def server_token() -> tuple[Secret, Path | None]:
    """The server's token, and the file it was written to (None when it came from the environment).

    Raises:
        ConfigError: ``$IRONFLOW_SANDBOX_TOKEN`` is too short.
    """
    if value := os.environ.get(TOKEN_ENV, "").strip():
        if len(value) < MIN_TOKEN_CHARS:
            raise errors.ConfigError(f"{TOKEN_ENV} is too short: use at least {MIN_TOKEN_CHARS} random characters")
        return Secret(value), None
    token = Secret(secrets.token_urlsafe(32))
    path = token_file()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{os.getpid()}")
    with contextlib.suppress(FileNotFoundError):
        temp.unlink()
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token.reveal() + "\n")
    os.replace(temp, path)
    return token, path


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family, backlog=128)
    except OSError as exc:
        raise errors.ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


async def serve(
    host: str,
    port: int,
    token: Secret,
    *,
    ready: Callable[[str], None],
    sessions: SessionHost | None = None,
    keep_sessions: bool = False,
) -> None:
    """Serve ``sessions`` (default: local ones) until SIGINT or SIGTERM, then close every one of
    them (``keep_sessions``: let go of cluster sessions, which live on to their TTL); ``ready``
    gets the URL once listening.

    Raises:
        ConfigError: the address cannot be bound, the sessions cannot be made here, or
            ``keep_sessions`` for sessions that live in this process.
    """
    owned: SessionHost = sessions or LocalSessions()
    if keep_sessions and not isinstance(owned, ClusterSessions):
        raise errors.ConfigError("--keep-sessions is for --backend k8s or agent-sandbox: local sessions die with serve")
    runner = web.AppRunner(build_app(owned, token), access_log=None, handle_signals=False, shutdown_timeout=2)
    await runner.setup()
    loop = asyncio.get_running_loop()
    try:
        sock = _bind(host, port)
        site = web.SockSite(runner, sock)
        await site.start()
        stop = asyncio.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        shown = f"[{host}]" if ":" in host else host
        ready(f"http://{shown}:{sock.getsockname()[1]}")
        await stop.wait()
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
        if keep_sessions and isinstance(owned, ClusterSessions):
            await owned.release()  # the sessions stay in the cluster for the next server
        else:
            await owned.aclose()  # first: a streaming answer ends with its sandbox, and the runner stops at once
        await runner.cleanup()
