"""The proxy's HTTP handlers: admin API, the Anthropic relay, the secret relay, health, metrics.

Each handler applies :mod:`ironflow.auth_proxy.policy` in the order of its rule table
and does the I/O around it: resolve the token in the registry, stream the upstream
response back chunk by chunk. Handlers never log a token, a credential, a header value
or a query string: log lines go through :func:`ironflow.auth_proxy.logs.event` with
the 12-char token id only.

The handlers live on one :class:`ProxyHandlers` object whose resources (registry, HTTP
session) are filled in by the app's cleanup contexts before the first request.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import logging
import re
import time
from dataclasses import dataclass
from typing import Final

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from ironflow.auth_proxy import config as config_mod
from ironflow.auth_proxy import crypto, logs, metrics, policy, registry, tokens

__all__ = ["ProxyHandlers"]

_JSON: Final = "application/json"
_OUTPUT_TOKENS = re.compile(rb'"output_tokens"\s*:\s*(\d+)')
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
    """Handlers sharing one registry, one upstream session and one metrics set."""

    def __init__(self, config: config_mod.AuthProxyConfig) -> None:
        self.config = config
        self.metrics = metrics.ProxyMetrics()
        self.registry: registry.GrantRegistry | None = None
        self.session: aiohttp.ClientSession | None = None
        self._admin_digest = hashlib.sha256(config.admin_key.reveal().encode()).digest()
        self._upstream = config.upstream

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
        grant = found
        refusal = policy.check_claude_request(method, path, grant)
        if refusal is None and not grant.limits.empty:
            refusal = await self._check_limits(request, grant)
        if refusal is not None:
            logs.event(refusal.event, logging.WARNING, token=grant.short_id, method=method, path=path)
            self.metrics.count(refusal.result)
            return _refuse(refusal)
        credential = grant.credential
        assert isinstance(credential, tokens.ClaudeCredential)  # check_claude_request refused secrets
        body = await self._read_body(request)
        if body is None:
            self.metrics.count(policy.BODY_TOO_LARGE.result)
            return _refuse(policy.BODY_TOO_LARGE)
        headers = policy.upstream_headers(request.headers.items(), credential)
        count_tokens = grant.limits.max_output_tokens is not None
        response, status = await self._forward(
            request, method, self._upstream + request.rel_url.raw_path_qs, headers, body, count_tokens, grant
        )
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

    async def _check_limits(self, request: web.Request, grant: tokens.Grant) -> policy.Refusal | None:
        """Rows L1–L2: the model of a POST body against the allowlist, then the counted usage."""
        if grant.limits.models is not None and request.method == "POST":
            # Parsed only for tokens issued with a model allowlist: others pay nothing here.
            refusal = policy.check_model(grant.limits, policy.requested_model(await self._read_body(request) or b""))
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

    async def _read_body(self, request: web.Request) -> bytes | None:
        """Row 8: the whole body (≤ the configured limit), or ``None``."""
        if not request.body_exists:
            return b""
        try:
            return await request.read()
        except (web.HTTPRequestEntityTooLarge, aiohttp.ClientError, ConnectionError, ValueError):
            return None

    async def _forward(
        self,
        request: web.Request,
        method: str,
        url: str,
        headers: list[tuple[str, str]],
        body: bytes,
        count_tokens: bool,
        grant: tokens.Grant,
    ) -> tuple[web.StreamResponse, int]:
        """Send upstream and stream the answer back; status 0 means nothing was sent back."""
        session = self.session
        if session is None:
            return web.StreamResponse(), 0
        started = time.perf_counter()
        try:
            upstream_cm = session.request(
                method, url, headers=CIMultiDict(headers), data=body or None, allow_redirects=False
            )
            upstream = await upstream_cm.__aenter__()
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError):
            return web.StreamResponse(), 0
        used = 0
        response: web.StreamResponse = web.StreamResponse()
        try:
            self.metrics.upstream_latency.observe(time.perf_counter() - started)
            downstream = CIMultiDict(policy.downstream_headers(upstream.headers.items()))
            self.metrics.open_streams.inc()
            try:
                first = await upstream.content.readany()
                if count_tokens:
                    used = _output_tokens(first, used)
                if upstream.content.at_eof() and method != "HEAD":
                    # The whole answer is already here: headers and body leave in one write.
                    response = web.Response(status=upstream.status, headers=downstream, body=first)
                    return response, upstream.status
                response = web.StreamResponse(status=upstream.status, headers=downstream)
                await response.prepare(request)
                await response.write(first)
                tail = first[-48:]
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
                    if count_tokens:
                        window = tail + chunk
                        used = _output_tokens(window, used)
                        tail = window[-48:]
                await response.write_eof()
            except (aiohttp.ClientError, TimeoutError, ConnectionError):
                # Upstream died or the pod went away mid-stream.
                if not response.prepared:
                    return web.StreamResponse(), 0
            finally:
                self.metrics.open_streams.dec()
        finally:
            await upstream_cm.__aexit__(None, None, None)
            if used and self.registry is not None:
                try:
                    await self.registry.add_output_tokens(grant.id, used)
                except registry.RegistryUnavailable:
                    logs.event("token registry unavailable", logging.ERROR, operation="count output tokens")
        return response, upstream.status

    async def _secret_relay(self, request: web.Request, method: str, path: str) -> web.StreamResponse:
        """Rows S1–S5: ``/r/<host>/<path>`` with a proxied secret injected."""
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
        body = await self._read_body(request)
        if body is None:
            self._secret_event(request, host=host, secret=name, grant=grant, result="body_too_large")
            return _refuse(policy.BODY_TOO_LARGE)
        query = request.rel_url.raw_query_string
        base = f"https://{host}" if self.config.secret_upstream is None else f"{self.config.secret_upstream}/{host}"
        url = base + rest + (f"?{query}" if query else "")
        headers = policy.secret_headers(request.headers.items(), secret)
        response, status = await self._forward(request, method, url, headers, body, False, grant)
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


def _output_tokens(window: bytes, seen: int) -> int:
    """The largest ``"output_tokens": N`` in a stream window: the usage is cumulative."""
    for match in _OUTPUT_TOKENS.finditer(window):
        seen = max(seen, int(match.group(1)))
    return seen


def _host_for_log(path: str) -> str:
    target = policy.split_secret_target(path)
    return target[0] if target is not None else "<invalid>"
