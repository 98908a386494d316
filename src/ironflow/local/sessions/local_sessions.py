"""Local sandbox sessions: the table of open sessions, each a bubblewrap, gVisor or Docker sandbox kept open.

A session's sandbox is the provider's own with the runtime inside it, started by
:mod:`~ironflow.local.sessions.starter` (the socket, the token on stdin, the runtime's
``--isolate-commands``; a Docker container by :mod:`~ironflow.local.sessions.docker_sessions`);
this module opens, finds, lists and closes sessions by id, and
watches each until its end. With a pool (:mod:`~ironflow.local.sessions.prewarm`) a session that
fits is handed a sandbox started ahead (one with an empty workspace bound, for a session with a
workspace: :mod:`~ironflow.local.sessions.handouts`), issued its token then; any other opens cold. Either
way the sandbox is new: none is ever handed out twice.

Every session is reaped: :meth:`LocalSessions.close`, its TTL, the runtime's idle timeout,
or the death of this process (the sandbox's first process, bwrap or ``runsc run``, gets
SIGKILL when its parent dies (under gVisor behind a proxy's relay, the relay passes it on to
``runsc run``), and takes the sandbox down: bubblewrap's pid namespace, runsc's
sandbox and gofer; the next :class:`LocalSessions` on the machine sweeps the directory, runsc's
state in it, and :func:`~ironflow.local.sandbox.cgroups.probe` the cgroup; a Docker container,
which the daemon holds, goes at the next Docker sessions' :func:`~ironflow.local.sessions.docker_sessions.sweep`).
Sessions live as long as the
process that opened them (``ironflow sandbox serve``), unless kept (``keep_sessions``, bubblewrap:
:mod:`~ironflow.local.sessions.adoption`): the next instance on the state dir serves them again.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import dataclasses
import functools
import logging
import os
import secrets
import shutil
import tempfile
import time
from typing import Final

from ironflow import errors
from ironflow.claude import layout
from ironflow.egress import EgressPolicy
from ironflow.local import workdirs
from ironflow.local.sandbox import environment
from ironflow.local.sessions import (
    adoption,
    agents,
    changesets,
    docker_sessions,
    forks,
    gvisor_runtime,
    handouts,
    prewarm,
    session_controls,
    snapshots,
    starter,
)
from ironflow.local.sessions.activity import SessionActivity
from ironflow.local.sessions.freezer import Freezer
from ironflow.local.sessions.provided import LocalSandbox
from ironflow.local.sessions.starter import RUNTIME_DIR, RUNTIME_PATH
from ironflow.results import AgentResult
from ironflow.secrets import Secret
from ironflow.sessions.client import AsyncSandbox, RuntimeClient
from ironflow.sessions.pools import PoolPolicy
from ironflow.sessions.values import OpenOptions, SessionInfo, SessionNotFound, check_session_id
from ironflow.steps import AgentConfig
from ironflow.workspaces import WORKSPACE_PATH, WorkspaceChanges

__all__ = ["DEFAULT_MAX_UPLOAD_BYTES", "RUNTIME_DIR", "RUNTIME_PATH", "LocalSessions"]

log = logging.getLogger("ironflow.local")

#: The largest single upload the runtime accepts (413 past it).
DEFAULT_MAX_UPLOAD_BYTES: Final = 1 << 30
#: A session directory's name starts so (short: its runtime socket's path has a length limit).
_DIR_PREFIX: Final = "ifs-"
_MAX_SOCKET_PATH: Final = 107
_Pool = prewarm.WarmPool[starter.WarmSandbox]


class LocalSessions(session_controls.LocalControls, handouts.HandOuts):
    """The sessions this process opened on the local provider, by id.

    Args:
        provider: its isolation (bubblewrap or gVisor), limits, sizes and host uid shape every session.
        state_dir: where each session's private directory goes (its runtime socket); default the
            system's temp dir. Keep it short: a unix socket path holds at most 107 bytes.
        max_upload_bytes: the largest file a session accepts in one upload.
        pool: sandboxes kept warm for the sessions that fit one (:mod:`~ironflow.local.sessions.prewarm`).
        snapshot_store: the store of snapshots (:mod:`~ironflow.local.sessions.snapshots`; default the user's).

    Raises:
        SandboxError: gVisor isolation and no runsc on this machine (one line naming it).
        ConfigError: ``state_dir`` too long for a socket path; a credential in the provider's env;
            Docker isolation on a worker that is not root.
    """

    backend: Final = "local"

    def __init__(
        self,
        provider: LocalSandbox,
        *,
        state_dir: str | None = None,
        max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES,
        pool: PoolPolicy | None = None,
        snapshot_store: snapshots.SnapshotStore | None = None,
        keep_sessions: bool = False,
    ) -> None:
        self.provider = provider
        self.store = snapshot_store or snapshots.SnapshotStore()
        self._starter = starter.SessionStarter(self.provider, outlive=keep_sessions)
        self.keep_sessions, self._releasing = keep_sessions, False
        if provider.isolation == "docker":
            self._starter = docker_sessions.DockerStarter(self.provider)
        self.state_dir = os.path.realpath(state_dir or self.provider.temp_dir or tempfile.gettempdir())
        if len(gvisor_runtime.host_socket(os.path.join(self.state_dir, _DIR_PREFIX + "x" * 8))) > _MAX_SOCKET_PATH:
            raise errors.ConfigError(
                f"state_dir '{self.state_dir}' is too long for a unix socket path: use a shorter one"
            )
        self.max_upload_bytes = max_upload_bytes
        self._sessions: dict[str, starter.StartedSession] = {}
        self._activity: dict[str, SessionActivity] = {}
        self._ended: dict[str, str] = {}  # why a session ended that was stopped (workspace past its bound)
        self._kept: set[str] = set()  # the sessions with a record: an earlier server's, or kept at release
        self._gone: list[adoption.Kept] = []  # an earlier server's whose sandbox died: cleaned once a loop runs
        self._adopt()  # before the sweep: the kept sessions' directories are this process's from here
        workdirs.sweep(self.state_dir, _DIR_PREFIX)
        # Every sandbox starts with the provider's environment; a session's own goes in at hand-out.
        self._base_env = environment.sandbox_env(self.provider.env)
        #: The warm sandboxes for sessions without a workspace, and those with one bound (``pool.workspaces``).
        self.pool: prewarm.WarmPool[starter.WarmSandbox] | None = None
        self.workspace_pool: prewarm.WarmPool[starter.WarmSandbox] | None = None
        if pool is not None and pool.size:
            bound = pool.workspaces if prewarm.binds_workspace(self.provider.isolation) else 0
            alive = lambda warm: warm.proc.returncode is None  # noqa: E731
            if pool.size - bound:
                plain = functools.partial(self._prewarm, bound=False)
                self.pool = prewarm.WarmPool(
                    dataclasses.replace(pool, size=pool.size - bound), start=plain, discard=self._discard, alive=alive
                )
            if bound:
                policy, filled = dataclasses.replace(pool, size=bound), functools.partial(self._prewarm, bound=True)
                self.workspace_pool = prewarm.WarmPool(policy, start=filled, discard=self._discard, alive=alive)
            with contextlib.suppress(RuntimeError):  # no running loop: the first open (or prewarm) begins it
                asyncio.get_running_loop()
                for warm_pool in self._pools():
                    warm_pool.begin()

    def prewarm(self) -> None:
        """Begin filling the pool now, in the running loop (a server calls it once listening); the
        sessions of an earlier server are watched again (and the dead ones' remains cleaned) from here."""
        for warm_pool in self._pools():
            warm_pool.begin()
        for session in self._sessions.values():
            if session.watcher is None and session.info.id in self._kept:
                self._begin(session, session.info.expires_at - time.time(), None)
        gone, self._gone = self._gone, []
        for record in gone:
            asyncio.get_running_loop().create_task(adoption.clean(record, self.provider.processes.support))

    def _pools(self) -> builtins.list[_Pool]:
        return [pool for pool in (self.pool, self.workspace_pool) if pool is not None]

    def _adopt(self) -> None:
        """An earlier server's kept sessions still running, taken; the rest (all without ``keep_sessions``) cleaned."""
        support = self.provider.processes.support
        found, self._gone = adoption.adopt(self.state_dir, _DIR_PREFIX, support, take=self.keep_sessions)
        for session in found:
            self._sessions[session.info.id] = session
            self._kept.add(session.info.id)

    # -- opening --

    async def open(self, options: OpenOptions | None = None, *, agent: bool = False) -> AsyncSandbox:
        """A new session and a handle on it; the session ends at ``options.ttl`` seconds at the latest.
        A ``workspace`` is copied (or cloned) as a step's is and is the runtime's working
        directory at ``/workspace``; :meth:`changes` gives what changed there. ``agent`` gives
        the session its own auth proxy (one token, revoked at close) for :meth:`agent` steps.
        With a pool, a session that fits a warm sandbox (:func:`prewarm.warm_fits`) is handed one.

        Raises:
            SandboxError: bubblewrap, runsc or the runtime did not start.
            StepConfigError: ``env`` names a credential variable.
            ConfigError: the provider has relays (not delivered to sessions yet).
        """
        options = options or OpenOptions()
        seed = None
        if self.provider.isolation == "docker" and (options.from_snapshot is not None or options.idle_suspend):
            raise errors.ConfigError("--from and --idle-suspend are for bwrap and gvisor sessions, not Docker's")
        if options.from_snapshot is not None:
            owner, isolation = self.provider.shape().writable_uid, self.provider.isolation
            seed = forks.from_snapshot(self.store, options.from_snapshot, isolation=isolation, owner=owner)
        return await self._open(options, agent, seed)

    async def _open(self, options: OpenOptions, agent: bool, seed: forks.Seed | None) -> AsyncSandbox:
        ttl, workspace = options.ttl, options.workspace
        if self.provider.relays:  # refused, never silently dropped
            raise errors.ConfigError("relays reach local steps and commands; sandbox sessions do not get them yet")
        egress = self.provider.egress_with(options.egress)
        if not environment.serves_egress(egress):
            egress = None
        run_env = environment.sandbox_env({**self.provider.env, **options.env})
        session_id = "sbx-" + secrets.token_hex(8)
        kind = "copy" if seed is not None and seed.workspace is not None else None  # a snapshot's, a fork's
        kind = ("git" if workspace.is_git else "copy") if workspace is not None else kind  # first, as cold
        isolation = self.provider.isolation
        cold = prewarm.warm_fits(workspace=kind, agent=agent, egress=egress is not None, isolation=isolation)
        pool = self.pool if kind is None else self.workspace_pool
        warm = None if pool is None or cold is not None else pool.take()
        if pool is not None:
            log.debug("sandbox session %s: %s", session_id, cold or ("warm" if warm else "cold, the pool is empty"))
        proxy = contextlib.AsyncExitStack()
        token = None
        try:
            session = None
            if warm is not None:
                prepared = await self._fill(warm, options, seed)  # a refusal is the request's: it opens nothing
                try:
                    session = await self._hand_out(warm, session_id, options, run_env, prepared)
                except errors.SandboxError as exc:  # it died waiting: this request opens cold
                    log.warning("sandbox session %s: a warm sandbox failed its hand-out: %s", session_id, exc)
            if session is None:
                warm, token = await self._launch_cold(proxy, options, egress, run_env, agent=agent, seed=seed)
                session = await self._hand_out(warm, session_id, options, run_env)
        except BaseException:
            await proxy.aclose()
            if pool is not None:
                pool.refill()
            raise
        try:
            session.agent_token, session.proxy = token, proxy
            self._sessions[session_id] = session
            keepable = agent is False and egress is None and session.workspace is None and not options.idle_suspend
            if self.keep_sessions and keepable:  # its record: the next server serves it again
                await asyncio.to_thread(adoption.save, session)
                self._kept.add(session_id)
            self._begin(session, ttl, options, seed.snapshot_id if seed else None)
            kill = functools.partial(self._starter.kill, session)
            if session.workspace is not None:  # killed once its copy holds more than the workspace's max_total_bytes
                session.bound = changesets.stop_past_bound(session.workspace, session_id, self._ended, kill)
            if seed is not None and seed.home is not None:
                try:
                    home = functools.partial(snapshots.sandbox_home, session.proc.pid, session.group)
                    await asyncio.to_thread(seed.home, session.directory, home)
                except BaseException:
                    await self.close(session_id)
                    raise
            log.info("sandbox session %s opened (ttl %.0fs)", session_id, ttl)
            return self._handle(session)
        finally:
            if pool is not None:
                pool.refill()  # once the session is up: a start forks in this loop, which would delay it

    def _begin(
        self, session: starter.StartedSession, ttl: float, options: OpenOptions | None, base: str | None = None
    ) -> None:
        """The session watched to its end (``options``: None for an earlier server's, no idle rule of the host's)."""
        session_id = session.info.id
        idle_suspend = options.idle_suspend if options is not None else None
        activity = SessionActivity(session_id, Freezer(session.proc.pid, session.group), idle_suspend)
        self._activity[session_id] = activity
        activity.base_snapshot, activity.deadline = base, asyncio.timeout(ttl)
        session.watcher = asyncio.create_task(self._watch(session, ttl))
        kill = functools.partial(self._starter.kill, session)
        activity.start(idle_end=options.idle_timeout if options is not None else None, kill=kill)

    async def _launch_cold(
        self,
        proxy: contextlib.AsyncExitStack,
        options: OpenOptions,
        egress: EgressPolicy | None,
        run_env: dict[str, str],
        *,
        agent: bool,
        seed: forks.Seed | None = None,
    ) -> tuple[starter.WarmSandbox, Secret | None]:
        """A sandbox started for this session: its workspace copied, its proxy served (on ``proxy``),
        the egress proxy's variables added to ``run_env``. Returns it and the agent's proxy token."""
        directory = workdirs.marked_dir(self.state_dir, _DIR_PREFIX)
        token = None
        try:
            prepared = None
            if options.workspace is not None:
                prepared = await changesets.prepare(self.provider, options.workspace, directory)
            elif seed is not None and seed.workspace is not None:
                forks.workspace_dir(directory)
                prepared = await asyncio.to_thread(seed.workspace, directory)
            socket_path, egress_socket = None, None
            if agent or egress is not None:
                socket_path, issued, egress_socket = await agents.open_proxy(
                    proxy, self.provider, directory, run_id=options.run_id, ttl=options.ttl, agent=agent, egress=egress
                )
                token = issued.claude
                if issued.egress is not None:  # every command of the session goes through the egress proxy
                    run_env.update(environment.egress_env(issued.egress.reveal()))
            launching = self._starter.launch(
                directory,
                self._base_env,
                prepared,
                socket_path,
                max_upload_bytes=self.max_upload_bytes,
                egress_socket=egress_socket,
                agent=agent,
            )
            warm = await (launching if seed is None else forks.beside(launching, seed, directory))
        except BaseException:
            shutil.rmtree(directory, ignore_errors=True)
            raise
        return warm, token

    async def _prewarm(self, *, bound: bool) -> starter.WarmSandbox:
        """A sandbox for the pool: the provider's, with nothing of a session's (``bound``: and an empty
        workspace directory bound, :mod:`~ironflow.local.sessions.handouts`)."""
        directory = workdirs.marked_dir(self.state_dir, _DIR_PREFIX)
        try:
            empty = forks.workspace_dir(directory) if bound else None
            return await self._starter.launch(
                directory, self._base_env, max_upload_bytes=self.max_upload_bytes, workspace_dir=empty
            )
        except BaseException:
            shutil.rmtree(directory, ignore_errors=True)
            raise

    async def _watch(self, session: starter.StartedSession, ttl: float) -> None:
        """Until the sandbox ends or its TTL passes; then nothing of it is left (unless this server lets
        go of it: :meth:`keep`). An earlier server's session has no stderr here: only its end."""
        try:
            activity = self._activity.get(session.info.id)
            async with activity.deadline if activity and activity.deadline else asyncio.timeout(ttl):
                while session.proc.stderr is not None and (line := await starter.stderr_line(session.proc.stderr)):
                    log.debug("sandbox session %s: %s", session.info.id, line[:300].decode(errors="replace").rstrip())
                await session.proc.wait()
            log.info("sandbox session %s ended (exit %s)", session.info.id, session.proc.returncode)
        except TimeoutError:
            log.info("sandbox session %s expired (ttl %.0fs)", session.info.id, ttl)
        finally:
            if not (self._releasing and session.info.id in self._kept):
                await asyncio.shield(self._teardown(session))

    async def _teardown(self, session: starter.StartedSession) -> None:
        if session.bound is not None:
            session.bound.cancel()
        if activity := self._activity.pop(session.info.id, None):
            await activity.end(functools.partial(self._starter.kill, session))
        await self._starter.teardown(session)
        if session.proxy is not None:
            await session.proxy.aclose()  # the session's proxy token is revoked here
        shutil.rmtree(session.directory, ignore_errors=True)
        self._sessions.pop(session.info.id, None)

    # -- using --

    def _get(self, session_id: str) -> starter.StartedSession:
        session = self._sessions.get(check_session_id(session_id))
        if why := self._ended.get(session_id):  # stopped: ended now, even while its teardown runs
            raise SessionNotFound(f"sandbox session '{session_id}' ended: {why}")
        if session is None:
            raise SessionNotFound(f"no open sandbox session '{session_id}'")
        return session

    def _handle(self, session: starter.StartedSession) -> AsyncSandbox:
        session_id = session.info.id
        client = RuntimeClient(
            unix_path=session.socket_path,
            headers={"Authorization": f"Bearer {session.token.reveal()}"},
            activity=functools.partial(self.active, session_id),
        )

        async def closer() -> None:
            await self.close(session_id)

        return AsyncSandbox(self._info(session), client, closer)

    async def agent(self, session_id: str, config: AgentConfig) -> AgentResult:
        """``config`` run by Claude Code inside the open session, in its working directory.

        Raises:
            ConfigError: the session was opened without ``agent=True``.
            AgentTimeout, AgentError, StepConfigError: as a local step's.
        """
        session = self._get(session_id)
        if session.agent_token is None:
            raise errors.ConfigError(f"sandbox session '{session_id}' was opened without agent=True")
        root = layout.SANDBOX_HOME if session.workspace is None else WORKSPACE_PATH
        handle = self._handle(session)
        try:
            return await agents.run_agent(handle, self.provider, config, session.agent_token, working_dir=root)
        finally:
            await handle.disconnect()

    async def connect(self, session_id: str) -> AsyncSandbox:
        """A new handle on an open session (reattach by id).

        Raises:
            SessionNotFound: no such session is open here.
        """
        return self._handle(self._get(session_id))

    def route(self, session_id: str) -> tuple[str, Secret]:
        """The runtime socket of a session and its token, for a server that forwards to it."""
        session = self._get(session_id)
        return session.socket_path, session.token

    def held(self) -> builtins.list[SessionInfo]:
        """Every open session: a local one lives in this process only."""
        return [self._info(s) for s in self._sessions.values()]

    async def list(self) -> builtins.list[SessionInfo]:
        return self.held()

    def host_pids(self, session_id: str) -> builtins.list[int]:
        """The host pids of every process of the session (its cgroup), bubblewrap first."""
        session = self._get(session_id)
        pids = [session.proc.pid]
        if session.group is not None:
            pids += session.group.pids()
        return list(dict.fromkeys(pids))

    async def changes(self, session_id: str, *, apply: bool = False) -> WorkspaceChanges:
        """The patch of everything changed in the session's workspace since open (read with the
        session's processes frozen); with ``apply``, written into the host directory too (all or none).

        Raises:
            ConfigError: the session was opened without a workspace.
        """
        session = self._get(session_id)
        if session.workspace is None:
            raise errors.ConfigError(f"sandbox session '{session_id}' was opened without a workspace")
        activity = self._activity[session_id]
        if apply and activity.base_snapshot is not None:
            raise errors.WorkspaceRefused(
                "a session opened from a snapshot has no host directory to apply to: take its patch"
            )
        async with activity.active():  # a paused session is resumed for the read (frozen again by it)
            return await changesets.changes(session.workspace, apply=apply, group=session.group)

    async def close(self, session_id: str) -> bool:
        """End a session: every process in it is dead when this returns. False when it was not open
        (closing twice is no error)."""
        session = self._sessions.get(check_session_id(session_id))
        if session is None or session.watcher is None:
            return False
        session.watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await session.watcher
        if self._sessions.get(session.info.id) is session:  # cancelled before its first step: no finally ran
            await self._teardown(session)
        return True

    # -- snapshots, fork, pause, extend (:class:`~ironflow.sessions.backend.SessionControls`) --

    def _info(self, session: starter.StartedSession) -> SessionInfo:
        activity = self._activity.get(session.info.id)
        return dataclasses.replace(session.info, paused=activity is not None and activity.freezer.paused)

    async def release_run(self, run_id: str) -> int:
        """Close every session opened for ``run_id``; returns how many."""
        ids = [s.info.id for s in self._sessions.values() if s.info.run_id == run_id]
        for session_id in ids:
            await self.close(session_id)
        return len(ids)

    async def keep(self) -> None:
        """Let go of the sessions with a record (``keep_sessions``: each lives on to its TTL, and the next
        server serves it again); close the pool and every other session."""
        for pool in self._pools():
            await pool.aclose()
        self._releasing = True
        for session_id in list(self._sessions):
            session = self._sessions[session_id]
            if session_id not in self._kept:
                await self.close(session_id)
                continue
            if activity := self._activity.pop(session_id, None):
                await activity.freezer.resume()  # a paused one runs again: nothing here will thaw it
            if session.watcher is not None:
                session.watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await session.watcher
            self._sessions.pop(session_id, None)
            log.info("sandbox session %s kept for the next server", session_id)

    async def aclose(self) -> None:
        """Close the pool (every warm sandbox torn down), then every session."""
        for pool in self._pools():
            await pool.aclose()
        gone, self._gone = self._gone, []
        for record in gone:  # an earlier server's, never served here
            await adoption.clean(record, self.provider.processes.support)
        for session_id in list(self._sessions):
            await self.close(session_id)

    async def __aenter__(self) -> LocalSessions:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
