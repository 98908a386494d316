"""``ironflow manifests --sandbox-router``: where the SDK looks for its router, and the least it may do."""

from __future__ import annotations

import json
from typing import Any

from ironflow.cluster import sandbox_router, setup


def _objects() -> dict[tuple[str, str], Any]:
    config = setup.ClusterSetup(sandbox_router=sandbox_router.SandboxRouterDeployment())
    return {(str(d.body["kind"]), str(d.body["metadata"]["name"])): d.body for d in setup.render_documents(config)}


def test_the_service_is_where_the_sdk_looks_and_selects_the_routers_pods() -> None:
    found = _objects()
    service = found[("Service", "sandbox-router-svc")]
    deployment = found[("Deployment", "sandbox-router")]
    assert service["metadata"]["namespace"] == "agent-sandbox-system"
    assert service["spec"]["ports"] == [{"name": "http", "port": 8080, "targetPort": "http"}]
    template_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= template_labels.items()
    # The controller's default policy admits app=sandbox-router; ironflow's session policy the name label.
    assert template_labels["app"] == "sandbox-router"
    assert template_labels["app.kubernetes.io/name"] == "sandbox-router"


def test_the_router_may_read_sandboxes_and_pods_and_exec_in_the_agent_namespace_only() -> None:
    found = _objects()
    role = found[("Role", "ironflow-sandbox-router")]
    assert role["metadata"]["namespace"] == setup.ClusterSetup().namespace
    rules = {(r["resources"][0], tuple(r["verbs"])) for r in role["rules"]}
    assert rules == {("sandboxes", ("get",)), ("pods", ("get",)), ("pods/exec", ("create", "get"))}
    assert not [k for k in found if k[0] in {"ClusterRole", "ClusterRoleBinding"} and "router" in k[1]]


def test_the_router_pod_is_hardened_and_its_token_is_a_secret_reference() -> None:
    deployment = _objects()[("Deployment", "sandbox-router")]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert pod["securityContext"]["runAsNonRoot"] is True
    (env,) = container["env"]
    assert env == {
        "name": "IRONFLOW_SANDBOX_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "ironflow-sandbox-router", "key": "token", "optional": True}},
    }
    assert container["args"][:2] == ["sandbox", "router"]
    assert '"value"' not in json.dumps(container["env"])  # never a literal value
