"""The egress proxy: HTTP forwarding and ``CONNECT`` tunnels for a step, by its grant's policy.

A second listener of the auth proxy, on asyncio protocols (a ``CONNECT`` tunnel is a raw byte
stream after its head, which aiohttp's server cannot hand over): :mod:`splices` reads the head
and carries a tunnel transport to transport, one handler task per connection decides; plain
HTTP continues on streams. One connection carries one request, in this order:

==  ==========================================================  =====================================
 #  check                                                       refusal
==  ==========================================================  =====================================
 1  the head arrives within ``header_timeout_s``, ≤ 64 KiB      close / 431
 2  the head parses (:mod:`egress_requests`)                   400
 3  ``Proxy-Authorization`` holds a live token                 407, one text for every reason
 4  the grant's policy allows host, port (method, path)        403 naming the reason and rule
    by name (``None``: nothing is allowed)
 5  the token has a tunnel and bytes left                      429
 6  the name resolves, ONCE, through the :class:`Resolver`;     403 when any address is denied,
    every address passes the policy after resolution            502 when none answers
 7  connect to a checked address (never a second lookup)      502
 8  CONNECT: ``200``, then the client's ClientHello must        close
    name the CONNECT host (an IP literal: no name, or itself)
 9  relay (:mod:`splices`, :mod:`tunnels`), within idle       close
    and byte limits
==  ==========================================================  =====================================

Plain HTTP goes upstream as :func:`egress_requests.origin_head` with its body, and the answer
streams back untouched until the upstream closes: no redirect is followed. Every decision is one
log line (``egress allowed`` / ``egress denied``: token id, run, step, host, port, method, path
without query, address, bytes, reason, rule) and a count in ``ironflow_auth_proxy_egress``
(decisions through :func:`egress.decide_remembered`: each policy works a destination out once);
never a token, a header value or a query string. An allowed or denied decision of a live grant is
also kept with the grant (:meth:`~ironflow.auth_proxy.registry.GrantRegistry.note_egress`, as its
:func:`decision_line`, off the request's path), so the worker reads a pod step's decisions for
its record through the admin API whichever replica made them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Final, Protocol, TypeVar

from prometheus_client import Counter

from ironflow import egress
from ironflow.auth_proxy import client_hello, crypto, egress_requests, logs, metrics, registry, splices, tokens, tunnels
from ironflow.auth_proxy import config as config_mod

__all__ = ["MAX_HEAD_BYTES", "EgressServer", "Resolver", "SystemResolver", "serve_egress"]

#: A request head larger than this is refused (431); also the stream reader's buffer limit.
MAX_HEAD_BYTES: Final = 64 * 1024
#: Reading an address spelling costs ~10 µs; a proxy sees the same few hosts again and again.
_literal: Final = functools.lru_cache(maxsize=4096)(egress.parse_ip_literal)
_ESTABLISHED: Final = egress_requests.answer(200)
_T = TypeVar("_T")
_UNAUTHORIZED: Final = "ironflow egress: proxy authentication required (a live ifap_ token)"


class Resolver(Protocol):
    """Names to addresses: the proxy's one lookup per request (tests replace it to rebind)."""

    async def resolve(self, host: str, port: int) -> Sequence[egress.IPAddress]: ...


class SystemResolver:
    """The event loop's ``getaddrinfo`` (the system's resolver), TCP addresses in its order."""

    async def resolve(self, host: str, port: int) -> Sequence[egress.IPAddress]:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
        found: list[egress.IPAddress] = []
        for _, _, _, _, sockaddr in infos:
            address = _literal(str(sockaddr[0]).partition("%")[0])
            if address is not None and address not in found:
                found.append(address)
        return found


class _Refused(Exception):
    """An answer of the proxy's own and what its log line says."""

    def __init__(self, status: int, reason: str, rule: str | None = None, *, result: str = "denied") -> None:
        super().__init__(reason)
        self.status, self.reason, self.rule, self.result = status, reason, rule, result


def decision_line(result: str, reason: str, fields: dict[str, Any]) -> str:
    """One decision as a step's record shows it: ``egress denied example.com:443 (CONNECT): <reason>``
    (never a token or a query string: ``fields`` carry neither)."""
    method = fields.get("method") or "CONNECT"
    return f"egress {result} {fields.get('host')}:{fields.get('port')} ({method}): {reason}"


class EgressServer:
    """Serves egress connections for the grants of one registry; see the module's rule table."""

    def __init__(
        self,
        config: config_mod.AuthProxyConfig,
        grants: registry.GrantRegistry,
        proxy_metrics: metrics.ProxyMetrics,
        *,
        resolver: Resolver | None = None,
        observer: Callable[[str], None] | None = None,
    ) -> None:
        self.config = config
        #: Hears each allowed or denied decision as one line (the local sandbox puts it in the step's record).
        self.observer = observer
        self.grants = grants
        self.resolver: Resolver = resolver or SystemResolver()
        self.budgets = tunnels.TokenBudgets(max_tunnels=config.egress_max_tunnels, max_bytes=config.egress_max_bytes)
        self._decisions = Counter(
            "ironflow_auth_proxy_egress",
            "Egress proxy decisions, by result (allowed, denied, unauthorized, malformed, limited, unreachable).",
            ["result"],
            registry=proxy_metrics.registry,
        )
        self._bytes = Counter(
            "ironflow_auth_proxy_egress_bytes", "Bytes relayed by the egress proxy.", registry=proxy_metrics.registry
        )
        self._noting: set[asyncio.Task[None]] = set()
        #: The handler task of each connection whose head was read (the listener cancels them as it closes).
        self.handlers: set[asyncio.Task[None]] = set()
        #: The connections whose head is still coming (closed with the listener).
        self.reading: set[splices.Client] = set()
        self._loop: asyncio.AbstractEventLoop | None = None  # the listener's, known at its first connection
        self._counts: dict[str, Any] = {}  # each result's labelled counter

    def connection(self) -> splices.Client:
        """The listener's protocol for one client connection."""
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return splices.Client(
            self._begin,
            reading=self.reading,
            loop=self._loop,
            header_timeout_s=self.config.header_timeout_s,
            max_head=MAX_HEAD_BYTES,
        )

    def _begin(self, client: splices.Client, head: bytes | None) -> None:
        task = client.loop.create_task(self.handle(client, head))
        self.handlers.add(task)
        task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        self.handlers.discard(task)
        self._noting.discard(task)

    async def handle(self, client: splices.Client, head: bytes | None) -> None:
        """One client connection, its head read (``None``: too large): one request, then close;
        then the decision is kept with the grant (:meth:`_keep`)."""
        fields: dict[str, Any] = {}
        grant_ids: list[str] = []  # the resolved grant's, apart from the logged fields (they carry 12 chars)
        line: str | None = None
        assert client.transport is not None
        try:
            line = await self._serve(client, head, fields, grant_ids)
        except _Refused as refused:
            line = self._log(refused.result, refused.reason, refused.rule, fields, logging.WARNING)
            if isinstance(refused, _Closed):
                return
            body = f"ironflow egress: denied {fields.get('host')}:{fields.get('port')}: {refused.reason}"
            extra: tuple[tuple[str, str], ...] = ()
            if refused.status == 407:
                body, extra = _UNAUTHORIZED, (egress_requests.AUTHENTICATE,)
            elif refused.status in (400, 431):
                body = f"ironflow egress: {refused.reason}"
            if not client.transport.is_closing():
                client.transport.write(egress_requests.answer(refused.status, body, *extra))
        except (ConnectionError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass  # the client went, or broke the stream after the answer: nothing more to say
        except Exception as exc:  # a bug: one line naming its class, never the request
            logs.event("egress request failed", logging.ERROR, error=type(exc).__name__, **fields)
            self._decisions.labels(result="internal_error").inc()
        finally:
            client.close()  # after what is buffered is sent
            if line is not None and grant_ids:
                await self._keep(grant_ids[0], line)

    def _log(self, result: str, reason: str, rule: str | None, fields: dict[str, Any], level: int) -> str | None:
        """Count and log a decision; an allowed or denied one is also the line for the step's record."""
        counter = self._counts.get(result)
        if counter is None:
            counter = self._counts[result] = self._decisions.labels(result=result)
        counter.inc()
        message = "egress allowed" if result == "allowed" else "egress denied"
        logs.event(message, level, result=result, reason=reason, rule=rule, **fields)
        if result not in ("allowed", "denied"):
            return None
        line = decision_line(result, reason, fields)
        if self.observer is not None:
            self.observer(line)
        return line

    async def _keep(self, grant_id: str, line: str) -> None:
        """Keep a decision with its grant for the step's record, once the connection is closed (off
        the request's path): the handler is a note now, which a closing listener waits for
        (:meth:`settle`) rather than cancels. A registry that cannot take it loses only the note."""
        task = asyncio.current_task()
        if task is not None and task in self.handlers:
            self.handlers.discard(task)
            self._noting.add(task)
        with contextlib.suppress(registry.RegistryUnavailable):
            await self.grants.note_egress(grant_id, line)

    async def settle(self) -> None:
        """Wait for the decisions still being kept (the listener is closing)."""
        if self._noting:
            await asyncio.wait(set(self._noting), timeout=self.config.connect_timeout_s)

    def _request(self, head: bytes | None) -> egress_requests.ProxyRequest:
        if head is None:
            raise _Refused(431, "request head too large", result="malformed")
        try:
            return egress_requests.parse_head(head)
        except egress_requests.MalformedHead as exc:
            raise _Refused(400, str(exc), result="malformed") from None

    async def _grant(
        self, request: egress_requests.ProxyRequest, fields: dict[str, Any], grant_ids: list[str]
    ) -> tokens.Grant:
        token = egress_requests.proxy_token(request)
        if token is None:
            raise _Refused(407, "missing token", result="unauthorized")
        try:
            found = await self.grants.resolve(tokens.token_id(token), int(time.time()))
        except (registry.RegistryUnavailable, crypto.MissingKeyVersion):
            raise _Refused(503, "token registry unavailable", result="unavailable") from None
        if isinstance(found, registry.Resolution):
            raise _Refused(407, f"{found.value} token", result="unauthorized")
        fields.update(token=found.short_id, run_id=found.run_id, step=found.step)
        grant_ids.append(found.id)
        return found

    async def _addresses(self, policy: egress.EgressPolicy, host: str, port: int) -> list[egress.IPAddress]:
        """Step 6: every address the one lookup gave, each allowed after resolution."""
        literal = _literal(host)
        if literal is not None:
            found: Sequence[egress.IPAddress] = [literal]
        else:
            try:
                found = await _within(self.config.connect_timeout_s, self.resolver.resolve(host, port))
            except (OSError, UnicodeError, TimeoutError):
                found = []
            if not found:
                raise _Refused(502, f"cannot resolve {host}", result="unreachable")
        for address in found:
            decision = egress.decide_address_remembered(policy, host, port, address)
            if not decision.allowed:
                raise _Refused(403, decision.reason, decision.rule)
        return list(found)

    async def _connect(
        self, addresses: list[egress.IPAddress], fields: dict[str, Any], open_one: Callable[[str], Awaitable[_T]]
    ) -> _T:
        """Step 7: the first checked address that answers (never a second lookup)."""
        for address in addresses:
            at = str(address)
            try:
                opened = await _within(self.config.connect_timeout_s, open_one(at))
            except (OSError, TimeoutError):
                continue
            fields["address"] = at
            return opened
        raise _Refused(502, "upstream unreachable", result="unreachable")

    async def _serve(
        self, client: splices.Client, head: bytes | None, fields: dict[str, Any], grant_ids: list[str]
    ) -> str | None:
        request = self._request(head)
        fields.update(host=request.host, port=request.port, method=request.method)
        if request.path is not None:
            fields["path"] = request.path
        grant = await self._grant(request, fields, grant_ids)
        policy = grant.egress if grant.egress is not None else egress.EgressPolicy()
        method = None if request.tunnel else request.method  # a tunnel shows no method or path
        decision = egress.decide_remembered(policy, request.host, request.port, method=method, path=request.path)
        if not decision.allowed:
            raise _Refused(403, decision.reason, decision.rule)
        budget = self.budgets.acquire(grant.id, grant.expires_at)
        if isinstance(budget, str):
            raise _Refused(429, budget, result="limited")
        try:
            addresses = await self._addresses(policy, request.host, request.port)
            outcome = await self._relay(client, request, addresses, budget, fields)
        finally:
            self.budgets.release(budget)
        self._bytes.inc(outcome.sent + outcome.received)
        fields.update(sent=outcome.sent, received=outcome.received)
        return self._log("allowed", outcome.cut or decision.reason, decision.rule, fields, logging.INFO)

    async def _relay(
        self,
        client: splices.Client,
        request: egress_requests.ProxyRequest,
        addresses: list[egress.IPAddress],
        budget: tunnels.Budget,
        fields: dict[str, Any],
    ) -> tunnels.Relayed:
        """Steps 7 to 9. A tunnel: ``200``, the ClientHello's check, then bytes both ways; plain HTTP:
        the origin-form head and the body upstream, the answer back untouched."""
        idle = self.config.egress_idle_timeout_s
        if not request.tunnel:
            upstream = await self._connect(
                addresses, fields, lambda at: asyncio.open_connection(at, request.port, limit=MAX_HEAD_BYTES)
            )
            streams = client.streams(MAX_HEAD_BYTES)
            try:
                upstream[1].write(egress_requests.origin_head(request))
                framing = True if request.chunked else request.content_length or False
                return await tunnels.relay(streams, upstream, budget, idle_timeout_s=idle, body=framing)
            finally:
                upstream[1].close()
                streams[1].close()
        _, tunnel_end = await self._connect(
            addresses, fields, lambda at: client.loop.create_connection(splices.Upstream, at, request.port)
        )
        try:
            return await client.splice_to(
                tunnel_end,
                budget,
                answer=_ESTABLISHED,
                hello_timeout_s=self.config.header_timeout_s,
                idle_timeout_s=idle,
                check=functools.partial(_check_hello, request.host),
            )
        except client_hello.NotClientHello as exc:
            raise _Closed(f"not a TLS ClientHello ({exc})") from None
        except (TimeoutError, ConnectionError):
            raise _Closed("no TLS ClientHello") from None
        finally:
            tunnel_end.close()


async def _within(seconds: float, awaitable: Awaitable[_T]) -> _T:
    """``await awaitable``, or ``TimeoutError`` after ``seconds``: ``asyncio.timeout``'s job for the
    lookup and the connect before a tunnel's first byte, at a third of its cost (a timer and a flag)."""
    task = asyncio.current_task()
    assert task is not None
    expired = False

    def expire() -> None:
        nonlocal expired
        expired = True
        task.cancel()

    timer = task.get_loop().call_later(seconds, expire)
    try:
        return await awaitable
    except asyncio.CancelledError:
        if expired and task.uncancel() == 0:
            raise TimeoutError from None
        raise
    finally:
        timer.cancel()


def _check_hello(host: str, name: str | None) -> None:
    """Step 8: the client's ClientHello names ``host`` (an IP literal: no name, or itself)."""
    literal = _literal(host) is not None
    if name is None and not literal:
        raise _Closed("the TLS ClientHello names no server")
    if name is not None and name != host:
        raise _Closed(f"the TLS ClientHello names {name[:100]}, not {host}")


class _Closed(_Refused):
    """A refusal after ``200 Connection established``: no answer can be sent, the tunnel closes."""

    def __init__(self, reason: str) -> None:
        super().__init__(0, reason)


@contextlib.asynccontextmanager
async def serve_egress(
    server: EgressServer,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    unix_socket: str | None = None,
    reuse_port: bool = False,
) -> AsyncIterator[str]:
    """Listen until the block ends; yields the proxy URL (``http://host:port``, or the socket path)."""
    loop = asyncio.get_running_loop()
    listener: asyncio.Server
    if unix_socket is not None:
        listener = await loop.create_unix_server(server.connection, unix_socket)
        os.chmod(unix_socket, 0o666)  # noqa: S103 - the sandboxed uid must connect; the dir guards access
        where = unix_socket
    else:
        listener = await loop.create_server(server.connection, host, port, reuse_port=reuse_port or None)
        bound = listener.sockets[0].getsockname()
        shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
        where = f"http://{shown}:{bound[1]}"
    try:
        yield where
    finally:
        listener.close()
        for waiting in list(server.reading):
            waiting.close()
        for task in list(server.handlers):
            task.cancel()
        await asyncio.gather(*server.handlers, return_exceptions=True)
        await listener.wait_closed()
        await server.settle()
