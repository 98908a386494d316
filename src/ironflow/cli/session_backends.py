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

import contextlib
from collections.abc import AsyncIterator
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from ironflow.auth_proxy.git_hosts import GitHosts
from ironflow.cli import exits
from ironflow.cli.inputs import Backend
from ironflow.sessions.backend import ClusterSessionBackend, SessionBackend
from ironflow.sessions.remote import RemoteSessions
from ironflow.sessions.serve_access import SERVER_ENV

__all__ = [
    "BackendOption",
    "Mode",
    "ProviderOption",
    "ServerOption",
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


@contextlib.asynccontextmanager
async def session_client(target: Target) -> AsyncIterator[SessionBackend]:
    """The sessions of the place :func:`choose` picked (exits 2 on a bad provider file). A cluster's
    are let go of at the end, never closed: each lives on to its TTL."""
    if choose(target) is Mode.CLUSTER:
        # The cluster's modules load only when a command talks to one (`sandbox exec --help` stays light).
        from ironflow.cli import backends

        backend = Backend(target.backend or Backend.K8S)
        sessions = backends.session_backend(backend, provider_file=target.provider, git_hosts=target.git_hosts)
        try:
            yield sessions
        finally:
            if isinstance(sessions, ClusterSessionBackend):
                await sessions.release()
        return
    async with RemoteSessions(target.server, backend=target.backend) as remote:
        yield remote
