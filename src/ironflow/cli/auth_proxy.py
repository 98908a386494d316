"""``ironflow auth-proxy``: serve the auth proxy, and re-seal its grants under a new key.

Thin over :mod:`ironflow.auth_proxy.__main__` and :func:`ironflow.auth_proxy.postgres.rotate_keys`;
configured by the environment of §6.1 (``IRONFLOW_AUTH_PROXY_ADMIN_KEY``, ``…_LISTEN``,
``…_DATABASE_URL``, ``…_UPSTREAM``, ``IRONFLOW_SECRET_KEYS``…), never by flags that
would put a secret in a process listing. A refused configuration exits 2 with one line
on stderr; results go to stdout.
"""

from __future__ import annotations

import asyncio
import os
from typing import Annotated

import typer

from ironflow import errors
from ironflow.auth_proxy import __main__ as proxy_main
from ironflow.auth_proxy import admin_client, config, postgres, registry
from ironflow.cli import groups
from ironflow.cli.exits import fail, fail_for

__all__ = ["register"]

auth_proxy_app = groups.new_app(
    name="auth-proxy",
    help="The auth proxy: pods hold an opaque token, the proxy holds the Claude credential.",
    no_args_is_help=False,
    add_completion=False,
)


def _serve(workers: int) -> None:

    code = proxy_main.main(["--workers", str(workers)])
    if code:
        raise typer.Exit(code)


@auth_proxy_app.callback(invoke_without_command=True)
def _default(
    ctx: typer.Context,
    workers: Annotated[int, typer.Option(min=1, help="Server processes sharing the port.")] = 1,
) -> None:
    """Serve the proxy when no subcommand is given."""
    if ctx.invoked_subcommand is None:
        _serve(workers)


@auth_proxy_app.command("serve")
def serve(
    workers: Annotated[int, typer.Option(min=1, help="Server processes sharing the port.")] = 1,
) -> None:
    """Serve the proxy on IRONFLOW_AUTH_PROXY_LISTEN until SIGINT/SIGTERM."""
    _serve(workers)


@auth_proxy_app.command("rotate-keys")
def rotate_keys() -> None:
    """Re-seal every grant under the active key of IRONFLOW_SECRET_KEYS (PostgreSQL registry)."""
    try:
        database_url, key_ring = config.registry_from_env(os.environ)  # no admin key: it serves nothing
    except errors.ConfigError as exc:
        fail(exc.message)

    try:
        report = asyncio.run(postgres.rotate_keys(database_url, key_ring))
    except registry.RegistryUnavailable as exc:
        typer.echo(f"error: {exc}: check {config.DATABASE_URL_ENV} and the database", err=True)
        raise typer.Exit(1) from None
    typer.echo(
        f"resealed={report.resealed} already_current={report.current} unreadable={report.unreadable} "
        f"active_key_version={key_ring.active_version}"
    )
    if report.missing_key:
        typer.echo(
            f"error: {report.missing_key} grant(s) use a key version missing from {config.SECRET_KEYS_ENV}: "
            "add the old key to the ring and run rotate-keys again",
            err=True,
        )
    if report.broken:
        typer.echo(
            f"error: {report.broken} grant(s) do not open with the key {config.SECRET_KEYS_ENV} holds for their "
            "version: that version's key differs from the one that sealed them (check the ring), or the rows "
            "were altered",
            err=True,
        )
    if report.unreadable:
        raise typer.Exit(1)


_URL_HELP = "Proxy URL (default: $IRONFLOW_AUTH_PROXY_URL); the admin key comes from $IRONFLOW_AUTH_PROXY_ADMIN_KEY."


def _admin_call(url: str | None, call: str, argument: str) -> object:

    target = url or os.environ.get("IRONFLOW_AUTH_PROXY_URL", "").strip()
    if not target:
        fail("give --url or set IRONFLOW_AUTH_PROXY_URL to the proxy's URL")

    async def run() -> object:
        async with admin_client.AdminClient(target) as admin:
            method = admin.revoke if call == "revoke" else admin.revoke_run
            return await method(argument)

    try:
        return asyncio.run(run())
    except errors.IronflowError as exc:  # no admin key: 2; the proxy unreachable or refusing: 3
        fail_for(exc)


@auth_proxy_app.command("revoke")
def revoke(
    token_id: Annotated[str, typer.Argument(help="Token id (64 hex chars, as issued).")],
    url: Annotated[str | None, typer.Option(help=_URL_HELP)] = None,
) -> None:
    """Revoke one token now (prints revoked=1, or revoked=0 when it was already gone)."""
    typer.echo(f"revoked={int(bool(_admin_call(url, 'revoke', token_id)))}")


@auth_proxy_app.command("revoke-run")
def revoke_run(
    run_id: Annotated[str, typer.Argument(help="Run id whose tokens to revoke.")],
    url: Annotated[str | None, typer.Option(help=_URL_HELP)] = None,
) -> None:
    """Revoke every live token of a run now (prints revoked=N)."""
    typer.echo(f"revoked={_admin_call(url, 'revoke_run', run_id)}")


def register(app: typer.Typer) -> None:
    """Add ``ironflow auth-proxy`` to the main app."""
    app.add_typer(auth_proxy_app, name="auth-proxy")
