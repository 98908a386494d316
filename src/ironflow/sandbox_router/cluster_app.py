"""The in-cluster Sandbox Router: upstream's protocol in front of sandbox pods' runtimes (I/O).

``ironflow sandbox router`` runs it as ``Service sandbox-router-svc`` (port 8080) in
``agent-sandbox-system``, where agent-sandbox's SDK looks for it in every mode that uses a
router (direct, tunnel). A request names its sandbox by the router headers
(:func:`~ironflow.sandbox_router.protocol.target`); a
:class:`~ironflow.sessions.routes.RuntimeRoutes` (the CLI hands in the cluster's) says whether it
is a sandbox at all and where its runtime answers, with a token the backend delivered to that
runtime: the request goes there with that token in place of the caller's ``Authorization``. A
target that is no sandbox is refused before any connection is made.

Callers: ``GET /healthz`` is open; a caller on the pod's loopback is one ``kubectl port-forward``
brought (the API server authorized it for ``services/portforward``), so it is admitted (the SDK's
tunnel mode sends no header of its own); everyone else needs the router's bearer token (the SDK's
``extra_headers`` in direct mode). Every refusal is upstream's JSON ``{"detail": …}``; an error no
handler expected is a 500 naming its type, never a traceback.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import aiohttp
from aiohttp import web
from yarl import URL

from ironflow import errors
from ironflow.sandbox_router import process
from ironflow.sandbox_router.protocol import (
    Handler,
    Refused,
    bearer_auth,
    detail,
    forwarded,
    healthz,
    relay,
    target,
)
from ironflow.secrets import Secret
from ironflow.sessions.routes import NotRoutable, RuntimeRoutes

__all__ = ["build_cluster_app", "serve"]

log = logging.getLogger("ironflow.sandbox_router")


@web.middleware
async def _answers(request: web.Request, handler: Handler) -> web.StreamResponse:
    """What no handler expected: a 500 naming its type (the log has the rest), never a traceback."""
    try:
        return await handler(request)
    except web.HTTPException:
        raise
    except Exception as exc:
        log.error("%s %s failed: %s", request.method, request.path, type(exc).__name__, exc_info=log.isEnabledFor(10))
        return detail(500, f"the router failed ({type(exc).__name__}); its log says more")


class _Proxy:
    """Routes each request to its sandbox's runtime, over one pooled HTTP client."""

    def __init__(self, routes: RuntimeRoutes) -> None:
        self.routes = routes
        self.http: aiohttp.ClientSession | None = None

    def client(self) -> aiohttp.ClientSession:
        if self.http is None:
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=5)
            self.http = aiohttp.ClientSession(auto_decompress=False, timeout=timeout)
        return self.http

    async def proxy(self, request: web.Request) -> web.StreamResponse:
        try:
            wanted, timeout = target(request.headers, pod_ip=True)
        except Refused as exc:
            return detail(exc.status, exc.detail)
        if not request.raw_path.startswith("/"):
            return detail(400, "Invalid path.")
        try:
            found = await self.routes.route(wanted)
        except NotRoutable as exc:
            return detail(exc.status, exc.message)
        except errors.KubernetesError as exc:
            return detail(502, f"could not look sandbox {wanted.name} up in the cluster: {exc.message}")
        headers = forwarded(request.headers)
        if found.token is not None:
            headers["Authorization"] = f"Bearer {found.token.reveal()}"
        url = URL(found.base_url + request.raw_path, encoded=True)
        body = request.content if request.body_exists else None
        try:
            async with asyncio.timeout(timeout):
                upstream = await self.client().request(
                    request.method, url, headers=headers, data=body, allow_redirects=False
                )
        except TimeoutError:
            return detail(504, f"Timed out waiting for the backend sandbox: {wanted.name}")
        except aiohttp.ClientError:
            self.routes.forget(wanted)  # a new pod, a new address: the next request looks again
            return detail(502, f"Could not connect to the backend sandbox: {wanted.name}")
        async with upstream:
            if upstream.status == 401 and found.token is not None:
                self.routes.forget(wanted)  # a restarted runtime lost our token: delivered anew next time
            return await relay(request, upstream)

    async def aclose(self) -> None:
        if self.http is not None:
            await self.http.close()
        await self.routes.aclose()


def build_cluster_app(routes: RuntimeRoutes, token: Secret | None, *, trust_loopback: bool = True) -> web.Application:
    """The router over ``routes``; ``token`` is what callers from the network must present (None:
    only loopback callers, with ``trust_loopback``). Its clients close with the app."""
    proxy = _Proxy(routes)
    app = web.Application(
        middlewares=[_answers, bearer_auth(token, trust_loopback=trust_loopback)],
        handler_args={"max_field_size": 65536},
    )
    app.router.add_get("/healthz", healthz)
    app.router.add_route("*", "/{tail:.*}", proxy.proxy)

    async def cleanup(_app: web.Application) -> None:
        await proxy.aclose()

    app.on_cleanup.append(cleanup)
    return app


async def serve(
    host: str, port: int, routes: RuntimeRoutes, token: Secret | None, *, ready: Callable[[str], None]
) -> None:
    """Serve the router on ``host:port`` until SIGINT or SIGTERM; ``ready`` gets the URL once listening.

    Raises:
        ConfigError: the address cannot be bound.
    """
    sock = process.bind(host, port)
    runner = web.AppRunner(build_cluster_app(routes, token), access_log=None, handle_signals=False)
    try:
        await runner.setup()
        await web.SockSite(runner, sock).start()
        ready(process.listening_url(host, sock))
        await process.until_signalled()
    finally:
        await runner.cleanup()
        sock.close()
