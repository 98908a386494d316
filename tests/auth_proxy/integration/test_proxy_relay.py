"""The proxy on a real TCP port, relaying to a fake Anthropic API on loopback.

Counterparts of the reference's ``ironflow-auth-proxy/tests/relay.rs`` and
``relay_logs.rs``, plus token limits and proxied secrets. Every request goes through
real sockets; the upstream records what it received.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gzip
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from yarl import URL

from ironflow import log_lines
from ironflow.auth_proxy import AdminClient, AuthProxyConfig, Credential, Limits, MemoryRegistry, run_auth_proxy, tokens
from ironflow.auth_proxy import logs as proxy_logs
from ironflow.auth_proxy.app import RunningProxy
from ironflow.auth_proxy.policy import error_body as policy_error
from ironflow.fake_model.server import FakeAnthropic, Script, TextTurn, Usage
from ironflow.secrets import Secret, find_leaks
from ironflow.testing.polling import eventually

ADMIN = "admin-key-" + "x" * 40
OAUTH = "sk-ant-oat01-REAL-OAUTH-TOKEN"
API_KEY = "sk-ant-api03-REAL-API-KEY"
API_CRED = Credential("api_key", Secret(API_KEY))
MESSAGE = {"model": "claude-haiku-5-0", "max_tokens": 9, "stream": True, "messages": [{"role": "user", "content": ""}]}


@contextlib.asynccontextmanager
async def _upstream(
    handler: Callable[[web.Request], Awaitable[web.StreamResponse]], *, raw: bool = False
) -> AsyncIterator[str]:
    """A throwaway upstream on loopback answering every route with ``handler``; its URL.
    With ``raw``, request bodies reach ``handler`` as sent (an encoded body is not inflated)."""
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app, handler_cancellation=True, auto_decompress=not raw)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


@dataclass
class Env:
    proxy: RunningProxy
    fake: FakeAnthropic
    admin: AdminClient
    http: aiohttp.ClientSession
    registry: MemoryRegistry

    async def token(self, credential: Credential | None = None, *, run_id: str = "run-1", **kw: object) -> str:
        issued = await self.admin.issue(
            run_id, "step-a", int(time.time()) + 300, credential=credential or Credential("oauth_token", Secret(OAUTH)),
            **kw,  # type: ignore[arg-type]
        )  # fmt: skip
        return issued.token.reveal()

    async def post(self, token: str | None, path: str = "/v1/messages?beta=true", **headers: str) -> Reply:
        if token is not None:
            headers.setdefault("Authorization", f"Bearer {token}")
        async with self.http.post(self.proxy.url + path, json=MESSAGE, headers=headers) as response:
            return Reply(response.status, await response.read())


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    turn = TextTurn("hello from upstream", headers={"anthropic-ratelimit-unified-status": "allowed"}, usage=Usage(7, 7))
    script = Script.of(default=turn)
    shared = MemoryRegistry()
    async with FakeAnthropic(script) as fake:
        config = AuthProxyConfig(admin_key=Secret(ADMIN), upstream=fake.url, registry=shared)
        async with run_auth_proxy(config) as proxy, proxy.admin_client() as admin, aiohttp.ClientSession() as http:
            yield Env(proxy, fake, admin, http, shared)


async def _error(response: aiohttp.ClientResponse | Reply) -> tuple[int, str, str]:
    body = json.loads(response.body if isinstance(response, Reply) else await response.read())
    assert body["type"] == "error"
    return response.status, body["error"]["type"], body["error"]["message"]


async def test_unknown_token_returns_401(env: Env) -> None:
    response = await env.post("ifap_" + "0" * 64)
    assert await _error(response) == (401, "authentication_error", "invalid or expired ironflow auth proxy token")
    assert env.fake.requests == []


async def test_missing_token_returns_401(env: Env) -> None:
    assert (await env.post(None)).status == 401
    assert env.fake.requests == []


async def test_expired_token_returns_401(env: Env) -> None:
    token = tokens.new_token().reveal()
    credential = tokens.ClaudeCredential("oauth_token", Secret(OAUTH))
    await env.registry.insert(tokens.Grant(tokens.token_id(token), "run-1", "s", int(time.time()) - 1, credential))
    assert (await env.post(token)).status == 401
    assert await env.registry.count() == 0
    assert env.fake.requests == []


async def test_revoked_token_returns_401(env: Env) -> None:
    issued = await env.admin.issue("run-1", "s", int(time.time()) + 60, credential=API_CRED)
    assert await env.admin.revoke(issued.id)
    assert (await env.post(issued.token.reveal())).status == 401
    assert not await env.admin.revoke(issued.id)


async def test_token_issued_by_one_replica_is_relayed_by_another(env: Env) -> None:
    """Two app instances sharing one registry: issued on one, relayed by the other."""
    config = AuthProxyConfig(admin_key=Secret(ADMIN), upstream=env.fake.url, registry=env.registry)
    async with run_auth_proxy(config) as second:
        token = await env.token()
        async with env.http.post(second.url + "/v1/messages", json=MESSAGE, headers={"x-api-key": token}) as response:
            assert response.status == 200
            assert "hello from upstream" in await response.text()


async def test_revoke_run_drops_every_token_of_the_run(env: Env) -> None:
    mine = [await env.token(run_id="run-x") for _ in range(3)]
    other = await env.token(run_id="run-y")
    assert await env.admin.revoke_run("run-x") == 3
    assert [(await env.post(t)).status for t in mine] == [401, 401, 401]
    assert (await env.post(other)).status == 200
    assert await env.admin.revoke_run("run-x") == 0


async def test_valid_oauth_token_relays_with_real_credential(env: Env) -> None:
    token = await env.token()
    response = await env.post(token, **{"anthropic-beta": "claude-code-20250219", "Cookie": "c=1"})
    assert response.status == 200
    (seen,) = env.fake.requests
    assert seen.header("authorization") == f"Bearer {OAUTH}"
    assert seen.header("anthropic-beta") == "claude-code-20250219,oauth-2025-04-20"
    assert seen.header("x-api-key") is None
    assert seen.header("cookie") is None
    assert seen.query == {"beta": "true"}
    assert not find_leaks([token], dict(seen.headers), seen.body)


async def test_valid_api_key_token_relays_with_x_api_key(env: Env) -> None:
    token = await env.token(Credential("api_key", Secret(API_KEY)))
    assert (await env.post(token, **{"anthropic-beta": "b1"})).status == 200
    (seen,) = env.fake.requests
    assert seen.header("x-api-key") == API_KEY
    assert seen.header("authorization") is None
    assert seen.header("anthropic-beta") == "b1"
    assert not find_leaks([token], dict(seen.headers))


async def test_sse_response_is_streamed_with_ratelimit_headers(env: Env) -> None:
    token = await env.token()
    headers = {"Authorization": f"Bearer {token}"}
    async with env.http.post(env.proxy.url + "/v1/messages", json=MESSAGE, headers=headers) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["anthropic-ratelimit-unified-status"] == "allowed"
        body = await response.text()
    assert body.index("message_start") < body.index("hello from upstream") < body.index("message_stop")


async def test_sse_chunks_pass_through_before_the_stream_ends() -> None:
    """The proxy forwards each event as it comes: the upstream waits for the client to see
    the first event before it sends the second (a buffering proxy would deadlock here)."""
    seen_first = asyncio.Event()

    async def slow_stream(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b"event: one\ndata: {}\n\n")
        await asyncio.wait_for(seen_first.wait(), 5)
        await response.write(b"event: two\ndata: {}\n\n")
        await response.write_eof()
        return response

    async with _upstream(slow_stream) as upstream_url:
        config = AuthProxyConfig(admin_key=Secret(ADMIN), upstream=upstream_url)
        async with run_auth_proxy(config) as proxy, proxy.admin_client() as admin, aiohttp.ClientSession() as http:
            issued = await admin.issue("r", "s", int(time.time()) + 60, credential=API_CRED)
            headers = {"x-api-key": issued.token.reveal()}
            async with http.post(proxy.url + "/v1/messages", data=b"{}", headers=headers) as response:
                assert "content-length" not in response.headers
                assert response.headers["transfer-encoding"] == "chunked"
                first = await asyncio.wait_for(response.content.readuntil(b"\n\n"), 5)
                assert first.startswith(b"event: one")
                seen_first.set()
                assert (await response.read()).startswith(b"event: two")


async def test_path_outside_api_returns_403(env: Env) -> None:
    token = await env.token()
    for path in ("/admin/v1/tokens", "/v1/../admin", "/v1/%2e%2e/x", "/v2/messages", "/v1//messages"):
        async with env.http.get(URL(env.proxy.url + path, encoded=True), headers={"x-api-key": token}) as response:
            assert response.status == 403, path
            assert "only the Anthropic API under /v1/" in (await response.json())["error"]["message"]
    assert env.fake.requests == []


async def test_bad_path_without_token_is_401_not_403(env: Env) -> None:
    async with env.http.get(env.proxy.url + "/v2/secret") as response:
        assert response.status == 401


async def _raw(proxy: RunningProxy, request: bytes) -> bytes:
    host, port = proxy.url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(request)
        await writer.drain()
        return await asyncio.wait_for(reader.read(65536), 5)
    finally:
        writer.close()
        await writer.wait_closed()


async def test_absolute_form_request_to_other_host_returns_403(env: Env) -> None:
    """Absolute-form and CONNECT are refused before any token check, even with a valid token."""
    token = await env.token()
    for line in (b"GET http://evil.example/v1/messages HTTP/1.1", b"CONNECT evil.example:443 HTTP/1.1"):
        answer = await _raw(env.proxy, line + b"\r\nHost: evil.example\r\nx-api-key: " + token.encode() + b"\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 403"), answer[:40]
        assert b"only api.anthropic.com is reachable through this proxy" in answer
    assert env.fake.requests == []


async def test_put_method_returns_405(env: Env) -> None:
    token = await env.token()
    async with env.http.put(env.proxy.url + "/v1/messages", json=MESSAGE, headers={"x-api-key": token}) as response:
        assert await _error(response) == (405, "invalid_request_error", "only GET and POST are relayed")


async def test_body_over_the_limit_returns_413() -> None:
    config = AuthProxyConfig(admin_key=Secret(ADMIN), upstream="http://127.0.0.1:9", max_body_bytes=1024)
    async with run_auth_proxy(config) as proxy, proxy.admin_client() as admin, aiohttp.ClientSession() as http:
        issued = await admin.issue("r", "s", int(time.time()) + 60, credential=API_CRED)
        headers = {"x-api-key": issued.token.reveal()}
        async with http.post(proxy.url + "/v1/messages", data=b"x" * 4096, headers=headers) as response:
            assert (await _error(response))[:2] == (413, "request_too_large")


async def test_upstream_unreachable_returns_502() -> None:
    config = AuthProxyConfig(admin_key=Secret(ADMIN), upstream="http://127.0.0.1:9")
    async with run_auth_proxy(config) as proxy, proxy.admin_client() as admin, aiohttp.ClientSession() as http:
        issued = await admin.issue("r", "s", int(time.time()) + 60, credential=API_CRED)
        headers = {"x-api-key": issued.token.reveal()}
        async with http.post(proxy.url + "/v1/messages", json=MESSAGE, headers=headers) as response:
            assert await _error(response) == (502, "api_error", "the Anthropic API is unreachable")


async def test_healthz_returns_ok(env: Env) -> None:
    async with env.http.get(env.proxy.url + "/healthz") as response:
        assert (response.status, await response.text()) == (200, "ok")


async def test_metrics_count_results_and_live_tokens(env: Env) -> None:
    await env.post(await env.token())
    await env.post("ifap_nope")
    async with env.http.get(env.proxy.url + "/metrics") as response:
        assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
        text = await response.text()
    assert 'ironflow_auth_proxy_requests_total{result="relayed",secret=""} 1.0' in text
    assert 'ironflow_auth_proxy_requests_total{result="unauthorized",secret=""} 1.0' in text
    assert "ironflow_auth_proxy_live_tokens 1.0" in text
    assert "ironflow_auth_proxy_upstream_latency_seconds_count 1.0" in text
    assert "ironflow_auth_proxy_open_streams 0.0" in text


async def test_metrics_disabled_answers_404() -> None:
    config = AuthProxyConfig(admin_key=Secret(ADMIN), metrics_enabled=False)
    async with run_auth_proxy(config) as proxy, aiohttp.ClientSession() as http, http.get(proxy.url + "/metrics") as r:
        assert await _error(r) == (404, "not_found_error", "metrics are disabled")


async def test_admin_without_key_returns_401(env: Env) -> None:
    body = {"run_id": "r", "step": "s", "expires_at": int(time.time()) + 60,
            "credential": {"kind": "api_key", "value": API_KEY}}  # fmt: skip
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"bearer {ADMIN}"}, {"x-api-key": ADMIN}):
        async with env.http.post(env.proxy.url + "/admin/v1/tokens", json=body, headers=headers) as response:
            assert await _error(response) == (401, "authentication_error", "invalid or missing admin key")
    async with env.http.delete(env.proxy.url + "/admin/v1/runs/r/tokens") as response:
        assert response.status == 401
    assert await env.registry.count() == 0


async def test_admin_issue_rejects_past_expiry_with_400(env: Env) -> None:
    body = {"run_id": "r", "step": "s", "expires_at": int(time.time()) - 5,
            "credential": {"kind": "api_key", "value": API_KEY}}  # fmt: skip
    headers = {"Authorization": f"Bearer {ADMIN}"}
    async with env.http.post(env.proxy.url + "/admin/v1/tokens", json=body, headers=headers) as response:
        assert await _error(response) == (400, "invalid_request_error", "expires_at is in the past")


async def test_wrong_method_on_admin_path_is_never_a_success(env: Env) -> None:
    headers = {"Authorization": f"Bearer {ADMIN}"}
    async with env.http.get(env.proxy.url + "/admin/v1/tokens", headers=headers) as response:
        assert response.status >= 400
    assert env.fake.requests == []


async def test_client_going_away_ends_the_upstream_stream() -> None:
    """When the pod drops the connection mid-stream, the upstream request is closed too."""
    upstream_closed = asyncio.Event()

    async def endless(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        try:
            while True:
                await response.write(b"event: ping\ndata: {}\n\n")
                await asyncio.sleep(0.02)
        except (ConnectionError, asyncio.CancelledError):
            upstream_closed.set()
            raise

    async with _upstream(endless) as upstream_url:
        config = AuthProxyConfig(admin_key=Secret(ADMIN), upstream=upstream_url)
        async with run_auth_proxy(config) as proxy, proxy.admin_client() as admin:
            issued = await admin.issue("r", "s", int(time.time()) + 60, credential=API_CRED)
            async with aiohttp.ClientSession() as http:
                response = await http.post(
                    proxy.url + "/v1/messages", data=b"{}", headers={"x-api-key": issued.token.reveal()}
                )
                await response.content.readuntil(b"\n\n")
                response.close()
            await asyncio.wait_for(upstream_closed.wait(), 5)


# --- limits fixed at issue time ------------------------------------------------------------


async def test_limit_on_models_refuses_other_models_with_403(env: Env) -> None:
    token = await env.token(limits=Limits(models=("claude-opus-5-1",)))
    response = await env.post(token)
    status, kind, _ = await _error(response)
    assert (status, kind) == (403, "permission_error")
    assert env.fake.requests == []
    async with env.http.get(env.proxy.url + "/v1/models", headers={"x-api-key": token}) as listing:
        assert listing.status == 200  # a GET names no model: the allowlist does not apply
    allowed = await env.token(limits=Limits(models=("claude-haiku-5-0",)))
    assert (await env.post(allowed)).status == 200


async def test_limit_on_models_refuses_a_compressed_body_it_cannot_read(env: Env) -> None:
    """The proxy never inflates a body, so a gzip-encoded one names no model it can check: refused."""
    allowed = await env.token(limits=Limits(models=("claude-haiku-5-0",)))
    headers = {"x-api-key": allowed, "Content-Encoding": "gzip", "Content-Type": "application/json"}
    body = gzip.compress(json.dumps(MESSAGE).encode())
    async with env.http.post(env.proxy.url + "/v1/messages", data=body, headers=headers) as response:
        assert (await _error(response))[:2] == (403, "permission_error")
    assert env.fake.requests == []


async def test_limit_on_requests_answers_429_once_spent(env: Env) -> None:
    token = await env.token(limits=Limits(max_requests=2))
    assert [(await env.post(token)).status for _ in range(2)] == [200, 200]
    status, kind, message = await _error(await env.post(token))
    assert (status, kind) == (429, "rate_limit_error")
    assert "2 requests" in message
    assert len(env.fake.requests) == 2


async def test_limit_on_output_tokens_counts_the_streamed_usage(env: Env) -> None:
    """Each reply reports 7 output tokens; a budget of 10 allows two replies, refuses the third."""
    token = await env.token(limits=Limits(max_output_tokens=10))
    assert (await env.post(token)).status == 200
    assert (await env.post(token)).status == 200
    status, kind, message = await _error(await env.post(token))
    assert (status, kind) == (429, "rate_limit_error")
    assert "10 output tokens" in message


# --- logs --------------------------------------------------------------------------------


def _log_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    formatter = log_lines.JsonFormatter()
    return [formatter.format(r) for r in caplog.records if r.name == proxy_logs.LOGGER_NAME]


async def test_logs_never_contain_token_or_credential(env: Env, caplog: pytest.LogCaptureFixture) -> None:
    """Issue, relay, refuse, revoke: no log line holds a token, a credential, the admin key or a query."""
    caplog.set_level(logging.DEBUG, logger=proxy_logs.LOGGER_NAME)
    token = await env.token()
    await env.post(token, path="/v1/messages?beta=true&trace=QUERYSECRET42")
    await env.post(token, path="/v2/x?QUERYSECRET42=1")
    await env.post("ifap_wrongtoken")
    async with env.http.post(env.proxy.url + "/admin/v1/tokens", data=b"{bad sk-ant-BODYSECRET", headers={
            "Authorization": f"Bearer {ADMIN}"}) as response:  # fmt: skip
        assert response.status == 400
    await env.admin.revoke_run("run-1")
    lines = _log_lines(caplog)
    events = {json.loads(line)["event"] for line in lines}
    assert {"token issued", "relayed", "path outside the API refused", "run tokens revoked"} <= events
    assert "request with an invalid token rejected" in events
    assert not find_leaks([token, OAUTH, ADMIN, "QUERYSECRET42", "BODYSECRET", "ifap_wrongtoken"], lines)
    relayed = next(json.loads(line) for line in lines if json.loads(line)["event"] == "relayed")
    assert len(relayed["token"]) == 12
    assert relayed["path"] == "/v1/messages"


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


# --- proxied secrets ------------------------------------------------------------------------


@pytest.fixture
async def git_host() -> AsyncIterator[tuple[str, list[dict[str, str]]]]:
    seen: list[dict[str, str]] = []

    async def record(request: web.Request) -> web.Response:
        seen.append({"path": request.path_qs, **{k.lower(): v for k, v in request.headers.items()}})
        return web.Response(text="git says hi")

    async with _upstream(record) as url:
        yield url, seen


async def test_secret_relay_injects_the_secret_for_allowed_hosts_only(
    git_host: tuple[str, list[dict[str, str]]], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=proxy_logs.LOGGER_NAME)
    base, seen = git_host
    config = AuthProxyConfig(admin_key=Secret(ADMIN), secret_upstream=base)
    secret = tokens.SecretCredential("gitlab", Secret("glpat-SECRETVALUE"), tokens.Injection("private_token"),
                                     ("gitlab.example.com",))  # fmt: skip
    async with run_auth_proxy(config) as proxy, proxy.admin_client() as admin, aiohttp.ClientSession() as http:
        issued = await admin.issue("run-g", "clone", int(time.time()) + 60, credential=secret)
        headers = {"Private-Token": issued.token.reveal()}
        url = proxy.url + "/r/gitlab.example.com/api/v4/projects?per_page=QUERYSECRET"
        async with http.get(url, headers=headers) as response:
            assert (response.status, await response.text()) == (200, "git says hi")
        async with http.get(proxy.url + "/r/github.com/x", headers=headers) as response:
            assert await _error(response) == (403, "permission_error", "host not allowed for this secret")
        dotted = URL(proxy.url + "/r/gitlab.example.com/a/../b", encoded=True)
        async with http.get(dotted, headers=headers) as response:
            assert response.status == 403
        async with http.post(proxy.url + "/v1/messages", json=MESSAGE, headers=headers) as response:
            assert (await _error(response))[2] == "this token only reaches its allowlisted hosts under /r/"
        claude = await admin.issue("run-g", "s", int(time.time()) + 60, credential=API_CRED)
        async with http.get(url, headers={"x-api-key": claude.token.reveal()}) as response:
            assert (await _error(response))[2] == "a Claude token only reaches the Anthropic API"
    (request,) = seen
    assert request["path"] == "/gitlab.example.com/api/v4/projects?per_page=QUERYSECRET"
    assert request["private-token"] == "glpat-SECRETVALUE"
    assert issued.token.reveal() not in json.dumps(request)
    lines = _log_lines(caplog)
    secret_events = [json.loads(line) for line in lines if json.loads(line)["event"] == "secret relay"]
    assert [e["result"] for e in secret_events] == ["relayed", "forbidden_host", "forbidden_path", "forbidden_token"]
    assert secret_events[0]["secret"] == "gitlab"
    assert secret_events[0]["upstream_status"] == 200


async def test_secret_relay_logs_result_and_never_the_secret(
    git_host: tuple[str, list[dict[str, str]]], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=proxy_logs.LOGGER_NAME)
    base, _ = git_host
    config = AuthProxyConfig(admin_key=Secret(ADMIN), secret_upstream=base)
    secret = tokens.SecretCredential("gh", Secret("ghp_SECRETVALUE"), tokens.Injection("basic", username="x"),
                                     ("*.example.com",))  # fmt: skip
    async with run_auth_proxy(config) as proxy, proxy.admin_client() as admin, aiohttp.ClientSession() as http:
        issued = await admin.issue("run-g", "clone", int(time.time()) + 60, credential=secret)
        auth = {"Authorization": _basic("x", issued.token.reveal())}
        async with http.get(proxy.url + "/r/git.example.com/repo.git/info/refs?service=Q1", headers=auth) as response:
            assert response.status == 200
        bad = {"Authorization": _basic("x", "ifap_nope")}
        async with http.delete(proxy.url + "/r/git.example.com/x", headers=bad) as response:
            assert response.status == 401
    lines = _log_lines(caplog)
    results = [json.loads(line)["result"] for line in lines if json.loads(line)["event"] == "secret relay"]
    assert results == ["relayed", "unknown_token"]
    assert not find_leaks(["ghp_SECRETVALUE", issued.token.reveal(), "service=Q1", ADMIN], lines)


async def test_secret_relay_forwards_an_encoded_body_byte_for_byte() -> None:
    """git gzips a large fetch request (``Content-Encoding: gzip``): the host must get the very
    bytes sent, with their encoding header, not an inflated body still labelled gzip."""
    received: list[tuple[str | None, bytes]] = []

    async def record(request: web.Request) -> web.Response:
        received.append((request.headers.get("Content-Encoding"), await request.read()))
        return web.Response(text="ok")

    plain = b"0032want " + b"f" * 40 + b"\n" * 2000
    encoded = gzip.compress(plain)
    secret = tokens.SecretCredential("gh", Secret("ghp_SECRETVALUE"), tokens.Injection("bearer"), ("git.example.com",))
    async with _upstream(record, raw=True) as base:
        config = AuthProxyConfig(admin_key=Secret(ADMIN), secret_upstream=base)
        async with run_auth_proxy(config) as proxy, proxy.admin_client() as admin, aiohttp.ClientSession() as http:
            issued = await admin.issue("run-g", "clone", int(time.time()) + 60, credential=secret)
            headers = {"Authorization": f"Bearer {issued.token.reveal()}", "Content-Encoding": "gzip"}
            url = proxy.url + "/r/git.example.com/org/repo.git/git-upload-pack"
            async with http.post(url, data=encoded, headers=headers) as response:
                assert response.status == 200
    assert received == [("gzip", encoded)]


async def test_secret_relay_answers_100_continue_then_relays_the_chunked_body() -> None:
    """A client that sends ``Expect: 100-continue`` and a chunked body (curl's way for a large
    upload) gets its 100 first; the host gets the whole body with its length and the secret."""
    received: list[tuple[str, str, bytes]] = []

    async def record(request: web.Request) -> web.Response:
        received.append((request.headers["Authorization"], request.headers["Content-Length"], await request.read()))
        return web.Response(text="ok")

    secret = tokens.SecretCredential("gh", Secret("ghp_SECRETVALUE"), tokens.Injection("bearer"), ("git.example.com",))
    async with _upstream(record) as base:
        config = AuthProxyConfig(admin_key=Secret(ADMIN), secret_upstream=base)
        async with run_auth_proxy(config) as proxy, proxy.admin_client() as admin:
            issued = await admin.issue("run-g", "push", int(time.time()) + 60, credential=secret)
            host, port = proxy.url.removeprefix("http://").rsplit(":", 1)
            reader, writer = await asyncio.open_connection(host, int(port))
            try:
                writer.write(
                    b"POST /r/git.example.com/org/repo.git/git-receive-pack HTTP/1.1\r\nHost: proxy\r\n"
                    + f"Authorization: Bearer {issued.token.reveal()}\r\n".encode()
                    + b"Expect: 100-continue\r\nTransfer-Encoding: chunked\r\n\r\n"
                )
                assert await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5) == b"HTTP/1.1 100 Continue\r\n\r\n"
                writer.write(b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
                assert head.startswith(b"HTTP/1.1 200 ")
            finally:
                writer.close()
                await writer.wait_closed()
    assert received == [("Bearer ghp_SECRETVALUE", "11", b"hello world")]


async def test_framework_logs_of_a_bad_request_carry_no_request_line(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    """aiohttp logs unparseable requests with their request line; the proxy scrubs that text."""
    caplog.set_level(logging.DEBUG)
    answer = await _raw(env.proxy, b"GET /v1/x?q=QUERYSECRET9\x01 HTTP/1.1\r\nx-api-key: ifap_LEAKED\r\n\r\n")
    assert answer.split(b" ")[1] == b"400"
    texts = [logging.Formatter().format(r) for r in caplog.records]
    assert any("framework error" in text for text in texts)
    assert not find_leaks(["QUERYSECRET9", "ifap_LEAKED"], texts)


async def test_silent_stream_ends_after_the_idle_timeout_not_a_total_timeout() -> None:
    """A stream that goes quiet longer than the idle timeout is cut; a slow but live one is not."""

    async def stalls(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        pace = float(request.query.get("pace", "0"))
        for _ in range(6):
            await response.write(b"event: ping\ndata: {}\n\n")
            await asyncio.sleep(pace)
        await asyncio.sleep(float(request.query.get("stall", "0")))
        await response.write_eof()
        return response

    async with _upstream(stalls) as upstream_url:
        config = AuthProxyConfig(admin_key=Secret(ADMIN), upstream=upstream_url, idle_timeout_s=0.6)
        async with run_auth_proxy(config) as proxy, proxy.admin_client() as admin, aiohttp.ClientSession() as http:
            issued = await admin.issue("r", "s", int(time.time()) + 60, credential=API_CRED)
            headers = {"x-api-key": issued.token.reveal()}
            # Live: 6 events 0.15 s apart (0.9 s in all, longer than the idle timeout) arrive whole.
            async with http.post(proxy.url + "/v1/messages?pace=0.15", data=b"{}", headers=headers) as response:
                assert (await asyncio.wait_for(response.read(), 5)).count(b"event: ping") == 6
            # Silent for 2.5 s after the events: cut after about 0.6 s.
            started = time.monotonic()
            async with http.post(proxy.url + "/v1/messages?stall=2.5", data=b"{}", headers=headers) as response:
                with contextlib.suppress(aiohttp.ClientPayloadError):
                    await asyncio.wait_for(response.read(), 5)
            assert time.monotonic() - started < 2.0


async def test_purge_task_drops_expired_grants(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=proxy_logs.LOGGER_NAME)
    shared = MemoryRegistry()
    credential = tokens.ClaudeCredential("api_key", Secret(API_KEY))
    await shared.insert(tokens.Grant("e" * 64, "run-old", "s", int(time.time()) - 1, credential))
    config = AuthProxyConfig(admin_key=Secret(ADMIN), registry=shared, purge_interval_s=0.05)

    async def purged() -> bool:
        return await shared.count() == 0

    async with run_auth_proxy(config):
        await eventually(purged, interval_s=0.02, what="the purge task to drop the expired grant")
    assert await shared.count() == 0
    assert any(json.loads(line)["event"] == "expired auth proxy tokens purged" for line in _log_lines(caplog))


async def test_unix_socket_proxy_issues_and_relays(tmp_path: Path) -> None:
    """The local sandbox's shape: the proxy on a unix socket, its admin client on the same socket."""
    socket_path = str(tmp_path / "proxy.sock")
    async with FakeAnthropic() as fake:
        config = AuthProxyConfig(admin_key=Secret(ADMIN), upstream=fake.url)
        async with run_auth_proxy(config, unix_socket=socket_path) as proxy, proxy.admin_client() as admin:
            assert proxy.unix_socket == socket_path
            issued = await admin.issue("run-u", "s", int(time.time()) + 60, credential=API_CRED)
            connector = aiohttp.UnixConnector(path=socket_path)
            async with (
                aiohttp.ClientSession(connector=connector) as http,
                http.post(proxy.url + "/v1/messages", json=MESSAGE, headers={"x-api-key": issued.token.reveal()}) as r,
            ):
                assert r.status == 200
                assert "OK" in await r.text()
            assert await admin.revoke(issued.id)
    assert fake.message_requests[0].header("x-api-key") == API_KEY


async def test_upstream_errors_and_redirects_pass_back_unfollowed() -> None:
    """The pod sees the API's own 429 (with retry-after) and a redirect as is; nothing is followed."""
    hits: list[str] = []

    async def answer(request: web.Request) -> web.Response:
        hits.append(request.path)
        if request.path == "/v1/moved":
            return web.Response(status=302, headers={"Location": "http://evil.example/steal"})
        body = policy_error("rate_limit_error", "slow down")
        return web.Response(status=429, body=body, headers={"retry-after": "7", "content-type": "application/json"})

    async with _upstream(answer) as upstream_url:
        config = AuthProxyConfig(admin_key=Secret(ADMIN), upstream=upstream_url)
        async with run_auth_proxy(config) as proxy, proxy.admin_client() as admin, aiohttp.ClientSession() as http:
            issued = await admin.issue("r", "s", int(time.time()) + 60, credential=API_CRED)
            headers = {"x-api-key": issued.token.reveal()}
            async with http.post(proxy.url + "/v1/messages", json=MESSAGE, headers=headers) as response:
                assert response.status == 429
                assert response.headers["retry-after"] == "7"
                assert (await response.json())["error"]["type"] == "rate_limit_error"
            async with http.get(proxy.url + "/v1/moved", headers=headers, allow_redirects=False) as response:
                assert response.status == 302
                assert response.headers["location"] == "http://evil.example/steal"
        assert hits == ["/v1/messages", "/v1/moved"]
