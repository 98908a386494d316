"""No credential reaches a manifest, an error or a repr, whichever builder it went through.

Secret *values* are fed through every builder that takes one; Secret *names* and keys
are not secrets and may appear. Two documented exceptions, by design: the opaque
``ifap_`` proxy token is the pod's ``ANTHROPIC_AUTH_TOKEN`` (and only that), and inline
OAuth credentials on a non-sandboxed provider without a proxy are written by the pod
command (the reference's behaviour; sandboxed or proxied providers refuse them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ironflow import AgentConfig, errors
from ironflow.k8s import K8sEphemeralProvider
from ironflow.secrets import find_leaks
from ironflow.testing.k8s_validate import validate_manifests

IMAGE = "ghcr.io/acme/claude-runner:2.1.332-1"
API_KEY = "sk-ant-api03-LEAKCANARY-api-key-value"
OAUTH_TOKEN = "sk-ant-oat01-LEAKCANARY-oauth-token"
CREDENTIALS = '{"claudeAiOauth":{"accessToken":"sk-ant-oat01-LEAKCANARY-inline"}}'
ADMIN_KEY = "admin-LEAKCANARY-proxy-admin-key"
PROXY_TOKEN = "ifap_LEAKCANARY_opaque_token"
SECRETS = [API_KEY, OAUTH_TOKEN, CREDENTIALS, "sk-ant-oat01-LEAKCANARY-inline", ADMIN_KEY]

Build = Callable[[], K8sEphemeralProvider]

SCENARIOS: dict[str, Build] = {
    "sandboxed plain api key": lambda: K8sEphemeralProvider.sandboxed(IMAGE).env("ANTHROPIC_API_KEY", API_KEY),
    "sandboxed plain oauth token": lambda: K8sEphemeralProvider.sandboxed(IMAGE).env(
        "CLAUDE_CODE_OAUTH_TOKEN", OAUTH_TOKEN
    ),
    "sandboxed inline credentials": lambda: K8sEphemeralProvider.sandboxed(IMAGE).oauth_credentials(CREDENTIALS),
    "proxy inline credentials": lambda: (
        K8sEphemeralProvider(IMAGE).auth_proxy("http://p").oauth_credentials(CREDENTIALS)
    ),
    "proxy sk-ant value under another name": lambda: (
        K8sEphemeralProvider(IMAGE).auth_proxy("http://p").env("MY_TOKEN", OAUTH_TOKEN)
    ),
    "proxy forbidden name": lambda: (
        K8sEphemeralProvider.sandboxed(IMAGE).auth_proxy("http://p").env("ANTHROPIC_API_KEY", API_KEY)
    ),
    "proxy with admin key": lambda: (
        K8sEphemeralProvider.sandboxed(IMAGE)
        .auth_proxy("http://p")
        .auth_proxy_admin_key(ADMIN_KEY)
        .oauth_token_from_secret("claude", "token")
    ),
    "proxy with admin key, clean": lambda: (
        K8sEphemeralProvider.sandboxed(IMAGE).auth_proxy("http://p").auth_proxy_admin_key(ADMIN_KEY)
    ),
    "secrets by reference": lambda: (
        K8sEphemeralProvider.sandboxed(IMAGE)
        .oauth_credentials_from_secret("claude-creds", "credentials.json")
        .env_from_secret("ANTHROPIC_API_KEY", "anthropic", "api-key")
    ),
}


def outcome(provider: K8sEphemeralProvider, **kw: Any) -> list[dict[str, Any]] | errors.IronflowError:
    try:
        return provider.manifests(AgentConfig("hello").env_from_secret("GH", "github", "token"), now=0, **kw)
    except errors.IronflowError as exc:
        return exc


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_no_credential_in_manifests_errors_or_reprs(name: str) -> None:
    provider = SCENARIOS[name]()
    kw: dict[str, Any] = {"proxy_token": PROXY_TOKEN} if provider.settings.auth_proxy_url else {}
    result = outcome(provider, **kw)
    if not isinstance(result, errors.IronflowError):
        validate_manifests(result)
    assert find_leaks(SECRETS, result, repr(provider), str(provider), repr(provider.settings)) == []


def test_refusals_name_the_variable_not_the_value() -> None:
    result = outcome(SCENARIOS["proxy sk-ant value under another name"](), proxy_token=PROXY_TOKEN)
    assert isinstance(result, errors.StepConfigError)
    assert "MY_TOKEN" in result.message
    assert find_leaks([OAUTH_TOKEN, PROXY_TOKEN], result) == []


def test_the_proxy_token_appears_only_as_the_auth_token_env() -> None:
    objs = outcome(SCENARIOS["proxy with admin key, clean"](), proxy_token=PROXY_TOKEN)
    assert not isinstance(objs, errors.IronflowError)
    validate_manifests(objs)
    (pod,) = objs
    env = pod["spec"]["containers"][0]["env"]
    holders = [e["name"] for e in env if e.get("value") == PROXY_TOKEN]
    assert holders == ["ANTHROPIC_AUTH_TOKEN"]
    scrubbed = [{**e, "value": "x"} if e["name"] == "ANTHROPIC_AUTH_TOKEN" else e for e in env]
    pod["spec"]["containers"][0]["env"] = scrubbed
    assert find_leaks([PROXY_TOKEN], pod) == []


def test_inline_credentials_on_a_plain_provider_stay_out_of_reprs() -> None:
    """By the reference's design the command writes them; the provider's repr never shows them."""
    provider = K8sEphemeralProvider(IMAGE).oauth_credentials(CREDENTIALS)
    (pod,) = provider.manifests(AgentConfig("hi"), now=0)
    validate_manifests([pod])
    assert CREDENTIALS.replace("'", "'\\''") in pod["spec"]["containers"][0]["command"][2]
    assert find_leaks([CREDENTIALS], repr(provider), repr(provider.settings)) == []
    env_and_meta = {"env": pod["spec"]["containers"][0]["env"], "metadata": pod["metadata"]}
    assert find_leaks([CREDENTIALS], env_and_meta) == []
