"""Handing a started sandbox out as a session: a pool's member filled with the session's workspace, then
its token issued (I/O): :class:`HandOuts`, a part of
:class:`~ironflow.local.sessions.local_sessions.LocalSessions`.

A warm bubblewrap member binds its empty ``workspace`` directory at ``/workspace`` from its start
(:func:`~ironflow.local.sessions.prewarm.binds_workspace`). A session with a workspace that takes it
(a host directory's copy, a fork's or a snapshot's files) has its files copied into that very
directory before the hand-out, by the same helpers as a cold open (the same owner, mode, bounds and
first snapshot): the bind holds the directory's inode, so it is filled, never replaced, and the
sandbox sees the files at once. A plain session's member has that directory removed at hand-out
(:meth:`~ironflow.local.sessions.starter.SessionStarter.hand_out`). A member that failed its fill
is torn down: none is handed out twice, nor put back.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time

from ironflow import errors
from ironflow.local.sessions import changesets, forks, starter
from ironflow.local.sessions.provided import LocalSandbox
from ironflow.local.workspaces import copies
from ironflow.sessions.values import OpenOptions, SessionInfo

__all__ = ["HandOuts"]


class HandOuts:
    """Filling and handing out; the session table, its pool and its starter are the subclass's."""

    provider: LocalSandbox
    _starter: starter.SessionStarter
    _base_env: dict[str, str]

    async def _fill(
        self, warm: starter.WarmSandbox, options: OpenOptions, seed: forks.Seed | None
    ) -> copies.PreparedWorkspace | None:
        """The session's workspace (``options.workspace``'s copy, or ``seed``'s files) copied into the warm
        sandbox's bound directory; None without one. Failing, the sandbox is torn down.

        Raises:
            WorkspaceRefused: as a cold open's copy. SandboxError: the directory is not the member's own, empty one.
        """
        if options.workspace is None and (seed is None or seed.workspace is None):
            return None
        try:
            if warm.workspace_dir is None or os.listdir(warm.workspace_dir):
                raise errors.SandboxError("a warm sandbox's workspace directory is missing or not empty")
            if options.workspace is not None:
                prepared = await changesets.prepare(self.provider, options.workspace, warm.directory, made=True)
            else:
                assert seed is not None
                prepared = await asyncio.to_thread(forks.fill_now, seed, warm.directory)
            if prepared.copy != warm.workspace_dir:
                raise errors.SandboxError("a session's workspace was copied beside its warm sandbox's bound directory")
        except BaseException:
            await asyncio.shield(self._discard(warm))
            raise
        return prepared

    async def _hand_out(
        self,
        warm: starter.WarmSandbox,
        session_id: str,
        options: OpenOptions,
        run_env: dict[str, str],
        prepared: copies.PreparedWorkspace | None = None,
    ) -> starter.StartedSession:
        """``warm`` handed out as the session: the env it lacks and the idle timeout go in with its
        token; its TTL counts from now. Failing, it is torn down."""
        own_env = {name: value for name, value in run_env.items() if self._base_env.get(name) != value}
        now = time.time()
        info = SessionInfo(
            session_id, "local", self.provider.isolation, now, now + options.ttl, dict(options.labels), options.run_id
        )
        try:
            idle = None if options.idle_suspend else options.idle_timeout  # with a suspend: the host's (activity)
            return await self._starter.hand_out(warm, info, env=own_env, idle_timeout=idle, workspace=prepared)
        except BaseException:
            shutil.rmtree(warm.directory, ignore_errors=True)
            raise

    async def _discard(self, warm: starter.WarmSandbox) -> None:
        await self._starter.teardown(warm)
        shutil.rmtree(warm.directory, ignore_errors=True)
