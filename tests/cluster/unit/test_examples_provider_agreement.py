"""The cluster manifests and the runtime agree: a pod the sandboxed provider renders with the
example's registrations references only ConfigMaps the example creates, in the namespace the
Role covers, is selected by the egress policies, and passes Pod Security ``restricted``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ironflow import labels
from ironflow.cluster import examples, service_network, session_network, setup
from ironflow.k8s.commands.pod_ups import PodUp, Readiness
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.k8s.sessions import runtime_pod, session_pod
from ironflow.steps import AgentConfig

HOME = (
    Path(__file__).resolve().parents[3] / "examples" / "k8s" / "sandbox" / examples.PROFILE_DIR / examples.PROFILE_HOME
)
PROFILE = {str(p.relative_to(HOME)): p.read_text(encoding="utf-8") for p in HOME.rglob("*") if p.is_file()}
CONFIG = examples.EXAMPLE_CONFIG
OBJECTS = setup.render(CONFIG, profile=PROFILE)
STEP = AgentConfig("review").scoped("run-1", "review")


def _provider() -> K8sEphemeralProvider:
    provider = K8sEphemeralProvider.sandboxed("ghcr.io/acme/claude-runner:2.1.332-1").namespace(CONFIG.namespace)
    for preset in CONFIG.presets:
        provider = provider.managed_settings_preset(preset, setup.preset_configmap_name(preset))
    for subdir in sorted({p.rpartition("/")[0] for p in PROFILE}):
        provider = provider.claude_profile_configmap_at(setup.profile_configmap_name(subdir), subdir)
    return provider.default_managed_settings("locked")


def _pod(provider: K8sEphemeralProvider, step: AgentConfig = STEP) -> dict[str, Any]:
    pod = provider.manifests(step, now=1000)[-1]
    assert pod["kind"] == "Pod"
    return pod


def _selects(selector: dict[str, Any], pod_labels: dict[str, str]) -> bool:
    return all(pod_labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


def test_every_configmap_the_pod_mounts_is_created_by_the_example() -> None:
    pod = _pod(_provider())
    mounted = {v["configMap"]["name"] for v in pod["spec"]["volumes"] if "configMap" in v}
    created = {o["metadata"]["name"] for o in OBJECTS if o["kind"] == "ConfigMap"}
    assert mounted
    assert mounted <= created
    assert setup.preset_configmap_name("locked") in mounted
    assert {"claude-profile", "claude-profile-rules"} <= mounted


def test_the_pod_lives_where_the_worker_role_applies() -> None:
    role = next(o for o in OBJECTS if o["kind"] == "Role")
    assert _pod(_provider())["metadata"]["namespace"] == role["metadata"]["namespace"] == CONFIG.namespace


def test_agent_egress_policies_select_the_pod_and_profile_policies_only_with_the_label() -> None:
    policies = [
        o
        for o in setup.render(setup.ClusterSetup(cilium=True))
        if o["kind"] == "CiliumNetworkPolicy" and o["metadata"]["namespace"] == CONFIG.namespace
    ]
    plain_labels = _pod(_provider())["metadata"]["labels"]
    gitlab_labels = _pod(_provider(), STEP.egress_profile("gitlab"))["metadata"]["labels"]
    for policy in policies:
        selector = policy["spec"]["endpointSelector"]
        is_profile = labels.LABEL_EGRESS_PROFILE in selector["matchLabels"]
        assert _selects(selector, plain_labels) is not is_profile, policy["metadata"]["name"]
        assert _selects(selector, gitlab_labels), policy["metadata"]["name"]
    service = PodUp("db", "postgres:16", "run-1").port(5432).readiness(Readiness.tcp(5432)).build_pod()
    service_labels = service["metadata"]["labels"]
    for policy in (
        o for o in OBJECTS if o["kind"] == "NetworkPolicy" and o["metadata"]["namespace"] == CONFIG.namespace
    ):
        selector, name = policy["spec"]["podSelector"], policy["metadata"]["name"]
        # Each selects agent pods, or (the service pods' ingress) the PodUp pods the library renders.
        selected = (_selects(selector, plain_labels), _selects(selector, service_labels))
        wanted = (False, True) if name == service_network.INGRESS_NAME else (True, name == "default-deny-all")
        if name in (session_network.NAME, session_network.EGRESS_NAME):  # the session pods the library renders
            wanted = (False, False)
            assert _selects(selector, _session_pod()["metadata"]["labels"]), name
        assert selected == wanted, name


def _session_pod() -> dict[str, Any]:
    return session_pod.session_pod("sbx-0123456789abcdef", _provider().settings, ttl_s=60, now=0)


def test_the_session_runtime_policy_opens_the_port_the_session_pod_listens_on() -> None:
    (container,) = _session_pod()["spec"]["containers"]
    assert [p["containerPort"] for p in container["ports"]] == [runtime_pod.PORT] == [session_network.RUNTIME_PORT]


@pytest.mark.parametrize("proxy", [False, True])
def test_the_pod_meets_pod_security_restricted(proxy: bool) -> None:
    """What the namespace's ``enforce: restricted`` label demands of every container."""
    provider = _provider().auth_proxy(setup.DEFAULT_AUTH_PROXY_URL) if proxy else _provider()
    pod = provider.manifests(STEP, now=1000, proxy_token="ifap_x" if proxy else None)[-1]
    spec = pod["spec"]
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    for container in [*spec.get("initContainers", []), *spec["containers"]]:
        ctx = container["securityContext"]
        assert ctx["allowPrivilegeEscalation"] is False
        assert ctx["capabilities"]["drop"] == ["ALL"]
        assert not ctx.get("capabilities", {}).get("add")
    assert not any("hostPath" in v for v in spec["volumes"])
    namespace = next(o for o in OBJECTS if o["kind"] == "Namespace" and o["metadata"]["name"] == CONFIG.namespace)
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
