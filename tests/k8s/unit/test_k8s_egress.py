"""A k8s provider's egress policy (pure): read from the provider file with its own profiles or set
from Python, refused without the proxy, and a step's pod sent through the proxy Service's egress
port with the step's egress-only token (never its Claude token) only when the policy opens something."""

from __future__ import annotations

import doctest
import re
from typing import Any

import pytest

from ironflow import AgentConfig, egress, errors
from ironflow.egress import options, variables
from ironflow.k8s import K8sEphemeralProvider, step_objects
from ironflow.k8s.sessions.pod_sessions import K8sSessions
from ironflow.secrets import Secret
from ironflow.sessions.values import OpenOptions
from ironflow.testing.k8s_validate import validate_manifest

IMAGE = "ghcr.io/acme/claude-runner:2.1.332-1"
PROXY = "http://ironflow-auth-proxy.ironflow:80"
TOKEN = Secret("ifap_" + "a" * 64)
EGRESS_TOKEN = Secret("ifap_" + "e" * 64)
FILE_EGRESS = {"allow": ["mirror.internal:443@10.96.0.0/12"], "profiles": ["pypi", "team"]}
FILE_PROFILES = {"team": {"allow": ["*.team.example:443"], "profiles": ["github"]}}
PROXY_VARIABLES = ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy", "NO_PROXY", "no_proxy")


def _provider(**extra: Any) -> K8sEphemeralProvider:
    return K8sEphemeralProvider.from_dict({"image": IMAGE, "namespace": "agents", **extra})


def _env(
    provider: K8sEphemeralProvider, token: Secret | None = TOKEN, egress_token: Secret | None = EGRESS_TOKEN
) -> dict[str, str | None]:
    objects = step_objects.render_step(
        provider.settings,
        AgentConfig("go"),
        now=1_700_000_000,
        pod_name="claude-code-t-1",
        token=token,
        worker_env={},
        environment_id="e",
        egress_token=egress_token,
    )
    validate_manifest(objects.pod)
    return {e["name"]: e.get("value") for e in objects.pod["spec"]["containers"][0]["env"]}


def test_a_provider_files_egress_and_own_profiles_become_its_policy() -> None:
    settings = _provider(auth_proxy=PROXY, egress=FILE_EGRESS, egress_profiles=FILE_PROFILES).settings
    expected, _ = options.file_policy(FILE_EGRESS, FILE_PROFILES, source="x")
    assert settings.egress == expected
    assert egress.decide(expected, "api.github.com", 443).allowed  # through the file's own profile
    assert egress.decide(expected, "files.pythonhosted.org", 443).allowed
    assert not egress.decide(expected, "evil.example", 443).allowed


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"egress": {"allow": ["*.bad..host"]}}, "provider file: egress: "),
        ({"egress": {"profiles": ["nope"]}}, "provider file: egress: unknown egress profile 'nope'"),
        ({"egress_profiles": {"Bad Name": {}}}, "provider file: egress_profiles: invalid profile name 'Bad Name'"),
        ({"egress": ["pypi.org"]}, "provider file: egress: an egress policy is a mapping"),
    ],
)
def test_a_bad_egress_entry_is_one_line_naming_the_key(extra: dict[str, Any], message: str) -> None:
    with pytest.raises(errors.ConfigError, match=re.escape(message)) as caught:
        _provider(auth_proxy=PROXY, **extra)
    assert "\n" not in str(caught.value)


def test_the_python_builder_sets_the_same_policy_and_refuses_anything_else() -> None:
    policy = egress.policy_from_options(["pypi.org"])
    assert _provider().egress(policy).settings.egress == policy
    assert _provider().egress(policy).egress(None).settings.egress is None
    with pytest.raises(errors.ConfigError, match="egress takes an EgressPolicy, not dict"):
        _provider().egress({"allow": ["pypi.org"]})  # type: ignore[arg-type]


def test_an_opening_policy_without_the_auth_proxy_refuses_the_step() -> None:
    opening = _provider(egress={"allow": ["pypi.org"]})
    with pytest.raises(errors.StepConfigError, match=re.escape("an egress policy on Kubernetes needs auth_proxy(url)")):
        opening.manifests(AgentConfig("go"), now=1_700_000_000, pod_name="claude-code-t-1")
    _provider(egress={"allow": []}).manifests(AgentConfig("go"), now=1_700_000_000, pod_name="claude-code-t-1")


def test_the_pod_reaches_the_egress_port_with_its_egress_only_token_and_the_proxy_directly() -> None:
    env = _env(_provider(auth_proxy=PROXY, egress={"allow": ["pypi.org"]}))
    url = f"http://ironflow:{EGRESS_TOKEN.reveal()}@ironflow-auth-proxy.ironflow:3128"
    assert [env[name] for name in PROXY_VARIABLES[:4]] == [url] * 4
    assert env["NO_PROXY"] == env["no_proxy"] == "ironflow-auth-proxy.ironflow,localhost,127.0.0.1"
    assert env["ANTHROPIC_AUTH_TOKEN"] == TOKEN.reveal()  # the model's token: in no proxy URL
    assert not any(TOKEN.reveal() in str(env[name]) for name in PROXY_VARIABLES)


def test_without_an_egress_token_the_pod_gets_no_proxy_variable_and_never_the_claude_token_in_one() -> None:
    env = _env(_provider(auth_proxy=PROXY, egress={"allow": ["pypi.org"]}), egress_token=None)
    assert not set(PROXY_VARIABLES) & set(env)
    with pytest.raises(errors.ConfigError, match="auth_proxy"):  # an egress token needs the proxy it reaches
        _env(_provider(), token=None)


@pytest.mark.parametrize("extra", [{}, {"egress": {}}, {"egress": {"deny": ["pypi.org"]}}])
def test_a_policy_that_opens_nothing_sets_no_proxy_variable(extra: dict[str, Any]) -> None:
    env = _env(_provider(auth_proxy=PROXY, **extra))
    assert not set(PROXY_VARIABLES) & set(env)


def test_a_dry_render_holds_no_token_and_no_proxy_variable() -> None:
    provider = _provider(auth_proxy=PROXY, egress={"allow": ["pypi.org"]})
    (pod,) = [o for o in provider.manifests(AgentConfig("go")) if o["kind"] == "Pod"]
    names = {e["name"] for e in pod["spec"]["containers"][0]["env"]}
    assert not set(PROXY_VARIABLES) & names
    assert "ifap_" not in str(pod)


def test_the_variables_modules_examples_hold() -> None:
    result = doctest.testmod(variables)
    assert result.attempted >= 3
    assert result.failed == 0


async def test_k8s_sandbox_sessions_refuse_an_opening_policy_without_an_auth_proxy() -> None:
    """Nothing would enforce it: refused at open, before anything exists (no cluster is reached)."""
    sessions = K8sSessions(_provider(egress={"allow": ["pypi.org"]}).settings)
    with pytest.raises(errors.ConfigError, match="egress in a Kubernetes session needs auth_proxy"):
        await sessions.open()
    plain = K8sSessions(_provider().settings)
    with pytest.raises(errors.ConfigError, match="egress in a Kubernetes session needs auth_proxy"):
        await plain.open(OpenOptions(egress=egress.policy_from_options(["pypi.org"])))
