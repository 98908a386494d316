"""Patterns whose pod runs the agent, behind the auth proxy: the proxy's address in the pod, a
wait for the token that ``deliver_token`` writes over exec, and no token in any object."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ironflow.agent_sandbox import catalog, deliveries, patterns
from ironflow.k8s.pod_provider import K8sEphemeralProvider

PROXY = "http://ironflow-auth-proxy.ironflow.svc:8080"
PROXIED = K8sEphemeralProvider.sandboxed("ghcr.io/acme/runner:1").auth_proxy(PROXY)
#: The patterns whose Sandbox pod runs the agent as its command (the others exec it per step).
AGENT_RUNNING = ("ephemeral", "standalone-pvc")


def agent_container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (sandbox,) = (o for o in objects if o["kind"] == "Sandbox")
    container: dict[str, Any] = sandbox["spec"]["podTemplate"]["spec"]["containers"][0]
    return container


@pytest.mark.parametrize("pattern", AGENT_RUNNING)
def test_proxied_pattern_pod_has_the_proxy_address_and_waits_for_its_token(pattern: str) -> None:
    """Before: the pod had no base URL and no token, so its agent could not authenticate at all."""
    objects = catalog.render_pattern(pattern, patterns.PatternOptions(provider=PROXIED))
    script = agent_container(objects)["command"][-1]
    assert script.startswith(deliveries.token_wait_prefix(PROXY))
    assert f"ANTHROPIC_BASE_URL='{PROXY}'" in script
    assert 'ANTHROPIC_AUTH_TOKEN="$(cat "$HOME/.ironflow/proxy-token")"' in script
    assert "ConfigMap" not in {o["kind"] for o in objects}


@pytest.mark.parametrize("pattern", AGENT_RUNNING)
def test_proxied_pattern_holds_no_credential(pattern: str) -> None:
    text = json.dumps(catalog.render_pattern(pattern, patterns.PatternOptions(provider=PROXIED)))
    assert "ifap_" not in text
    env = {e["name"] for e in agent_container(json.loads(text))["env"]}
    assert not env & {"ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN"}


@pytest.mark.parametrize("pattern", AGENT_RUNNING)
def test_unproxied_pattern_runs_the_agent_at_once(pattern: str) -> None:
    script = agent_container(catalog.render_pattern(pattern, patterns.PatternOptions()))["command"][-1]
    assert deliveries.PROXY_TOKEN_FILE not in script
