"""The in-cluster Sandbox Router's objects: what ``ironflow manifests --sandbox-router`` adds (pure).

agent-sandbox's SDK finds its router as ``Service sandbox-router-svc`` (port 8080) in
``agent-sandbox-system``, and the controller's default NetworkPolicy admits pods labelled
``app: sandbox-router`` there; ironflow's session-runtime policy admits
``app.kubernetes.io/name: sandbox-router``. The router's pod carries both. It runs
``ironflow sandbox router`` from the worker image (:mod:`ironflow.sandbox_router.cluster_app`).

=====================================  =====================================================
object                                 what it holds
=====================================  =====================================================
ServiceAccount (agent-sandbox-system)  the router's identity; its token is automounted (it
                                       reads the API)
Role + RoleBinding (agent namespace)   sandboxes get, pods get, pods/exec create and get (the
                                       token delivery): nothing else, nowhere else
Deployment (agent-sandbox-system)      hardened (restricted), probes on ``/healthz``; the
                                       callers' token from Secret ``ironflow-sandbox-router``
                                       key ``token`` by secretKeyRef (optional: without it
                                       only ``kubectl port-forward`` callers get in)
Service ``sandbox-router-svc``         port 8080 to the router's pods
=====================================  =====================================================
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from ironflow import labels
from ironflow.cluster import documents, session_network, workloads

__all__ = ["PORT", "SECRET", "SERVICE", "SandboxRouterDeployment", "objects"]

SERVICE: Final = "sandbox-router-svc"
PORT: Final = 8080
#: The Secret whose ``token`` key callers from the network present (created by the admin).
SECRET: Final = "ironflow-sandbox-router"  # noqa: S105 - a Secret's name
_ACCOUNT: Final = "ironflow-sandbox-router"
_TOKEN_REF: Final = {"name": SECRET, "key": "token", "optional": True}
_RULES: Final = (
    ("agents.x-k8s.io", "sandboxes", ("get",)),
    ("", "pods", ("get",)),
    ("", "pods/exec", ("create", "get")),  # get: the websocket upgrade of an exec
)


@dataclass(frozen=True)
class SandboxRouterDeployment:
    """The router's Deployment: its image (ironflow's worker image) and replicas."""

    image: str = workloads.DEFAULT_WORKER_IMAGE
    replicas: int = 1
    resources: workloads.Resources = field(default=workloads.Resources("50m", "128Mi", "1", "256Mi"))


def _meta(name: str, namespace: str) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "labels": {labels.LABEL_MANAGED_BY: labels.MANAGED_BY_VALUE}}


def _rbac(agents_namespace: str) -> list[documents.Document]:
    ns = session_network.ROUTER_NAMESPACE
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": _meta(_ACCOUNT, agents_namespace),
        "rules": [{"apiGroups": [g], "resources": [r], "verbs": list(v)} for g, r, v in _RULES],
    }
    bound = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _meta(_ACCOUNT, agents_namespace),
        "subjects": [{"kind": "ServiceAccount", "name": _ACCOUNT, "namespace": ns}],
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": _ACCOUNT},
    }
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(_ACCOUNT, ns)}
    table = "\n".join(f"  {r}: {', '.join(v)}" for _, r, v in _RULES)
    return [
        documents.Document(account, "The sandbox router's identity (ironflow sandbox router)."),
        documents.Document(
            role,
            f"What the router does in {agents_namespace}: finds a sandbox's pod, and delivers its own\n"
            f"token to the pod's runtime by exec (never an API object):\n{table}",
        ),
        documents.Document(bound),
    ]


def objects(spec: SandboxRouterDeployment, *, agents_namespace: str) -> list[documents.Document]:
    """The router's account, its Role in ``agents_namespace``, its Deployment and ``sandbox-router-svc``."""
    ns, name = session_network.ROUTER_NAMESPACE, session_network.ROUTER_NAME
    container = {
        "name": "router",
        "image": spec.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["ironflow"],
        "args": ["sandbox", "router", "--port", str(PORT), "--namespace", agents_namespace],
        "ports": [{"name": "http", "containerPort": PORT, "protocol": "TCP"}],
        "env": [workloads.secret_env("IRONFLOW_SANDBOX_TOKEN", SECRET, "token", optional=True)],
        "readinessProbe": workloads.health_probe("http", delay=0),
        "livenessProbe": workloads.health_probe("http", delay=10),
        "resources": spec.resources.render(),
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
    }
    # It reads sandboxes and pods through the API server: its account's token is mounted.
    volumes = [{"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}]
    pod = workloads.pod_spec(container, automount=True, serviceAccountName=_ACCOUNT, volumes=volumes)
    deployment = workloads.deployment_object(name, ns, spec.replicas, pod)
    # The controller's default NetworkPolicy admits ``app: sandbox-router``: the pods carry it too.
    pod_labels = {**deployment["spec"]["template"]["metadata"]["labels"], "app": name}
    deployment["metadata"]["labels"] = pod_labels
    deployment["spec"]["template"]["metadata"]["labels"] = dict(pod_labels)
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {**_meta(SERVICE, ns), "labels": dict(pod_labels)},
        "spec": {
            "selector": {labels.LABEL_NAME: name},
            "ports": [{"name": "http", "port": PORT, "targetPort": "http"}],
        },
    }
    comment = (
        f"The Sandbox Router agent-sandbox's SDK calls (direct, tunnel modes), for sandboxes of\n"
        f"{agents_namespace}. Callers from the network present the token of Secret {SECRET}\n"
        "(key token; the SDK's extra_headers Authorization: Bearer …); kubectl port-forward callers\n"
        "are admitted on the pod's loopback. Without the Secret only they get in."
    )
    return [
        *_rbac(agents_namespace),
        documents.Document(deployment, comment),
        documents.Document(service, f"{SERVICE}: where the SDK looks for its router (port {PORT})."),
    ]
