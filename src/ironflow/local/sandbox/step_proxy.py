"""One step's in-process auth proxy: serve on a unix socket, issue one token, revoke it.

The local sandbox runs the auth proxy (:mod:`ironflow.auth_proxy`) inside the worker
process with the in-memory registry; the step's sandbox reaches it only through the
socket bind-mounted into its network namespace. The credential goes into the registry
and nowhere else; the caller gets the opaque ``ifap_`` token. The token is revoked and
the socket removed when the block ends, whatever happened inside. Each step's proxy takes
at most ``max_connections`` connections at once (the sandbox's ``proxy_connections``
limit): every one is a descriptor of the worker's, shared by all its steps. The proxy's server
(aiohttp, cryptography), its token registry and the relays load when a session starts, not with
this module: a sandbox without network (``ironflow exec``) never pays for them. A step with relays
(:mod:`ironflow.auth_proxy.relays`) gets one more token per relay from the same proxy
(:func:`step_session`), each revoked with the rest.

A step with an egress policy (:func:`environment.serves_egress`) also gets the egress proxy on a second socket,
``egress_socket``, reached with an egress-only token (:class:`~ironflow.auth_proxy.tokens.EgressCredential`)
whose grant carries the policy and which the model and secret relays refuse: no Claude key is
needed (``ironflow exec --allow-host``), and the proxy URL in ``HTTPS_PROXY`` reaches nothing else.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ironflow.local.sandbox import environment, limits
from ironflow.secrets import Secret

if TYPE_CHECKING:
    from ironflow import egress as egress_policy
    from ironflow.auth_proxy import app, relays, tokens

__all__ = ["StepTokens", "secret_session", "step_session"]

log = logging.getLogger("ironflow.local")


@dataclass(frozen=True)
class StepTokens:
    """The opaque tokens of one step's proxy: the Claude credential's (if any), and one per relay."""

    claude: Secret | None
    relays: tuple[tuple[relays.RelaySpec, Secret], ...] = field(default=())
    #: The egress-only token whose grant carries the egress policy.
    egress: Secret | None = None

    def env(self) -> dict[str, str]:
        """The sandbox variables they become (:func:`environment.proxy_env`, :func:`environment.egress_env`,
        :func:`relays.relay_env`)."""
        out = environment.proxy_env(self.claude.reveal()) if self.claude is not None else {}
        if self.egress is not None:
            out.update(environment.egress_env(self.egress.reveal()))
        proxy_url = f"http://127.0.0.1:{environment.PROXY_PORT}"
        if self.relays:
            from ironflow.auth_proxy import relays

            out.update(relays.relay_env(((spec, token.reveal()) for spec, token in self.relays), proxy_url))
        return out


@contextlib.asynccontextmanager
async def step_session(
    credential: environment.ProxyCredential | None,
    relayed: Sequence[relays.Relay],
    *,
    socket_path: str,
    run_id: str | None,
    step: str,
    expires_in: float,
    trace_context: str | None = None,
    relay_upstream: str | None = None,
    max_connections: int = limits.DEFAULT_LIMITS.proxy_connections,
    egress: egress_policy.EgressPolicy | None = None,
    egress_socket: str | None = None,
    on_egress: Callable[[str], None] | None = None,
) -> AsyncIterator[StepTokens]:
    """Serve the proxy on ``socket_path`` and yield the step's tokens, valid for ``expires_in`` seconds
    (of run ``run_id``, ``local`` without one): the Claude credential's (none without ``credential``;
    its ``trace_context``, the step's ``traceparent``, parents the proxy's request spans), one per relay in
    ``relayed``, and for an ``egress`` policy that opens something an egress-only token (never the
    Claude token: the proxy URL every tool in the sandbox sees reaches nothing but the egress proxy);
    ``relay_upstream`` as ``secret_upstream`` of :func:`secret_session`."""
    from ironflow.auth_proxy import tokens

    upstream = credential.upstream if credential is not None else "https://api.anthropic.com"
    run = run_id or "local"
    if not environment.serves_egress(egress):
        egress, egress_socket = None, None
    async with contextlib.AsyncExitStack() as stack:
        running = await stack.enter_async_context(
            _serving(socket_path, upstream, relay_upstream, max_connections, egress_socket, on_egress)
        )
        claude: Secret | None = None
        if credential is not None:
            claude_credential = tokens.ClaudeCredential(credential.kind, credential.value)
            claude = await stack.enter_async_context(
                _token(running, claude_credential, run, step, expires_in, trace_context, None)
            )
        egress_token: Secret | None = None
        if egress is not None:  # its own token: the proxy URL every tool sees cannot reach the model
            egress_token = await stack.enter_async_context(
                _token(running, tokens.EgressCredential(), run, step, expires_in, None, egress)
            )
        issued = []
        for relay in relayed:
            token = await stack.enter_async_context(_token(running, relay.secret(), run, step, expires_in, None, None))
            issued.append((relay.spec, token))
        yield StepTokens(claude, tuple(issued), egress=egress_token)


@contextlib.asynccontextmanager
async def secret_session(
    secret: tokens.SecretCredential,
    *,
    socket_path: str,
    run_id: str,
    step: str,
    expires_in: float,
    secret_upstream: str | None = None,
    max_connections: int = limits.DEFAULT_LIMITS.proxy_connections,
) -> AsyncIterator[Secret]:
    """As :func:`step_session`, one token for a proxied secret relayed under ``/r/<host>/`` (a git host's
    token for a workspace); ``secret_upstream`` sends ``/r/<host>/…`` to ``<secret_upstream>/<host>/…``
    instead of ``https://<host>/…`` (a mirror, or a test's loopback server)."""
    async with (
        _serving(socket_path, "https://api.anthropic.com", secret_upstream, max_connections) as running,
        _token(running, secret, run_id, step, expires_in, None, None) as token,
    ):
        yield token


@contextlib.asynccontextmanager
async def _serving(
    socket_path: str,
    upstream: str,
    secret_upstream: str | None,
    max_connections: int,
    egress_socket: str | None = None,
    on_egress: Callable[[str], None] | None = None,
) -> AsyncIterator[app.RunningProxy]:
    from ironflow.auth_proxy import app, config, registry  # the server, only now (see the module's docstring)

    environment = config.AuthProxyConfig(
        admin_key=Secret(secrets.token_hex(32)),  # never used over HTTP: tokens are issued in-process
        upstream=upstream,
        metrics_enabled=False,
        registry=registry.MemoryRegistry(),
        secret_upstream=secret_upstream,
        max_connections=max_connections,
        egress_socket=egress_socket,
    )
    async with app.run_auth_proxy(environment, unix_socket=socket_path, egress_observer=on_egress) as running:
        yield running


@contextlib.asynccontextmanager
async def _token(
    running: app.RunningProxy,
    credential: tokens.Credential,
    run_id: str,
    step: str,
    expires_in: float,
    trace_context: str | None,
    egress: egress_policy.EgressPolicy | None,
) -> AsyncIterator[Secret]:
    from ironflow.auth_proxy import registry, tokens

    # Whole seconds, at most the 24 h the proxy accepts.
    expires_at = int(time.time() + min(max(expires_in, 1.0), 86_400.0))
    request = tokens.TokenRequest(
        run_id=run_id,
        step=step,
        expires_at=expires_at,
        credential=credential,
        trace_context=trace_context,
        egress=egress,
    )
    grant, token = await registry.issue(running.registry, request)
    log.info("auth proxy token issued: token=%s run_id=%s step=%s", grant.id[:12], run_id, step)
    try:
        yield token
    finally:
        await running.registry.revoke(grant.id)
        log.info("auth proxy token revoked: token=%s", grant.id[:12])
