"""A real, throwaway PostgreSQL server for tests: initdb, start, yield a DSN, stop, remove.

Why a real server: the registry's SQL (advisory locks, ``RETURNING``, LISTEN/NOTIFY)
is the part most likely to be wrong, and no fake checks it. The server listens on
127.0.0.1 only, on a free port, with ``fsync=off`` (a test database need not survive
a crash). ``initdb`` refuses to run as root, so as root every PostgreSQL binary runs
as the ``postgres`` user through ``runuser`` in a temp dir that user owns.

Never used by the library itself; nothing is left behind after ``stop``.
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from ironflow.testing.ports import free_port

__all__ = ["PostgresNotAvailable", "PostgresServer", "find_pg_bin", "fresh_database"]

_SEARCH_GLOB = "/usr/lib/postgresql/*/bin"
_START_TIMEOUT_S = 30.0


class PostgresNotAvailable(RuntimeError):
    """``initdb``/``pg_ctl`` cannot be found, or the server did not start."""


def find_pg_bin(name: str) -> str:
    """Path of a PostgreSQL binary: on PATH first, then the newest ``/usr/lib/postgresql/*/bin``."""
    found = shutil.which(name)
    if found:
        return found
    for directory in sorted(glob.glob(_SEARCH_GLOB), reverse=True):
        candidate = os.path.join(directory, name)
        if os.access(candidate, os.X_OK):
            return candidate
    raise PostgresNotAvailable(
        f"{name} not found on PATH or under {_SEARCH_GLOB}: install PostgreSQL (apt-get install -y postgresql-15)"
    )


@dataclass(frozen=True)
class _Runner:
    """How to run a PostgreSQL binary: directly, or as the ``postgres`` user when we are root."""

    as_user: str | None

    def argv(self, argv: Sequence[str]) -> list[str]:
        if self.as_user is None:
            return list(argv)
        return ["runuser", "-u", self.as_user, "--", *argv]


class PostgresServer:
    """A throwaway PostgreSQL cluster; use as ``with`` or ``async with``; ``dsn`` while running.

    >>> PostgresServer().dsn  # doctest: +SKIP
    'postgresql://postgres@127.0.0.1:54321/postgres'
    """

    def __init__(self, *, database: str = "postgres", user: str = "postgres") -> None:
        self.database = database
        self.user = user
        self.port = 0
        self._tmp: str | None = None
        self._datadir: str | None = None
        self._runner = _Runner("postgres" if os.geteuid() == 0 else None)

    @property
    def dsn(self) -> str:
        """``postgresql://`` URL of the running server (trust auth on 127.0.0.1; no password)."""
        if self._datadir is None:
            raise PostgresNotAvailable("the PostgreSQL server is not running: enter the context manager first")
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{self.database}"

    def start(self) -> str:
        """initdb into a fresh temp dir and start the server; return the DSN."""
        initdb = find_pg_bin("initdb")
        pg_ctl = find_pg_bin("pg_ctl")
        self._tmp = tempfile.mkdtemp(prefix="ironflow-pg-")
        if self._runner.as_user is not None:
            entry = pwd.getpwnam(self._runner.as_user)
            os.chown(self._tmp, entry.pw_uid, entry.pw_gid)
        datadir = os.path.join(self._tmp, "data")
        self._run(
            [initdb, "-D", datadir, "-U", self.user, "-A", "trust", "-E", "UTF8", "--no-sync", "--no-instructions"]
        )
        self._datadir = datadir
        self.port = free_port()
        options = f"-c listen_addresses=127.0.0.1 -p {self.port} -c fsync=off -c unix_socket_directories={self._tmp}"
        options += " -c full_page_writes=off -c synchronous_commit=off -c max_connections=200"
        try:
            self._run([pg_ctl, "-D", datadir, "-o", options, "-l", os.path.join(self._tmp, "log"), "-w", "start"])
            self._wait_ready()
            if self.database != "postgres":
                self._run(
                    [
                        find_pg_bin("createdb"),
                        "-h",
                        "127.0.0.1",
                        "-p",
                        str(self.port),
                        "-U",
                        self.user,
                        self.database,
                    ]
                )
        except BaseException:
            self.stop()
            raise
        return self.dsn

    def stop(self) -> None:
        """Stop the server (fast mode) and remove its directory; safe to call twice."""
        if self._datadir is not None and os.path.isdir(self._datadir):
            with contextlib.suppress(PostgresNotAvailable, subprocess.SubprocessError):
                self._run([find_pg_bin("pg_ctl"), "-D", self._datadir, "-m", "immediate", "-w", "stop"])
        self._datadir = None
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def _run(self, argv: Sequence[str]) -> None:
        proc = subprocess.run(
            self._runner.argv(argv), capture_output=True, text=True, timeout=_START_TIMEOUT_S, check=False, cwd="/"
        )
        if proc.returncode != 0:
            log = ""
            if self._tmp is not None:
                log_path = Path(self._tmp, "log")
                if log_path.exists():
                    log = log_path.read_text(errors="replace")[-2000:]
            raise PostgresNotAvailable(
                f"{os.path.basename(argv[0])} failed with exit code {proc.returncode}: "
                f"{(proc.stderr or proc.stdout)[-2000:]}{log}"
            )

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return
            time.sleep(0.05)
        raise PostgresNotAvailable(f"PostgreSQL did not accept connections on port {self.port}")

    def __enter__(self) -> str:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    async def __aenter__(self) -> str:
        return await asyncio.to_thread(self.start)

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.to_thread(self.stop)


@contextlib.asynccontextmanager
async def fresh_database(server_dsn: str, *, prefix: str = "t_") -> AsyncIterator[str]:
    """A new, empty database on a running server for one test; dropped (connections and all) after."""
    import asyncpg  # only the async helpers need it

    name = prefix + uuid.uuid4().hex[:12]
    admin = await asyncpg.connect(server_dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield server_dsn.rsplit("/", 1)[0] + "/" + name
        finally:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()
