"""``ironflow sandbox serve``: the process sandbox sessions live in, over HTTP.

It owns the sessions of one backend (local, under bubblewrap, ``--isolation gvisor`` or ``docker``; k8s or
agent-sandbox from ``--provider FILE``, each session a pod, or a claim on a warm pool, of the
file's cluster: the provider's ``sessions()``, from :func:`ironflow.cli.backends.session_backend`;
:mod:`ironflow.sandbox_router`) and answers the session commands of
:mod:`ironflow.cli.sandbox_sessions` and the upstream SDK. Its token comes from
``$IRONFLOW_SANDBOX_TOKEN``, or is the token file's: made and written (0600) once the address
is bound, or, while another serve on this machine runs, that one's, so neither locks the
other's clients out (:class:`~ironflow.sandbox_router.process.SharedToken`); only the path is
printed. Bad input exits 2 with one line (:mod:`ironflow.cli.exits`).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

from ironflow import errors
from ironflow.cli import backends, exits
from ironflow.cli.inputs import Backend, Isolation
from ironflow.cli.session_backends import ProviderOption
from ironflow.sandbox_router import process
from ironflow.sandbox_router.app import DEFAULT_MAX_SESSIONS
from ironflow.secrets import Secret
from ironflow.sessions import pools
from ironflow.sessions.backend import SessionBackend
from ironflow.sessions.values import parse_duration

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
        typer.Option(
            "--isolation",
            help="Local sessions: bwrap (default), gvisor (runsc) or docker (a worker running as root).",
            show_default=False,
        ),
    ] = None,
    keep_sessions: Annotated[
        bool,
        typer.Option(
            "--keep-sessions",
            help="On SIGINT/SIGTERM leave the sessions to their TTL (the next serve serves them again) instead "
            "of closing them; local: bubblewrap sessions without workspace, agent, egress or idle suspend.",
        ),
    ] = False,
    max_sessions: Annotated[
        int,
        typer.Option("--max-sessions", help="Sessions held at once; one more is refused (429).", min=1),
    ] = DEFAULT_MAX_SESSIONS,
    pool: Annotated[
        int,
        typer.Option(
            "--pool",
            help="Local: sandboxes kept warm for sessions without agent or egress (with a workspace: "
            "--pool-workspaces).",
            min=0,
        ),
    ] = 0,
    pool_starts: Annotated[
        int, typer.Option("--pool-starts", help="Local: warm sandboxes started at once while refilling.", min=1)
    ] = pools.DEFAULT_MAX_STARTS,
    pool_idle_expiry: Annotated[
        str, typer.Option("--pool-idle-expiry", help="Local: a warm sandbox unused this long is replaced.")
    ] = "10m",
    pool_workspaces: Annotated[
        int,
        typer.Option(
            "--pool-workspaces",
            help="Local, bubblewrap: how many of --pool wait with an empty /workspace bound, for forks and "
            "sessions with a directory workspace.",
            min=0,
        ),
    ] = 0,
) -> None:
    """Serve sandbox sessions over HTTP (the clients' and the upstream SDK's endpoint).

    Cluster sessions (k8s, agent-sandbox) are found by their labels: this server routes, lists
    and closes the sessions an earlier server opened in the provider's namespace."""
    policy = _pool(pool, pool_starts, pool_idle_expiry, pool_workspaces)
    sessions = _sessions(backend, provider, isolation, keep_sessions, policy)
    try:
        token: Secret | process.SharedToken = process.env_token() or process.SharedToken()
    except errors.IronflowError as exc:
        exits.fail_for(exc)

    def ready(url: str) -> None:
        if isinstance(token, process.SharedToken):
            how = "written to" if token.written else "another running serve's, read from"
            typer.echo(f"token: {how} {token.path} (mode 0600; clients read it there)", err=True)
        if not process.is_loopback(host):
            typer.echo(
                f"warning: serving on {host}: any host that reaches it and holds the token runs commands", err=True
            )
        print(f"serving {url}", flush=True)

    try:
        served = process.serve(
            host, port, token, ready=ready, sessions=sessions, keep_sessions=keep_sessions, max_sessions=max_sessions
        )
        asyncio.run(served)
    except errors.IronflowError as exc:
        exits.fail_for(exc)


def _pool(size: int, starts: int, idle_expiry: str, workspaces: int) -> pools.PoolPolicy | None:
    """The warm pool of ``--pool`` and its policy options (None: no pool); bad input exits 2."""
    if workspaces > size:
        exits.fail(f"--pool-workspaces {workspaces}: at most --pool ({size}) of the warm sandboxes")
    try:
        expiry = parse_duration(idle_expiry)
    except errors.ConfigError as exc:
        exits.fail(f"--pool-idle-expiry: {exc.message}")
    try:
        policy = pools.PoolPolicy(size, max_starts=starts, idle_expiry=expiry, workspaces=workspaces)
    except errors.ConfigError as exc:
        exits.fail(f"--pool: {exc.message}")
    return policy if size else None


def _sessions(
    backend: Backend,
    provider: Path | None,
    isolation: Isolation | None,
    keep_sessions: bool,
    pool: pools.PoolPolicy | None = None,
) -> SessionBackend:
    """The sessions ``serve`` holds, the provider's own (local: bubblewrap by default); bad input exits 2."""
    if keep_sessions and backend is Backend.LOCAL and isolation not in (None, Isolation.BWRAP):
        exits.fail(f"--keep-sessions for local sessions needs --isolation bwrap: {isolation} sessions die with serve")
    return backends.session_backend(
        backend, provider_file=provider, isolation=isolation, pool=pool, keep_sessions=keep_sessions
    )


def register(group: typer.Typer) -> None:
    """Add ``serve`` to the ``ironflow sandbox`` group."""
    group.command("serve")(serve)
