"""The UI's aiohttp application: routes, the guard middleware (host, sign-in, errors as pages),
the security headers on every answer, and :func:`serve`.

The store is opened and closed by the caller (``ironflow ui``, a test, the benchmark); the
application only reads it and changes runs through the handlers. Every answer, a redirect
or a 404 too, carries :data:`~ironflow.ui.security.SECURITY_HEADERS`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Final

from aiohttp import web
from aiohttp.typedefs import Middleware

from ironflow import errors
from ironflow.engine import monitoring, running
from ironflow.engine.store import Store
from ironflow.ui import handlers, layout
from ironflow.ui.security import SECURITY_HEADERS, SESSION_COOKIE, UiSecurity

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "create_app", "serve"]

DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 8090
#: Paths served before sign-in: the stylesheet and the sign-in form itself.
_PUBLIC: Final = ("/static/", "/login")
_log = logging.getLogger("ironflow.ui")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _guard(security: UiSecurity) -> Middleware:
    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not security.request_host_ok(request.headers.get("Host")):
            return handlers.error_response(403, "this UI answers only to a loopback host name (127.0.0.1, localhost)")
        public = request.path.startswith(_PUBLIC)
        if not public and not security.signed_in(
            authorization=request.headers.get("Authorization"), cookie=request.cookies.get(SESSION_COOKIE)
        ):
            return handlers.html_response(layout.sign_in_page(security.csrf_token("/login")), 401)
        try:
            return await handler(request)
        except web.HTTPNotFound:
            return handlers.error_response(404, f"no page at {request.path}")
        except web.HTTPMethodNotAllowed as exc:
            return handlers.error_response(
                405, f"{request.method} is not allowed here; use {', '.join(exc.allowed_methods)}"
            )
        except errors.IronflowError as exc:  # the store failed: one line, never a traceback
            _log.warning("request failed: %s", " ".join(exc.message.split()))
            return handlers.error_response(503, f"the store failed: {' '.join(exc.message.split())}")

    return guard


async def _headers(request: web.Request, response: web.StreamResponse) -> None:
    response.headers.update(SECURITY_HEADERS)


def create_app(
    store: Store, security: UiSecurity, *, base_dir: str = "", local_dirs: running.LocalDirs | None = None
) -> web.Application:
    """The UI over an open ``store``; workflow files under ``base_dir`` are named relative to it;
    the live page shows this machine's ``local_dirs`` (None: no local sandbox is looked for)."""
    pages = handlers.Handlers(store, security, base_dir=base_dir, local_dirs=local_dirs)
    app = web.Application(middlewares=[_guard(security)], client_max_size=64 * 1024)
    app.on_response_prepare.append(_headers)
    app.router.add_get("/", pages.runs)
    app.router.add_get("/runs/{run_id}", pages.run)
    app.router.add_post("/runs/{run_id}/{action:cancel|retry}", pages.change)
    app.router.add_get("/sandboxes", pages.sandboxes)
    app.router.add_get("/static/style.css", pages.style)
    app.router.add_get("/login", pages.sign_in_form)
    app.router.add_post("/login", pages.sign_in)
    return app


@contextlib.asynccontextmanager
async def serve(
    store: Store,
    security: UiSecurity,
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    base_dir: str = "",
    local_dirs: running.LocalDirs | None = None,
) -> AsyncIterator[monitoring.Serving]:
    """Serve the UI of ``store`` on ``host:port`` for the block (port 0: any free one).

    Raises:
        ConfigError: the address cannot be bound.
    """
    app = create_app(store, security, base_dir=base_dir, local_dirs=local_dirs)
    async with monitoring.serve(app, host=host, port=port, what="the UI") as serving:
        yield serving
