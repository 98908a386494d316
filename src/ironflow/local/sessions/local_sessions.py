"""Local sandbox sessions: a bubblewrap or gVisor sandbox kept open, with the runtime inside it.

The sandbox is the provider's own (the same argv from :mod:`~ironflow.local.sandbox.argv`,
the same seccomp filter, limits and cgroup as :meth:`LocalSandboxProvider.run_command`, no
network); its one process is :mod:`ironflow.sandbox_runtime.server`, shown read-only at
:data:`RUNTIME_PATH`. Under bubblewrap it listens on a unix socket the worker made in the
session's private directory (0700) and passed in as an inherited fd; under gVisor the socket
is made inside, in a host directory only gVisor's root can enter
(:mod:`~ironflow.local.sessions.gvisor_runtime`). The per-session token goes in on stdin, so neither
is on an argv or in the environment of the commands the runtime starts. The runtime keeps its
commands out of its reach (``--isolate-commands``): under bubblewrap they run in a pid namespace
of their own (the runtime keeps ``CAP_SYS_ADMIN`` in the sandbox's user namespace for that, then
drops every capability), under gVisor with a uid apart from the runtime's real and saved one.

Every session is reaped: :meth:`LocalSessions.close`, its TTL, the runtime's idle timeout,
or the death of this process (the sandbox's first process, bwrap or ``runsc run``, gets
SIGKILL when its parent dies, and takes the sandbox down: bubblewrap's pid namespace, runsc's
sandbox and gofer; the next :class:`LocalSessions` on the machine sweeps the directory, runsc's
state in it, and :func:`~ironflow.local.sandbox.cgroups.probe` the cgroup). The sandbox is this
process's child: sessions live as long as the process that opened them (``ironflow sandbox
serve`` for the CLI).
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import ctypes
import dataclasses
import functools
import logging
import os
import secrets
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from typing import Final

from ironflow import errors
from ironflow.claude import layout
from ironflow.local import workdirs
from ironflow.local.sandbox import argv as sandbox_argv
from ironflow.local.sandbox import bwrap, cgroups, environment, gvisor, launch
from ironflow.local.sandbox import limits as sandbox_limits
from ironflow.local.sessions import agents, changesets, gvisor_runtime
from ironflow.local.sessions.provided import LocalSandbox
from ironflow.local.workspaces import copies as local_workspaces
from ironflow.results import AgentResult
from ironflow.sandbox_runtime import SERVER_PATH
from ironflow.secrets import Secret
from ironflow.sessions.client import AsyncSandbox, RuntimeClient
from ironflow.sessions.values import OpenOptions, SessionInfo, SessionNotFound, check_session_id
from ironflow.steps import AgentConfig
from ironflow.workspaces import WORKSPACE_PATH, WorkspaceChanges

__all__ = ["DEFAULT_MAX_UPLOAD_BYTES", "RUNTIME_DIR", "RUNTIME_PATH", "LocalSessions"]

log = logging.getLogger("ironflow.local")

#: Where the runtime's directory appears inside a bubblewrap sandbox (a new top-level path: no host dir
#: is touched); gVisor's is :data:`~ironflow.local.sessions.gvisor_runtime.RUNTIME_DIR`.
RUNTIME_DIR: Final = "/ironflow-runtime"
RUNTIME_PATH: Final = f"{RUNTIME_DIR}/server.py"
#: The largest single upload the runtime accepts (413 past it).
DEFAULT_MAX_UPLOAD_BYTES: Final = 1 << 30
_READY: Final = b"ironflow-runtime: ready"
_START_TIMEOUT_S: Final = 30.0
#: A session directory's name starts so (short: its runtime socket's path has a length limit).
_DIR_PREFIX: Final = "ifs-"
_SOCKET: Final = "rt.sock"
_MAX_SOCKET_PATH: Final = 107
_PR_SET_PDEATHSIG: Final = 1
#: The runtime's commands in a pid namespace of their own, the runtime without capability nor dumpable
#: (:mod:`ironflow.sandbox_runtime.confine`); it refuses to start if it cannot. gVisor's:
#: :data:`~ironflow.local.sessions.gvisor_runtime.RUNTIME_ISOLATION`.
_ISOLATE: Final = "--isolate-commands"


@dataclasses.dataclass(eq=False)
class _Session:
    info: SessionInfo
    directory: str
    socket_path: str
    token: Secret
    proc: asyncio.subprocess.Process
    group: cgroups.SandboxCgroup | None
    watcher: asyncio.Task[None] | None = None
    bound: asyncio.Task[None] | None = None
    workspace: local_workspaces.PreparedWorkspace | None = None
    #: With ``agent=True``: the session's proxy token, and what closes its proxy (revoking it).
    agent_token: Secret | None = None
    proxy: contextlib.AsyncExitStack | None = None


class LocalSessions:
    """The sessions this process opened on the local provider, by id.

    Args:
        provider: its isolation (bubblewrap or gVisor), limits, sizes and host uid shape every session.
        state_dir: where each session's private directory goes (its runtime socket); default the
            system's temp dir. Keep it short: a unix socket path holds at most 107 bytes.
        max_upload_bytes: the largest file a session accepts in one upload.

    Raises:
        SandboxError: gVisor isolation and no runsc on this machine (one line naming it).
        ConfigError: ``state_dir`` too long for a socket path; a credential in the provider's env.
    """

    backend: Final = "local"

    def __init__(
        self,
        provider: LocalSandbox,
        *,
        state_dir: str | None = None,
        max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES,
    ) -> None:
        self.provider = provider
        if self.provider.env:
            environment.sandbox_env(self.provider.env)
        self._runsc = sandbox_argv.which("runsc") if self.provider.isolation == "gvisor" else ""
        self.state_dir = os.path.realpath(state_dir or self.provider.temp_dir or tempfile.gettempdir())
        if len(gvisor_runtime.host_socket(os.path.join(self.state_dir, _DIR_PREFIX + "x" * 8))) > _MAX_SOCKET_PATH:
            raise errors.ConfigError(
                f"state_dir '{self.state_dir}' is too long for a unix socket path: use a shorter one"
            )
        self.max_upload_bytes = max_upload_bytes
        self._sessions: dict[str, _Session] = {}
        self._ended: dict[str, str] = {}  # why a session ended that was stopped (workspace past its bound)
        # The provider's shape and processes: the same sandbox as its plain commands, not a copy.
        self._shape = self.provider.shape()
        self._processes: launch.SandboxProcesses = self.provider.processes
        self._python = os.path.realpath(sys.executable)  # its prefix is shown read-only, as for the proxy relay
        self._libc = ctypes.CDLL(None, use_errno=True)  # loaded before any fork: the child only calls prctl
        workdirs.sweep(self.state_dir, _DIR_PREFIX)

    # -- opening --

    async def open(self, options: OpenOptions | None = None, *, agent: bool = False) -> AsyncSandbox:
        """A new session and a handle on it; the session ends at ``options.ttl`` seconds at the latest.
        A ``workspace`` is copied (or cloned) as a step's is and is the runtime's working
        directory at ``/workspace``; :meth:`changes` gives what changed there. ``agent`` gives
        the session its own auth proxy (one token, revoked at close) for :meth:`agent` steps.

        Raises:
            SandboxError: bubblewrap, runsc or the runtime did not start.
            StepConfigError: ``env`` names a credential variable.
        """
        options = options or OpenOptions()
        ttl, idle_timeout, run_id, workspace = options.ttl, options.idle_timeout, options.run_id, options.workspace
        if agent and self.provider.isolation != "bwrap":
            raise errors.ConfigError("agent sessions need isolation 'bwrap': gVisor sessions have no proxy relay yet")
        run_env = environment.sandbox_env({**self.provider.env, **options.env})
        session_id = "sbx-" + secrets.token_hex(8)
        directory = workdirs.marked_dir(self.state_dir, _DIR_PREFIX)
        proxy = contextlib.AsyncExitStack()
        try:
            prepared = None if workspace is None else await changesets.prepare(self.provider, workspace, directory)
            socket_path, token = (None, None)
            if agent:
                socket_path, token = await agents.open_proxy(proxy, self.provider, directory, run_id=run_id, ttl=ttl)
            session = await self._start(session_id, directory, run_env, idle_timeout, prepared, socket_path)
        except BaseException:
            await proxy.aclose()
            shutil.rmtree(directory, ignore_errors=True)
            raise
        session.agent_token, session.proxy = token, proxy
        now = time.time()
        session.info = SessionInfo(
            session_id, "local", self.provider.isolation, now, now + ttl, dict(options.labels), run_id
        )
        self._sessions[session_id] = session
        session.watcher = asyncio.create_task(self._watch(session, ttl))
        if prepared is not None:  # killed once its copy holds more than the workspace's max_total_bytes
            kill = functools.partial(launch.kill_tree, session.proc, session.group)
            session.bound = changesets.stop_past_bound(prepared, session_id, self._ended, kill)
        log.info("sandbox session %s opened (ttl %.0fs)", session_id, ttl)
        return self._handle(session)

    async def _start(
        self,
        session_id: str,
        directory: str,
        env: Mapping[str, str],
        idle_timeout: float | None,
        prepared: local_workspaces.PreparedWorkspace | None = None,
        proxy_socket: str | None = None,
    ) -> _Session:
        token = Secret(secrets.token_urlsafe(32))
        root = layout.SANDBOX_HOME if prepared is None else WORKSPACE_PATH
        options: tuple[str, ...] = ("--token-fd", "0", "--workspace", root)
        options += ("--max-upload-bytes", str(self.max_upload_bytes))
        if idle_timeout is not None:
            options += ("--idle-timeout", str(idle_timeout))
        writable = () if prepared is None else (bwrap.WritableMount(prepared.copy, WORKSPACE_PATH),)
        if self.provider.isolation == "gvisor":
            proc, group, socket_path = await self._start_gvisor(directory, env, options, writable)
        else:
            proc, group, socket_path = await self._start_bwrap(directory, env, options, writable, proxy_socket)
        info = SessionInfo(session_id, "local", "", 0, 0)
        session = _Session(info, directory, socket_path, token, proc, group, workspace=prepared)
        try:
            await self._handshake(session)
        except BaseException:
            await asyncio.shield(launch.teardown(proc, group))
            raise
        return session

    async def _start_bwrap(
        self,
        directory: str,
        env: Mapping[str, str],
        options: tuple[str, ...],
        writable: tuple[bwrap.WritableMount, ...],
        proxy_socket: str | None = None,
    ) -> tuple[asyncio.subprocess.Process, cgroups.SandboxCgroup | None, str]:
        """bubblewrap with the runtime on a socket made here, passed in as an inherited fd (and,
        for agent steps, the relay to the session's proxy and the Claude Code CLI shown)."""
        socket_path = os.path.join(directory, _SOCKET)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(socket_path)
            listener.listen(128)
            python = self._python
            listen = ("--listen-fd", str(listener.fileno()), _ISOLATE)
            command = (python, "-I", "-S", RUNTIME_PATH, *listen, *options)
            with sandbox_argv.sandbox_fds(self.provider.isolation, env) as fds:
                argv, binds = sandbox_argv.render(
                    self._shape,
                    command,
                    tmp=directory,
                    working_dir=None,
                    mounts=(bwrap.ReadOnlyMount(os.path.dirname(SERVER_PATH), RUNTIME_DIR),),
                    proxy_socket=proxy_socket,
                    env=env,
                    writable=writable,
                    extra_tools=(python,) if proxy_socket is None else (python, self.provider.claude_cli()),
                    fds=fds,
                    keep_sys_admin=True,  # the runtime's, to isolate its commands; it drops it before serving
                )
                proc, group = await self._spawn(argv, (*fds.inherited, listener.fileno()), binds)
        finally:
            listener.close()  # the sandbox holds the only copy now: the socket dies with it
        return proc, group, socket_path

    async def _start_gvisor(
        self,
        directory: str,
        env: Mapping[str, str],
        options: tuple[str, ...],
        writable: tuple[bwrap.WritableMount, ...],
    ) -> tuple[asyncio.subprocess.Process, cgroups.SandboxCgroup | None, str]:
        """``runsc run`` with the runtime on a socket gVisor's root makes in the session's socket dir."""
        python = self._python
        listen = str(gvisor_runtime.LISTEN_FD)
        command = (python, "-I", "-S", gvisor_runtime.RUNTIME_PATH, "--listen-fd", listen, *options)
        shown = gvisor_runtime.runtime_settings(
            self._shape, command, python=python, runsc_path=self._runsc, writable=writable
        )
        doc = gvisor_runtime.spec(
            shown,
            env,
            runtime_source=os.path.dirname(SERVER_PATH),
            socket_source=os.path.join(directory, gvisor_runtime.SOCKET_SUBDIR),
        )
        bundle = gvisor_runtime.write_bundle(directory, doc)
        proc, group = await self._spawn(gvisor.gvisor_argv(shown, bundle), (), ())
        return proc, group, gvisor_runtime.host_socket(directory)

    async def _spawn(
        self, argv: list[str], fds: tuple[int, ...], binds: tuple[tuple[bytes, bytes], ...]
    ) -> tuple[asyncio.subprocess.Process, cgroups.SandboxCgroup | None]:
        """The sandbox in its own cgroup with the provider's rlimits, leading its own process group; its
        host process gets :data:`launch.RUNTIME_ENV`, the session's environment is in ``argv``'s fd or spec."""
        processes = self._processes
        group: cgroups.SandboxCgroup | None = None
        if processes.support.version:
            try:
                group = cgroups.SandboxCgroup(processes.support, processes.limits)
            except OSError as exc:
                raise errors.SandboxError(f"could not make the session's cgroup: {exc.strerror}") from None
        pairs = sandbox_limits.rlimits(
            processes.limits,
            nproc="pids" not in processes.support.controllers,
            data="memory" not in processes.support.controllers,
            gvisor=self.provider.isolation == "gvisor",
        )
        setup = self._dying_with_us(
            cgroups.child_setup(group.procs_files if group else (), pairs, processes.host_uid, binds)
        )
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                env=dict(launch.RUNTIME_ENV),
                cwd="/",
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
                pass_fds=fds,
                preexec_fn=setup,
            )
        except BaseException:
            if group is not None:
                await group.remove()
            raise
        return proc, group

    def _dying_with_us(self, setup: Callable[[], None]) -> Callable[[], None]:
        """``setup``, then SIGKILL for the sandbox's first process when this one dies: ``runsc run``
        has no ``--die-with-parent`` (its sandbox and gofer die with it). Set last: a uid change
        clears it."""
        prctl, parent = self._libc.prctl, os.getpid()

        def run() -> None:
            setup()
            prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.getppid() != parent:  # this process died before the prctl: no signal will come
                os._exit(1)

        return run

    async def _handshake(self, session: _Session) -> None:
        """Hand the token in on stdin, wait for the runtime's ready line (or its failure)."""
        proc = session.proc
        assert proc.stdin is not None
        assert proc.stderr is not None
        proc.stdin.write(session.token.reveal().encode() + b"\n")
        with contextlib.suppress(ConnectionError):
            await proc.stdin.drain()
        proc.stdin.close()
        lines: list[bytes] = []
        async with asyncio.timeout(_START_TIMEOUT_S):
            while line := await _stderr_line(proc.stderr):
                if line.startswith(_READY):
                    return
                if len(lines) < 20:
                    lines.append(line)
        code = await proc.wait()
        stderr = b"".join(lines).decode(errors="replace")
        sandbox_argv.raise_if_sandbox_failed(code or 1, stderr, self.provider.isolation)
        raise errors.SandboxError(f"the session runtime did not start: {errors.truncate(stderr.strip(), 500)}")

    async def _watch(self, session: _Session, ttl: float) -> None:
        """Until the sandbox ends or its TTL passes; then nothing of it is left."""
        assert session.proc.stderr is not None
        try:
            async with asyncio.timeout(ttl):
                while line := await _stderr_line(session.proc.stderr):
                    log.debug("sandbox session %s: %s", session.info.id, line[:300].decode(errors="replace").rstrip())
                await session.proc.wait()
            log.info("sandbox session %s ended (exit %s)", session.info.id, session.proc.returncode)
        except TimeoutError:
            log.info("sandbox session %s expired (ttl %.0fs)", session.info.id, ttl)
        finally:
            await asyncio.shield(self._teardown(session))

    async def _teardown(self, session: _Session) -> None:
        if session.bound is not None:
            session.bound.cancel()
        await launch.teardown(session.proc, session.group)
        if session.proxy is not None:
            await session.proxy.aclose()  # the session's proxy token is revoked here
        shutil.rmtree(session.directory, ignore_errors=True)
        self._sessions.pop(session.info.id, None)

    # -- using --

    def _get(self, session_id: str) -> _Session:
        session = self._sessions.get(check_session_id(session_id))
        if why := self._ended.get(session_id):  # stopped: ended now, even while its teardown runs
            raise SessionNotFound(f"sandbox session '{session_id}' ended: {why}")
        if session is None:
            raise SessionNotFound(f"no open sandbox session '{session_id}'")
        return session

    def _handle(self, session: _Session) -> AsyncSandbox:
        client = RuntimeClient(
            unix_path=session.socket_path, headers={"Authorization": f"Bearer {session.token.reveal()}"}
        )
        session_id = session.info.id

        async def closer() -> None:
            await self.close(session_id)

        return AsyncSandbox(session.info, client, closer)

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
        return [s.info for s in self._sessions.values()]

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
        return True

    async def release_run(self, run_id: str) -> int:
        """Close every session opened for ``run_id``; returns how many."""
        ids = [s.info.id for s in self._sessions.values() if s.info.run_id == run_id]
        for session_id in ids:
            await self.close(session_id)
        return len(ids)

    async def aclose(self) -> None:
        """Close every session."""
        for session_id in list(self._sessions):
            await self.close(session_id)

    async def __aenter__(self) -> LocalSessions:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


async def _stderr_line(stream: asyncio.StreamReader) -> bytes:
    """The next line of a session's stderr; a line past the reader's limit is dropped, not an error
    that ends the session (under gVisor a command may reach the runtime's stderr)."""
    while True:
        try:
            return await stream.readline()
        except ValueError:  # asyncio cleared the over-long line's bytes so far; its rest reads on
            continue
