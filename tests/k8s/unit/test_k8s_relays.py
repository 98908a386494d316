"""A k8s provider's relays (pure): read from the provider file, refused without the proxy, and a
step's pod holding each relay's URL and opaque token, never a value or a reference to its Secret."""

from __future__ import annotations

import re
from typing import Any

import pytest

from ironflow import AgentConfig, errors
from ironflow.auth_proxy import relays, tokens
from ironflow.k8s import K8sEphemeralProvider, step_objects
from ironflow.k8s.sessions.pod_sessions import K8sSessions
from ironflow.secrets import Secret
from ironflow.testing.k8s_validate import validate_manifest

IMAGE = "ghcr.io/acme/claude-runner:2.1.332-1"
PROXY = "http://auth-proxy.ironflow:8080"
RELAY = {
    "host": "api.example.com",
    "credential_secret": {"secret": "example-api", "key": "token"},
    "injection": {"query": "api_key"},
    "scope": {"methods": ["GET"]},
}


def _provider(**extra: Any) -> K8sEphemeralProvider:
    return K8sEphemeralProvider.from_dict({"image": IMAGE, "namespace": "agents", **extra})


def test_a_provider_files_relays_become_its_settings() -> None:
    (spec,) = _provider(auth_proxy=PROXY, relays=[RELAY]).settings.relays
    assert spec == relays.RelaySpec(
        "api.example.com",
        "api.example.com",
        tokens.Injection("query", param="api_key"),
        tokens.Scope(methods=("GET",)),
        credential_secret=relays.SecretRef("example-api", "token"),
    )


def test_a_relay_on_kubernetes_takes_its_value_from_a_secret_only() -> None:
    entry = {**RELAY, "credential_env": "API_TOKEN"}
    del entry["credential_secret"]
    with pytest.raises(errors.ConfigError, match=re.escape("relays[0].credential_env: a pod's worker reads no")):
        _provider(relays=[entry])
    unresolved = relays.RelaySpec("x", "x.example.com", tokens.Injection("bearer"), credential_env="X")
    with pytest.raises(errors.ConfigError, match="comes from a Secret"):
        _provider().relays([unresolved])


def test_relays_without_the_auth_proxy_refuse_the_step() -> None:
    with pytest.raises(errors.StepConfigError, match=re.escape("relays on Kubernetes need auth_proxy(url)")):
        _provider(relays=[RELAY]).manifests(AgentConfig("go"), now=1_700_000_000, pod_name="claude-code-t-1")


def test_the_pod_gets_each_relays_url_and_token_and_nothing_of_its_secret() -> None:
    settings = _provider(auth_proxy=PROXY, relays=[RELAY]).settings
    token = Secret("ifap_" + "c" * 64)
    objects = step_objects.render_step(
        settings,
        AgentConfig("go"),
        now=1_700_000_000,
        pod_name="claude-code-t-1",
        token=Secret("ifap_" + "a" * 64),
        worker_env={},
        environment_id="e",
        relay_tokens=[(settings.relays[0], token)],
    )
    validate_manifest(objects.pod)
    env = {e["name"]: e.get("value") for e in objects.pod["spec"]["containers"][0]["env"]}
    assert env["IRONFLOW_RELAY_API_EXAMPLE_COM"] == f"{PROXY}/r/api.example.com"
    assert env["IRONFLOW_RELAY_API_EXAMPLE_COM_TOKEN"] == token.reveal()
    assert "example-api" not in str(objects.pod)  # the pod does not even learn where the value is kept
    with pytest.raises(errors.ConfigError, match="one token per relay"):
        step_objects.render_step(
            settings,
            AgentConfig("go"),
            now=1_700_000_000,
            pod_name="claude-code-t-1",
            token=None,
            worker_env={},
            environment_id="e",
            relay_tokens=[(relays.RelaySpec("o", "o.example.com", tokens.Injection("bearer")), token)],
        )


async def test_k8s_sandbox_sessions_refuse_relays_rather_than_drop_them() -> None:
    sessions = K8sSessions(_provider(auth_proxy=PROXY, relays=[RELAY]).settings)
    with pytest.raises(errors.ConfigError, match="sandbox sessions do not get them yet"):
        await sessions.open()
