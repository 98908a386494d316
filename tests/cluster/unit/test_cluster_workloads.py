"""The proxy's and the worker's Deployments: valid for the supported Kubernetes versions, hardened
like agent pods, secrets only by reference, the proxy's port from one source, and a provider file
the worker's own reader accepts with the names the policies select on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

import ironflow
from ironflow import errors, labels
from ironflow.auth_proxy import config as proxy_config
from ironflow.cluster import network, proxy_address, setup, workloads
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.kube import clusters, owners
from ironflow.testing.k8s_validate import validate_manifests

ROOT = Path(__file__).resolve().parents[3]
URL = "http://ironflow-auth-proxy.ironflow-system"
FULL = setup.ClusterSetup(
    auth_proxy_url=URL,
    auth_proxy_deployment=workloads.AuthProxyDeployment(),
    worker_deployment=workloads.WorkerDeployment(),
    agent_sandbox_rbac=True,
    gvisor=True,
)


def _by_kind(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind]


def _deployment(objs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(o for o in _by_kind(objs, "Deployment") if o["metadata"]["name"] == name)


def test_every_object_validates_strictly_for_the_supported_versions() -> None:
    validate_manifests(setup.render(FULL))
    validate_manifests(setup.render(setup.ClusterSetup(worker_deployment=workloads.WorkerDeployment())))


def test_deployments_are_opt_in() -> None:
    kinds = {o["kind"] for o in setup.render(setup.ClusterSetup(auth_proxy_url=URL))}
    assert not kinds & {"Deployment", "Service", "PodDisruptionBudget"}


@pytest.mark.parametrize("name", [network.AUTH_PROXY_NAME, network.WORKER_POD_NAME])
def test_pods_are_hardened_with_resources_and_no_service_links(name: str) -> None:
    pod = _deployment(setup.render(FULL), name)["spec"]["template"]["spec"]
    assert pod["enableServiceLinks"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for container in pod["containers"]:
        ctx = container["securityContext"]
        assert ctx["allowPrivilegeEscalation"] is False
        assert ctx["readOnlyRootFilesystem"] is True
        assert ctx["capabilities"] == {"drop": ["ALL"]}
        assert set(container["resources"]) == {"requests", "limits"}
        assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
        assert container["livenessProbe"]["httpGet"]["port"] == container["ports"][0]["name"]


def test_only_the_worker_gets_an_api_token() -> None:
    objs = setup.render(FULL)
    proxy = _deployment(objs, network.AUTH_PROXY_NAME)["spec"]["template"]["spec"]
    assert proxy["automountServiceAccountToken"] is False
    worker = _deployment(objs, network.WORKER_POD_NAME)["spec"]["template"]["spec"]
    assert worker["automountServiceAccountToken"] is True
    assert worker["serviceAccountName"] == setup.WORKER_SERVICE_ACCOUNT


def test_secrets_reach_containers_only_by_reference() -> None:
    for deployment in _by_kind(setup.render(FULL), "Deployment"):
        for container in deployment["spec"]["template"]["spec"]["containers"]:
            assert "envFrom" not in container
            for env in container["env"]:
                if "value" in env:
                    assert env["name"] in {proxy_config.LISTEN_ENV, proxy_config.EGRESS_LISTEN_ENV}
                else:  # a Secret's key, or the pod's own metadata (never a secret)
                    assert set(env["valueFrom"]) in ({"secretKeyRef"}, {"fieldRef"})
                    if "fieldRef" in env["valueFrom"]:
                        assert env["valueFrom"]["fieldRef"]["fieldPath"].startswith("metadata.")


def test_the_worker_learns_its_own_pod_from_the_downward_api() -> None:
    """What kube.owners reads, under its names: the worker binds what it creates to its pod."""
    container = _deployment(setup.render(FULL), network.WORKER_POD_NAME)["spec"]["template"]["spec"]["containers"][0]
    fields = {
        e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"]
        for e in container["env"]
        if "fieldRef" in e.get("valueFrom", {})
    }
    assert fields == {
        owners.ENV_NAME: "metadata.name",
        owners.ENV_UID: "metadata.uid",
        owners.ENV_NAMESPACE: "metadata.namespace",
    }


def test_the_proxy_port_has_one_source() -> None:
    """The address the proxy listens on is the pod port the Service targets and the policies open."""
    objs = setup.render(FULL)
    container = _deployment(objs, network.AUTH_PROXY_NAME)["spec"]["template"]["spec"]["containers"][0]
    listen = next(e["value"] for e in container["env"] if e["name"] == proxy_config.LISTEN_ENV)
    _, listen_port = proxy_config.parse_listen(listen)
    assert listen_port == container["ports"][0]["containerPort"] == network.AUTH_PROXY_PORT
    assert proxy_config.AuthProxyConfig.port == network.AUTH_PROXY_PORT  # the proxy's own default agrees
    opened = {
        p["port"]
        for np in _by_kind(objs, "NetworkPolicy")
        if np["metadata"]["name"] in {network.AUTH_PROXY_NAME, "claude-runner-egress-auth-proxy"}
        for rule in np["spec"].get("egress", []) + np["spec"].get("ingress", [])
        for p in rule.get("ports", [])
        if p["port"] not in {53, 443}
    }
    assert opened == {listen_port, network.EGRESS_PORT}


def test_the_egress_port_has_one_source_and_only_agents_and_sessions_reach_it() -> None:
    """The egress listener is the pod's ``egress`` port, the Service's ``egress`` port, and a port
    the policies open to agent pods and session pods only (the worker's rule opens the relay's
    port alone; session pods the egress port and the relay's, which their git workspace's clone
    goes through)."""
    objs = setup.render(FULL)
    container = _deployment(objs, network.AUTH_PROXY_NAME)["spec"]["template"]["spec"]["containers"][0]
    listen = next(e["value"] for e in container["env"] if e["name"] == proxy_config.EGRESS_LISTEN_ENV)
    assert proxy_config.parse_listen(listen)[1] == network.EGRESS_PORT
    assert {"name": "egress", "containerPort": network.EGRESS_PORT, "protocol": "TCP"} in container["ports"]
    (service,) = _by_kind(objs, "Service")
    egress_port = {"name": "egress", "port": network.EGRESS_PORT, "targetPort": "egress", "protocol": "TCP"}
    assert egress_port in service["spec"]["ports"]
    policies = _by_kind(objs, "NetworkPolicy")
    (proxy_policy,) = [np for np in policies if np["metadata"]["name"] == network.AUTH_PROXY_NAME]
    reaching: dict[str, set[int]] = {}
    for rule in proxy_policy["spec"]["ingress"]:
        for peer in rule["from"]:
            component = peer["podSelector"]["matchLabels"].get(labels.LABEL_COMPONENT, "worker")
            reaching.setdefault(component, set()).update(p["port"] for p in rule["ports"])
    assert reaching == {
        labels.COMPONENT_CLAUDE_RUNNER: {network.AUTH_PROXY_PORT, network.EGRESS_PORT},
        labels.COMPONENT_SANDBOX_SESSION: {network.AUTH_PROXY_PORT, network.EGRESS_PORT},
        "worker": {network.AUTH_PROXY_PORT},
    }


def test_the_service_takes_its_name_namespace_and_port_from_the_url() -> None:
    config = setup.ClusterSetup(
        auth_proxy_url="http://relay.auth.svc.cluster.local:8443", auth_proxy_deployment=workloads.AuthProxyDeployment()
    )
    (service,) = _by_kind(setup.render(config), "Service")
    assert service["metadata"] == {**service["metadata"], "name": "relay", "namespace": "auth"}
    assert service["spec"]["ports"][0]["port"] == 8443
    assert service["spec"]["ports"][0]["targetPort"] == "http"
    assert {"auth"} <= {o["metadata"]["name"] for o in _by_kind(setup.render(config), "Namespace")}


def test_the_worker_provider_file_is_read_by_the_worker_reader_with_the_same_names() -> None:
    objs = setup.render(FULL)
    (config_map,) = [o for o in _by_kind(objs, "ConfigMap") if o["metadata"]["name"] == workloads.PROVIDER_CONFIGMAP]
    data = yaml.safe_load(config_map["data"]["provider.yaml"])
    settings = K8sEphemeralProvider.from_dict(data).settings
    assert settings.namespace == setup.AGENTS_NAMESPACE
    assert settings.image == workloads.DEFAULT_RUNNER_IMAGE
    assert settings.auth_proxy_url == "http://ironflow-auth-proxy.ironflow-system:80"
    assert settings.runtime_class == setup.GVISOR_RUNTIME_CLASS
    assert isinstance(settings.cluster, clusters.InCluster)
    presets = {o["metadata"]["name"] for o in _by_kind(objs, "ConfigMap")}
    assert set(data["managed_settings_presets"].values()) <= presets


def test_without_the_proxy_the_worker_reads_a_token_secret_and_no_admin_key() -> None:
    objs = setup.render(setup.ClusterSetup(worker_deployment=workloads.WorkerDeployment()))
    container = _deployment(objs, network.WORKER_POD_NAME)["spec"]["template"]["spec"]["containers"][0]
    assert proxy_config.ADMIN_KEY_ENV not in {e["name"] for e in container["env"]}
    config_map = next(o for o in objs if o["metadata"]["name"] == workloads.PROVIDER_CONFIGMAP)
    assert "oauth_token_secret" in yaml.safe_load(config_map["data"]["provider.yaml"])


def test_the_default_proxy_and_worker_images_carry_the_package_version() -> None:
    assert f"ironflow-auth-proxy:{ironflow.__version__}" == workloads.DEFAULT_AUTH_PROXY_IMAGE
    assert f"ironflow-worker:{ironflow.__version__}" == workloads.DEFAULT_WORKER_IMAGE


def test_the_default_runner_image_is_the_runner_image_tag() -> None:
    tag = (ROOT / "docker" / "claude-runner" / "IMAGE_TAG").read_text().strip()
    assert f"ironflow-claude-runner:{tag}" == workloads.DEFAULT_RUNNER_IMAGE


def test_the_agent_sandbox_role_grants_its_table_to_the_worker() -> None:
    objs = setup.render(FULL)
    role = next(o for o in _by_kind(objs, "Role") if o["metadata"]["name"].endswith("-agent-sandbox"))
    assert role["rules"] == [p.rule() for p in setup.AGENT_SANDBOX_PERMISSIONS]
    binding = next(o for o in _by_kind(objs, "RoleBinding") if o["roleRef"]["name"] == role["metadata"]["name"])
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": setup.WORKER_SERVICE_ACCOUNT, "namespace": setup.WORKER_NAMESPACE}
    ]
    assert not any(o["metadata"]["name"].endswith("-agent-sandbox") for o in setup.render(setup.ClusterSetup()))


def test_resources_can_be_set_key_by_key() -> None:
    changed = workloads.WORKER_RESOURCES.with_values({"limits.memory": "2Gi", "requests.cpu": "50m"})
    assert changed.render() == {"requests": {"cpu": "50m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "2Gi"}}
    with pytest.raises(errors.ConfigError, match=r"unknown resource 'limits\.gpu'"):
        workloads.WORKER_RESOURCES.with_values({"limits.gpu": "1"})


def test_a_proxy_deployment_without_its_url_is_refused() -> None:
    with pytest.raises(errors.ConfigError, match="needs its URL"):
        setup.ClusterSetup(auth_proxy_deployment=workloads.AuthProxyDeployment())


@pytest.mark.parametrize("image", ["ironflow-worker:latest", "ironflow worker:1", ""])
def test_an_unpinned_image_is_refused(image: str) -> None:
    with pytest.raises(errors.ConfigError, match="must be a pinned reference"):
        workloads.WorkerDeployment(image=image)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://10.0.0.5:8080", "is an IP address: the proxy's Deployment and Service need"),
        ("http://[fd00::1]:8080", "is an IP address"),
        ("https://proxy.example.com", "is a host outside the cluster"),
        ("http://proxy", "names neither a Service"),
        ("http://1.2.3", "names neither a Service"),
        ("http://proxy.ns:99999", "invalid port"),
        ("http://proxy.ns:0", "invalid port"),
        ("http://proxy.ns/v1", "must be scheme://host"),
        ("ftp://proxy.ns", "must start with http"),
    ],
)
def test_a_proxy_url_that_names_no_service_is_refused_for_the_deployment(url: str, message: str) -> None:
    with pytest.raises(errors.ConfigError, match=message):
        proxy_address.parse_proxy_url(url)


@pytest.mark.parametrize(
    ("url", "host", "port", "cidr"),
    [
        ("http://10.0.0.5:8080", "10.0.0.5", 8080, "10.0.0.5/32"),
        ("https://[fd00::1]", "fd00::1", 443, "fd00::1/128"),
        ("http://203.0.113.7", "203.0.113.7", 80, "203.0.113.7/32"),
        ("https://proxy.example.com:9443", "proxy.example.com", 9443, None),
    ],
)
def test_an_ip_or_an_outside_host_is_an_external_proxy(url: str, host: str, port: int, cidr: str | None) -> None:
    parsed = proxy_address.parse_proxy_address(url)
    assert parsed == proxy_address.ExternalProxy(scheme=url.partition(":")[0], host=host, port=port)
    assert parsed.cidr == cidr
    assert (parsed.plain_policy_problem() is None) == (cidr is not None)


@pytest.mark.parametrize(
    ("url", "service", "namespace", "port"),
    [
        ("http://ironflow-auth-proxy.ironflow-system", "ironflow-auth-proxy", "ironflow-system", 80),
        ("https://relay.auth.svc", "relay", "auth", 443),
        ("http://relay.auth.svc.cluster.local:8080/", "relay", "auth", 8080),
    ],
)
def test_a_service_url_gives_its_name_namespace_and_port(url: str, service: str, namespace: str, port: int) -> None:
    parsed = proxy_address.parse_proxy_url(url)
    assert (parsed.service, parsed.namespace, parsed.port) == (service, namespace, port)
