"""The in-cluster Sandbox Router on a test cluster, deployed as ``ironflow manifests --sandbox-router``
renders it (I/O): what the real-node tests and ``benchmarks/real_node.py`` put in front of their
sandboxes, so both meet the same router."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Final

from ironflow.cluster import sandbox_router, session_network
from ironflow.kube import api as k8s
from ironflow.kube import pod_status
from ironflow.testing.kubeenv import KubeEnv
from ironflow.testing.polling import eventually

__all__ = ["RESOURCES", "deployed"]

NAMESPACE: Final = session_network.ROUTER_NAMESPACE
#: Where each kind the router's manifests hold lives in the API.
RESOURCES: Final = {
    "ServiceAccount": k8s.Resource("", "v1", "serviceaccounts", "ServiceAccount"),
    "Role": k8s.Resource("rbac.authorization.k8s.io", "v1", "roles", "Role"),
    "RoleBinding": k8s.Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding"),
    "Deployment": k8s.Resource("apps", "v1", "deployments", "Deployment"),
    "Service": k8s.Resource("", "v1", "services", "Service"),
}


@contextlib.asynccontextmanager
async def deployed(
    env: KubeEnv, api: k8s.KubeApi, agents_namespace: str, image: str, token: str, *, settle_s: float = 180.0
) -> AsyncIterator[str]:
    """The router as rendered, for the sandboxes of ``agents_namespace``, with ``token`` in its
    Secret, Ready; yields its Service's address (``http://clusterIP:8080``) and removes it all after."""
    with contextlib.suppress(Exception):
        env.create_namespace(NAMESPACE)
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": sandbox_router.SECRET, "namespace": NAMESPACE},
        "stringData": {"token": token},
    }
    await api.create(k8s.SECRETS, NAMESPACE, secret)
    docs = sandbox_router.objects(
        sandbox_router.SandboxRouterDeployment(image=image), agents_namespace=agents_namespace
    )
    try:
        for doc in docs:
            await api.create(RESOURCES[doc.body["kind"]], doc.body["metadata"]["namespace"], doc.body)

        async def ready() -> bool:
            pods = (await api.list(k8s.PODS, NAMESPACE, label_selector="app=sandbox-router")).items
            return any(pod_status.pod_ready(p) for p in pods)

        await eventually(ready, limit_s=settle_s, interval_s=0.5, what="the sandbox router's pod Ready")
        service = await api.get(RESOURCES["Service"], NAMESPACE, sandbox_router.SERVICE)
        yield f"http://{service['spec']['clusterIP']}:{sandbox_router.PORT}"
    finally:
        for doc in reversed(docs):
            meta = doc.body["metadata"]
            with contextlib.suppress(Exception):
                await api.delete(RESOURCES[doc.body["kind"]], meta["namespace"], meta["name"])
        with contextlib.suppress(Exception):
            await api.delete(k8s.SECRETS, NAMESPACE, sandbox_router.SECRET)
