"""The proxy application: routes, typed state keys, resources paired in cleanup contexts.

``create_app(config)`` returns an aiohttp app whose registry, upstream connection pool
(:mod:`upstream`) and purge task open at startup and close at shutdown, in reverse order. ``run_auth_proxy``
serves it (and the egress proxy, :mod:`egress_server`, when the config asks for it) inside
the current event loop (the local sandbox provider runs the proxy in the worker process this
way); ``__main__`` serves it as a process.

The app never follows redirects, never sets a total timeout on a stream (an idle read
timeout ends a silent one), and disables aiohttp's access log: it would print query
strings, which the proxy never logs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Final

from aiohttp import hdrs, web

from ironflow.auth_proxy import admin_client as client_mod
from ironflow.auth_proxy import config as config_mod
from ironflow.auth_proxy import connections, egress_server, handlers, hub, logs, policy, registry, upstream

__all__ = [
    "CONFIG_KEY",
    "HANDLERS_KEY",
    "REGISTRY_KEY",
    "UPSTREAM_KEY",
    "RunningProxy",
    "create_app",
    "make_runner",
    "open_registry",
    "run_auth_proxy",
]

CONFIG_KEY: Final = web.AppKey("config", config_mod.AuthProxyConfig)
HANDLERS_KEY: Final = web.AppKey("handlers", handlers.ProxyHandlers)
REGISTRY_KEY: Final = web.AppKey("registry", registry.GrantRegistry)
UPSTREAM_KEY: Final = web.AppKey("upstream", upstream.UpstreamPool)

_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
#: Raw paths no route but the relay's catch-all matches.
_RELAY_PREFIXES: Final = ("/v1/", "/r/")


async def open_registry(config: config_mod.AuthProxyConfig) -> registry.GrantRegistry:
    """The registry the config asks for: PostgreSQL, the parent's hub, else in memory."""
    if config.database_url is None:
        if config.hub_socket is not None:
            return hub.HubRegistry(config.hub_socket, cache_ttl_s=config.token_cache_ttl_s)
        return registry.MemoryRegistry()
    # asyncpg (about 0.1 s) loads only where a database is configured: a named exception to
    # top-level imports (tests/package/unit/test_layers.py lists them).
    from ironflow.auth_proxy import postgres

    assert config.key_ring is not None  # AuthProxyConfig refuses a database without keys
    return await postgres.PostgresRegistry.open(
        config.database_url,
        config.key_ring,
        cache_ttl_s=config.token_cache_ttl_s,
        listen_keepalive_s=config.listen_keepalive_s,
    )


async def _registry_ctx(app: web.Application) -> AsyncIterator[None]:
    config = app[CONFIG_KEY]
    owned = config.registry is None
    grants = config.registry if config.registry is not None else await open_registry(config)
    app[HANDLERS_KEY].registry = grants
    app[REGISTRY_KEY] = grants
    try:
        yield
    finally:
        await app[HANDLERS_KEY].settle_pending()  # output tokens still being charged
        app[HANDLERS_KEY].registry = None
        if owned:
            await grants.close()


async def _upstream_ctx(app: web.Application) -> AsyncIterator[None]:
    config = app[CONFIG_KEY]
    pool = upstream.UpstreamPool(connect_timeout_s=config.connect_timeout_s, idle_timeout_s=config.idle_timeout_s)
    app[HANDLERS_KEY].pool = pool
    app[UPSTREAM_KEY] = pool
    try:
        yield
    finally:
        app[HANDLERS_KEY].pool = None
        await pool.close()


async def _purge_ctx(app: web.Application) -> AsyncIterator[None]:
    async def purge_forever() -> None:
        interval = app[CONFIG_KEY].purge_interval_s
        while True:
            await asyncio.sleep(interval)
            try:
                purged = await app[REGISTRY_KEY].purge_expired(int(time.time()))
            except registry.RegistryUnavailable:
                logs.event("token registry unavailable", logging.ERROR, operation="purge")
                continue
            if purged:
                logs.event("expired auth proxy tokens purged", count=purged)

    task = asyncio.create_task(purge_forever(), name="ironflow-auth-proxy-purge")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _or_internal_error(
    proxy: handlers.ProxyHandlers, request: web.Request, handler: _Handler
) -> web.StreamResponse:
    """The handler's answer; a bug still answers in the Anthropic error shape, logging no request detail."""
    try:
        return await handler(request)
    except web.HTTPException:
        raise
    except Exception as exc:
        logs.event("request failed", logging.ERROR, method=request.method, error=type(exc).__name__)
        proxy.metrics.count("internal_error")
        body = policy.error_body("api_error", "internal error in the auth proxy")
        return web.Response(status=500, body=body, content_type="application/json")


def front_door(app: web.Application) -> _Handler:
    """The server's request handler: a relay path goes straight to the relay, which is where
    the router's catch-all route would send it (routing and the middleware chain cost about a
    tenth of a relayed request); every other request, and one that expects ``100-continue``,
    goes through the app."""
    proxy = app[HANDLERS_KEY]
    through_app = app._handle

    async def front(request: web.Request) -> web.StreamResponse:
        if request.raw_path.startswith(_RELAY_PREFIXES) and hdrs.EXPECT not in request.headers:
            return await _or_internal_error(proxy, request, proxy.relay)
        return await through_app(request)

    return front


def create_app(config: config_mod.AuthProxyConfig) -> web.Application:
    """The proxy as an aiohttp application (not started)."""
    logs.scrub_framework_logs()
    proxy = handlers.ProxyHandlers(config)

    @web.middleware
    async def edge(request: web.Request, handler: _Handler) -> web.StreamResponse:
        # Targets the router cannot route at all (CONNECT host:443, OPTIONS *) still go
        # through the relay's decision order, so they get its refusals, not a bare 404.
        failed = request.match_info.http_exception
        if failed is not None and failed.status == 404:
            handler = proxy.relay
        return await _or_internal_error(proxy, request, handler)

    app = web.Application(client_max_size=config.max_body_bytes, middlewares=[edge])
    app[CONFIG_KEY] = config
    app[HANDLERS_KEY] = proxy
    app.router.add_get("/healthz", proxy.healthz, allow_head=False)
    app.router.add_get("/metrics", proxy.metrics_page, allow_head=False)
    app.router.add_post("/admin/v1/tokens", proxy.issue)
    app.router.add_delete("/admin/v1/tokens/{id}", proxy.revoke)
    app.router.add_get("/admin/v1/tokens/{id}/egress", proxy.egress_notes, allow_head=False)
    app.router.add_delete("/admin/v1/runs/{run_id}/tokens", proxy.revoke_run)
    app.router.add_put("/admin/v1/runs/{run_id}/egress", proxy.set_egress)
    app.router.add_route("*", "/{tail:.*}", proxy.relay)
    app.cleanup_ctx.append(_registry_ctx)
    app.cleanup_ctx.append(_upstream_ctx)
    app.cleanup_ctx.append(_purge_ctx)
    return app


def make_runner(app: web.Application) -> web.AppRunner:
    """A runner that cancels a handler when its client goes away, logs no access lines,
    caps connections and bounds header reads and idle keep-alive (:mod:`connections`),
    and serves through :func:`front_door`. Request bodies are never inflated: one sent with
    a ``Content-Encoding`` (git gzips large fetch requests) is relayed as the bytes it came as."""
    config = app[CONFIG_KEY]
    cap = config.max_connections if config.max_connections is not None else connections.default_max_connections()
    return connections.GuardedRunner(
        app,
        handler=front_door(app),
        max_connections=cap,
        header_timeout_s=config.header_timeout_s,
        keepalive_timeout=config.client_idle_timeout_s,
        handler_cancellation=True,
        auto_decompress=False,  # an inflated body would go upstream still labelled gzip
        access_log=None,
        shutdown_timeout=5.0,
    )


@dataclass(frozen=True)
class RunningProxy:
    """A proxy serving in this event loop: where it listens, and an admin client for it."""

    url: str
    config: config_mod.AuthProxyConfig
    app: web.Application
    unix_socket: str | None = None
    #: The egress proxy: ``http://host:port``, or its unix socket's path; ``None`` when not served.
    egress: str | None = None

    @property
    def registry(self) -> registry.GrantRegistry:
        return self.app[REGISTRY_KEY]

    def admin_client(self) -> client_mod.AdminClient:
        """An :class:`AdminClient` holding this proxy's admin key (close it, or use ``async with``)."""
        return client_mod.AdminClient(self.url, self.config.admin_key, unix_socket=self.unix_socket)


@contextlib.asynccontextmanager
async def run_auth_proxy(
    config: config_mod.AuthProxyConfig,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    unix_socket: str | None = None,
    reuse_port: bool = False,
    egress_resolver: egress_server.Resolver | None = None,
    egress_observer: Callable[[str], None] | None = None,
) -> AsyncIterator[RunningProxy]:
    """Serve the proxy on ``host:port`` (0 = a free port) or a unix socket until the block ends;
    with ``config.egress_port`` or ``config.egress_socket``, the egress proxy too (its names looked
    up by ``egress_resolver``, default the system's).

    >>> async def demo(config):  # doctest: +SKIP
    ...     async with run_auth_proxy(config) as running:
    ...         async with running.admin_client() as admin:
    ...             token_id, token = await admin.issue("run-1", "plan", expires_at)
    """
    app = create_app(config)
    runner = make_runner(app)
    await runner.setup()
    try:
        if unix_socket is not None:
            site: web.BaseSite = web.UnixSite(runner, unix_socket)
            await site.start()
            os.chmod(unix_socket, 0o666)  # noqa: S103 - the sandboxed uid must connect; the dir guards access
            url = "http://localhost"
        else:
            site = web.TCPSite(runner, host, port, reuse_port=reuse_port or None)
            await site.start()
            bound = runner.addresses[0]
            shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
            url = f"http://{shown}:{bound[1]}"
        async with contextlib.AsyncExitStack() as stack:
            egress = None
            if config.egress_enabled:
                server = egress_server.EgressServer(
                    config,
                    app[REGISTRY_KEY],
                    app[HANDLERS_KEY].metrics,
                    resolver=egress_resolver,
                    observer=egress_observer,
                )
                listening = egress_server.serve_egress(
                    server,
                    host=config.egress_host,
                    port=config.egress_port or 0,
                    unix_socket=config.egress_socket,
                    reuse_port=reuse_port,
                )
                egress = await stack.enter_async_context(listening)
            yield RunningProxy(url=url, config=config, app=app, unix_socket=unix_socket, egress=egress)
    finally:
        await runner.cleanup()
