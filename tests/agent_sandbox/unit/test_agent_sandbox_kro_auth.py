"""The KRO graphs behind the auth proxy: the one-shot modes' agent waits for the token that
``ironflow sandbox deliver-token`` writes over exec (the proxy's address in its shell, no token
or credential anywhere in the graph); the scheduled mode, with nobody to deliver, is refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.fakes.sandbox_cli import run_sandbox

from ironflow import errors
from ironflow.agent_sandbox import catalog, deliveries, kro, patterns
from ironflow.k8s.pod_provider import K8sEphemeralProvider

PROXY = "http://ironflow-auth-proxy.ironflow.svc:8080"
PROXIED = K8sEphemeralProvider.sandboxed(patterns.DEFAULT_IMAGE).auth_proxy(PROXY)
KRO_PATTERNS = ("kro-raw", "kro-template")
CREDENTIAL_ENV = {"ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN"}


def agent_pod(rgds: list[dict[str, Any]]) -> dict[str, Any]:
    """The pod spec of the graph's Sandbox (07) or SandboxTemplate (08)."""
    (child,) = (
        r["template"] for rgd in rgds for r in rgd["spec"]["resources"]
        if r["template"]["kind"] in ("Sandbox", "SandboxTemplate")
    )  # fmt: skip
    spec: dict[str, Any] = child["spec"]["podTemplate"]["spec"]
    return spec


def agent_shell(rgds: list[dict[str, Any]]) -> str:
    """The shell that runs the agent (08: the wrapper's argument, run once the claim adopts the pod)."""
    text: str = agent_pod(rgds)["containers"][0]["command"][-1]
    return text


@pytest.mark.parametrize("pattern", KRO_PATTERNS)
def test_proxied_one_shot_pod_has_the_proxy_address_and_waits_for_its_token(pattern: str) -> None:
    """Before: a provider with auth_proxy was refused, so no KRO graph could use the proxy."""
    rgds = catalog.render_pattern(pattern, patterns.PatternOptions(provider=PROXIED))
    shell = agent_shell(rgds)
    assert shell.startswith(deliveries.token_wait_prefix(PROXY))
    assert f"ANTHROPIC_BASE_URL='{PROXY}'" in shell
    assert 'ANTHROPIC_AUTH_TOKEN="$(cat "$HOME/.ironflow/proxy-token")"' in shell
    assert f"{kro.PROMPT_DIR}/prompt" in shell  # the prompt still comes from the graph's ConfigMap


@pytest.mark.parametrize("pattern", KRO_PATTERNS)
def test_proxied_graph_holds_no_token_and_no_credential(pattern: str) -> None:
    rgds = catalog.render_pattern(pattern, patterns.PatternOptions(provider=PROXIED))
    text = json.dumps(rgds)
    assert "ifap_" not in text
    assert "secretKeyRef" not in text
    assert "Secret" not in {r["template"]["kind"] for rgd in rgds for r in rgd["spec"]["resources"]}
    env = {e["name"] for e in agent_pod(rgds)["containers"][0].get("env", [])}
    assert not env & CREDENTIAL_ENV
    configmaps = [
        r["template"] for rgd in rgds for r in rgd["spec"]["resources"] if r["template"]["kind"] == "ConfigMap"
    ]
    assert [c["data"] for c in configmaps] == [{"prompt": "${schema.spec.prompt}"}]  # no proxy address either


@pytest.mark.parametrize("pattern", KRO_PATTERNS)
def test_proxied_graph_has_only_the_one_shot_mode(pattern: str) -> None:
    """No schedule field, no CronJob: a scheduled run would have nobody to deliver its token."""
    rgds = catalog.render_pattern(pattern, patterns.PatternOptions(provider=PROXIED))
    user = rgds[-1]
    assert "schedule" not in user["spec"]["schema"]["spec"]
    kinds = {r["template"]["kind"] for r in user["spec"]["resources"]}
    assert not kinds & {"CronJob", "ServiceAccount", "Role", "RoleBinding"}
    assert all("includeWhen" not in r for r in user["spec"]["resources"])


def test_proxied_kro_template_waits_for_adoption_before_the_token() -> None:
    """The token wait starts once a claim adopts the pool member (the pool label gone)."""
    (rgd,) = catalog.render_pattern("kro-template", patterns.PatternOptions(provider=PROXIED))
    command = agent_pod([rgd])["containers"][0]["command"]
    assert command[2].startswith("while grep -q '^agents.x-k8s.io/warm-pool-sandbox='")
    assert deliveries.PROXY_TOKEN_FILE not in command[2]


@pytest.mark.parametrize("pattern", KRO_PATTERNS)
def test_a_scheduled_proxied_graph_is_refused_naming_the_secret_reference(pattern: str) -> None:
    opts = patterns.PatternOptions(provider=PROXIED, schedule="0 * * * *")
    with pytest.raises(errors.ConfigError, match="scheduled kro graph cannot use auth_proxy") as caught:
        catalog.render_pattern(pattern, opts)
    assert "env_from_secret" in caught.value.message
    assert "deliver-token" in caught.value.message


def test_render_refuses_a_scheduled_proxied_graph_with_one_line(tmp_path: Path) -> None:
    provider = tmp_path / "pod.yaml"
    provider.write_text(yaml.safe_dump({"image": "ghcr.io/acme/runner:1", "sandboxed": True, "auth_proxy": PROXY}))
    code, out, err = run_sandbox("render", "kro-raw", "--provider", str(provider), "--schedule", "0 * * * *")
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1
    assert err.startswith("error: a scheduled kro graph cannot use auth_proxy")


def test_unproxied_kro_pod_starts_the_agent_without_a_token_wait() -> None:
    (rgd,) = catalog.render_pattern("kro-template")
    assert deliveries.PROXY_TOKEN_FILE not in json.dumps(rgd)
