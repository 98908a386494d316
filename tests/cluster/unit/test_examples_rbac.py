"""The worker's Role grants exactly what the runtime uses: nothing on NetworkPolicies, nothing on
Secrets, no attach or port-forward, no wildcard; exec (``PodRun.stdin``) into the agent namespace's
pods only, by its one Role. The check account may exec too, and only into pods."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ironflow.cluster import setup

ROOT = Path(__file__).resolve().parents[3] / "examples" / "k8s" / "sandbox"

#: What the runtime does in the agent namespace, by the reference (ironflow-behaviour.md):
#: §1.4/§1.9 create, watch, get and delete the agent pod and read its log; §1.8 create and
#: delete the prompt ConfigMap; §3 release_run and the previous-attempt cleanup list and
#: delete pods, Jobs and ConfigMaps and watch pods until gone; §4 the reaper lists and
#: deletes pods, Jobs and ConfigMaps; §5 PodRun creates, gets and deletes a pod and reads
#: its log, JobRun creates, gets and deletes a Job and lists its pods; PodRun's stdin goes over
#: pods/exec into the pod's FIFO (create, and get for a websocket upgrade). A step whose pod cannot
#: start lists the pod's events for its error.
RUNTIME_NEEDS = {
    ("", "pods", "create"),
    ("", "pods", "get"),
    ("", "pods", "list"),
    ("", "pods", "watch"),
    ("", "pods", "delete"),
    ("", "pods/log", "get"),
    ("", "pods/exec", "create"),
    ("", "pods/exec", "get"),
    ("", "events", "list"),
    ("", "configmaps", "create"),
    ("", "configmaps", "get"),
    ("", "configmaps", "list"),
    ("", "configmaps", "delete"),
    ("batch", "jobs", "create"),
    ("batch", "jobs", "get"),
    ("batch", "jobs", "list"),
    ("batch", "jobs", "watch"),
    ("batch", "jobs", "delete"),
}


def _grants(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def _objects(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((ROOT / name).read_text(encoding="utf-8")) if d]


def _worker_role() -> dict[str, Any]:
    roles = [d for d in _objects("namespace-rbac.yaml") if d["kind"] in {"Role", "ClusterRole"}]
    assert len(roles) == 1, "the worker gets one namespaced Role, no ClusterRole"
    assert roles[0]["kind"] == "Role"
    return roles[0]


def test_worker_role_grants_exactly_the_runtime_needs() -> None:
    assert _grants(_worker_role()) == RUNTIME_NEEDS


def test_worker_role_grants_nothing_on_networkpolicies_secrets_attach_or_port_forward() -> None:
    resources = {resource for _, resource, _ in _grants(_worker_role())}
    assert not {"networkpolicies", "secrets", "pods/attach", "pods/portforward", "pods/ephemeralcontainers"} & resources
    assert "*" not in resources
    assert all("*" not in (g, v) for g, _, v in _grants(_worker_role()))


def test_worker_exec_is_one_rule_in_the_agent_namespace_for_pod_run_stdin() -> None:
    role = _worker_role()
    assert role["metadata"]["namespace"] == "ironflow-agents"
    execs = [r for r in role["rules"] if "pods/exec" in r["resources"]]
    assert execs == [{"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create", "get"]}]
    assert any(p.resource == "pods/exec" and "PodRun" in p.why for p in setup.WORKER_PERMISSIONS)


def test_worker_role_is_bound_to_the_worker_service_account_only() -> None:
    bindings = [d for d in _objects("namespace-rbac.yaml") if d["kind"] == "RoleBinding"]
    assert [b["subjects"] for b in bindings] == [
        [{"kind": "ServiceAccount", "name": "ironflow-worker", "namespace": "ironflow"}]
    ]
    assert bindings[0]["metadata"]["namespace"] == "ironflow-agents"
    assert bindings[0]["roleRef"]["name"] == _worker_role()["metadata"]["name"]


def test_environment_claims_add_only_the_pvc_verbs() -> None:
    config = setup.ClusterSetup(environment_claims=True)
    role = next(o for o in setup.render(config) if o["kind"] == "Role")
    extra = _grants(role) - RUNTIME_NEEDS
    assert extra == {("", "persistentvolumeclaims", v) for v in ("create", "get", "list", "patch", "delete")}


def test_session_volumes_add_only_the_claim_and_volumesnapshot_verbs() -> None:
    config = setup.ClusterSetup(session_volumes=True)
    role = next(o for o in setup.render(config) if o["kind"] == "Role")
    extra = _grants(role) - RUNTIME_NEEDS
    assert extra == {("", "persistentvolumeclaims", v) for v in ("create", "get", "list", "patch", "delete")} | {
        ("snapshot.storage.k8s.io", "volumesnapshots", v) for v in ("create", "get", "delete")
    }


def test_only_the_check_account_may_exec_and_only_into_pods() -> None:
    objects = _objects("check-rbac.yaml")
    role = next(o for o in objects if o["kind"] == "Role")
    # the websocket exec `ironflow check` uses is a GET upgrade; SPDY clients POST (create)
    assert _grants(role) == {
        ("", "pods", "get"),
        ("", "pods", "list"),
        ("", "pods/exec", "create"),
        ("", "pods/exec", "get"),
    }
    cluster_role = next(o for o in objects if o["kind"] == "ClusterRole")
    assert _grants(cluster_role) == {("authorization.k8s.io", "subjectaccessreviews", "create")}
    subjects = [s["name"] for o in objects if o["kind"].endswith("Binding") for s in o["subjects"]]
    assert set(subjects) == {setup.CHECK_SERVICE_ACCOUNT}
