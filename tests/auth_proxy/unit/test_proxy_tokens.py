"""Tokens, token requests and the in-memory registry's semantics (counterparts of ``registry.rs``)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from ironflow.auth_proxy import handlers, registry, tokens
from ironflow.auth_proxy.config import AuthProxyConfig
from ironflow.secrets import Secret

NOW = 1_800_000_000


def _body(**overrides: Any) -> bytes:
    body: dict[str, Any] = {
        "run_id": "run-1",
        "step": "plan",
        "expires_at": NOW + 600,
        "credential": {"kind": "oauth_token", "value": "sk-ant-oat01-abc"},
    }
    body.update(overrides)
    return json.dumps(body).encode()


def _refusal(body: bytes) -> str:
    with pytest.raises(tokens.InvalidTokenRequest) as caught:
        tokens.parse_token_request(body, NOW)
    return caught.value.message


async def _issued(reg: registry.GrantRegistry, run_id: str = "run-1", expires_at: int = NOW + 600) -> tuple[str, str]:
    request = tokens.parse_token_request(_body(run_id=run_id, expires_at=expires_at), NOW)
    grant, token = await registry.issue(reg, request)
    return grant.id, token.reveal()


async def test_issue_then_resolve_returns_grant() -> None:
    reg = registry.MemoryRegistry()
    grant_id, token = await _issued(reg)
    found = await reg.resolve(tokens.token_id(token), NOW)
    assert isinstance(found, tokens.Grant)
    assert (found.id, found.run_id, found.step) == (grant_id, "run-1", "plan")
    assert isinstance(found.credential, tokens.ClaudeCredential)
    assert found.credential.value.reveal() == "sk-ant-oat01-abc"


async def test_resolve_unknown_token_is_rejected() -> None:
    assert await registry.MemoryRegistry().resolve(tokens.token_id("ifap_nope"), NOW) is registry.Resolution.UNKNOWN


async def test_resolve_expired_token_is_rejected_and_removed() -> None:
    reg = registry.MemoryRegistry()
    grant_id, _ = await _issued(reg, expires_at=NOW + 10)
    assert await reg.resolve(grant_id, NOW + 10) is registry.Resolution.EXPIRED
    assert await reg.count() == 0
    assert await reg.resolve(grant_id, NOW) is registry.Resolution.UNKNOWN


async def test_revoked_token_resolves_to_revoked() -> None:
    reg = registry.MemoryRegistry()
    grant_id, _ = await _issued(reg)
    assert await reg.revoke(grant_id)
    assert await reg.resolve(grant_id, NOW) is registry.Resolution.REVOKED
    assert not await reg.revoke(grant_id)


async def test_revoke_run_only_drops_that_run() -> None:
    reg = registry.MemoryRegistry()
    a, _ = await _issued(reg, "run-a")
    await _issued(reg, "run-a")
    b, _ = await _issued(reg, "run-b")
    assert await reg.revoke_run("run-a") == 2
    assert await reg.resolve(a, NOW) is registry.Resolution.REVOKED
    assert isinstance(await reg.resolve(b, NOW), tokens.Grant)


async def test_revoke_run_tombstones_every_grant() -> None:
    reg = registry.MemoryRegistry()
    ids = [(await _issued(reg, "run-x"))[0] for _ in range(3)]
    await reg.revoke_run("run-x")
    assert [await reg.resolve(i, NOW) for i in ids] == [registry.Resolution.REVOKED] * 3


async def test_purge_expired_counts() -> None:
    reg = registry.MemoryRegistry()
    await _issued(reg, expires_at=NOW + 5)
    await _issued(reg, expires_at=NOW + 5)
    await _issued(reg, expires_at=NOW + 500)
    assert await reg.purge_expired(NOW + 5) == 2
    assert await reg.count() == 1


async def test_purge_drops_expired_tombstones() -> None:
    """After its expiry a revoked token reads unknown: the tombstone is gone too."""
    reg = registry.MemoryRegistry()
    grant_id, _ = await _issued(reg, expires_at=NOW + 5)
    await reg.revoke(grant_id)
    await reg.purge_expired(NOW + 4)
    assert await reg.resolve(grant_id, NOW) is registry.Resolution.REVOKED
    await reg.purge_expired(NOW + 5)
    assert await reg.resolve(grant_id, NOW) is registry.Resolution.UNKNOWN


def test_issue_rejects_past_expiry() -> None:
    assert _refusal(_body(expires_at=NOW)) == "expires_at is in the past"


def test_issue_rejects_lifetime_over_24h() -> None:
    assert _refusal(_body(expires_at=NOW + 86_401)) == "expires_at is more than 24 hours away"
    assert tokens.parse_token_request(_body(expires_at=NOW + 86_400), NOW).expires_at == NOW + 86_400


def test_issue_rejects_empty_credential() -> None:
    assert _refusal(_body(credential={"kind": "api_key", "value": ""})) == "credential is empty"


def test_issue_validation_order_and_messages() -> None:
    """Expiry first, then run, step, credential emptiness, then header-safe characters."""
    assert _refusal(_body(run_id="", step="", expires_at=NOW - 1)) == "expires_at is in the past"
    assert _refusal(_body(run_id="", step="")) == "run_id is empty"
    assert _refusal(_body(step="")) == "step is empty"
    bad = {"kind": "oauth_token", "value": "sk ant"}
    assert _refusal(_body(credential=bad)) == "credential holds characters a header cannot carry"


def test_unparseable_or_unknown_fields_are_refused_without_echo() -> None:
    """The body and the parser's error never appear in the message."""
    for body in (b"{not json", _body(extra="sk-ant-leak"), b"[]", _body(expires_at="soon")):
        message = _refusal(body)
        assert message == "invalid token request body"
        assert "sk-ant" not in message


def test_token_has_prefix_and_never_starts_with_sk_ant() -> None:
    token = tokens.new_token().reveal()
    assert token.startswith("ifap_")
    assert len(token) == 69
    assert all(c in "0123456789abcdef" for c in token[5:])
    assert not token.startswith("sk-ant")


def test_two_tokens_differ() -> None:
    assert tokens.new_token() != tokens.new_token()


def test_token_id_is_sha256_of_the_whole_token() -> None:
    assert tokens.token_id("ifap_x") == hashlib.sha256(b"ifap_x").hexdigest()
    assert tokens.short_id(tokens.token_id("ifap_x")) == tokens.token_id("ifap_x")[:12]


async def test_registry_with_backend_shares_grants_between_clones() -> None:
    """Two app objects given the same registry see each other's grants."""
    shared = registry.MemoryRegistry()
    config = AuthProxyConfig(admin_key=Secret("k" * 32), registry=shared)
    first, second = handlers.ProxyHandlers(config), handlers.ProxyHandlers(config)
    first.registry = second.registry = config.registry
    grant_id, _ = await _issued(shared)
    assert second.registry is not None
    assert isinstance(await second.registry.resolve(grant_id, NOW), tokens.Grant)


async def test_registry_debug_shows_no_grant() -> None:
    reg = registry.MemoryRegistry()
    grant_id, token = await _issued(reg)
    shown = repr(reg)
    assert grant_id not in shown
    assert token not in shown
    assert "sk-ant" not in shown


async def test_issued_token_debug_redacts_token() -> None:
    grant, token = await registry.issue(registry.MemoryRegistry(), tokens.parse_token_request(_body(), NOW))
    assert token.reveal() not in repr(token)
    assert "sk-ant" not in repr(grant)


def test_admin_key_matches_true_false_and_different_lengths() -> None:
    """Constant-time comparison over digests: equal keys match; other lengths and values do not."""
    proxy = handlers.ProxyHandlers(AuthProxyConfig(admin_key=Secret("a" * 40)))

    class _Req:
        def __init__(self, header: str) -> None:
            self.headers = {"Authorization": header}

    assert proxy._is_admin(_Req("Bearer " + "a" * 40 + "  "))  # type: ignore[arg-type]
    assert not proxy._is_admin(_Req("Bearer " + "a" * 39))  # type: ignore[arg-type]
    assert not proxy._is_admin(_Req("Bearer " + "b" * 40))  # type: ignore[arg-type]
    assert not proxy._is_admin(_Req("bearer " + "a" * 40))  # type: ignore[arg-type]
    assert not proxy._is_admin(_Req("a" * 40))  # type: ignore[arg-type]


def test_issue_secret_with_empty_hosts_is_invalid() -> None:
    credential = {"name": "gitlab", "value": "glpat", "injection": "private_token", "hosts": []}
    assert "host" in _refusal(_body(credential=credential))


def test_issue_secret_with_bad_host_is_invalid() -> None:
    for host in ("localhost", "10.0.0.1", "gitlab.com:443", "https://gitlab.com", "gitlab.com/x", "*.com"):
        credential = {"name": "gitlab", "value": "glpat", "injection": "bearer", "hosts": [host]}
        assert "invalid secret host" in _refusal(_body(credential=credential)), host


def test_issue_secret_with_forbidden_custom_header_is_invalid() -> None:
    for header in ("Host", "cookie", "Transfer-Encoding"):
        credential = {"name": "s", "value": "v", "injection": {"header": header}, "hosts": ["a.example.com"]}
        assert "injection" in _refusal(_body(credential=credential))
    basic = {"name": "s", "value": "v", "injection": {"basic": {"username": "a:b"}}, "hosts": ["a.example.com"]}
    assert "Basic username" in _refusal(_body(credential=basic))


async def test_issue_then_resolve_secret_grant() -> None:
    reg = registry.MemoryRegistry()
    credential = {"name": "gitlab", "value": "glpat-1", "injection": {"basic": {"username": "oauth2"}},
                  "hosts": ["GitLab.Example.com", "*.corp.example"]}  # fmt: skip
    _grant, token = await registry.issue(reg, tokens.parse_token_request(_body(credential=credential), NOW))
    found = await reg.resolve(tokens.token_id(token.reveal()), NOW)
    assert isinstance(found, tokens.Grant)
    assert isinstance(found.credential, tokens.SecretCredential)
    assert found.credential.hosts == ("gitlab.example.com", "*.corp.example")
    assert found.credential.injection == tokens.Injection("basic", username="oauth2")


async def test_an_egress_only_request_carries_its_policy_and_no_value() -> None:
    """A pod's proxy password (``{"kind": "egress"}``): no credential behind it, so it needs a policy."""
    policy = {"allow": ["pypi.org:443"]}
    parsed = tokens.parse_token_request(_body(credential={"kind": "egress"}, egress=policy), NOW)
    assert parsed.credential == tokens.EgressCredential()
    assert parsed.egress is not None
    assert parsed.egress.allow[0].label() == "pypi.org:443"
    grant, _ = await registry.issue(registry.MemoryRegistry(), parsed)
    assert tokens.grant_to_wire(grant)["credential"] == {"kind": "egress"}
    assert tokens.grant_from_wire(tokens.grant_to_wire(grant)) == grant
    assert _refusal(_body(credential={"kind": "egress"})) == "an egress-only credential needs an egress policy"
    for bad in ({"kind": "egress", "value": "sk-ant-x"}, {"kind": "egress", "value": ""}, {"kind": "Egress"}):
        assert _refusal(_body(credential=bad, egress=policy)) == "invalid token request body"


async def test_a_live_grant_keeps_its_last_egress_decisions_until_it_goes() -> None:
    reg = registry.MemoryRegistry()
    grant_id, _ = await _issued(reg)
    await reg.note_egress("f" * 64, "not a grant")  # nothing to keep it with
    for n in range(registry.EGRESS_NOTES_KEPT + 3):
        await reg.note_egress(grant_id, f"decision {n}")
    assert await reg.egress_notes(grant_id) == [f"decision {n}" for n in range(3, registry.EGRESS_NOTES_KEPT + 3)]
    assert await reg.egress_notes("f" * 64) == []
    await reg.revoke(grant_id)
    assert await reg.egress_notes(grant_id) == []
    await reg.note_egress(grant_id, "after the revoke")
    assert await reg.egress_notes(grant_id) == []


def test_limits_are_parsed_and_validated() -> None:
    parsed = tokens.parse_token_request(_body(limits={"models": ["m1"], "max_requests": 3}), NOW)
    assert parsed.limits == tokens.Limits(models=("m1",), max_requests=3)
    assert "max_output_tokens" in _refusal(_body(limits={"max_output_tokens": 0}))
    assert "allowed keys" in _refusal(_body(limits={"budget": 1}))


async def test_a_trace_context_is_a_w3c_traceparent_kept_on_the_grant_and_its_wire_form() -> None:
    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    parsed = tokens.parse_token_request(_body(trace_context=traceparent), NOW)
    grant, _ = await registry.issue(registry.MemoryRegistry(), parsed)
    assert grant.trace_context == traceparent
    assert tokens.grant_from_wire(tokens.grant_to_wire(grant)) == grant
    assert tokens.parse_token_request(_body(), NOW).trace_context is None
    for bad in ("not-a-traceparent", 7, traceparent + "\r\nx: y"):
        assert _refusal(_body(trace_context=bad)) == "trace_context is not a W3C traceparent"


async def test_take_request_counts_before_and_after() -> None:
    reg = registry.MemoryRegistry()
    grant_id, _ = await _issued(reg)
    assert await reg.take_request(grant_id) == registry.Usage(0, 0)
    await reg.add_output_tokens(grant_id, 40)
    assert await reg.take_request(grant_id) == registry.Usage(1, 40)


def test_expires_at_beyond_i64_is_an_error() -> None:
    assert _refusal(_body(expires_at=2**63)) == "invalid token request body"
    assert _refusal(_body(expires_at=-1)) == "invalid token request body"


def _cached_grant(grant_id: str, run_id: str = "run-c", expires_at: int = NOW + 60) -> tokens.Grant:
    return tokens.Grant(grant_id, run_id, "s", expires_at, tokens.ClaudeCredential("api_key", Secret("sk-ant-c")))


def test_grant_cache_serves_only_while_enabled_and_until_expiry() -> None:
    cache = registry.GrantCache(ttl_s=30)
    grant = _cached_grant("a")
    cache.put(grant, cache.ticket())
    assert cache.get("a", NOW) is None  # not enabled: the revocation feed is not connected
    cache.enabled = True
    cache.put(grant, cache.ticket())
    assert cache.get("a", NOW) == grant
    assert cache.get("a", NOW + 60) is None  # expired grants are never served
    assert len(cache) == 0


def test_grant_cache_refuses_a_read_that_raced_a_revocation() -> None:
    cache = registry.GrantCache(ttl_s=30)
    cache.enabled = True
    ticket = cache.ticket()  # a read starts...
    cache.evict(["b"])  # ...a revocation is announced meanwhile...
    cache.put(_cached_grant("b"), ticket)  # ...the read's answer must not be kept
    assert cache.get("b", NOW) is None


def test_grant_cache_evicts_by_run_and_drops_stale_entries() -> None:
    cache = registry.GrantCache(ttl_s=30)
    cache.enabled = True
    for grant in (_cached_grant("x1", "run-x"), _cached_grant("x2", "run-x"), _cached_grant("y", "run-y", NOW + 5)):
        cache.put(grant, cache.ticket())
    cache.evict_run("run-x")
    assert (cache.get("x1", NOW), cache.get("x2", NOW)) == (None, None)
    assert cache.get("y", NOW) is not None
    cache.drop_stale(NOW + 5)
    assert len(cache) == 0
