"""The NetworkPolicies that let agent pods reach a run's service pods (``PodUp``), and nothing else (pure).

Rule table (in the agent namespace, on top of ``default-deny-all``; plain NetworkPolicies, which
Cilium enforces too, so one set serves every variant):

=================================  =========================================================
policy                             opens
=================================  =========================================================
ironflow-service-pods              service pods (component=pod-up) accept agent pods
                                   (component=claude-runner) of their namespace on the
                                   named ports svc-0..svc-7 only
claude-runner-egress-service-pods  agent pods reach service pods of their namespace on the
                                   same named ports
=================================  =========================================================

A named port is each destination pod's own: only the ports a ``PodUp`` declared (named
``svc-<i>`` in its container) open; any other port of the service pod stays closed, as it stays
to every other pod (a ``PodRun``, a pod of another namespace, the worker). A service pod gets
no egress. The worker cannot create NetworkPolicies (``ironflow check`` proves it), so these
rules are static: they cannot compare one pod's run label with another's, and an agent pod of
another run in the same namespace reaches a service pod too. A run that needs its service
apart from other runs gives it a credential of its own (a password the agent is told).
"""

from __future__ import annotations

from typing import Any, Final

from ironflow import labels
from ironflow.cluster import documents

__all__ = ["AGENT_EGRESS_NAME", "INGRESS_NAME", "policies"]

INGRESS_NAME: Final = "ironflow-service-pods"
AGENT_EGRESS_NAME: Final = "claude-runner-egress-service-pods"
_AGENTS: Final = {labels.LABEL_COMPONENT: labels.COMPONENT_CLAUDE_RUNNER}
_SERVICES: Final = {labels.LABEL_COMPONENT: labels.COMPONENT_POD_UP}


def _policy(name: str, namespace: str, selected: dict[str, str], spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"podSelector": {"matchLabels": dict(selected)}, **spec},
    }


def _pods(selected: dict[str, str]) -> dict[str, Any]:
    """Pods of the policy's own namespace (no namespaceSelector) with these labels."""
    return {"podSelector": {"matchLabels": dict(selected)}}


def _ports() -> list[dict[str, Any]]:
    return [{"port": name, "protocol": "TCP"} for name in labels.SERVICE_PORT_NAMES]


def policies(namespace: str) -> list[documents.Document]:
    """The two policies of the rule table, for the agent namespace ``namespace``.

    >>> [d.body["metadata"]["name"] for d in policies("agents")]
    ['ironflow-service-pods', 'claude-runner-egress-service-pods']
    """
    ingress = _policy(
        INGRESS_NAME,
        namespace,
        _SERVICES,
        {
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": {"matchLabels": dict(_AGENTS)}}], "ports": _ports()}],
        },
    )
    egress = _policy(
        AGENT_EGRESS_NAME,
        namespace,
        _AGENTS,
        {
            "policyTypes": ["Egress"],
            "egress": [{"to": [{"podSelector": {"matchLabels": dict(_SERVICES)}}], "ports": _ports()}],
        },
    )
    names = ", ".join(labels.SERVICE_PORT_NAMES[:2]) + "..."
    return [
        documents.Document(
            ingress,
            "Service pods of a run (PodUp: a database for the agent's tests) accept agent pods\n"
            f"of this namespace on their declared ports only (named {names}), nobody else.\n"
            "Static, as the worker may not write policies: agents of every run in this\n"
            "namespace are let in; give a run's service a credential of its own.",
        ),
        documents.Document(
            egress,
            "Agent pods reach the service pods of this namespace on their declared ports.",
        ),
    ]
