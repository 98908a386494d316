"""The NetworkPolicy that lets the worker and the sandbox router reach a session pod's runtime (pure).

Rule table (in the agent namespace, on top of ``default-deny-all``; a plain NetworkPolicy,
which Cilium enforces too, so one policy serves every variant):

========================  ==================================================================
policy                    opens
ironflow-session-egress   with an auth proxy in the cluster: session pods reach kube-dns and
                          the proxy's pods only: its egress listener (3128), where a session's
                          egress policy is decided (docs/egress.md), and 8080, the git relay a
                          workspace is cloned through; nothing else leaves them
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
from ironflow.cluster import documents, network, proxy_rules

__all__ = ["EGRESS_NAME", "NAME", "ROUTER_NAME", "ROUTER_NAMESPACE", "RUNTIME_PORT", "policies"]

NAME: Final = "ironflow-session-runtime"
EGRESS_NAME: Final = "ironflow-session-egress"
#: The session runtime's port (``ironflow.k8s.sessions.runtime_pod.PORT``: a layer above; a test keeps them equal).
RUNTIME_PORT: Final = 8888
ROUTER_NAME: Final = "sandbox-router"
ROUTER_NAMESPACE: Final = "agent-sandbox-system"


def _peer(namespace: str, name: str) -> dict[str, Any]:
    return {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        "podSelector": {"matchLabels": {labels.LABEL_NAME: name}},
    }


def _session_policy(name: str, namespace: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"podSelector": {"matchLabels": {labels.LABEL_COMPONENT: labels.COMPONENT_SANDBOX_SESSION}}, **spec},
    }


def policies(namespace: str, *, worker_namespace: str, proxy_namespace: str | None = None) -> list[documents.Document]:
    """The policies of the rule table, for the agent namespace ``namespace`` (the egress one with
    the auth proxy's namespace).

    >>> [d.body["metadata"]["name"] for d in policies("agents", worker_namespace="ironflow")]
    ['ironflow-session-runtime']
    """
    ingress = {
        "from": [_peer(worker_namespace, network.WORKER_POD_NAME), _peer(ROUTER_NAMESPACE, ROUTER_NAME)],
        "ports": [{"port": RUNTIME_PORT, "protocol": "TCP"}],
    }
    body = _session_policy(NAME, namespace, {"policyTypes": ["Ingress"], "ingress": [ingress]})
    comment = (
        "Sandbox session pods run the session runtime on 8888: only the worker and the\n"
        f"sandbox router ({labels.LABEL_NAME}={ROUTER_NAME} in {ROUTER_NAMESPACE}) reach it,\n"
        "each request still with the session's token (delivered by exec, never in a manifest)."
    )
    found = [documents.Document(body, comment)]
    if proxy_namespace is not None:
        rules = proxy_rules.session_egress_rules(proxy_namespace)
        egress = _session_policy(EGRESS_NAME, namespace, {"policyTypes": ["Egress"], "egress": rules})
        said = (
            "Sandbox session pods reach kube-dns and the auth proxy's egress listener (3128) only:\n"
            "a session opened with an egress policy (--allow-host...) gets HTTPS_PROXY with a token\n"
            "of its own, and the proxy decides what passes; a session without one reaches nothing."
        )
        found.append(documents.Document(egress, said))
    return found
