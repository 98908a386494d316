"""Where the ``ironflow sandbox`` session commands find their sessions: a server, or a cluster.

With ``--provider FILE`` (``--backend k8s``, the default then, or ``agent-sandbox``) they
talk to the cluster the file names, as ``ironflow exec --backend k8s`` does: a session is
its pod (or its SandboxClaim), found by its id's labels, so no process has to hold it
(opened so, it lives to its TTL; an idle timeout needs a server to watch it, and is
refused). Otherwise they are clients of ``ironflow sandbox serve`` (``--server``,
``$IRONFLOW_SANDBOX_SERVER``), whichever backend it serves. Every bad combination exits 2
with one line.
"""

from __future__ import annotations

import builtins
import contextlib
from collections.abc import AsyncIterator, Mapping
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Protocol

import typer

from ironflow.auth_proxy.git_hosts import GitHosts
from ironflow.cli import exits
from ironflow.cli.inputs import Backend
from ironflow.sessions.client import AsyncSandbox
from ironflow.sessions.remote import SERVER_ENV, RemoteSessions
from ironflow.sessions.values import SessionInfo
from ironflow.workspaces import Workspace, WorkspaceChanges

if TYPE_CHECKING:
    from ironflow.k8s.sessions.pod_sessions import K8sSessions

__all__ = [
    "BackendOption",
    "ClusterSessions",
    "Mode",
    "ProviderOption",
    "ServerOption",
    "SessionClient",
    "Target",
    "choose",
    "session_client",
]

ServerOption = Annotated[
    str | None,
    typer.Option("--server", envvar=SERVER_ENV, help="The `ironflow sandbox serve` URL.", show_default=False),
]
BackendOption = Annotated[
    Backend | None,
    typer.Option("--backend", help="local, k8s or agent-sandbox (with --provider: k8s).", show_default=False),
]
ProviderOption = Annotated[
    Path | None,
    typer.Option("--provider", help="k8s / agent-sandbox provider file: its cluster, no server.", show_default=False),
]


class Mode(StrEnum):
    SERVER = "server"
    CLUSTER = "cluster"


class Target:
    """What one command names: a server, a backend, a provider file."""

    def __init__(
        self, server: str | None, backend: str | None, provider: Path | None, git_hosts: GitHosts | None = None
    ) -> None:
        self.server, self.backend, self.provider = server, backend, provider
        #: The git host credential a cluster session's git workspace clones with (kept in the proxy).
        self.git_hosts = git_hosts


def choose(target: Target) -> Mode:
    """The cluster with ``--provider``, else the server; exits 2 naming a bad combination."""
    backend = target.backend
    if backend not in (None, "local", "k8s", "agent-sandbox"):
        exits.fail(f"invalid --backend '{backend}': use local, k8s or agent-sandbox")
    if target.provider is not None:
        if backend == "local":
            exits.fail("--provider is for --backend k8s or agent-sandbox: local sessions live in `sandbox serve`")
        return Mode.CLUSTER
    if backend in ("k8s", "agent-sandbox") and not target.server:
        exits.fail(f"--backend {backend} needs --provider provider.yaml, or the --server of a `sandbox serve`")
    return Mode.SERVER


class SessionClient(Protocol):
    """The session commands' view of either place (:class:`RemoteSessions`, :class:`ClusterSessions`)."""

    async def open(
        self,
        *,
        ttl: float = ...,
        idle_timeout: float | None = ...,
        labels: Mapping[str, str] | None = ...,
        run_id: str | None = ...,
        env: Mapping[str, str] | None = ...,
        backend: str | None = ...,
        workspace: str | None = ...,
    ) -> AsyncSandbox: ...

    async def connect(self, session_id: str) -> AsyncSandbox: ...

    async def changes(self, session_id: str, *, apply: bool = ...) -> WorkspaceChanges: ...

    async def list(self) -> builtins.list[SessionInfo]: ...

    async def close(self, session_id: str) -> bool: ...


class ClusterSessions:
    """:class:`K8sSessions` as a client of the cluster: ``list`` is every session pod of the
    namespace; leaving lets go of the sessions, never closes one."""

    def __init__(self, sessions: K8sSessions) -> None:
        self.sessions = sessions

    async def open(
        self,
        *,
        ttl: float = 3600.0,
        idle_timeout: float | None = None,
        labels: Mapping[str, str] | None = None,
        run_id: str | None = None,
        env: Mapping[str, str] | None = None,
        backend: str | None = None,
        workspace: str | None = None,
    ) -> AsyncSandbox:
        spec = None if workspace is None else Workspace.parse(workspace)
        return await self.sessions.open(
            ttl=ttl, idle_timeout=idle_timeout, labels=labels, run_id=run_id, env=env, workspace=spec
        )

    async def changes(self, session_id: str, *, apply: bool = False) -> WorkspaceChanges:
        return await self.sessions.changes(session_id, apply=apply)

    async def connect(self, session_id: str) -> AsyncSandbox:
        return await self.sessions.connect(session_id)

    async def list(self) -> builtins.list[SessionInfo]:
        return await self.sessions.find()

    async def close(self, session_id: str) -> bool:
        return await self.sessions.close(session_id)


@contextlib.asynccontextmanager
async def session_client(target: Target) -> AsyncIterator[SessionClient]:
    """The client of the place :func:`choose` picked (exits 2 on a bad provider file)."""
    if choose(target) is Mode.CLUSTER:
        # The cluster's modules load only when a command talks to one (`sandbox exec --help` stays light).
        from ironflow.cli import backends
        from ironflow.k8s.sessions.pod_sessions import K8sSessions

        sessions: K8sSessions
        if target.backend == "agent-sandbox":
            from ironflow.agent_sandbox.claim_sessions import AgentSandboxSessions

            sessions = AgentSandboxSessions(backends.agent_sandbox_provider(target.provider, target.git_hosts).settings)
        else:
            pods = backends.k8s_provider(target.provider)
            if target.git_hosts is not None:
                pods = backends.with_git_hosts(pods, target.git_hosts)
            sessions = K8sSessions(pods.settings)
        try:
            yield ClusterSessions(sessions)
        finally:
            await sessions.release()
        return
    async with RemoteSessions(target.server) as remote:
        yield remote
