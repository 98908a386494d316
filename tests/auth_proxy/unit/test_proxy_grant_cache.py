"""GrantCache.read_through: the one cache-aside rule both shared registries use."""

from __future__ import annotations

from pathlib import Path

from ironflow.auth_proxy import config, registry, tokens
from ironflow.secrets import Secret

NOW = 1_700_000_000


def _grant(grant_id: str) -> tokens.Grant:
    return tokens.Grant(grant_id, "run-c", "s", NOW + 60, tokens.ClaudeCredential("api_key", Secret("sk-ant-c")))


def _enabled_cache() -> registry.GrantCache:
    cache = registry.GrantCache(ttl_s=30)
    cache.enabled = True
    return cache


async def test_read_through_loads_once_then_serves_the_cached_grant() -> None:
    cache = _enabled_cache()
    loads: list[str] = []

    async def load() -> tokens.Grant | registry.Resolution:
        loads.append("a")
        return _grant("a")

    assert await cache.read_through("a", NOW, load) == _grant("a")
    assert await cache.read_through("a", NOW, load) == _grant("a")
    assert loads == ["a"]


async def test_read_through_keeps_out_a_grant_revoked_while_it_loaded() -> None:
    """The answer is still returned (the caller's read began first), but never cached."""
    cache = _enabled_cache()

    async def load_racing_a_revocation() -> tokens.Grant | registry.Resolution:
        cache.evict(["b"])
        return _grant("b")

    assert await cache.read_through("b", NOW, load_racing_a_revocation) == _grant("b")
    assert cache.get("b", NOW) is None
    assert len(cache) == 0


async def test_read_through_never_caches_a_refusal() -> None:
    cache = _enabled_cache()
    answers: list[tokens.Grant | registry.Resolution] = [registry.Resolution.REVOKED, _grant("c")]

    async def load() -> tokens.Grant | registry.Resolution:
        return answers.pop(0)

    assert await cache.read_through("c", NOW, load) is registry.Resolution.REVOKED
    assert await cache.read_through("c", NOW, load) == _grant("c")


def test_the_doc_states_the_revocation_gap_the_code_leaves() -> None:
    """docs/auth-proxy.md once said "no revocation is missed" and, elsewhere, "up to about 4 s"
    (issue 33): the cache is trusted until a keep-alive ping goes unanswered, so a silently cut
    link can relay a revoked token for twice ``listen_keepalive_s``; the doc says that, and only that."""
    doc = " ".join((Path(__file__).resolve().parents[3] / "docs" / "auth-proxy.md").read_text().split())
    defaults = config.AuthProxyConfig(admin_key=Secret("k" * 32))
    keepalive, ttl = defaults.listen_keepalive_s, defaults.token_cache_ttl_s
    assert "no revocation is missed" not in doc
    assert f"every `listen_keepalive_s` ({keepalive:g} s)" in doc
    assert f"twice that interval, about {2 * keepalive:g} s by default" in doc
    assert f"{ttl:g} s, `token_cache_ttl_s`" in doc
    assert doc.count(f"at most about {2 * keepalive:g} s") == 1
