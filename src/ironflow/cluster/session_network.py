"""The NetworkPolicy that lets the worker and the sandbox router reach a session pod's runtime (pure).

Rule table (in the agent namespace, on top of ``default-deny-all``; a plain NetworkPolicy,
which Cilium enforces too, so one policy serves every variant):

========================  ==================================================================
policy                    opens
========================  ==================================================================
ironflow-session-runtime  session pods (component=sandbox-session) accept, on the runtime's
                          port 8888 only: the worker's pods (``app.kubernetes.io/name=
                          ironflow-worker`` in the worker namespace) and the sandbox router's
                          (``app.kubernetes.io/name=sandbox-router`` in ``agent-sandbox-system``)
========================  ==================================================================

Nothing else reaches a session's runtime: not an agent pod, not another session pod, not a pod
of another namespace. The runtime still wants its bearer token (delivered by ``pods/exec``,
:mod:`ironflow.k8s.sessions.runtime_pod`); the policy is the second lock, not the only one. The
router is named by ``app.kubernetes.io/name``, the label ironflow's own router Deployment
carries (upstream's router has ``app: sandbox-router``: label it so, or add a peer here).
"""

from __future__ import annotations

from typing import Any, Final

from ironflow import labels
from ironflow.cluster import documents, network

__all__ = ["NAME", "ROUTER_NAME", "ROUTER_NAMESPACE", "RUNTIME_PORT", "policies"]

NAME: Final = "ironflow-session-runtime"
#: The session runtime's port (``ironflow.k8s.sessions.runtime_pod.PORT``: a layer above; a test keeps them equal).
RUNTIME_PORT: Final = 8888
ROUTER_NAME: Final = "sandbox-router"
ROUTER_NAMESPACE: Final = "agent-sandbox-system"


def _peer(namespace: str, name: str) -> dict[str, Any]:
    return {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        "podSelector": {"matchLabels": {labels.LABEL_NAME: name}},
    }


def policies(namespace: str, *, worker_namespace: str) -> list[documents.Document]:
    """The policy of the rule table, for the agent namespace ``namespace``.

    >>> [d.body["metadata"]["name"] for d in policies("agents", worker_namespace="ironflow")]
    ['ironflow-session-runtime']
    """
    body = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": NAME, "namespace": namespace},
        "spec": {
            "podSelector": {"matchLabels": {labels.LABEL_COMPONENT: labels.COMPONENT_SANDBOX_SESSION}},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [_peer(worker_namespace, network.WORKER_POD_NAME), _peer(ROUTER_NAMESPACE, ROUTER_NAME)],
                    "ports": [{"port": RUNTIME_PORT, "protocol": "TCP"}],
                }
            ],
        },
    }
    comment = (
        "Sandbox session pods run the session runtime on 8888: only the worker and the\n"
        f"sandbox router ({labels.LABEL_NAME}={ROUTER_NAME} in {ROUTER_NAMESPACE}) reach it,\n"
        "each request still with the session's token (delivered by exec, never in a manifest)."
    )
    return [documents.Document(body, comment)]
