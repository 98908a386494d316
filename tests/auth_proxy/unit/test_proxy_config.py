"""Proxy configuration from the environment, the key ring, and the worker's credential choice.

Counterparts of the reference's ``src/lib.rs``, crypto ``key_ring_from_spec_*`` and
``credential.rs`` tests.
"""

from __future__ import annotations

import pytest

from ironflow.auth_proxy import config, crypto, registry, tokens
from ironflow.auth_proxy.admin_client import admin_key_from
from ironflow.auth_proxy.app import open_registry
from ironflow.auth_proxy.issuing import Credential, resolve_credential
from ironflow.errors import ConfigError, MissingCredential
from ironflow.secrets import Secret
from ironflow.steps import AccountLease

ADMIN = "a" * 32
KEY1 = "11" * 32
KEY2 = "22" * 32


def _env(**extra: str) -> dict[str, str]:
    return {config.ADMIN_KEY_ENV: ADMIN, **extra}


async def test_registry_from_config_defaults_to_memory() -> None:
    cfg = config.AuthProxyConfig.from_env(_env())
    assert cfg.database_url is None
    reg = await open_registry(cfg)
    assert isinstance(reg, registry.MemoryRegistry)


def test_registry_from_config_requires_key_ring_with_database() -> None:
    with pytest.raises(ConfigError) as caught:
        config.AuthProxyConfig.from_env(_env(IRONFLOW_AUTH_PROXY_DATABASE_URL="postgresql://u:pw@db/x"))
    assert caught.value.message == (
        "IRONFLOW_AUTH_PROXY_DATABASE_URL is set but no encryption key is configured: "
        "set IRONFLOW_SECRET_KEYS (or IRONFLOW_SECRET_KEY)"
    )
    assert "pw" not in caught.value.message


def test_registry_from_config_rejects_invalid_database_url() -> None:
    with pytest.raises(ConfigError) as caught:
        config.AuthProxyConfig.from_env(_env(IRONFLOW_AUTH_PROXY_DATABASE_URL="mysql://u:hunter2@db/x",
                                             IRONFLOW_SECRET_KEYS=f"1:{KEY1}"))  # fmt: skip
    assert "postgres" in caught.value.message
    assert "hunter2" not in caught.value.message


def test_blank_database_url_means_memory() -> None:
    assert config.AuthProxyConfig.from_env(_env(IRONFLOW_AUTH_PROXY_DATABASE_URL="  ")).database_url is None


def test_config_debug_shows_secret_upstream_not_admin_key() -> None:
    cfg = config.AuthProxyConfig.from_env(
        _env(
            IRONFLOW_AUTH_PROXY_UPSTREAM="http://127.0.0.1:9/",
            IRONFLOW_AUTH_PROXY_DATABASE_URL="postgres://u:pw@h/d",
            IRONFLOW_SECRET_KEYS=f"1:{KEY1}",
        )
    )
    shown = repr(cfg)
    assert "http://127.0.0.1:9" in shown
    for secret in (ADMIN, "pw@h", KEY1):
        assert secret not in shown


def test_admin_key_must_be_at_least_32_chars_after_trimming() -> None:
    with pytest.raises(ConfigError, match="at least 32 characters"):
        config.AuthProxyConfig.from_env({config.ADMIN_KEY_ENV: "  " + "a" * 31 + "  "})
    with pytest.raises(ConfigError, match="is required"):
        config.AuthProxyConfig.from_env({})
    assert config.AuthProxyConfig.from_env({config.ADMIN_KEY_ENV: f" {ADMIN} "}).admin_key.reveal() == ADMIN


def test_listen_address_defaults_and_parses() -> None:
    assert (config.AuthProxyConfig.from_env(_env()).host, config.AuthProxyConfig.from_env(_env()).port) == (
        "0.0.0.0",
        8080,
    )
    assert config.parse_listen("[::1]:9000") == ("::1", 9000)
    with pytest.raises(ConfigError, match="IRONFLOW_AUTH_PROXY_LISTEN"):
        config.parse_listen("8080")


def test_legacy_key_is_version_one_and_ignored_when_a_ring_is_set() -> None:
    legacy = config.AuthProxyConfig.from_env(_env(IRONFLOW_SECRET_KEY=KEY1))
    assert legacy.key_ring is not None
    assert legacy.key_ring.active_version == 1
    both = config.AuthProxyConfig.from_env(_env(IRONFLOW_SECRET_KEY=KEY1, IRONFLOW_SECRET_KEYS=f"3:{KEY2}"))
    assert both.key_ring is not None
    assert both.key_ring.active_version == 3
    assert any("ignored" in w for w in both.warnings)


def test_key_ring_from_spec_parses_versions_and_picks_the_highest() -> None:
    ring = crypto.KeyRing.from_spec(f" 1 : {KEY1} ,, 2:{KEY2},")
    assert sorted(ring.keys) == [1, 2]
    assert ring.active_version == 2


def test_key_ring_from_spec_honours_the_active_version() -> None:
    assert crypto.KeyRing.from_spec(f"1:{KEY1},2:{KEY2}", active=1).active_version == 1
    with pytest.raises(crypto.KeyRingError, match="not in the key ring"):
        crypto.KeyRing.from_spec(f"1:{KEY1}", active=2)


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("", "empty"),
        (" , ", "empty"),
        (f"0:{KEY1}", "positive"),
        (f"x:{KEY1}", "not an integer"),
        ("1:abcd", "64 hex"),
        (f"1:{'zz' * 32}", "64 hex"),
        (f"1:{KEY1},1:{KEY2}", "twice"),
        (KEY1, "version:hex"),
    ],
)
def test_key_ring_from_spec_refuses_bad_specs_without_key_material(spec: str, problem: str) -> None:
    with pytest.raises(crypto.KeyRingError) as caught:
        crypto.KeyRing.from_spec(spec)
    assert problem in str(caught.value)
    assert KEY1 not in str(caught.value)
    assert KEY2 not in str(caught.value)


def test_seal_uses_a_fresh_nonce_and_opens_only_with_its_key_version() -> None:
    ring = crypto.KeyRing.from_spec(f"1:{KEY1},2:{KEY2}")
    first, second = ring.seal(b"sk-ant-x", b"row"), ring.seal(b"sk-ant-x", b"row")
    assert first.nonce != second.nonce
    assert first.key_version == 2
    assert b"sk-ant-x" not in first.ciphertext
    assert len(first.ciphertext) == len(b"sk-ant-x") + 16
    with pytest.raises(crypto.MissingKeyVersion, match="key version 2 which is not configured"):
        crypto.KeyRing.from_spec(f"1:{KEY1}").open(first, b"row")


def test_a_wrong_key_or_other_row_is_a_broken_seal_not_a_missing_version() -> None:
    """Same version number, other key bytes (or another row's associated data): says so."""
    sealed = crypto.KeyRing.from_spec(f"1:{KEY1}").seal(b"sk-ant-x", b"row-1")
    for ring, associated in ((crypto.KeyRing.from_spec(f"1:{KEY2}"), b"row-1"),
                             (crypto.KeyRing.from_spec(f"1:{KEY1}"), b"row-2")):  # fmt: skip
        with pytest.raises(crypto.SealBroken) as caught:
            ring.open(sealed, associated)
        assert "not configured" not in str(caught.value)
        assert "the key differs from the one that sealed it, or the row was altered" in str(caught.value)
        assert KEY1 not in str(caught.value)
        assert KEY2 not in str(caught.value)


# --- credential.rs ---------------------------------------------------------------------


def _account(env_name: str, value: str = "sk-ant-acct") -> AccountLease:
    return AccountLease(account_id="acct-1", env_name=env_name, value=Secret(value))


def test_resolve_prefers_account() -> None:
    env = {"CLAUDE_CODE_OAUTH_TOKEN": "sk-ant-env", "ANTHROPIC_API_KEY": "sk-ant-key"}
    chosen = resolve_credential(_account("CLAUDE_CODE_OAUTH_TOKEN"), env)
    assert (chosen.kind, chosen.value.reveal()) == ("oauth_token", "sk-ant-acct")


def test_resolve_falls_back_to_oauth_env_then_api_key() -> None:
    both = {"CLAUDE_CODE_OAUTH_TOKEN": "sk-ant-env", "ANTHROPIC_API_KEY": "sk-ant-key"}
    assert resolve_credential(None, both).kind == "oauth_token"
    assert resolve_credential(None, {"ANTHROPIC_API_KEY": "sk-ant-key"}).kind == "api_key"


def test_resolve_errors_without_credential() -> None:
    with pytest.raises(MissingCredential) as caught:
        resolve_credential(None, {})
    assert caught.value.message == (
        "no credential: attach a Provider Account or set CLAUDE_CODE_OAUTH_TOKEN or ANTHROPIC_API_KEY"
    )
    assert not caught.value.retryable


def test_resolve_ignores_empty_env() -> None:
    chosen = resolve_credential(None, {"CLAUDE_CODE_OAUTH_TOKEN": "", "ANTHROPIC_API_KEY": "sk-ant-key"})
    assert chosen.kind == "api_key"


def test_debug_redacts_value() -> None:
    credential = Credential("api_key", Secret("sk-ant-visible"))
    assert "sk-ant-visible" not in repr(credential)
    assert "sk-ant-visible" not in str(credential)


def test_from_account_maps_kinds() -> None:
    assert Credential.from_account(_account("ANTHROPIC_API_KEY")).kind == "api_key"
    assert Credential.from_account(_account("CLAUDE_CODE_OAUTH_TOKEN")).kind == "oauth_token"
    assert Credential.from_account(_account("ANY_OTHER")).kind == "oauth_token"


def test_admin_key_from_builder_then_env_else_refusal() -> None:
    assert admin_key_from(" builder-key ", {}).reveal() == "builder-key"
    assert admin_key_from(None, {"IRONFLOW_AUTH_PROXY_ADMIN_KEY": " env-key "}).reveal() == "env-key"
    with pytest.raises(MissingCredential, match="auth_proxy requires IRONFLOW_AUTH_PROXY_ADMIN_KEY"):
        admin_key_from(None, {"IRONFLOW_AUTH_PROXY_ADMIN_KEY": "  "})


# --- pod env (§6.8, §6.9) and stable labels (lib.rs) ---------------------------------------


def test_proxy_env_has_base_url_and_opaque_token_only() -> None:
    from ironflow.claude.layout import proxy_env

    env = proxy_env("http://proxy.ns/", Secret("ifap_abc").reveal())
    assert env == {
        "ANTHROPIC_BASE_URL": "http://proxy.ns",
        "ANTHROPIC_AUTH_TOKEN": "ifap_abc",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    assert not any("sk-ant" in v for v in env.values())


def test_secret_pod_env_sends_git_through_the_proxy_for_basic_secrets() -> None:
    import base64

    from ironflow.auth_proxy.issuing import secret_pod_env
    from ironflow.auth_proxy.tokens import Injection, SecretCredential

    secret = SecretCredential(
        "gitlab", Secret("glpat-real"), Injection("basic", username="oauth2"), ("gitlab.com", "*.corp.example")
    )
    env = secret_pod_env("GITLAB_TOKEN", "http://proxy:8080/", Secret("ifap_tok"), secret)
    expected_header = "Authorization: Basic " + base64.b64encode(b"oauth2:ifap_tok").decode()
    assert env == {
        "GITLAB_TOKEN": "ifap_tok",
        "GITLAB_TOKEN_URL": "http://proxy:8080/r",
        "GIT_CONFIG_COUNT": "2",
        "GIT_CONFIG_KEY_0": "url.http://proxy:8080/r/gitlab.com/.insteadOf",
        "GIT_CONFIG_VALUE_0": "https://gitlab.com/",
        "GIT_CONFIG_KEY_1": "http.http://proxy:8080/r/gitlab.com/.extraHeader",
        "GIT_CONFIG_VALUE_1": expected_header,
    }
    assert "glpat-real" not in repr(env)


def test_relay_results_have_stable_labels() -> None:
    from ironflow.auth_proxy import policy

    refusals = [v for v in vars(policy).values() if isinstance(v, policy.Refusal)]
    assert len(refusals) >= 12
    assert {r.result for r in refusals} <= policy.RESULTS
    limits = policy.check_limits(
        tokens.Limits(models=("a",)),
        requests_used=0,
        output_tokens_used=0,
        model="b",
    )
    assert limits is not None
    assert limits.result in policy.RESULTS
    assert {"relayed", "unknown_token", "expired", "revoked", "unavailable", "upstream_error"} <= policy.RESULTS
