"""``ironflow.cluster.setup.render``: which objects each configuration yields, the refusals of a
bad configuration, the managed-settings presets, and the Cilium structural check."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from ironflow import errors, labels
from ironflow.claude import layout
from ironflow.cluster import cilium, network, proxy_address, setup, workloads

#: The egress listener an outside proxy serves beside its URL's port (agents reach both).
EGRESS_TCP = {"port": network.EGRESS_PORT, "protocol": "TCP"}


def _kinds(objects: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(o["kind"], o["metadata"]["name"]) for o in objects]


def _by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def test_default_renders_plain_policies_and_no_proxy_namespace() -> None:
    objects = setup.render(setup.ClusterSetup())
    assert [o["metadata"]["name"] for o in _by_kind(objects, "Namespace")] == ["ironflow-agents", "ironflow"]
    assert {n for k, n in _kinds(objects) if k == "NetworkPolicy"} == {
        "default-deny-all",
        "claude-runner-egress-dns",
        "claude-runner-egress-https",
        "ironflow-service-pods",
        "claude-runner-egress-service-pods",
        "ironflow-session-runtime",
    }
    assert not _by_kind(objects, "CiliumNetworkPolicy")
    assert not _by_kind(objects, "RuntimeClass")


@pytest.mark.parametrize("cilium", [False, True])
def test_every_variant_opens_service_pods_to_agents_of_the_namespace_on_declared_ports_only(cilium: bool) -> None:
    """Plain NetworkPolicies, which Cilium enforces too: service pods accept agents of their own
    namespace (no namespaceSelector, no ipBlock) on the named ports, and get no egress."""
    objects = setup.render(setup.ClusterSetup(namespace="agents", cilium=cilium))
    policies = {o["metadata"]["name"]: o for o in _by_kind(objects, "NetworkPolicy")}
    ports = [{"port": name, "protocol": "TCP"} for name in labels.SERVICE_PORT_NAMES]
    agents = {"podSelector": {"matchLabels": {labels.LABEL_COMPONENT: labels.COMPONENT_CLAUDE_RUNNER}}}
    services = {"podSelector": {"matchLabels": {labels.LABEL_COMPONENT: labels.COMPONENT_POD_UP}}}
    ingress = policies["ironflow-service-pods"]
    assert ingress["metadata"]["namespace"] == "agents"
    assert ingress["spec"] == {**services, "policyTypes": ["Ingress"], "ingress": [{"from": [agents], "ports": ports}]}
    egress = policies["claude-runner-egress-service-pods"]
    assert egress["spec"] == {**agents, "policyTypes": ["Egress"], "egress": [{"to": [services], "ports": ports}]}
    opened = [p for p in policies.values() if services["podSelector"] == p["spec"]["podSelector"]]
    assert [p["metadata"]["name"] for p in opened] == ["ironflow-service-pods"]  # nothing opens their egress


def test_namespaces_come_first_so_a_plain_apply_creates_them_before_their_objects() -> None:
    kinds = [o["kind"] for o in setup.render(setup.ClusterSetup(auth_proxy_url=setup.DEFAULT_AUTH_PROXY_URL))]
    assert kinds[:3] == ["Namespace"] * 3
    assert "Namespace" not in kinds[3:]


def test_agent_namespace_enforces_restricted_pod_security() -> None:
    agents = setup.render(setup.ClusterSetup(namespace="agents"))[0]
    assert agents["metadata"]["name"] == "agents"
    assert agents["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_custom_namespace_reaches_every_namespaced_object() -> None:
    objects = setup.render(setup.ClusterSetup(namespace="agents", worker_namespace="wk", check_rbac=True))
    namespaced = [o for o in objects if o["kind"] not in {"Namespace", "ClusterRole", "ClusterRoleBinding"}]
    assert {o["metadata"]["namespace"] for o in namespaced} == {"agents", "wk"}
    service_accounts = {o["metadata"]["namespace"] for o in _by_kind(objects, "ServiceAccount")}
    assert service_accounts == {"wk"}


def test_cilium_with_auth_proxy_uses_the_proxy_variant_in_the_urls_namespace() -> None:
    config = setup.ClusterSetup(cilium=True, auth_proxy_url="http://proxy.sec.svc.cluster.local:8080")
    objects = setup.render(config)
    policies = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in _by_kind(objects, "CiliumNetworkPolicy")}
    assert policies == {
        ("ironflow-agents", "claude-runner-egress-auth-proxy"),
        ("ironflow-agents", "claude-runner-egress-gitlab"),
        ("sec", "ironflow-auth-proxy"),
    }
    assert "sec" in [o["metadata"]["name"] for o in _by_kind(objects, "Namespace")]


def test_agents_never_reach_the_api_directly_when_the_proxy_is_set() -> None:
    for cilium_on in (True, False):
        config = setup.ClusterSetup(cilium=cilium_on, auth_proxy_url=setup.DEFAULT_AUTH_PROXY_URL)
        agent_policies = [
            o
            for o in setup.render(config)
            if o["kind"].endswith("NetworkPolicy") and o["metadata"]["namespace"] == config.namespace
        ]
        text = json.dumps(agent_policies)
        assert "ipBlock" not in text
        runner_only = [p for p in agent_policies if labels.LABEL_EGRESS_PROFILE not in json.dumps(p["spec"])]
        assert runner_only
        assert network.ANTHROPIC_HOST not in json.dumps(runner_only)


def _agent_egress(config: setup.ClusterSetup) -> list[dict[str, Any]]:
    """The egress rules of the agents' auth-proxy policy (the one beside DNS and the profiles)."""
    (policy,) = [o for o in setup.render(config) if o["metadata"]["name"] == "claude-runner-egress-auth-proxy"]
    egress: list[dict[str, Any]] = policy["spec"]["egress"]
    return egress


def test_an_ip_proxy_gets_an_ipblock_of_that_address_on_the_urls_port_and_no_namespace() -> None:
    """The issue's case: http://10.0.0.5:8080 rendered a Namespace "0" and ignored the port."""
    config = setup.ClusterSetup(auth_proxy_url="http://10.0.0.5:8080")
    objects = setup.render(config)
    assert [o["metadata"]["name"] for o in _by_kind(objects, "Namespace")] == ["ironflow-agents", "ironflow"]
    assert _agent_egress(config) == [
        {"to": [{"ipBlock": {"cidr": "10.0.0.5/32"}}], "ports": [{"port": 8080, "protocol": "TCP"}, EGRESS_TCP]}
    ]
    assert "ironflow-auth-proxy" not in {o["metadata"]["name"] for o in objects}  # its pods are not ours
    v6 = setup.ClusterSetup(auth_proxy_url="https://[fd00::7]:9443")
    assert _agent_egress(v6)[0]["to"] == [{"ipBlock": {"cidr": "fd00::7/128"}}]
    assert _agent_egress(v6)[0]["ports"] == [{"port": 9443, "protocol": "TCP"}, EGRESS_TCP]
    for url in ("http://10.0.0.5:3128", "http://ironflow-auth-proxy.ironflow:3128"):
        with pytest.raises(errors.ConfigError, match="port 3128 is the proxy's egress listener; give another"):
            setup.ClusterSetup(auth_proxy_url=url)


def test_an_outside_host_is_refused_for_plain_policies_naming_the_fixes() -> None:
    with pytest.raises(errors.ConfigError) as caught:
        setup.ClusterSetup(auth_proxy_url="https://proxy.example.com")
    message = caught.value.message
    assert "a plain NetworkPolicy opens egress by IP only" in message
    assert "--cilium" in message
    assert "Service (http://ironflow-auth-proxy.ironflow-system)" in message
    assert "\n" not in message
    named = proxy_address.ExternalProxy("https", "proxy.example.com", 443)
    with pytest.raises(errors.ConfigError, match="opens egress by IP only"):
        network.egress(network.Topology("a", "w", named, ()), cilium=False)


def test_cilium_names_an_outside_host_by_fqdn_on_the_urls_port() -> None:
    config = setup.ClusterSetup(cilium=True, auth_proxy_url="https://proxy.example.com:9443")
    egress = _agent_egress(config)
    assert egress[1] == {
        "toFQDNs": [{"matchName": "proxy.example.com"}],
        "toPorts": [{"ports": [{"port": "9443", "protocol": "TCP"}, {"port": "3128", "protocol": "TCP"}]}],
    }
    assert egress[0]["toPorts"][0]["rules"]["dns"]  # Cilium learns the name's IPs from DNS answers
    by_ip = _agent_egress(setup.ClusterSetup(cilium=True, auth_proxy_url="http://10.0.0.5:8080"))
    opened = [{"port": "8080", "protocol": "TCP"}, {"port": "3128", "protocol": "TCP"}]
    assert by_ip[1] == {"toCIDR": ["10.0.0.5/32"], "toPorts": [{"ports": opened}]}
    for url in ("https://proxy.example.com:9443", "http://10.0.0.5:8080"):
        for policy in _by_kind(
            setup.render(setup.ClusterSetup(cilium=True, auth_proxy_url=url)), "CiliumNetworkPolicy"
        ):
            assert cilium.check_cilium_network_policy(policy) == []


def test_a_service_urls_port_is_the_services_and_every_policy_opens_the_pods_port() -> None:
    """A Service translates its port to the pods' before any policy sees the connection."""
    url = "http://ironflow-auth-proxy.ironflow-system:9000"
    for cilium_on in (False, True):
        config = setup.ClusterSetup(
            cilium=cilium_on, auth_proxy_url=url, auth_proxy_deployment=workloads.AuthProxyDeployment()
        )
        objects = setup.render(config)
        (service,) = _by_kind(objects, "Service")
        assert service["spec"]["ports"][0]["port"] == 9000
        (deployment,) = _by_kind(objects, "Deployment")
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        assert container["ports"][0]["containerPort"] == network.AUTH_PROXY_PORT
        text = json.dumps([o for o in objects if o["kind"].endswith("NetworkPolicy")])
        assert "9000" not in text
        assert str(network.AUTH_PROXY_PORT) in text


def test_egress_profiles_become_cilium_openings_selected_on_the_profile_label() -> None:
    profiles = (network.EgressProfile("git", ("gitlab.com", "github.com")),)
    objects = setup.render(setup.ClusterSetup(cilium=True, egress_profiles=profiles))
    policy = next(o for o in objects if o["metadata"]["name"] == "claude-runner-egress-git")
    assert policy["spec"]["endpointSelector"]["matchLabels"][labels.LABEL_EGRESS_PROFILE] == "git"
    assert policy["spec"]["egress"][1]["toFQDNs"] == [{"matchName": "gitlab.com"}, {"matchName": "github.com"}]


def test_gvisor_adds_the_runsc_runtime_class() -> None:
    runtime = _by_kind(setup.render(setup.ClusterSetup(gvisor=True)), "RuntimeClass")
    assert runtime == [
        {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "gvisor"}, "handler": "runsc"}
    ]


def test_render_never_emits_a_secret() -> None:
    for config in (setup.ClusterSetup(), setup.ClusterSetup(auth_proxy_url=setup.DEFAULT_AUTH_PROXY_URL)):
        assert not _by_kind(setup.render(config), "Secret")


@pytest.mark.parametrize("preset", sorted(setup.MANAGED_SETTINGS_PRESETS))
def test_every_preset_has_no_marketplace_no_hooks_and_no_bypass(preset: str) -> None:
    objects = setup.render(setup.ClusterSetup(presets=(preset,)))
    (configmap,) = _by_kind(objects, "ConfigMap")
    assert configmap["metadata"]["name"] == f"claude-managed-{preset}"
    settings = json.loads(configmap["data"][layout.MANAGED_SETTINGS_FILE])
    assert settings["strictKnownMarketplaces"] == []
    assert settings["disableAllHooks"] is True
    assert settings["permissions"]["disableBypassPermissionsMode"] == "disable"
    assert "Read(~/.claude/.credentials.json)" in settings["permissions"]["deny"]


def test_readonly_preset_denies_every_tool_that_writes_or_runs_commands() -> None:
    deny = setup.MANAGED_SETTINGS_PRESETS["readonly"]["permissions"]["deny"]
    assert {"Bash", "Edit", "MultiEdit", "NotebookEdit", "Write"} <= set(deny)
    assert "Bash" not in setup.MANAGED_SETTINGS_PRESETS["locked"]["permissions"]["deny"]


def test_profile_becomes_one_configmap_per_directory() -> None:
    files = {"CLAUDE.md": "top", "rules/a.md": "a", "rules/b.md": "b", "agents/x/y.md": "y"}
    objects = setup.render(setup.ClusterSetup(), profile=files)
    profile = {o["metadata"]["name"]: o["data"] for o in objects if o["metadata"]["name"].startswith("claude-profile")}
    assert profile == {
        "claude-profile": {"CLAUDE.md": "top"},
        "claude-profile-agents-x": {"y.md": "y"},
        "claude-profile-rules": {"a.md": "a", "b.md": "b"},
    }


@pytest.mark.parametrize(
    ("files", "fragment"),
    [({"rules/a b.md": ""}, "'a b.md' is not a valid ConfigMap key"), ({"../x/a.md": ""}, "segment '..'")],
)
def test_profile_refuses_a_file_a_configmap_cannot_hold(files: dict[str, str], fragment: str) -> None:
    with pytest.raises(errors.ConfigError, match=fragment):
        setup.profile_configmaps("ns", files)


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"namespace": "Agents"}, "namespace 'Agents' is not a DNS label"),
        ({"worker_namespace": "a_b"}, "worker namespace 'a_b'"),
        ({"auth_proxy_url": "ftp://proxy.ns"}, "must start with http:// or https://"),
        ({"auth_proxy_url": "http://proxy"}, r"names neither a Service \(http://<service>\.<namespace>"),
        ({"presets": ("locked", "locked")}, "managed settings preset 'locked' is given twice"),
        (
            {
                "egress_profiles": (
                    network.EgressProfile("g", ("a.com",)),
                    network.EgressProfile("g", ("b.com",)),
                )
            },
            "egress profile 'g' is given twice",
        ),
        ({"presets": ("strict",)}, r"unknown managed settings preset 'strict', known presets: \[locked, readonly\]"),
    ],
)
def test_bad_configuration_is_refused_with_the_fix(kwargs: dict[str, Any], fragment: str) -> None:
    with pytest.raises(errors.ConfigError, match=fragment):
        setup.ClusterSetup(**kwargs)


@pytest.mark.parametrize(
    ("name", "hosts", "fragment"),
    [
        ("bad name!", ("a.com",), "not a valid label value"),
        ("p", (), "names no host"),
        ("p", ("https://a.com",), "not a lower-case DNS name"),
    ],
)
def test_bad_egress_profile_is_refused(name: str, hosts: tuple[str, ...], fragment: str) -> None:
    with pytest.raises(errors.ConfigError, match=fragment):
        network.EgressProfile(name, hosts)


# --- the Cilium structural check catches what it promises to ----------------------------

GOOD = next(
    o
    for o in setup.render(setup.ClusterSetup(cilium=True))
    if o["metadata"]["name"] == "claude-runner-egress-anthropic"
)


def _broken(path: list[Any], value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(GOOD)
    target = doc
    for key in path[:-1]:
        target = target[key]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return doc


def test_the_cilium_fixture_is_a_sound_fqdn_policy() -> None:
    assert GOOD["kind"] == "CiliumNetworkPolicy"
    assert "toFQDNs" in GOOD["spec"]["egress"][1]
    assert cilium.check_cilium_network_policy(GOOD) == []


@pytest.mark.parametrize(
    ("path", "value", "fragment"),
    [
        (["apiVersion"], "cilium.io/v1", "not a cilium.io/v2"),
        (["metadata", "namespace"], KeyError, "metadata.namespace is missing"),
        (["spec", "endpointSelector"], KeyError, "exactly one of endpointSelector"),
        (["spec", "egres"], [], "unknown key 'egres'"),
        (["spec", "egress", 1, "toPorts", 0, "ports", 0, "port"], 443, 'quoted port number, like "443"'),
        (["spec", "egress", 1, "toPorts", 0, "ports", 0, "protocol"], "HTTP", "is not one of"),
        (["spec", "egress", 1, "toFQDNs", 0], {"matchName": "a.com", "matchPattern": "*"}, "exactly one of matchName"),
        (["spec", "egress", 1, "toEndpoints"], [{"matchLabels": {}}], "mixes toEndpoints, toFQDNs"),
        (["spec", "egress", 0], {"toEntities": ["world"]}, "without a DNS rule on port 53"),
        (["spec", "endpointSelector", "matchLabels", "x"], 1, "must map strings to strings"),
    ],
)
def test_cilium_check_catches_each_broken_rule(path: list[Any], value: Any, fragment: str) -> None:
    problems = cilium.check_cilium_network_policy(_broken(path, value))
    assert any(fragment in p for p in problems), problems
