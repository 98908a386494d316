"""``ironflow sandbox deliver-token``: the proxy token of a pattern whose pod runs the agent itself.

``sandbox render ephemeral`` / ``standalone-pvc`` and the KRO graphs' one-shot modes
(``kro-raw``: the Runner's Sandbox, ``kro-template``: the claim's adopted Sandbox), rendered
with ``auth_proxy`` in the provider file, start an agent that waits for
``$HOME/.ironflow/proxy-token``. Whoever applied them with kubectl runs this command:
it waits for the Sandbox's pod to run, only then issues an ``ifap_`` token through the proxy's
admin API (``auth_proxy`` of the provider file, the admin key from
``IRONFLOW_AUTH_PROXY_ADMIN_KEY``, the upstream credential from the environment as for every
issuer) and writes it in over exec stdin
(:meth:`~ironflow.agent_sandbox.claim_provider.AgentSandboxProvider.deliver_token`). It prints the
token's id, never the token. NAME is a Sandbox or, looked up first, a SandboxClaim whose bound
Sandbox is taken; ``--claim`` waits for a claim not created yet (KRO makes a graph's claim a
moment after its instance). Bad input exits 2 with one line, a pod that did not run or an
API failure 3 (:mod:`ironflow.cli.exits`).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Any, Final

import typer

from ironflow import errors, labels
from ironflow.agent_sandbox import claims, lifecycle
from ironflow.agent_sandbox.claim_provider import AgentSandboxProvider
from ironflow.auth_proxy.admin_client import admin_key_from
from ironflow.cli import backends, exits, inputs, shared_options
from ironflow.cli.stores import run_async
from ironflow.sessions.values import parse_duration

__all__ = ["deliver_token", "register"]

#: How long the command lets its closed TLS connections finish before the loop ends.
_TLS_CLOSE_S: Final = 0.25


async def _sandbox_of(provider: AgentSandboxProvider, name: str, *, claim: bool, timeout_s: float) -> lifecycle.Target:
    """The Sandbox ``name`` stands for: a SandboxClaim's bound Sandbox, else the Sandbox of that
    name (whose pod the delivery waits for, even before it exists). With ``claim`` the claim is
    waited for too: KRO creates a graph's claim a moment after its instance."""
    s = provider.settings
    api = await provider.runner().api()
    res = provider.resources
    found: dict[str, Any] | None = None
    if not claim:
        try:
            found = await api.get(res.claims, s.namespace, name)
        except errors.KubeNotFound:
            return lifecycle.Target(name)
    bound = None if found is None else claims.bound_sandbox(found)
    if bound is None:
        # No fail fast on the claim's Ready=False: in a KRO graph the claim may come before its
        # template (TemplateNotFound), and the real controller binds it once the template exists.
        try:
            ready = await claims.wait_for(api, res.claims, s.namespace, name, "Ready", timeout_s=timeout_s)
            bound = claims.bound_sandbox(ready)
        except errors.OperationTimeout:
            raise errors.OperationTimeout(
                f"SandboxClaim '{name}' in {s.namespace} was not bound to a Sandbox within {timeout_s:g}s"
                f"{await _last_word(provider, name)}: no token was issued"
            ) from None
    if bound is None:
        raise errors.KubernetesError(f"SandboxClaim '{name}' is Ready but names no Sandbox", status=500)
    return lifecycle.Target(bound, name)


async def _last_word(provider: AgentSandboxProvider, name: str) -> str:
    """`` (Ready=False: REASON: MESSAGE)`` of the claim, for a timeout's message; empty when it says nothing."""
    try:
        found = await (await provider.runner().api()).get(provider.resources.claims, provider.settings.namespace, name)
    except errors.KubeNotFound:
        return " (it does not exist)"
    cond = claims.condition(found, "Ready") or {}
    if cond.get("status") != "False":
        return ""
    return f" (Ready=False: {cond.get('reason')}: {errors.truncate(str(cond.get('message') or ''), 200)})"


async def _deliver(
    provider: AgentSandboxProvider, name: str, *, claim: bool, timeout_s: float
) -> tuple[lifecycle.Target, str]:
    try:
        target = await _sandbox_of(provider, name, claim=claim, timeout_s=timeout_s)
        return target, await provider.deliver_token(target.sandbox)
    finally:
        await provider.aclose()
        # aiohttp's graceful shutdown: the TLS connections just closed (the exec's among them) send
        # close_notify on the next loop turns; asyncio.run would close the loop under them first.
        await asyncio.sleep(_TLS_CLOSE_S)


def deliver_token(
    name: Annotated[
        str, typer.Argument(metavar="NAME", help="The Sandbox (or, by lookup or --claim, a SandboxClaim).")
    ],
    provider_file: Annotated[
        Path | None, typer.Option("--provider", help="The provider file the pattern was rendered from (auth_proxy).")
    ] = None,
    namespace: Annotated[str | None, typer.Option("--namespace", "-n", help="Default: the provider file's.")] = None,
    timeout: Annotated[
        str | None, typer.Option("--timeout", help="How long the pod may take to run, e.g. 90s, 5m (default: 5m).")
    ] = None,
    claim: Annotated[
        bool, typer.Option("--claim", help="NAME is a SandboxClaim: deliver to its bound Sandbox.")
    ] = False,
    kubeconfig: shared_options.ProviderKubeconfigOption = None,
    context: shared_options.ContextOption = None,
) -> None:
    """Give a rendered pattern's waiting agent its proxy token over exec, once its pod runs."""
    if not labels.is_dns_subdomain(name):
        exits.fail(f"invalid sandbox name '{errors.truncate(name, 60)}': use lowercase letters, digits, '-' and '.'")
    if namespace is not None:
        inputs.dns_label(namespace)
    if provider_file is None:
        exits.fail("deliver-token needs --provider FILE: the provider file with the auth_proxy the pattern waits on")
    try:
        limit = parse_duration(timeout or "5m")
    except errors.ConfigError as exc:
        exits.fail(f"--timeout: {exc.message}")
    try:
        provider = AgentSandboxProvider.from_file(provider_file, pod_settings_alone=True).ready_timeout(limit)
        if namespace is not None:
            provider = provider.namespace(namespace)
        if kubeconfig is not None or context is not None:
            provider = provider.cluster(backends.kube_cluster(kubeconfig, context))
        if provider.settings.auth_proxy_url is None:
            exits.fail(
                f"provider file '{provider_file}' has no auth_proxy: its patterns start the agent at once, "
                "nothing waits for a token"
            )
        admin_key_from(provider.settings.auth_proxy_admin_key)  # refused before the cluster is asked
    except errors.UsageError as exc:
        exits.fail_for(exc)
    target, token_id = run_async(_deliver(provider, name, claim=claim, timeout_s=limit))
    typer.echo(f"{target.describe()}: proxy token delivered (token id {token_id[:12]})")


def register(group: typer.Typer) -> None:
    """Add ``deliver-token`` to the ``ironflow sandbox`` group."""
    group.command("deliver-token")(deliver_token)
