"""An agent-sandbox step's egress: the template carries the egress proxy's address (never a
token) and a NetworkPolicy letting the pod reach only kube-dns and the proxy; the step's
egress-only token arrives over exec stdin and becomes the proxy variables' password."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ironflow import errors
from ironflow.agent_sandbox import deliveries
from ironflow.agent_sandbox import step_render as sandbox_steps
from ironflow.agent_sandbox.claim_provider import AgentSandboxProvider
from ironflow.egress import options
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.secrets import Secret
from ironflow.steps import AgentConfig

PROXIED = (
    K8sEphemeralProvider.sandboxed("ghcr.io/acme/claude-runner:1")
    .namespace("agents")
    .auth_proxy("http://auth-proxy.ironflow:8080")
)
EGRESS = PROXIED.egress(options.policy_from_options(["pypi.org"]))
TOKEN = "ifap_" + "e" * 64


def _template(p: K8sEphemeralProvider) -> dict[str, Any]:
    template, _ = sandbox_steps.template_objects(AgentSandboxProvider(p).settings)
    return template


def _env(template: dict[str, Any]) -> dict[str, str]:
    (main, *_) = template["spec"]["podTemplate"]["spec"]["containers"]
    return {e["name"]: e.get("value", "") for e in main.get("env", [])}


def test_the_template_of_an_egress_provider_carries_the_proxy_address_and_no_token() -> None:
    env = _env(_template(EGRESS))
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        assert env[name] == "http://auth-proxy.ironflow:3128"  # the egress listener, no user info
    assert env["NO_PROXY"].split(",") == ["auth-proxy.ironflow", "localhost", "127.0.0.1"]
    assert "ifap_" not in str(_template(EGRESS))


def test_the_template_network_policy_lets_the_pod_reach_only_dns_and_the_proxy() -> None:
    policy = _template(EGRESS)["spec"]["networkPolicy"]
    dns, proxy = policy["egress"]
    assert {p["port"] for p in dns["ports"]} == {53}
    assert dns["to"][0]["podSelector"] == {"matchLabels": {"k8s-app": "kube-dns"}}
    assert proxy["to"] == [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ironflow"}},
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "ironflow-auth-proxy"}},
        }
    ]
    assert [p["port"] for p in proxy["ports"]] == [8080, 3128]
    assert policy["ingress"][0]["from"][0]["podSelector"] == {"matchLabels": {"app": "sandbox-router"}}
    # The controller's default would block DNS and the proxy: no warning about it is left to give.
    assert not [w for w in sandbox_steps.template_warnings(AgentSandboxProvider(EGRESS).settings) if "DNS" in w]


def test_a_proxy_outside_the_cluster_by_ip_is_opened_by_address_and_by_name_refused() -> None:
    by_ip = EGRESS.auth_proxy("http://10.0.0.5:8080")
    (_, rule) = _template(by_ip)["spec"]["networkPolicy"]["egress"]
    assert rule == {"to": [{"ipBlock": {"cidr": "10.0.0.5/32"}}], "ports": [
        {"port": 8080, "protocol": "TCP"}, {"port": 3128, "protocol": "TCP"}]}  # fmt: skip
    with pytest.raises(errors.ConfigError, match="opens egress by IP only"):
        _template(EGRESS.auth_proxy("http://proxy.example.com:8080"))


def test_custom_or_unmanaged_network_policies_and_closed_policies_are_left_as_they_are() -> None:
    custom = AgentSandboxProvider(EGRESS).network_policy(None, managed=False)
    template, _ = sandbox_steps.template_objects(custom.settings)
    assert "networkPolicy" not in template["spec"]
    closed = PROXIED.egress(options.policy_from_options([]))  # opens nothing: the template of no egress
    assert _template(closed) == _template(PROXIED)
    assert "HTTPS_PROXY" not in _env(_template(PROXIED))


def test_an_added_policy_joins_the_pod_settings_and_leaves_the_applied_template_as_it_is() -> None:
    """``ironflow agent --allow-host``: the step's policy is the pod's with the option's rules; the
    template (its NetworkPolicy, its env) is the one applied, so a pod whose ``egress:`` opens
    nothing, or whose policy cannot reach the proxy, is refused."""
    base = AgentSandboxProvider(EGRESS)
    added = base.added_egress(options.policy_from_options(["files.pythonhosted.org"]))
    policy = added.settings.pod.settings.egress
    assert policy is not None
    assert [r.host for r in policy.allow] == ["pypi.org", "files.pythonhosted.org"]
    assert sandbox_steps.template_objects(added.settings) == sandbox_steps.template_objects(base.settings)
    with pytest.raises(errors.ConfigError, match="which opens nothing"):
        AgentSandboxProvider(PROXIED).added_egress(options.policy_from_options(["pypi.org"]))
    unmanaged = AgentSandboxProvider(PROXIED).network_policy(None, managed=False)  # the user's own policies
    assert unmanaged.added_egress(options.policy_from_options(["pypi.org"])).settings.pod.settings.egress


def test_the_egress_token_reaches_the_sandbox_only_as_exec_stdin() -> None:
    settings = AgentSandboxProvider(EGRESS).settings
    plan = sandbox_steps.exec_plan(
        settings, AgentConfig("hi"), proxy_token=Secret("ifap_c"), egress_token=Secret(TOKEN)
    )
    (_, proxy), (argv, stdin) = plan.deliveries
    assert stdin == TOKEN.encode()
    assert proxy == b"ifap_c"
    assert deliveries.EGRESS_TOKEN_FILE in argv[-1]
    assert TOKEN not in str(plan.agent) + repr(plan) + str([a for a, _ in plan.deliveries])
    assert deliveries.egress_prefix(settings.pod.settings) in plan.agent[-1]
    with pytest.raises(errors.ConfigError, match="egress policy"):
        sandbox_steps.exec_plan(AgentSandboxProvider(PROXIED).settings, AgentConfig("hi"), egress_token=Secret(TOKEN))


def test_the_agent_shell_puts_the_delivered_token_in_the_proxy_variables_and_removes_the_file(
    tmp_path: Path,
) -> None:
    (tmp_path / deliveries.TOKEN_DIR).mkdir()
    (tmp_path / deliveries.TOKEN_DIR / deliveries.EGRESS_TOKEN_FILE).write_text(TOKEN)
    script = (
        deliveries.egress_prefix(EGRESS.settings)
        + 'printf "%s\\n" "$HTTPS_PROXY" "$http_proxy" "$NO_PROXY" "${_egress-unset}"'
    )
    done = subprocess.run(["sh", "-c", script], env={"HOME": str(tmp_path), "PATH": os.environ["PATH"]},
                          capture_output=True, text=True, check=True)  # fmt: skip
    https, http, bypass, helper = done.stdout.splitlines()
    assert https == http == f"http://ironflow:{TOKEN}@auth-proxy.ironflow:3128"
    assert bypass == "auth-proxy.ironflow,localhost,127.0.0.1"
    assert helper == "unset"
    assert not (tmp_path / deliveries.TOKEN_DIR / deliveries.EGRESS_TOKEN_FILE).exists()
    assert deliveries.egress_prefix(PROXIED.settings) == ""  # nothing opened: no proxy variables
