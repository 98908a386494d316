"""Snapshot, fork, pause, resume and extend of local sessions: :class:`LocalControls`, a part of
:class:`~ironflow.local.sessions.local_sessions.LocalSessions` (the optional
:class:`~ironflow.sessions.backend.SessionControls` of the local backend).

Snapshots are :mod:`~ironflow.local.sessions.snapshots`' (read from the host with the session
frozen), forks :mod:`~ironflow.local.sessions.forks`', the freezer
:mod:`~ironflow.local.sessions.freezer`'s. A Docker session is refused: its processes are the
daemon's, which this process neither freezes nor reads.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import dataclasses
import time

from ironflow import errors
from ironflow.local.sessions import forks, snapshots, starter
from ironflow.local.sessions.activity import SessionActivity
from ironflow.local.sessions.provided import LocalSandbox
from ironflow.sessions.client import AsyncSandbox
from ironflow.sessions.values import OpenOptions, SessionInfo, SnapshotInfo

__all__ = ["LocalControls"]


class LocalControls:
    """The controls; the session table, its activity and its opening are the subclass's."""

    provider: LocalSandbox
    store: snapshots.SnapshotStore
    _activity: dict[str, SessionActivity]
    _kept: set[str]

    def _get(self, session_id: str) -> starter.StartedSession:
        raise NotImplementedError

    def _info(self, session: starter.StartedSession) -> SessionInfo:
        raise NotImplementedError

    async def _open(self, options: OpenOptions, agent: bool, seed: forks.Seed | None) -> AsyncSandbox:
        raise NotImplementedError

    def active(self, session_id: str) -> contextlib.AbstractAsyncContextManager[None]:
        """A request to the session under way: resumed first, kept from idle suspend until the block ends."""
        self._get(session_id)
        return self._activity[session_id].active()

    def _controlled(self, session_id: str) -> tuple[starter.StartedSession, SessionActivity]:
        """The session and its activity, for a control; a Docker session's processes are the
        daemon's, out of this process's reach: refused in one line."""
        session = self._get(session_id)
        if self.provider.isolation == "docker":
            raise errors.ConfigError(
                "snapshot, fork and pause are for bwrap and gvisor sessions: a Docker session's processes are "
                "the daemon's"
            )
        return session, self._activity[session_id]

    async def snapshot(self, session_id: str, *, name: str | None = None) -> SnapshotInfo:
        """The session's workspace and home (gVisor: its workspace only) as a new snapshot, read with its
        processes frozen (:mod:`~ironflow.local.sessions.snapshots`: its refusals)."""
        session, activity = self._controlled(session_id)
        trees = snapshots.trees_of(session.proc.pid, session.group, session.workspace, self.provider.isolation)
        spec = None if session.workspace is None else session.workspace.spec
        async with activity.freezer.held():
            return await self.store.capture(
                trees, session_id=session_id, name=name, isolation=self.provider.isolation, workspace=spec
            )

    async def snapshots(self) -> builtins.list[SnapshotInfo]:
        return await asyncio.to_thread(self.store.list)

    async def remove_snapshot(self, snapshot_id: str) -> bool:
        """Delete a snapshot; refused while a session opened from it is open (its diff reads it)."""
        if users := [a.session_id for a in self._activity.values() if a.base_snapshot == snapshot_id]:
            raise errors.ConfigError(f"snapshot '{snapshot_id}' is the base of open session {users[0]}: close it first")
        return await asyncio.to_thread(self.store.remove, snapshot_id)

    async def fork(self, session_id: str, *, count: int = 1) -> builtins.list[AsyncSandbox]:
        """``count`` sessions with this one's files, TTL left, labels and run (:mod:`~ironflow.local.sessions.
        forks`: copied straight with it frozen, or by a snapshot); a failure closes those opened so far."""
        if not 1 <= count <= 100:
            raise errors.ConfigError("a fork makes 1 to 100 sessions")
        (parent, activity), owner = self._controlled(session_id), self.provider.shape().writable_uid
        opened = builtins.list[AsyncSandbox]()
        options = OpenOptions(ttl=max(1.0, parent.info.expires_at - time.time()), labels=parent.info.labels,
                              run_id=parent.info.run_id)  # fmt: skip
        try:
            if (parent.workspace is not None and parent.workspace.spec.is_git) or self.provider.isolation != "bwrap":
                base = await self.snapshot(session_id, name=f"fork-of-{session_id}")  # their base: kept in the store
                seed = forks.from_snapshot(self.store, base.id, isolation=self.provider.isolation, owner=owner)
                for _ in range(count):
                    opened.append(await self._open(options, False, seed))
                return opened
            async with activity.freezer.held():  # each fork's sandbox starts while its files are copied
                for _ in range(count):
                    seed = forks.live(parent, owner, activity.base_snapshot)
                    opened.append(await self._open(options, False, seed))
        except BaseException:
            for handle in opened:
                await handle.close()
            raise
        return opened

    async def pause(self, session_id: str) -> SessionInfo:
        """Freeze the session (cgroup freezer, else SIGSTOP of its tree: :mod:`~ironflow.local.sessions.freezer`)."""
        session, activity = self._controlled(session_id)
        await activity.freezer.pause()
        return self._info(session)

    async def resume(self, session_id: str) -> SessionInfo:
        session, activity = self._controlled(session_id)
        await activity.freezer.resume()
        return self._info(session)

    async def extend(self, session_id: str, ttl: float) -> SessionInfo:
        """The session now ends ``ttl`` seconds from now."""
        if not ttl > 0:
            raise errors.ConfigError("ttl must be a positive number of seconds")
        session = self._get(session_id)
        if session_id in self._kept and time.time() + ttl > session.info.expires_at:
            raise errors.ConfigError(
                f"sandbox session '{session_id}' is kept across restarts: it ends at the TTL it was opened with"
            )
        self._activity[session_id].extend(ttl)
        session.info = dataclasses.replace(session.info, expires_at=time.time() + ttl)
        return self._info(session)
