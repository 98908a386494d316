"""The one interface of every sandbox-session backend: :class:`SessionBackend`.

Local sessions (bubblewrap, gVisor), Kubernetes pods, agent-sandbox claims and the sessions of
an ``ironflow sandbox serve`` (:class:`~ironflow.sessions.remote.RemoteSessions`) all offer
it, async throughout; a provider hands its own out from ``provider.sessions()``. A session is
opened with :class:`~ironflow.sessions.values.OpenOptions`, the one place its options are
written. Sessions that live in a cluster, not in the process that opened them, add
:class:`ClusterSessionBackend`: another process finds, closes and releases them by label.
Backends that can snapshot and fork a session add :class:`SessionSnapshots` (every backend:
cluster sessions keep their workspace as an archive); those that can pause and resume one add
:class:`PauseControls` (local sessions, whose processes freeze; agent-sandbox sessions, whose pod
goes and whose home stays on its PVC; Kubernetes sessions, whose pod goes and whose workspace waits
in the snapshot store); :class:`SessionControls` is both and a TTL extension
(local sessions, and a server's client, which passes them on). Callers check with ``isinstance``
and refuse in one line where one is missing (:func:`snapshots_of`, :func:`pause_controls_of`,
:func:`controls_of`).

"Held" is what this object holds in this process: a local session (all of them), a cluster
session it opened or reattached (a bridge to its pod), none for a server's client. A server
forwards only to held sessions (:meth:`SessionBackend.route`). This module defines
interfaces only; it runs nothing.
"""

from __future__ import annotations

import builtins
import contextlib
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ironflow import errors

if TYPE_CHECKING:
    from ironflow.secrets import Secret
    from ironflow.sessions.client import AsyncSandbox
    from ironflow.sessions.values import OpenOptions, SessionInfo, SnapshotInfo
    from ironflow.workspaces import WorkspaceChanges

__all__ = [
    "ClusterSessionBackend",
    "PauseControls",
    "PooledSessionBackend",
    "ReleasableSessionBackend",
    "SessionBackend",
    "SessionControls",
    "SessionSnapshots",
    "controls_of",
    "pause_controls_of",
    "snapshots_of",
]


@runtime_checkable
class SessionBackend(Protocol):
    """Open, reattach, list, diff and close sandbox sessions on one backend.

    ``backend`` names it (``local``, ``k8s``, ``agent-sandbox``; ``remote`` for a server's
    client, which serves whichever its server does). Errors are ironflow's:
    ``SessionNotFound`` for an id that is not open, ``ConfigError`` for a session without a
    workspace asked for its changes, ``WorkspaceRefused`` for what a backend's workspaces
    cannot do (a directory in a pod, an apply without a host directory).
    """

    @property
    def backend(self) -> str: ...

    async def open(self, options: OpenOptions | None = None) -> AsyncSandbox:
        """A new session and a handle on it (None: the default options); it ends at ``options.ttl`` at the latest."""
        ...

    async def connect(self, session_id: str) -> AsyncSandbox:
        """A new handle on an open session (reattach by id)."""
        ...

    async def list(self) -> builtins.list[SessionInfo]:
        """Every open session this backend reaches (a cluster's: all of its namespace)."""
        ...

    async def changes(self, session_id: str, *, apply: bool = False) -> WorkspaceChanges:
        """The patch of the session's workspace since open; ``apply`` writes it into the host directory."""
        ...

    async def close(self, session_id: str) -> bool:
        """End a session (every process in it dies); False when it was not open."""
        ...

    def held(self) -> builtins.list[SessionInfo]:
        """The sessions held by this object in this process (see the module docstring)."""
        ...

    def route(self, session_id: str) -> tuple[str, Secret]:
        """Where a held session's runtime API answers (a unix socket's path, or an ``http://`` URL) and
        its token, for a server that forwards to it.

        Raises:
            SessionNotFound: the session is not held here.
        """
        ...

    async def aclose(self) -> None:
        """Close every session held here and the clients; a server's sessions stay (none is held here)."""
        ...


@runtime_checkable
class ReleasableSessionBackend(SessionBackend, Protocol):
    """Sessions that may outlive the process holding them (``serve --keep-sessions``): cluster
    sessions, and local ones opened to be kept (each with a record the next server reads)."""

    async def release(self) -> None:
        """Let go of every session held here that can live on (each to its TTL); close the rest and the clients."""
        ...


@runtime_checkable
class ClusterSessionBackend(ReleasableSessionBackend, Protocol):
    """Sessions that live in a cluster: any process finds them by their labels, so a restarted
    server routes what an earlier one opened and a run's release ends its sessions."""

    async def release_run(self, run_id: str) -> int:
        """Close every session of ``run_id`` in the cluster, held here or not; returns how many."""
        ...


@runtime_checkable
class KeepingSessionBackend(SessionBackend, Protocol):
    """Local sessions that may outlive the process holding them (``serve --keep-sessions``): each has a
    record, and the next instance on the same state dir serves it again."""

    async def keep(self) -> None:
        """Let go of every session that can live on (each to its TTL); close the rest and the pool."""
        ...


@runtime_checkable
class PooledSessionBackend(SessionBackend, Protocol):
    """Sessions with sandboxes kept warm (:mod:`ironflow.sessions.pools`): ``open`` hands one out
    to a request that fits it, ``aclose`` tears the rest down."""

    def prewarm(self) -> None:
        """Begin filling the pool now, in the running loop (a server calls it once listening)."""
        ...


@runtime_checkable
class SessionSnapshots(SessionBackend, Protocol):
    """Snapshots and forks of open sessions.

    A snapshot holds a session's files, immutable, with an id: a local session's workspace and
    home, a cluster session's workspace (an archive: files only, no process); ``open`` takes one
    as ``OpenOptions(from_snapshot=...)``.
    """

    async def snapshot(self, session_id: str, *, name: str | None = None) -> SnapshotInfo:
        """The session's files as a new snapshot (a local session's read with its processes frozen)."""
        ...

    async def snapshots(self) -> builtins.list[SnapshotInfo]:
        """Every snapshot in the store, oldest first."""
        ...

    async def remove_snapshot(self, snapshot_id: str) -> bool:
        """Delete a snapshot; False when there was none."""
        ...

    async def fork(self, session_id: str, *, count: int = 1) -> builtins.list[AsyncSandbox]:
        """``count`` new sessions, each starting with a snapshot of this one's files (taken once)."""
        ...


@runtime_checkable
class PauseControls(SessionBackend, Protocol):
    """Pause and resume of open sessions, and idle suspend (``OpenOptions(idle_suspend=...)``).

    A paused session keeps its files; locally its processes too, frozen, while on agent-sandbox its
    pod goes (its processes end) and its home stays on its PVC, and on Kubernetes its pod goes and its
    workspace is kept as an archive in the snapshot store. Any request to it resumes it first.
    """

    async def pause(self, session_id: str) -> SessionInfo:
        """Pause the session (its files stay); pausing twice is no error."""
        ...

    async def resume(self, session_id: str) -> SessionInfo:
        """Let a paused session run again; resuming a running one is no error."""
        ...

    def active(self, session_id: str) -> contextlib.AbstractAsyncContextManager[None]:
        """A request to the session under way (a server wraps each one it forwards): a paused
        session is resumed first and kept from idle suspend until the block ends."""
        ...


@runtime_checkable
class SessionControls(SessionSnapshots, PauseControls, Protocol):
    """Snapshots, forks, pause and resume, and a TTL extension of open sessions."""

    async def extend(self, session_id: str, ttl: float) -> SessionInfo:
        """The session now ends ``ttl`` seconds from now (sooner or later than before)."""
        ...


def snapshots_of(sessions: SessionBackend) -> SessionSnapshots:
    """``sessions`` when it has :class:`SessionSnapshots`.

    Raises:
        ConfigError: it has not (one line naming its backend).
    """
    if isinstance(sessions, SessionSnapshots):
        return sessions
    raise errors.ConfigError(f"{sessions.backend} sessions have no snapshots or forks")


def controls_of(sessions: SessionBackend) -> SessionControls:
    """``sessions`` when it has :class:`SessionControls`.

    Raises:
        ConfigError: it has not (one line naming its backend).
    """
    if isinstance(sessions, SessionControls):
        return sessions
    raise errors.ConfigError(
        f"{sessions.backend} sessions cannot be extended yet: extend is for local sessions "
        "(bubblewrap or gVisor, or a `sandbox serve` of them)"
    )


def pause_controls_of(sessions: SessionBackend) -> PauseControls:
    """``sessions`` when it can pause and resume its sessions (:class:`PauseControls`).

    Raises:
        ConfigError: it cannot (one line naming its backend).
    """
    if isinstance(sessions, PauseControls):
        return sessions
    raise errors.ConfigError(
        f"{sessions.backend} sessions cannot be paused: pause and idle suspend are for local (bubblewrap or gVisor), "
        "k8s and agent-sandbox sessions (or a `sandbox serve` of them)"
    )
