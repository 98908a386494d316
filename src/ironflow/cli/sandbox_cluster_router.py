"""``ironflow sandbox router``: the in-cluster Sandbox Router agent-sandbox's SDK calls.

Runs :mod:`ironflow.sandbox_router.cluster_app` over the cluster's routes
(:class:`~ironflow.agent_sandbox.sandbox_routes.ClusterRoutes`), as the Deployment behind
``Service sandbox-router-svc`` that ``ironflow manifests --sandbox-router`` renders. Callers
from the network present ``$IRONFLOW_SANDBOX_TOKEN`` (from a Secret, by ``secretKeyRef``);
``kubectl port-forward`` callers (the SDK's tunnel mode) arrive on loopback and are admitted.
Bad input exits 2 with one line.
"""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from ironflow import errors
from ironflow.agent_sandbox.sandbox_routes import ClusterRoutes
from ironflow.cli import backends, exits, shared_options
from ironflow.sandbox_router import cluster_app, process
from ironflow.sessions.remote import TOKEN_ENV

__all__ = ["register", "router"]


def router(
    host: Annotated[str, typer.Option("--host", help="Address to bind (in a pod: 0.0.0.0).")] = "0.0.0.0",
    port: Annotated[
        int, typer.Option("--port", help="Port to bind (the router Service's: 8080).", min=0, max=65535)
    ] = (8080),
    namespace: Annotated[
        list[str] | None,
        typer.Option("--namespace", "-n", help="Route to sandboxes of this namespace only; repeatable (default: all)."),
    ] = None,
    kubeconfig: shared_options.KubeconfigOption = None,
    context: shared_options.ContextOption = None,
) -> None:
    """Route agent-sandbox's SDK to sandbox runtimes in the cluster (the in-cluster sandbox-router-svc)."""
    cluster = backends.kube_cluster(kubeconfig, context)
    try:
        token = process.env_token()
    except errors.IronflowError as exc:
        exits.fail_for(exc)
    if token is None:
        typer.echo(f"warning: no ${TOKEN_ENV}: only kubectl port-forward callers are admitted", err=True)

    async def run() -> None:
        async with await backends.connect(cluster) as api:
            routes = ClusterRoutes(api, namespaces=namespace or None)
            await cluster_app.serve(host, port, routes, token, ready=lambda url: print(f"routing {url}", flush=True))

    try:
        asyncio.run(run())
    except errors.IronflowError as exc:
        exits.fail_for(exc)


def register(group: typer.Typer) -> None:
    """Add ``router`` to the ``ironflow sandbox`` group."""
    group.command("router")(router)
