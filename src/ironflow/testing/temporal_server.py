"""A real, throwaway Temporal server for tests: ``temporal server start-dev`` on free ports.

The binary is the Temporal CLI that ``scripts/temporal-cli build`` builds from its pinned Go
module into ``${XDG_CACHE_HOME:-~/.cache}/ironflow/temporal-cli/<version>/bin/temporal`` (or
``$IRONFLOW_TEMPORAL_CLI``). The server keeps its state in a SQLite file of the caller's (so a
test can read what it holds after a restart), listens on 127.0.0.1 only, runs headless (no
UI), and lives in its own process group, killed whole by :meth:`TemporalDevServer.stop`; it
also dies with the thread that started it, so a killed test run leaves no server behind.

Never used by the library itself.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Final

from ironflow.testing._cached_tools import tool_path
from ironflow.testing._kubeenv_procs import die_with_parent
from ironflow.testing.ports import free_port

__all__ = ["TemporalDevServer", "TemporalNotAvailable", "find_temporal_cli"]

#: The pinned CLI version ``scripts/temporal-cli`` builds (it embeds Temporal Server 1.29.1).
CLI_VERSION: Final = "1.5.1"
_START_TIMEOUT_S: Final = 60.0
_STOP_GRACE_S: Final = 5.0


class TemporalNotAvailable(RuntimeError):
    """The Temporal CLI is not built, or its dev server did not start; the message says why."""


def find_temporal_cli() -> Path:
    """The ``temporal`` binary: ``$IRONFLOW_TEMPORAL_CLI``, else the pinned build in the cache.

    Raises:
        TemporalNotAvailable: not built, naming the command that builds it.
    """
    path = tool_path("IRONFLOW_TEMPORAL_CLI", "temporal-cli", CLI_VERSION, "bin", "temporal")
    if not os.access(path, os.X_OK):
        raise TemporalNotAvailable(f"the Temporal CLI is not built at {path}: run scripts/temporal-cli build")
    return path


def _accepts(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
        return True
    return False


class TemporalDevServer:
    """``temporal server start-dev`` on free loopback ports; ``address`` (``host:port``) while it runs.

    Use as ``with TemporalDevServer() as server:``. ``db_file`` keeps the server's state (default: a
    file in a temp dir removed at stop, with the server's log, which goes there either way).
    Readiness is the frontend's gRPC port accepting and the default namespace answering, which the
    CLI's own ``operator namespace describe`` checks.
    """

    def __init__(
        self, *, db_file: Path | None = None, namespace: str = "default", sqlite_pragmas: Sequence[str] = ()
    ) -> None:
        self.binary = find_temporal_cli()
        self.namespace = namespace
        #: ``PRAGMA=VALUE`` for the server's SQLite (``synchronous=off``: no fsync, as the test PostgreSQL).
        self.sqlite_pragmas = tuple(sqlite_pragmas)
        # Its log, and its state unless ``db_file`` is given: removed at stop, whoever keeps the state.
        self._own_dir: str | None = tempfile.mkdtemp(prefix="ironflow-temporal-")
        self.db_file = Path(self._own_dir) / "temporal.db" if db_file is None else db_file
        self.port = free_port()
        self.http_port = free_port()
        self.metrics_port = free_port()
        self._log = Path(self._own_dir) / f"temporal-{self.port}.log"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def argv(self) -> list[str]:
        """The dev server's command line: loopback only, headless, state in :attr:`db_file`."""
        return [
            str(self.binary),
            "server",
            "start-dev",
            "--headless",
            "--ip",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--http-port",
            str(self.http_port),
            "--metrics-port",
            str(self.metrics_port),
            "--db-filename",
            str(self.db_file),
            "--namespace",
            self.namespace,
            "--log-level",
            "warn",
            *(arg for pragma in self.sqlite_pragmas for arg in ("--sqlite-pragma", pragma)),
        ]

    def start(self) -> TemporalDevServer:
        """Start the server and wait until it answers.

        Raises:
            TemporalNotAvailable: it exited or did not answer in time, with the tail of its log.
        """
        with self._log.open("wb") as out:
            self._proc = subprocess.Popen(
                self.argv(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # one process group, killed whole at stop
                preexec_fn=die_with_parent,  # single-threaded start
            )
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline:
            code = self._proc.poll()
            if code is not None:
                tail = self._tail()
                self.stop()
                raise TemporalNotAvailable(f"temporal server start-dev exited {code}:\n{tail}")
            if _accepts(self.port) and self._namespace_ready():
                return self
            time.sleep(0.1)
        tail = self._tail()
        self.stop()
        raise TemporalNotAvailable(f"temporal server start-dev did not answer within {_START_TIMEOUT_S:.0f}s:\n{tail}")

    def _namespace_ready(self) -> bool:
        probe = subprocess.run(
            [str(self.binary), "operator", "namespace", "describe", "--address", self.address, "-n", self.namespace],
            capture_output=True,
            timeout=10,
            check=False,
        )
        return probe.returncode == 0

    def _tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self._log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        """Kill the server's process group (TERM, then KILL after a grace) and remove its temp dir."""
        proc, self._proc = self._proc, None
        if proc is not None:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, sig)
                try:
                    proc.wait(timeout=_STOP_GRACE_S)
                    break
                except subprocess.TimeoutExpired:
                    continue
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # anything the server left in its group
        if self._own_dir is not None:
            shutil.rmtree(self._own_dir, ignore_errors=True)
            self._own_dir = None

    def __enter__(self) -> TemporalDevServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
