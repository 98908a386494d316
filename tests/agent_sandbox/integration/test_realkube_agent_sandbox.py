"""agent-sandbox on a real kube-apiserver: the v1.0.3 CRDs and the real controller
(``--extensions``). The seed's patterns, rendered around ironflow's hardened pod, are accepted
by the apiserver's own CRD validation and PodSecurity ``restricted``; the controller makes
an ephemeral Sandbox Ready and binds a SandboxClaim from a warm pool. Skipped when the
control-plane binaries are not built.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from ironflow.agent_sandbox import catalog, patterns
from ironflow.k8s import K8sResources
from ironflow.testing.kubeenv import NODE_NAME, KubeEnv
from ironflow.testing.polling import eventually_sync

RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}
#: kro's CRDs are not installed here; every other pattern is.
PATTERNS = [p for p in catalog.PATTERNS if not p.startswith("kro")]


@pytest.fixture
def ns(kube_env: KubeEnv) -> Iterator[str]:
    with kube_env.namespace(f"sbx-{uuid.uuid4().hex[:8]}", labels=RESTRICTED) as name:
        yield name


def _ready(obj: dict[str, Any]) -> bool:
    conds = obj.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def _wait_ready(env: KubeEnv, path: str, limit: float = 30.0) -> dict[str, Any]:
    obj: dict[str, Any] = {}

    def ready() -> bool:
        nonlocal obj
        obj = env.request("GET", path)
        return _ready(obj)

    eventually_sync(
        ready, limit_s=limit, interval_s=0.2, what=lambda: f"{path} to be Ready; status: {obj.get('status')}"
    )
    return obj


@pytest.mark.parametrize("pattern", PATTERNS)
def test_every_pattern_is_accepted_by_the_real_crds_and_pod_security(kube_env: KubeEnv, ns: str, pattern: str) -> None:
    """Server-side apply of each pattern's objects: schema, CEL rules and admission all pass."""
    egress = (("10.20.0.0/16", 443),) if pattern == "network-custom-egress" else ()
    options = patterns.PatternOptions(namespace=ns, name=f"p-{pattern}"[:40], egress=egress)
    docs = catalog.render_pattern(pattern, options)
    kube_env.apply_objects(docs, namespace=ns)


def test_the_controller_makes_an_ephemeral_sandbox_ready(kube_env: KubeEnv, ns: str) -> None:
    docs = catalog.render_pattern("ephemeral", patterns.PatternOptions(namespace=ns, name="eph"))
    kube_env.apply_objects(docs, namespace=ns)
    (sandbox,) = [d for d in docs if d["kind"] == "Sandbox"]
    _wait_ready(kube_env, f"/apis/agents.x-k8s.io/v1beta1/namespaces/{ns}/sandboxes/{sandbox['metadata']['name']}")
    pods = kube_env.request("GET", f"/api/v1/namespaces/{ns}/pods")["items"]
    assert [p["status"]["phase"] for p in pods] == ["Running"]


def test_a_claim_on_the_warm_pool_becomes_ready(kube_env: KubeEnv, ns: str) -> None:
    """SandboxTemplate + SandboxWarmPool (2 pods admitted under restricted) + SandboxClaim: Ready."""
    docs = catalog.render_pattern("warm-pool", patterns.PatternOptions(namespace=ns, name="pool"))
    kube_env.provide_volumes(8)  # the pool's volumeClaimTemplates: no provisioner runs here
    kube_env.apply_objects(docs, namespace=ns)
    (claim,) = [d for d in docs if d["kind"] == "SandboxClaim"]
    _wait_ready(
        kube_env, f"/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/{ns}/sandboxclaims/{claim['metadata']['name']}"
    )
    # The claim took a pool pod, so the pool is making its replacement: wait until the real
    # scheduler has placed every pod, the new one too, before reading where they run.
    pods: list[dict[str, Any]] = []

    def all_scheduled() -> bool:
        nonlocal pods
        pods = kube_env.request("GET", f"/api/v1/namespaces/{ns}/pods")["items"]
        return len(pods) >= 2 and all(p["spec"].get("nodeName") for p in pods)

    def placed() -> str:
        return f"every pool pod scheduled: { {p['metadata']['name']: p['spec'].get('nodeName') for p in pods} }"

    eventually_sync(all_scheduled, limit_s=30, interval_s=0.2, what=placed)
    assert all(p["spec"]["securityContext"].get("runAsNonRoot") for p in pods)
    # The controller's pods keep the template's limits and no service links, and the real
    # scheduler placed them on the node although they request ephemeral storage.
    assert all(p["spec"]["containers"][0]["resources"] == K8sResources().render() for p in pods)
    assert all(p["spec"]["enableServiceLinks"] is False for p in pods)
    assert {p["spec"].get("nodeName") for p in pods} == {NODE_NAME}
