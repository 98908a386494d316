"""``ironflow sandbox serve``: the process sandbox sessions live in, over HTTP.

It owns the sessions of one backend (local, under bubblewrap or ``--isolation gvisor``; k8s or
agent-sandbox from ``--provider FILE``, each session a pod, or a claim on a warm pool, of the file's cluster;
:mod:`ironflow.sandbox_router`) and answers the session commands of
:mod:`ironflow.cli.sandbox_sessions` and the upstream SDK. Its token comes from
``$IRONFLOW_SANDBOX_TOKEN``, or is made and written to a 0600 file whose path (never the
token) is printed. Bad input exits 2 with one line (:mod:`ironflow.cli.exits`).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

from ironflow import errors
from ironflow.agent_sandbox.sessions import AgentSandboxSessions
from ironflow.cli import backends, exits
from ironflow.cli.inputs import Backend, Isolation
from ironflow.cli.session_backends import ProviderOption
from ironflow.k8s.sessions import K8sSessions
from ironflow.local.provider import LocalSandboxProvider
from ironflow.local.sessions import LocalSessions
from ironflow.sandbox_router import process
from ironflow.sandbox_router.app import SessionHost

__all__ = ["register", "serve"]


def serve(
    host: Annotated[str, typer.Option("--host", help="Address to bind; anything but loopback is reachable.")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option("--port", help="Port to bind (0: any free one).", min=0, max=65535)] = 8377,
    backend: Annotated[
        Backend, typer.Option("--backend", help="local, k8s or agent-sandbox (with --provider).")
    ] = Backend.LOCAL,
    provider: ProviderOption = None,
    isolation: Annotated[
        Isolation | None,
        typer.Option("--isolation", help="Local sessions: bubblewrap (default) or gVisor (runsc).", show_default=False),
    ] = None,
    keep_sessions: Annotated[
        bool,
        typer.Option(
            "--keep-sessions",
            help="k8s / agent-sandbox: on SIGINT/SIGTERM leave the sessions to their TTL (the next serve routes "
            "them) instead of closing them.",
        ),
    ] = False,
) -> None:
    """Serve sandbox sessions over HTTP (the clients' and the upstream SDK's endpoint).

    Cluster sessions (k8s, agent-sandbox) are found by their labels: this server routes, lists
    and closes the sessions an earlier server opened in the provider's namespace."""
    sessions = _sessions(backend, provider, isolation, keep_sessions)
    try:
        token, path = process.server_token()
    except errors.IronflowError as exc:
        exits.fail_for(exc)
    except OSError as exc:
        exits.fail(f"cannot write the token file: {exc.strerror or exc}")
    if path is not None:
        typer.echo(f"token: written to {path} (mode 0600; clients read it there)", err=True)
    if not process.is_loopback(host):
        typer.echo(f"warning: serving on {host}: any host that reaches it and holds the token runs commands", err=True)

    def ready(url: str) -> None:
        print(f"serving {url}", flush=True)

    try:
        asyncio.run(process.serve(host, port, token, ready=ready, sessions=sessions, keep_sessions=keep_sessions))
    except errors.IronflowError as exc:
        exits.fail_for(exc)


def _sessions(
    backend: Backend, provider: Path | None, isolation: Isolation | None, keep_sessions: bool
) -> SessionHost | None:
    """The sessions ``serve`` holds (None: the router's default, local bubblewrap); bad input exits 2."""
    if isolation is not None and backend != "local":
        exits.fail(f"--isolation is for --backend local: a {backend} session's isolation is its pod's runtime class")
    if backend == "k8s":
        return K8sSessions(backends.k8s_provider(provider).settings)
    if backend == "agent-sandbox":
        return AgentSandboxSessions(backends.agent_sandbox_provider(provider).settings)
    if provider is not None:
        exits.fail("--provider is for --backend k8s or agent-sandbox: local sessions need no provider file")
    if keep_sessions:
        exits.fail("--keep-sessions is for --backend k8s or agent-sandbox: local sessions die with serve")
    if isolation is not Isolation.GVISOR:
        return None
    try:
        return LocalSessions(LocalSandboxProvider(isolation="gvisor"))
    except errors.IronflowError as exc:
        exits.fail_for(exc)


def register(group: typer.Typer) -> None:
    """Add ``serve`` to the ``ironflow sandbox`` group."""
    group.command("serve")(serve)
