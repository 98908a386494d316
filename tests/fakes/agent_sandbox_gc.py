"""Wait until the real garbage collector cascades through agent-sandbox objects (a test helper).

kube-controller-manager starts before the CRDs are installed, and its garbage collector picks
new resources up on its next discovery pass (every 30 s): until then a deleted claim leaves its
Sandbox and pod. A production cluster has its CRDs long before; here one SandboxTemplate owned
by a ConfigMap shows when the cascade works (at once, once it does).
"""

from __future__ import annotations

from ironflow.agent_sandbox import claims
from ironflow.testing.kubeenv import KubeEnv
from ironflow.testing.polling import eventually_sync

__all__ = ["wait_for_claim_cascade"]


def wait_for_claim_cascade(kube_env: KubeEnv, namespace: str) -> None:
    """Return once a SandboxTemplate whose owner is deleted goes with it, in ``namespace`` (90 s at most)."""
    owner = kube_env.request(
        "POST", f"/api/v1/namespaces/{namespace}/configmaps", {"metadata": {"name": "gc-probe-owner"}, "data": {}}
    )
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "gc-probe-owner", "uid": owner["metadata"]["uid"]}
    res = claims.resources().templates
    template = {
        "apiVersion": f"{res.group}/{res.version}",
        "kind": "SandboxTemplate",
        "metadata": {"name": "gc-probe", "ownerReferences": [ref]},
        "spec": {"podTemplate": {"spec": {"containers": [{"name": "c", "image": "img"}]}}},
    }
    path = f"/apis/{res.group}/{res.version}/namespaces/{namespace}/{res.plural}"
    kube_env.request("POST", path, template)
    kube_env.request("DELETE", f"/api/v1/namespaces/{namespace}/configmaps/gc-probe-owner")
    eventually_sync(
        lambda: not [t for t in kube_env.request("GET", path)["items"] if t["metadata"]["name"] == "gc-probe"],
        limit_s=90,
        interval_s=0.5,
        what="the garbage collector to pick up the agent-sandbox CRDs",
    )
