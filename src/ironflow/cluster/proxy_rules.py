"""The egress rules that confine a pod to the auth proxy, as plain NetworkPolicy rules (pure).

=====================  ============================================================
pods                   may reach
=====================  ============================================================
agents                 kube-dns; the proxy's pods on 8080 (the model relay) and 3128
                       (the egress listener), or a proxy outside the cluster at its
                       address on its URL's port and 3128 (a host name: refused)
sandbox sessions       kube-dns; the proxy's pods on 8080 (the git relay a workspace is
                       cloned through) and 3128
=====================  ============================================================

The proxy decides what a pod reaches beyond it (each token's egress policy): these rules only
keep the pod to the proxy, so no Cilium is needed. ``ironflow manifests`` renders them
(:mod:`ironflow.cluster.network`, :mod:`ironflow.cluster.session_network`), and so does an
agent-sandbox template whose steps take egress.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from ironflow import errors, labels
from ironflow.cluster.proxy_address import ExternalProxy, ProxyAddress, ProxyService
from ironflow.egress import variables

__all__ = [
    "AUTH_PROXY_NAME",
    "AUTH_PROXY_PORT",
    "EGRESS_PORT",
    "agent_egress_rules",
    "dns_rule",
    "external_ports",
    "namespace_selector",
    "proxy_rule",
    "service_rule",
    "session_egress_rules",
]

AUTH_PROXY_NAME: Final = "ironflow-auth-proxy"
AUTH_PROXY_PORT: Final = 8080
#: The egress proxy's listener on the proxy pods and its Service (named ``egress``).
EGRESS_PORT: Final = variables.CLUSTER_PORT
_PROXY_PODS: Final = {labels.LABEL_NAME: AUTH_PROXY_NAME}


def dns_rule() -> dict[str, Any]:
    """kube-dns on 53, UDP and TCP."""
    return {
        "to": [
            {
                "namespaceSelector": namespace_selector("kube-system"),
                "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
            }
        ],
        "ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}],
    }


def namespace_selector(name: str) -> dict[str, Any]:
    return {"matchLabels": {"kubernetes.io/metadata.name": name}}


def service_rule(proxy_ns: str, ports: Sequence[int] = (AUTH_PROXY_PORT, EGRESS_PORT)) -> dict[str, Any]:
    """The proxy's pods in ``proxy_ns`` (a Service's: policies see the pods, not its address) on ``ports``."""
    pods = {"namespaceSelector": namespace_selector(proxy_ns), "podSelector": {"matchLabels": dict(_PROXY_PODS)}}
    return {"to": [pods], "ports": [{"port": p, "protocol": "TCP"} for p in ports]}


def external_ports(proxy: ExternalProxy) -> tuple[int, int]:
    """The URL's port and the egress listener's (on the same host, as a provider's pods are told)."""
    return proxy.port, EGRESS_PORT


def proxy_rule(proxy: ProxyAddress) -> dict[str, Any]:
    """An agent's one egress rule besides DNS: the proxy's pods (a Service) or its address, on
    the model relay's port and the egress listener's.

    Raises:
        ConfigError: a proxy outside the cluster named by host (a NetworkPolicy names no host).
    """
    if isinstance(proxy, ProxyService):
        return service_rule(proxy.namespace)
    problem = proxy.plain_policy_problem()
    if problem is not None or proxy.cidr is None:
        raise errors.ConfigError(problem or f"auth proxy url '{proxy.url}' has no IP address")
    ports = [{"port": port, "protocol": "TCP"} for port in external_ports(proxy)]
    return {"to": [{"ipBlock": {"cidr": proxy.cidr}}], "ports": ports}


def agent_egress_rules(proxy: ProxyAddress) -> list[dict[str, Any]]:
    """An agent's rules: kube-dns and the auth proxy (the table's first row)."""
    return [dns_rule(), proxy_rule(proxy)]


def session_egress_rules(proxy_ns: str) -> list[dict[str, Any]]:
    """A sandbox session pod's rules: kube-dns and the proxy's pods, on the egress listener (its
    commands' ``HTTPS_PROXY``) and on 8080, where a git workspace's clone goes through the git relay
    with a grant of its own, revoked once cloned; the session's commands hold no model token, so
    8080 answers them 401."""
    return [dns_rule(), service_rule(proxy_ns)]
