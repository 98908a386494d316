"""The worker-side admin client against a strict fake admin API on loopback.

Counterparts of the reference's ``tests/auth_proxy.rs``: what the client sends, which
answers it accepts, and that its errors carry neither the URL, the admin key, the
credential nor a token.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

from ironflow.auth_proxy import AdminClient, Credential, Injection, SecretCredential
from ironflow.errors import AuthProxyError, ConfigError
from ironflow.secrets import Secret, find_leaks
from ironflow.testing.ports import free_port

ADMIN = "admin-key-" + "a" * 40
TOKEN = "ifap_" + "1" * 64
TOKEN_ID = "f" * 64


@dataclass
class FakeAdmin:
    url: str = ""
    seen: list[dict[str, Any]] = field(default_factory=list)
    answer: tuple[int, str] = (201, json.dumps({"id": TOKEN_ID, "token": TOKEN}))


@pytest.fixture
async def fake_admin() -> AsyncIterator[FakeAdmin]:
    state = FakeAdmin()

    async def handle(request: web.Request) -> web.Response:
        body = await request.read()
        state.seen.append({
            "method": request.method, "path": request.raw_path, "auth": request.headers.get("Authorization"),
            "body": json.loads(body) if body else None,
        })  # fmt: skip
        status, text = state.answer
        return web.Response(status=status, text=text, content_type="application/json")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    state.url = f"http://127.0.0.1:{runner.addresses[0][1]}/"
    try:
        yield state
    finally:
        await runner.cleanup()


async def test_auth_proxy_client_issue_sends_admin_bearer_and_grant(fake_admin: FakeAdmin) -> None:
    async with AdminClient(fake_admin.url, f"  {ADMIN} ") as admin:
        credential = Credential("oauth_token", Secret("sk-ant-o"))
        issued = await admin.issue("run 1", "plan", 1_900_000_000, credential=credential)
    assert issued.id == TOKEN_ID
    assert issued.token.reveal() == TOKEN
    assert issued.short_id == TOKEN_ID[:12]
    assert TOKEN not in repr(issued)
    (seen,) = fake_admin.seen
    assert (seen["method"], seen["path"], seen["auth"]) == ("POST", "/admin/v1/tokens", f"Bearer {ADMIN}")
    assert seen["body"] == {
        "run_id": "run 1", "step": "plan", "expires_at": 1_900_000_000,
        "credential": {"kind": "oauth_token", "value": "sk-ant-o"},
    }  # fmt: skip


async def test_auth_proxy_client_issue_sends_secret_credential(fake_admin: FakeAdmin) -> None:
    secret = SecretCredential("gitlab", Secret("glpat-x"), Injection("basic", username="oauth2"), ("gitlab.com",))
    async with AdminClient(fake_admin.url, ADMIN) as admin:
        await admin.issue("r", "s", 1_900_000_000, credential=secret)
    assert fake_admin.seen[0]["body"]["credential"] == {
        "name": "gitlab", "value": "glpat-x", "injection": {"basic": {"username": "oauth2"}}, "hosts": ["gitlab.com"],
    }  # fmt: skip


async def test_auth_proxy_client_issue_maps_401_to_admin_error(fake_admin: FakeAdmin) -> None:
    fake_admin.answer = (401, '{"type":"error","error":{"type":"authentication_error","message":"' + "x" * 400 + '"}}')
    async with AdminClient(fake_admin.url, ADMIN) as admin:
        with pytest.raises(AuthProxyError) as caught:
            await admin.issue("r", "s", 1_900_000_000, credential=Credential("api_key", Secret("sk-ant-k")))
    assert caught.value.status == 401
    assert not caught.value.retryable
    assert len(caught.value.message) < 260


async def test_auth_proxy_client_issue_rejects_unexpected_success_status(fake_admin: FakeAdmin) -> None:
    fake_admin.answer = (200, json.dumps({"id": TOKEN_ID, "token": TOKEN}))
    async with AdminClient(fake_admin.url, ADMIN) as admin:
        with pytest.raises(AuthProxyError) as caught:
            await admin.issue("r", "s", 1_900_000_000, credential=Credential("api_key", Secret("sk-ant-k")))
    assert caught.value.status == 200


async def test_auth_proxy_client_revoke_accepts_404(fake_admin: FakeAdmin) -> None:
    async with AdminClient(fake_admin.url, ADMIN) as admin:
        fake_admin.answer = (204, "")
        assert await admin.revoke(TOKEN_ID) is True
        fake_admin.answer = (404, "")
        assert await admin.revoke(TOKEN_ID) is False
        fake_admin.answer = (503, "down")
        with pytest.raises(AuthProxyError) as caught:
            await admin.revoke(TOKEN_ID)
    assert caught.value.retryable
    assert fake_admin.seen[0]["path"] == f"/admin/v1/tokens/{TOKEN_ID}"


async def test_auth_proxy_client_revoke_run_returns_count(fake_admin: FakeAdmin) -> None:
    fake_admin.answer = (200, '{"revoked": 3}')
    async with AdminClient(fake_admin.url, ADMIN) as admin:
        assert await admin.revoke_run("run 1/x") == 3
    assert fake_admin.seen[0]["path"] == "/admin/v1/runs/run%201%2Fx/tokens"
    assert fake_admin.seen[0]["method"] == "DELETE"


async def test_auth_proxy_client_transport_error_does_not_leak_body() -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/secret-path"
    async with AdminClient(url, ADMIN) as admin:
        with pytest.raises(AuthProxyError) as caught:
            await admin.issue("r", "s", 1_900_000_000, credential=Credential("api_key", Secret("sk-ant-LEAK")))
    assert caught.value.retryable
    # The origin is named (issue 17: which proxy is unreachable); the path, the body and the keys never.
    assert str(caught.value) == f"auth proxy at http://127.0.0.1:{port} unreachable (ClientConnectorError)"
    assert not find_leaks(["sk-ant-LEAK", ADMIN, "secret-path"], caught.value)
    assert caught.value.__cause__ is None


def test_auth_proxy_client_refuses_credentials_in_the_url() -> None:
    with pytest.raises(ConfigError) as caught:
        AdminClient("http://user:pw-in-url@proxy:8080", ADMIN)
    assert "pw-in-url" not in str(caught.value)


async def test_admin_client_satisfies_the_launch_sequence_token_issuer(fake_admin: FakeAdmin) -> None:
    """mypy checks the assignment; the call goes through the hook's own signature."""
    from ironflow.auth_proxy.issuing import TokenIssuer

    async with AdminClient(fake_admin.url, ADMIN) as admin:
        issuer: TokenIssuer = admin
        token_id, token = await issuer.issue(
            "run-1", "agent", 1_900_000_000, credential=Credential("api_key", Secret("k"))
        )
    assert (token_id, token.reveal()) == (TOKEN_ID, TOKEN)
