"""The proxy's HTTP handlers: admin API, the Anthropic relay, the secret relay, health, metrics.

Each handler applies :mod:`ironflow.auth_proxy.policy` in the order of its rule table
and does the I/O around it: resolve the token in the registry, stream the upstream
response back chunk by chunk. Handlers never log a token, a credential, a header value
or a query string: log lines go through :func:`ironflow.auth_proxy.logs.event` with
the 12-char token id only.

With OpenTelemetry (:mod:`ironflow.tracing`) each relayed Anthropic request whose token resolved
is an ``ironflow.proxy.request`` span (method, path, status, token id), a child of the request's
own ``traceparent`` header, else of the one its token was issued with; without it, or with no
tracer provider set, no span work.

The handlers live on one :class:`ProxyHandlers` object whose resources (registry, upstream
connection pool) are filled in by the app's cleanup contexts before the first request.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import time
from dataclasses import dataclass
from typing import Final

from aiohttp import web
from multidict import CIMultiDict

from ironflow import egress as egress_policy
from ironflow import tracing
from ironflow.auth_proxy import bodies, crypto, header_policy, logs, metrics, policy, registry, tokens, usage_meter
from ironflow.auth_proxy import config as config_mod
from ironflow.auth_proxy import upstream as upstream_mod

__all__ = ["ProxyHandlers"]

_JSON: Final = "application/json"
_ADMIN_UNAUTHORIZED: Final = policy.error_body("authentication_error", "invalid or missing admin key")


@dataclass(frozen=True)
class _Denied:
    """A request whose token resolved to no usable grant: the answer, and the result label."""

    refusal: policy.Refusal
    reason: str


def _json_response(status: int, body: bytes) -> web.Response:
    return web.Response(status=status, body=body, content_type=_JSON)


def _refuse(refusal: policy.Refusal) -> web.Response:
    return _json_response(refusal.status, refusal.body())


def _path_of(request: web.Request) -> str:
    """The raw path, percent-encoding kept and the query dropped (queries are never logged)."""
    raw = request.raw_path
    if not raw.startswith("/"):
        return request.rel_url.raw_path
    return raw.partition("?")[0]


class ProxyHandlers:
    """Handlers sharing one registry, one upstream connection pool and one metrics set."""

    def __init__(self, config: config_mod.AuthProxyConfig) -> None:
        self.config = config
        self.metrics = metrics.ProxyMetrics()
        self.registry: registry.GrantRegistry | None = None
        self.pool: upstream_mod.UpstreamPool | None = None
        self._admin_digest = hashlib.sha256(config.admin_key.reveal().encode()).digest()
        self._upstream = config.upstream
        self.body_budget = bodies.BodyBudget(config.max_buffered_bytes)
        self._settling: set[asyncio.Future[None]] = set()

    # --- health and metrics ---------------------------------------------------------

    async def healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def metrics_page(self, request: web.Request) -> web.Response:
        if not self.config.metrics_enabled:
            return _json_response(404, policy.error_body("not_found_error", "metrics are disabled"))
        if self.registry is not None:
            with contextlib.suppress(registry.RegistryUnavailable):
                self.metrics.live_tokens.set(await self.registry.count())
        return web.Response(body=self.metrics.render(), headers={"Content-Type": metrics.CONTENT_TYPE})

    # --- admin API ------------------------------------------------------------------

    def _is_admin(self, request: web.Request) -> bool:
        header = request.headers.get("Authorization", "")
        if not header.startswith("Bearer "):
            return False
        given = hashlib.sha256(header[len("Bearer ") :].strip().encode()).digest()
        return hmac.compare_digest(given, self._admin_digest)

    def _admin_refused(self, request: web.Request) -> web.Response:
        logs.event("admin request without a valid admin key", logging.WARNING, method=request.method)
        self.metrics.count("admin_unauthorized")
        return _json_response(401, _ADMIN_UNAUTHORIZED)

    def _registry(self) -> registry.GrantRegistry:
        if self.registry is None:
            raise registry.RegistryUnavailable("the registry is not open")
        return self.registry

    async def issue(self, request: web.Request) -> web.Response:
        if not self._is_admin(request):
            return self._admin_refused(request)
        try:
            body = await request.read()
            token_request = tokens.parse_token_request(body, int(time.time()))
        except tokens.InvalidTokenRequest as exc:
            logs.event("token request refused", logging.WARNING, reason=exc.message)
            return _json_response(400, policy.error_body("invalid_request_error", exc.message))
        except web.HTTPRequestEntityTooLarge:
            logs.event("token request refused", logging.WARNING, reason="body too large")
            return _json_response(400, policy.error_body("invalid_request_error", "invalid token request body"))
        try:
            grant, token = await registry.issue(self._registry(), token_request)
        except (registry.RegistryUnavailable, crypto.MissingKeyVersion) as exc:
            logs.event("token registry unavailable", logging.ERROR, operation="issue", reason=str(exc))
            return _json_response(503, policy.error_body("api_error", "token registry unavailable"))
        except (OSError, NotImplementedError):  # the OS random source failed
            return _json_response(500, policy.error_body("api_error", "token issuance failed"))
        logs.event("token issued", token=grant.short_id, run_id=grant.run_id, step=grant.step)
        payload = json.dumps({"id": grant.id, "token": token.reveal()}).encode()
        return _json_response(201, payload)

    async def revoke(self, request: web.Request) -> web.Response:
        if not self._is_admin(request):
            return self._admin_refused(request)
        grant_id = request.match_info["id"]
        try:
            existed = await self._registry().revoke(grant_id)
        except registry.RegistryUnavailable:
            logs.event("token registry unavailable", logging.ERROR, operation="revoke")
            return _json_response(503, policy.error_body("api_error", "token registry unavailable"))
        if not existed:
            return _json_response(404, policy.error_body("not_found_error", "unknown token"))
        logs.event("token revoked", token=tokens.short_id(grant_id))
        return web.Response(status=204)

    async def egress_notes(self, request: web.Request) -> web.Response:
        """``GET /admin/v1/tokens/{id}/egress``: the grant's kept egress decision lines, oldest first
        (``{"decisions": [...]}``; none for a grant that is gone): a pod step's record."""
        if not self._is_admin(request):
            return self._admin_refused(request)
        try:
            lines = await self._registry().egress_notes(request.match_info["id"])
        except registry.RegistryUnavailable:
            logs.event("token registry unavailable", logging.ERROR, operation="egress_notes")
            return _json_response(503, policy.error_body("api_error", "token registry unavailable"))
        return _json_response(200, json.dumps({"decisions": lines}).encode())

    async def revoke_run(self, request: web.Request) -> web.Response:
        if not self._is_admin(request):
            return self._admin_refused(request)
        run_id = request.match_info["run_id"]
        try:
            count = await self._registry().revoke_run(run_id)
        except registry.RegistryUnavailable:
            logs.event("token registry unavailable", logging.ERROR, operation="revoke_run")
            return _json_response(503, policy.error_body("api_error", "token registry unavailable"))
        logs.event("run tokens revoked", run_id=run_id, revoked=count)
        return _json_response(200, json.dumps({"revoked": count}).encode())

    async def set_egress(self, request: web.Request) -> web.Response:
        """``PUT /admin/v1/runs/{run_id}/egress``: a new egress policy for the run's live grants (of one
        step, when the body names it); every replica decides their next connection by it. 200
        ``{"updated": n}``; a registry that cannot take it answers 503 and nothing changes."""
        if not self._is_admin(request):
            return self._admin_refused(request)
        run_id = request.match_info["run_id"]
        try:
            change = tokens.parse_egress_change(await request.read())
        except tokens.InvalidTokenRequest as exc:
            logs.event("egress change refused", logging.WARNING, reason=exc.message)
            return _json_response(400, policy.error_body("invalid_request_error", exc.message))
        try:
            # null lets nothing through: an empty policy, so the grants stay ones a later change reaches
            closed = change.egress if change.egress is not None else egress_policy.EgressPolicy()
            count = await self._registry().set_egress(run_id, change.step, closed)
        except registry.RegistryUnavailable:
            logs.event("token registry unavailable", logging.ERROR, operation="set_egress")
            return _json_response(503, policy.error_body("api_error", "token registry unavailable"))
        logs.event("egress policy changed", run_id=run_id, step=change.step, updated=count)
        return _json_response(200, json.dumps({"updated": count}).encode())

    # --- relays ---------------------------------------------------------------------

    async def _resolve(self, request: web.Request, path: str) -> tokens.Grant | _Denied:
        """Rows 3–4b: the grant behind the request's opaque token, or the refusal and why."""
        token = policy.extract_opaque_token(request.headers)
        if token is None:
            logs.event(policy.INVALID_TOKEN.event, logging.WARNING, reason="missing", path=path)
            return _Denied(policy.INVALID_TOKEN, "unknown_token")
        try:
            found = await self._registry().resolve(tokens.token_id(token), int(time.time()))
        except (registry.RegistryUnavailable, crypto.MissingKeyVersion) as exc:
            # Fixed texts only: no URL, no key material, no query values.
            logs.event(policy.REGISTRY_UNAVAILABLE.event, logging.ERROR, path=path, reason=str(exc))
            return _Denied(policy.REGISTRY_UNAVAILABLE, "unavailable")
        if isinstance(found, registry.Resolution):
            logs.event(policy.INVALID_TOKEN.event, logging.WARNING, reason=found.value, path=path)
            reason = "unknown_token" if found is registry.Resolution.UNKNOWN else found.value
            return _Denied(policy.INVALID_TOKEN, reason)
        return found

    async def relay(self, request: web.Request) -> web.StreamResponse:
        """The fallback route: the Anthropic relay, or ``/r/…`` for proxied secrets."""
        method = request.method
        refusal = policy.check_target(method, request.raw_path)
        if refusal is not None:
            logs.event(refusal.event, logging.WARNING, method=method)
            self.metrics.count(refusal.result)
            return _refuse(refusal)
        path = _path_of(request)
        if path.startswith("/r/"):
            return await self._secret_relay(request, method, path)
        found = await self._resolve(request, path)
        if isinstance(found, _Denied):
            self.metrics.count(found.refusal.result)
            return _refuse(found.refusal)
        if not tracing.recording():
            return await self._claude_relay(request, method, path, found)
        parent = request.headers.get("traceparent") or found.trace_context
        with tracing.span(
            "ironflow.proxy.request", parent=parent, method=method, path=path, token=found.short_id
        ) as span:
            response = await self._claude_relay(request, method, path, found)
            span.set(status=response.status)
            return response

    async def _claude_relay(
        self, request: web.Request, method: str, path: str, grant: tokens.Grant
    ) -> web.StreamResponse:
        """Rows 5 on: check, read, forward and stream back one Anthropic request of a resolved grant."""
        refusal = policy.check_claude_request(method, path, grant)
        if refusal is not None:
            return self._refused(refusal, grant, method, path)
        read = await self._read_body(request)
        if isinstance(read, policy.Refusal):
            return self._refused(read, grant, method, path)
        body = read
        try:
            if not grant.limits.empty:
                refusal = await self._check_limits(method, path, body.data, grant)
                if refusal is not None:
                    return self._refused(refusal, grant, method, path)
            credential = grant.credential
            assert isinstance(credential, tokens.ClaudeCredential)  # check_claude_request refused secrets
            headers = header_policy.upstream_headers(request.headers.items(), credential)
            count_tokens = grant.limits.max_output_tokens is not None
            target = request.rel_url.raw_path_qs
            response, status = await self._forward(
                request, method, self._upstream, target, headers, body, grant, count_tokens
            )
        finally:
            body.release()
        if status == 0:
            logs.event(policy.UPSTREAM_UNREACHABLE.event, logging.ERROR, token=grant.short_id, path=path)
            self.metrics.count(policy.UPSTREAM_UNREACHABLE.result)
            return _refuse(policy.UPSTREAM_UNREACHABLE)
        logs.event(
            "relayed",
            token=grant.short_id,
            run_id=grant.run_id,
            step=grant.step,
            method=method,
            path=path,
            status=status,
        )
        self.metrics.count("relayed")
        return response

    def _refused(self, refusal: policy.Refusal, grant: tokens.Grant, method: str, path: str) -> web.Response:
        logs.event(refusal.event, logging.WARNING, token=grant.short_id, method=method, path=path)
        self.metrics.count(refusal.result)
        return _refuse(refusal)

    async def _check_limits(self, method: str, path: str, body: bytes, grant: tokens.Grant) -> policy.Refusal | None:
        """Rows L1–L2: every model a POST body names against the allowlist, then the counted usage."""
        if grant.limits.models is not None and method == "POST":
            # Parsed only for tokens issued with a model allowlist: others pay nothing here.
            refusal = policy.check_models(grant.limits, policy.requested_models(path, body))
            if refusal is not None:
                return refusal
        if grant.limits.max_requests is None and grant.limits.max_output_tokens is None:
            return None
        try:
            usage = await self._registry().take_request(grant.id)
        except (registry.RegistryUnavailable, crypto.MissingKeyVersion) as exc:
            logs.event(policy.REGISTRY_UNAVAILABLE.event, logging.ERROR, operation="count request", reason=str(exc))
            return policy.REGISTRY_UNAVAILABLE
        return policy.check_usage(grant.limits, requests_used=usage.requests, output_tokens_used=usage.output_tokens)

    async def _read_body(self, request: web.Request) -> bodies.Body | policy.Refusal:
        """Row 8: the whole body under the replica's byte budget, or the refusal."""
        return await bodies.read_body(
            request,
            self.body_budget,
            max_bytes=self.config.max_body_bytes,
            read_timeout_s=self.config.body_read_timeout_s,
        )

    async def _forward(
        self,
        request: web.Request,
        method: str,
        base: str,
        target: str,
        headers: list[tuple[str, str]],
        body: bodies.Body,
        grant: tokens.Grant,
        count_tokens: bool,
    ) -> tuple[web.StreamResponse, int]:
        """Send upstream and stream the answer back; status 0 means nothing was sent back.

        A stream the upstream cuts short is cut short downstream too (the connection is
        closed before the chunked terminator), never ended cleanly. With ``count_tokens``
        the output tokens are metered from what the upstream sends and charged in a
        shielded step, even when the client leaves first (:meth:`_settle`).
        """
        pool = self.pool
        if pool is None:
            return web.StreamResponse(), 0
        started = time.perf_counter()
        try:
            upstream = await pool.request(method, base, target, headers, body.data)
        except upstream_mod.UpstreamError:
            return web.StreamResponse(), 0
        finally:
            body.release()  # sent: its bytes no longer count against the budget
        meter = usage_meter.UsageMeter() if count_tokens else None
        response: web.StreamResponse = web.StreamResponse()
        self.metrics.upstream_latency.observe(time.perf_counter() - started)
        self.metrics.open_streams.inc()
        try:
            downstream = CIMultiDict(header_policy.downstream_headers(upstream.headers))
            try:
                first = await upstream.read()
            except upstream_mod.UpstreamError:
                return web.StreamResponse(), 0
            if meter is not None:
                meter.feed(first)
            if upstream.done and method != "HEAD":
                # The whole answer is already here: headers and body leave in one write.
                if meter is not None:
                    meter.ended()
                return web.Response(status=upstream.status, headers=downstream, body=first), upstream.status
            response = web.StreamResponse(status=upstream.status, headers=downstream)
            await response.prepare(request)
            await response.write(first)
            while True:
                try:
                    chunk = await upstream.read()
                except upstream_mod.UpstreamError:
                    # Truncated upstream: the pod must see a broken stream, not a clean end.
                    logs.event("upstream stream cut short", logging.WARNING, token=grant.short_id)
                    _cut_short(request)
                    return response, upstream.status
                if not chunk:
                    break
                if meter is not None:
                    meter.feed(chunk)
                await response.write(chunk)
            if meter is not None:
                meter.ended()
            await response.write_eof()
        except ConnectionError:
            pass  # the pod went away mid-stream; a cancelled handler raises CancelledError instead
        finally:
            self.metrics.open_streams.dec()
            if meter is None:
                upstream.release()
            else:
                settle = asyncio.ensure_future(self._settle(upstream, meter, grant))
                self._settling.add(settle)
                settle.add_done_callback(self._settling.discard)
                await asyncio.shield(settle)  # a cancelled handler still gets its usage charged
        return response, upstream.status

    async def _settle(
        self, upstream: upstream_mod.UpstreamResponse, meter: usage_meter.UsageMeter, grant: tokens.Grant
    ) -> None:
        """Charge a limited token's output tokens; if the client left before the stream's
        own usage (``message_delta``), read on for it, bounded by ``usage_drain_timeout_s``."""
        try:
            if not meter.final:
                with contextlib.suppress(upstream_mod.UpstreamError, TimeoutError):
                    async with asyncio.timeout(self.config.usage_drain_timeout_s):
                        while not meter.final and (chunk := await upstream.read()):
                            meter.feed(chunk)
        finally:
            upstream.release()
            if meter.tokens and self.registry is not None:
                try:
                    await self.registry.add_output_tokens(grant.id, meter.tokens)
                except (registry.RegistryUnavailable, crypto.MissingKeyVersion):
                    logs.event("token registry unavailable", logging.ERROR, operation="count output tokens")

    async def settle_pending(self) -> None:
        """Wait for output-token charges still being written (at shutdown, before the registry closes)."""
        if self._settling:
            await asyncio.wait(set(self._settling), timeout=self.config.usage_drain_timeout_s + 5)

    async def _secret_relay(self, request: web.Request, method: str, path: str) -> web.StreamResponse:
        """Rows S1–S5: ``/r/<host>/<path>`` with a proxied secret injected (a header, or the query)."""
        found = await self._resolve(request, path)
        if isinstance(found, _Denied):
            self._secret_event(request, host=_host_for_log(path), secret="", grant=None, result=found.reason)
            return _refuse(found.refusal)
        grant = found
        refusal, host, rest = policy.check_secret_request(method, path, grant)
        secret = grant.credential
        name = secret.name if isinstance(secret, tokens.SecretCredential) else ""
        if refusal is not None:
            self._secret_event(request, host=host, secret=name, grant=grant, result=refusal.result)
            return _refuse(refusal)
        assert isinstance(secret, tokens.SecretCredential)
        read = await self._read_body(request)
        if isinstance(read, policy.Refusal):
            self._secret_event(request, host=host, secret=name, grant=grant, result=read.result)
            return _refuse(read)
        query = policy.secret_query(request.rel_url.raw_query_string, secret)  # never logged: may hold the secret
        base = f"https://{host}" if self.config.secret_upstream is None else f"{self.config.secret_upstream}/{host}"
        target = rest + (f"?{query}" if query else "")
        headers = header_policy.secret_headers(request.headers.items(), secret)
        try:
            response, status = await self._forward(request, method, base, target, headers, read, grant, False)
        finally:
            read.release()
        if status == 0:
            self._secret_event(request, host=host, secret=name, grant=grant, result="upstream_error")
            return _refuse(policy.SECRET_UPSTREAM_UNREACHABLE)
        self._secret_event(request, host=host, secret=name, grant=grant, result="relayed", upstream_status=status)
        return response

    def _secret_event(
        self,
        request: web.Request,
        *,
        host: str,
        secret: str,
        grant: tokens.Grant | None,
        result: str,
        upstream_status: int | None = None,
    ) -> None:
        logs.event(
            "secret relay",
            logging.INFO if result == "relayed" else logging.WARNING,
            host=host,
            secret=secret,
            run_id=grant.run_id if grant else None,
            step=grant.step if grant else None,
            token=grant.short_id if grant else None,
            method=request.method,
            result=result,
            upstream_status=upstream_status,
        )
        self.metrics.count(result, secret)


def _cut_short(request: web.Request) -> None:
    """Close the pod's connection before the response's end marker: a truncated answer
    must read as truncated (no chunked terminator), never as a clean end of stream."""
    transport = request.transport
    if transport is not None:
        transport.close()


def _host_for_log(path: str) -> str:
    target = policy.split_secret_target(path)
    return target[0] if target is not None else "<invalid>"
