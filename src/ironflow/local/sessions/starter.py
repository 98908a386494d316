"""Starting a local session's sandbox: bubblewrap or ``runsc run`` with the runtime inside, until it is ready.

The sandbox is the provider's own (the same argv from :mod:`~ironflow.local.sandbox.argv`, the same
seccomp filter, limits and cgroup as :meth:`LocalSandboxProvider.run_command`, no network: with an
agent's or an egress proxy, only the relay to it a one-shot step of that isolation has); its one
process is :mod:`ironflow.sandbox_runtime.server`, shown read-only at :data:`RUNTIME_PATH` (under
gVisor its code is packed in one file). Under bubblewrap it listens on a unix socket the worker made
in the session's private directory (0700) and passed in as an inherited fd; under gVisor the socket
is made inside, in a host directory only gVisor's root can enter, beside the runtime's code
(:mod:`~ironflow.local.sessions.gvisor_runtime`). Starting is two steps, the same for a cold open
and a pool: :meth:`SessionStarter.launch` starts the sandbox with the provider's environment and
waits until the runtime is set up (``--prewarm``); :meth:`SessionStarter.hand_out` issues the
session's token and hands it in on stdin with the session's own environment (its egress token, its
``env``) and idle timeout, so none of them is on an argv, in the runtime's environment, or anywhere
in a sandbox that waits in a pool. The runtime keeps its commands out of its reach
(``--isolate-commands``): under bubblewrap they run in a pid namespace of their own (the runtime
keeps ``CAP_SYS_ADMIN`` in the sandbox's user namespace for that, then drops every capability),
under gVisor with a uid apart from the runtime's real and saved one. The sandbox's first process
gets SIGKILL when this process dies (bubblewrap by its ``--die-with-parent``, ``runsc run`` by a
parent-death signal its first process asks for: :func:`~ironflow.local.sandbox.spawn.start`).

It never keeps a session: the table of open sessions, their TTL and their teardown are
:class:`~ironflow.local.sessions.local_sessions.LocalSessions`'.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import secrets
import socket
import sys
from collections.abc import Mapping
from typing import Final

from ironflow import errors, sandbox_runtime
from ironflow.claude import layout
from ironflow.local.sandbox import argv as sandbox_argv
from ironflow.local.sandbox import bwrap, cgroups, gvisor, launch
from ironflow.local.sandbox import limits as sandbox_limits
from ironflow.local.sandbox import spawn as sandbox_spawn
from ironflow.local.sessions import gvisor_runtime
from ironflow.local.sessions.provided import LocalSandbox
from ironflow.local.workspaces import copies as local_workspaces
from ironflow.sandbox_runtime import ENTRY, SERVER_PATH
from ironflow.secrets import Secret
from ironflow.sessions.values import SessionInfo
from ironflow.workspaces import WORKSPACE_PATH

__all__ = ["RUNTIME_DIR", "RUNTIME_PATH", "WARM", "SessionStarter", "StartedSession", "WarmSandbox", "stderr_line"]

#: Where the runtime's directory appears inside a bubblewrap sandbox (a new top-level path: no host dir
#: is touched); gVisor's is :data:`~ironflow.local.sessions.gvisor_runtime.RUNTIME_DIR`.
RUNTIME_DIR: Final = "/ironflow-runtime"
RUNTIME_PATH: Final = f"{RUNTIME_DIR}/{ENTRY}"
_READY: Final = b"ironflow-runtime: ready"
#: What the runtime says once set up, waiting for its hand-out line.
WARM: Final = b"ironflow-runtime: warm"
#: The runtime sets itself up, says :data:`WARM` and waits for the hand-out line (the token) on stdin.
_PREWARM: Final = "--prewarm"
_START_TIMEOUT_S: Final = 30.0
_SOCKET: Final = "rt.sock"
#: The runtime's commands in a pid namespace of their own, the runtime without capability nor dumpable
#: (:mod:`ironflow.sandbox_runtime.confine`); it refuses to start if it cannot. gVisor's:
#: :data:`~ironflow.local.sessions.gvisor_runtime.RUNTIME_ISOLATION`.
_ISOLATE: Final = "--isolate-commands"


@dataclasses.dataclass(eq=False)
class WarmSandbox:
    """A session's sandbox started, its runtime set up and waiting for its hand-out: no token
    exists yet and nothing of a session's is in it (a pool holds it so, :mod:`~ironflow.sessions.pools`)."""

    directory: str
    socket_path: str
    proc: asyncio.subprocess.Process
    group: cgroups.SandboxCgroup | None
    workspace: local_workspaces.PreparedWorkspace | None = None
    #: A pool's member: the empty directory bound at ``/workspace``, filled (never replaced: the bind
    #: holds its inode) when a session with a workspace takes it; None when it binds none.
    workspace_dir: str | None = None


@dataclasses.dataclass(eq=False)
class StartedSession:
    """One open session: its sandbox as started (process, cgroup, runtime socket and the token issued
    at hand-out) and what the session table adds (its watcher, workspace bound and agent proxy)."""

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


class SessionStarter:
    """Starts the sandboxes of one provider's sessions, each with the runtime inside, and hands them out.

    Raises:
        SandboxError: gVisor isolation and no runsc on this machine (one line naming it).
    """

    def __init__(self, provider: LocalSandbox, *, outlive: bool = False) -> None:
        """``outlive``: the sandboxes may outlive this process (a server kept across restarts); each
        then ends itself at its TTL, and its cgroup is named so no sweep takes it."""
        if outlive and provider.isolation != "bwrap":
            raise errors.ConfigError(f"sessions kept across a restart need isolation 'bwrap', not {provider.isolation}")
        self.provider, self.outlive = provider, outlive
        self._runsc = sandbox_argv.which("runsc") if self.provider.isolation == "gvisor" else ""
        # The provider's shape and processes: the same sandbox as its plain commands, not a copy.
        self._shape = self.provider.shape()
        self._processes: launch.SandboxProcesses = self.provider.processes
        self._python = os.path.realpath(sys.executable)  # its prefix is shown read-only, as for the proxy relay

    async def launch(
        self,
        directory: str,
        env: Mapping[str, str],
        prepared: local_workspaces.PreparedWorkspace | None = None,
        proxy_socket: str | None = None,
        *,
        max_upload_bytes: int,
        egress_socket: str | None = None,
        agent: bool = False,
        workspace_dir: str | None = None,
    ) -> WarmSandbox:
        """The session's sandbox with ``env``, its runtime set up and waiting for :meth:`hand_out`
        (torn down again if it never got there). ``workspace_dir``: a pool's member binds this empty
        directory at ``/workspace``, for a session with a workspace to fill before its hand-out."""
        bound = workspace_dir if prepared is None else prepared.copy
        root = layout.SANDBOX_HOME if bound is None else WORKSPACE_PATH
        options: tuple[str, ...] = ("--token-fd", "0", _PREWARM, "--workspace", root)
        options += ("--max-upload-bytes", str(max_upload_bytes))
        writable = () if bound is None else (bwrap.WritableMount(bound, WORKSPACE_PATH),)
        sandbox_runtime.compiled()  # the runtime's bytecode, for the sandbox's Python (gVisor: for packed()) to read
        if self.provider.isolation == "gvisor":
            proc, group, socket_path = await self._start_gvisor(
                directory, env, options, writable, proxy_socket, egress_socket, agent
            )
        else:
            proc, group, socket_path = await self._start_bwrap(
                directory, env, options, writable, proxy_socket, egress_socket, agent
            )
        warm = WarmSandbox(directory, socket_path, proc, group, workspace=prepared, workspace_dir=workspace_dir)
        try:
            await self._wait_for(proc, WARM)
        except BaseException:
            await asyncio.shield(self.teardown(warm))
            raise
        return warm

    async def hand_out(
        self,
        warm: WarmSandbox,
        info: SessionInfo,
        *,
        env: Mapping[str, str],
        idle_timeout: float | None,
        workspace: local_workspaces.PreparedWorkspace | None = None,
    ) -> StartedSession:
        """``warm`` as the session ``info``: its token issued now and handed in with the session's own
        ``env`` and idle timeout on stdin, once; the runtime serves from then on. A pool's member that
        binds a workspace is handed out with the session's ``workspace``, copied into its
        :attr:`WarmSandbox.workspace_dir` already.

        Raises:
            SandboxError: the runtime is gone or refused the hand-out (the sandbox is torn down).
        """
        token = Secret(secrets.token_urlsafe(32))
        handed: dict[str, object] = {"token": token.reveal(), "env": dict(env), "idle_timeout": idle_timeout}
        if self.outlive:
            handed["expires_at"] = info.expires_at
        line = json.dumps(handed)
        proc = warm.proc
        assert proc.stdin is not None
        try:
            if (warm.workspace_dir is None) != (workspace is None):  # its files would be bound nowhere, or none
                raise errors.SandboxError("a warm sandbox that binds a workspace is for a session with one, and only")
            proc.stdin.write(line.encode() + b"\n")
            with contextlib.suppress(ConnectionError):
                await proc.stdin.drain()
            proc.stdin.close()
            await self._wait_for(proc, _READY)
        except BaseException:
            await asyncio.shield(self.teardown(warm))
            raise
        workspace = workspace or warm.workspace
        return StartedSession(info, warm.directory, warm.socket_path, token, proc, warm.group, workspace=workspace)

    async def kill(self, sandbox: WarmSandbox | StartedSession) -> None:
        """Kill everything ``sandbox`` started; whoever waits for it then tears it down."""
        await launch.kill_tree(sandbox.proc, sandbox.group)

    async def teardown(self, sandbox: WarmSandbox | StartedSession) -> None:
        """Kill everything ``sandbox`` started and reap it (its directory is the caller's)."""
        await launch.teardown(sandbox.proc, sandbox.group)

    async def _start_bwrap(
        self,
        directory: str,
        env: Mapping[str, str],
        options: tuple[str, ...],
        writable: tuple[bwrap.WritableMount, ...],
        proxy_socket: str | None = None,
        egress_socket: str | None = None,
        agent: bool = True,
    ) -> tuple[asyncio.subprocess.Process, cgroups.SandboxCgroup | None, str]:
        """bubblewrap with the runtime on a socket made here, passed in as an inherited fd (and,
        for agent steps, the relay to the session's proxy and the Claude Code CLI shown; with an
        egress policy, the relay to the egress proxy)."""
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
                    extra_tools=(python, self.provider.claude_cli()) if agent and proxy_socket else (python,),
                    fds=fds,
                    egress_socket=egress_socket,
                    keep_sys_admin=True,  # the runtime's, to isolate its commands; it drops it before serving
                    ptys=True,  # commands in a terminal (``pty``)
                    die_with_parent=not self.outlive,
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
        proxy_socket: str | None = None,
        egress_socket: str | None = None,
        agent: bool = False,
    ) -> tuple[asyncio.subprocess.Process, cgroups.SandboxCgroup | None, str]:
        """``runsc run`` with the runtime on a socket gVisor's root makes in the session's socket dir
        (with a proxy, behind a one-shot step's relay: :func:`sandbox_argv.proxy_bridge`)."""
        python = self._python
        command = gvisor_runtime.runtime_command(python, *options)
        bridge = None if proxy_socket is None else sandbox_argv.proxy_bridge(proxy_socket, egress_socket)
        tools = (self.provider.claude_cli(),) if agent and bridge is not None else ()
        for tool in (*tools, *(() if bridge is None else (bridge.python,))):  # the relay's Python runs outside
            if problem := sandbox_argv.tool_problem("gvisor" if tool in tools else "bwrap", tool):
                raise errors.ConfigError(problem)
        shown = gvisor_runtime.runtime_settings(
            self._shape, command, python=python, runsc_path=self._runsc, writable=writable, proxy=bridge, tools=tools
        )
        doc = gvisor_runtime.spec(shown, env, socket_source=os.path.join(directory, gvisor_runtime.SOCKET_SUBDIR))
        bundle = gvisor_runtime.write_bundle(directory, doc, sandbox_runtime.packed())
        proc, group = await self._spawn(gvisor.gvisor_argv(shown, bundle), (), ())
        return proc, group, gvisor_runtime.host_socket(directory)

    async def _spawn(
        self, argv: list[str], fds: tuple[int, ...], binds: tuple[tuple[bytes, bytes], ...]
    ) -> tuple[asyncio.subprocess.Process, cgroups.SandboxCgroup | None]:
        """The sandbox in its own cgroup with the provider's rlimits, leading its own process group; its
        host process gets :data:`launch.RUNTIME_ENV`, the session's environment is in ``argv``'s fd or spec."""
        processes = self._processes
        group = processes.new_group(kept=self.outlive)
        pairs = sandbox_limits.rlimits(
            processes.limits,
            nproc="pids" not in processes.support.controllers,
            data="memory" not in processes.support.controllers,
            gvisor=self.provider.isolation == "gvisor",
        )
        try:
            proc = await sandbox_spawn.start(
                argv,
                group=group,
                pairs=pairs,
                host_uid=processes.host_uid,
                binds=binds,
                env=launch.RUNTIME_ENV,
                pass_fds=fds,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
                # runsc run has no --die-with-parent; bubblewrap's dies with this process by its own flag.
                die_with_parent=self.provider.isolation == "gvisor",
            )
        except BaseException:
            if group is not None:
                await group.remove()
            raise
        return proc, group

    async def _wait_for(self, proc: asyncio.subprocess.Process, marker: bytes) -> None:
        """Until the runtime says ``marker`` on stderr; its failure (or its end) raises."""
        assert proc.stderr is not None
        lines: list[bytes] = []
        async with asyncio.timeout(_START_TIMEOUT_S):
            while line := await stderr_line(proc.stderr):
                if line.startswith(marker):
                    return
                if len(lines) < 20:
                    lines.append(line)
        code = await proc.wait()
        stderr = b"".join(lines).decode(errors="replace")
        sandbox_argv.raise_if_sandbox_failed(code or 1, stderr, self.provider.isolation)
        raise errors.SandboxError(f"the session runtime did not start: {errors.truncate(stderr.strip(), 500)}")


async def stderr_line(stream: asyncio.StreamReader) -> bytes:
    """The next line of a session's stderr; a line past the reader's limit is dropped, not an error
    that ends the session (under gVisor a command may reach the runtime's stderr)."""
    while True:
        try:
            return await stream.readline()
        except ValueError:  # asyncio cleared the over-long line's bytes so far; its rest reads on
            continue
