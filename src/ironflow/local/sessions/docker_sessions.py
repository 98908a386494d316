"""Starting a local session's sandbox under Docker: a container of the runner image running the runtime (I/O).

The container and its posture are :mod:`~ironflow.local.sessions.docker_runtime`'s; this
module makes its directories, starts it with the ``docker`` client the provider checked, waits
until the runtime is set up, hands the token in on the attached stdin
(:meth:`SessionStarter.hand_out`, as for bubblewrap and gVisor), takes the socket's directory
back from uid 10001 once the runtime listens, and removes the container at teardown. An agent's or
egress proxy's sockets (in the 0700 session directory) are opened to the container's uid, as a
Docker step's are. The pool
and the table of open sessions are :class:`~ironflow.local.sessions.local_sessions.LocalSessions`',
as for the other runtimes.

A container outlives a SIGKILLed worker (the daemon holds it, not this process): built, the
starter removes the session containers on the daemon whose owner is surely gone (this boot,
this pid namespace, no such process) or that have ended (:func:`docker_runtime.stale`).

Root only: the socket's directory is handed to uid 10001 and back with ``chown``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import subprocess
from collections.abc import Mapping
from typing import Final

from ironflow import errors, labels
from ironflow.claude import layout
from ironflow.local import workdirs
from ironflow.local.sandbox import docker, docker_engine, launch
from ironflow.local.sessions import docker_runtime, starter
from ironflow.local.sessions.provided import LocalSandbox
from ironflow.local.workspaces import copies as local_workspaces
from ironflow.sandbox_runtime import SERVER_PATH
from ironflow.sessions.values import SessionInfo

__all__ = ["ROOT_ONLY", "DockerStarter", "sweep"]

log = logging.getLogger("ironflow.local")

ROOT_ONLY: Final = (
    "Docker sessions need a worker running as root (the runtime's socket directory is handed to the "
    "container's uid 10001 and back): run as root or use isolation 'bwrap'"
)
_LIST_TIMEOUT_S: Final = 20.0


def sweep(engine: docker_engine.DockerEngine) -> int:
    """Remove the session containers whose owner is surely gone or that ended; how many."""
    fmt = '{{.ID}}\t{{.State}}\t{{.Label "' + labels.LABEL_OWNER + '"}}'
    filters = [arg for f in docker_runtime.FILTERS for arg in ("--filter", f)]
    try:
        done = subprocess.run(
            [engine.docker_path, "ps", "--all", "--no-trunc", *filters, "--format", fmt],
            env=dict(engine.env), capture_output=True, text=True, timeout=_LIST_TIMEOUT_S, check=False,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return 0
    listed = []
    for line in done.stdout.splitlines() if done.returncode == 0 else ():
        cid, state, owner = ([*line.split("\t"), "", ""])[:3]
        listed.append(docker_runtime.ListedContainer(cid, state, owner))
    gone = set()
    for row in listed:
        marked = workdirs.parse_marker(row.owner)
        if marked is not None and workdirs.surely_gone(marked):
            gone.add(row.owner)
    removed = docker_runtime.stale(listed, gone)
    if removed:
        subprocess.run(
            [engine.docker_path, "rm", "--force", *removed], env=dict(engine.env), capture_output=True,
            timeout=_LIST_TIMEOUT_S * 3, check=False, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        log.info("removed %d session container(s) whose owner is gone or that ended", len(removed))
    return len(removed)


class DockerStarter(starter.SessionStarter):
    """Starts the containers of one Docker provider's sessions and hands them out.

    Raises:
        ConfigError: the worker is not root; the provider has no Docker engine.
    """

    def __init__(self, provider: LocalSandbox) -> None:
        super().__init__(provider)
        if os.geteuid() != 0:
            raise errors.ConfigError(ROOT_ONLY)
        engine = provider.processes.containers
        if not isinstance(engine, docker_engine.DockerEngine):
            raise errors.ConfigError("Docker sessions need a provider built with isolation 'docker'")
        self._engine = engine
        sweep(engine)

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
    ) -> starter.WarmSandbox:
        """The session's container with ``env``, its runtime set up and waiting for :meth:`hand_out`;
        from then on its socket's directory is root's (torn down again if it never got there). A warm
        container binds no workspace (:func:`~ironflow.local.sessions.prewarm.binds_workspace`)."""
        if workspace_dir is not None:
            raise errors.ConfigError("a Docker session's container binds no warm workspace")
        for served in (proxy_socket, egress_socket):
            if served is not None:  # the container's uid connects; in the 0700 session dir only the bind reaches it
                os.chmod(served, 0o666)  # noqa: S103
        socket_dir = os.path.join(directory, docker_runtime.SOCKET_SUBDIR)
        os.mkdir(socket_dir, 0o700)
        os.chown(socket_dir, layout.SANDBOX_UID, layout.SANDBOX_UID)  # the runtime binds its socket here
        runtime_dir = os.path.join(directory, docker_runtime.RUNTIME_SUBDIR)
        os.mkdir(runtime_dir, 0o755)
        source = os.path.dirname(SERVER_PATH)
        # A copy of every module (the package's own directory may be out of uid 10001's reach): a list
        # here would have to follow each module the runtime gains.
        for name in sorted(n for n in os.listdir(source) if n.endswith(".py")):
            shutil.copyfile(os.path.join(source, name), os.path.join(runtime_dir, name))
            os.chmod(os.path.join(runtime_dir, name), 0o644)
        env_file = os.path.join(directory, "env")
        fd = os.open(env_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # the provider's env only
        with os.fdopen(fd, "wb") as out:
            out.write(docker.env_file(env))
        argv = docker_runtime.session_argv(
            self._shape,
            directory,
            env_file=env_file,
            workspace_copy=None if prepared is None else prepared.copy,
            max_upload_bytes=max_upload_bytes,
            owner=workdirs.current_owner(),
            proxy_socket=proxy_socket,
            egress_socket=egress_socket,
        )
        proc = await asyncio.create_subprocess_exec(
            *argv,
            env=dict(self._engine.env),
            cwd="/",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        warm = starter.WarmSandbox(directory, docker_runtime.host_socket(directory), proc, None, workspace=prepared)
        try:
            await self._wait_for(proc, starter.WARM)
        except BaseException:
            await asyncio.shield(self.teardown(warm))
            raise
        return warm

    async def hand_out(
        self,
        warm: starter.WarmSandbox,
        info: SessionInfo,
        *,
        env: Mapping[str, str],
        idle_timeout: float | None,
        workspace: local_workspaces.PreparedWorkspace | None = None,
    ) -> starter.StartedSession:
        """:meth:`SessionStarter.hand_out`, then the socket's directory is root's (0700): the runtime
        has bound its socket, and no command has run yet (none runs before the host, which alone
        holds the token, asks): from now on none can reach the socket's path or replace it."""
        session = await super().hand_out(warm, info, env=env, idle_timeout=idle_timeout, workspace=workspace)
        try:
            os.chown(os.path.dirname(session.socket_path), 0, 0)
        except BaseException:
            await asyncio.shield(self.teardown(session))
            raise
        return session

    async def kill(self, sandbox: starter.WarmSandbox | starter.StartedSession) -> None:
        """Remove the container: its client then ends, and its waiter tears the rest down."""
        await self._engine.remove(docker.container_id(sandbox.directory))

    async def teardown(self, sandbox: starter.WarmSandbox | starter.StartedSession) -> None:
        """Remove the container (a killed client would leave it running), then reap its client."""
        await self._engine.remove(docker.container_id(sandbox.directory))
        await launch.teardown(sandbox.proc, None)

    async def _wait_for(self, proc: asyncio.subprocess.Process, marker: bytes) -> None:
        """Until the runtime says ``marker``; the client's or the runtime's failure raises, named."""
        try:
            await super()._wait_for(proc, marker)
        except errors.SandboxError as exc:
            raise errors.SandboxError(f"the Docker session did not start: {exc}") from None
