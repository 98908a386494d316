"""agent-sandbox's Sandbox Router protocol, as both of ironflow's routers speak it (the request side pure).

The headers (``X-Sandbox-ID``, ``-Namespace``, ``-Port``, ``-Pod-IP``, ``-Timeout``) and their
upstream error texts (:func:`target`), the headers that stop at the router (:func:`forwarded`:
``Authorization``, hop-by-hop, ``X-Sandbox-*``), the answer streamed back (:func:`relay`), the
JSON ``{"detail": …}`` refusals, ``GET /healthz``, and the router's own bearer check
(:func:`bearer_auth`). ``ironflow sandbox serve`` (:mod:`~ironflow.sandbox_router.app`) routes to
the sessions it holds; the in-cluster router (:mod:`~ironflow.sandbox_router.cluster_app`) to
sandbox pods a :class:`~ironflow.sessions.routes.RuntimeRoutes` resolves.
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import logging
import math
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

import aiohttp
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

from ironflow import labels
from ironflow.secrets import Secret
from ironflow.sessions.routes import RouteTarget

__all__ = [
    "DEFAULT_PORT",
    "PROXY_TIMEOUT_S",
    "Handler",
    "Refused",
    "bearer_auth",
    "detail",
    "forwarded",
    "healthz",
    "relay",
    "target",
]

log = logging.getLogger("ironflow.sandbox_router")

#: What the upstream router caps every request at (its ``--proxy-timeout``).
PROXY_TIMEOUT_S: Final = 180.0
#: The runtime port the upstream SDK names by default.
DEFAULT_PORT: Final = 8888
_HOP_BY_HOP: Final = frozenset(
    {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "trailers",
     "transfer-encoding", "upgrade", "host", "authorization", "expect"}
)  # fmt: skip
_CHUNK: Final = 65536
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Refused(Exception):
    """An answer of the router itself: status and detail."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status, self.detail = status, detail


def detail(status: int, text: str, **headers: str) -> web.Response:
    """A refusal as upstream writes it: ``{"detail": text}``."""
    return web.json_response({"detail": text}, status=status, headers=headers or None)


def target(headers: Mapping[str, str], *, pod_ip: bool = False) -> tuple[RouteTarget, float]:
    """The target and the seconds to wait for its answer, from the router headers (pure). The
    pod-IP hint is read only with ``pod_ip`` (the in-cluster router checks it against the pod;
    ``sandbox serve`` routes by id alone).

    Raises:
        Refused: 400 with upstream's text for a missing or malformed header; a pod-IP hint that
            is no address, or a loopback, link-local, multicast or unspecified one (upstream's
            SSRF guard).
    """
    name = headers.get("X-Sandbox-ID")
    if not name:
        raise Refused(400, "X-Sandbox-ID header is required.")
    if not labels.is_dns_label(name):
        raise Refused(400, "Invalid sandbox ID format.")
    namespace = headers.get("X-Sandbox-Namespace", "default")
    if not labels.is_dns_label(namespace):
        raise Refused(400, "Invalid namespace format.")
    port = headers.get("X-Sandbox-Port", str(DEFAULT_PORT))
    if not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
        raise Refused(400, "Invalid port format.")
    hint = _pod_ip(headers.get("X-Sandbox-Pod-IP") or None) if pod_ip else None
    timeout = PROXY_TIMEOUT_S
    with contextlib.suppress(ValueError):  # as upstream: an unreadable value falls back to the cap
        asked = float(headers.get("X-Sandbox-Timeout", ""))
        if math.isfinite(asked) and asked > 0:
            timeout = min(asked, PROXY_TIMEOUT_S)
    return RouteTarget(name, namespace, int(port), hint), timeout


def _pod_ip(given: str | None) -> str | None:
    if given is None:
        return None
    try:
        address = ipaddress.ip_address(given.strip("[]"))
    except ValueError:
        raise Refused(400, "Invalid target IP address format.") from None
    if address.is_loopback or address.is_link_local or address.is_multicast or address.is_unspecified:
        raise Refused(400, "Invalid target IP address.")
    return str(address)


def _hop_by_hop(headers: Mapping[str, str]) -> set[str]:
    named = {name.strip().lower() for name in headers.get("Connection", "").split(",") if name.strip()}
    return set(_HOP_BY_HOP) | named


def forwarded(headers: CIMultiDictProxy[str]) -> CIMultiDict[str]:
    """The request headers a sandbox's runtime may see (pure)."""
    drop = _hop_by_hop(headers)
    return CIMultiDict(
        (k, v) for k, v in headers.items() if k.lower() not in drop and not k.lower().startswith("x-sandbox-")
    )


async def relay(request: web.Request, upstream: aiohttp.ClientResponse) -> web.StreamResponse:
    """The runtime's answer, streamed as it comes (command events, downloads, tar streams)."""
    drop = _hop_by_hop(upstream.headers) | {"content-length"}
    response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
    for name, value in upstream.headers.items():
        if name.lower() not in drop:
            response.headers.add(name, value)
    if upstream.content_length is not None:
        response.content_length = upstream.content_length
    else:
        response.enable_chunked_encoding()
    await response.prepare(request)
    try:
        async for data in upstream.content.iter_chunked(_CHUNK):
            await response.write(data)
        await response.write_eof()
    except (aiohttp.ClientError, ConnectionError):
        log.debug("a relayed answer ended early")  # the client or the sandbox went away mid-stream
    return response


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


def _loopback(request: web.Request) -> bool:
    peer = request.transport.get_extra_info("peername") if request.transport is not None else None
    if not isinstance(peer, tuple) or not peer:
        return False
    with contextlib.suppress(ValueError):
        return ipaddress.ip_address(str(peer[0]).partition("%")[0]).is_loopback
    return False


def bearer_auth(token: Secret | None, *, trust_loopback: bool = False) -> Any:
    """The router's own check, before anything else is looked at: ``GET /healthz`` is open; with
    ``trust_loopback`` a caller on the pod's loopback is admitted (``kubectl port-forward``, which
    the API server authorized); anyone else needs ``Authorization: Bearer <token>`` (constant-time
    compare; no token configured: nobody else is admitted)."""
    expected = token.reveal().encode() if token is not None else None

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.method == "GET" and request.path == "/healthz":
            return await handler(request)
        if trust_loopback and _loopback(request):
            return await handler(request)
        scheme, _, value = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            return detail(401, "Missing or invalid Authorization header.", **{"WWW-Authenticate": "Bearer"})
        if expected is None or not hmac.compare_digest(value.strip().encode(), expected):
            return detail(401, "Invalid token.", **{"WWW-Authenticate": "Bearer"})
        return await handler(request)

    return middleware
