"""Egress of agent pods and of the auth proxy: Cilium FQDN policies or plain NetworkPolicies (pure).

Rule table (the namespace-wide default deny is in ``cluster.deny_all``):

===================  ==========================================  ======================================
variant              agent pods (component=claude-runner) reach  auth proxy pods
===================  ==========================================  ======================================
Cilium, direct       kube-dns; api.anthropic.com:443             (no proxy)
Cilium, auth proxy   kube-dns; proxy pods :8080, :3128           in: agents on 8080, 3128; worker on 8080;
                                                                 session pods on 8080, 3128;
                                                                 out: kube-dns, api.anthropic.com:443
plain, direct        kube-dns; any public address :443           (no proxy)
plain, auth proxy    kube-dns; proxy pods :8080, :3128           in: agents on 8080, 3128; worker on 8080;
                                                                 session pods on 8080, 3128;
                                                                 out: kube-dns, public addresses (any port)
Cilium, proxy by IP  kube-dns; <ip>/32 (/128) :<url port>, 3128  (not in the cluster: no policy here)
  or by name         kube-dns; toFQDNs <host> :<url port>, 3128
plain, proxy by IP   kube-dns; ipBlock <ip>/32 :<url port>, 3128  (not in the cluster: no policy here)
  or by name         refused: a NetworkPolicy names no host (give its IP, a Service URL, or Cilium)
===================  ==========================================  ======================================

Port 3128 (:data:`EGRESS_PORT`) is the egress listener, an agent's ``HTTPS_PROXY``: the proxy
enforces each step's egress policy, these policies only confine agents to the proxy (no Cilium
needed). The proxy reaches public addresses on any port (plain), an in-cluster host a policy
opens through a commented rule, and under Cilium the FQDNs an operator adds.

A proxy behind a Service (:class:`~ironflow.cluster.proxy_address.ProxyService`) is opened
on the port its pods listen on, :data:`AUTH_PROXY_PORT`: policies see a connection after
the Service has translated it, so the URL's port (the Service's) is never the policy's.
A proxy outside the cluster (:class:`~ironflow.cluster.proxy_address.ExternalProxy`) has
no Service in between: the URL's port is the one opened.

Egress profiles (``ironflow.io/egress-profile=<name>``) add FQDN openings under Cilium
only. A plain NetworkPolicy cannot name a host: its "public :443" excludes private,
link-local (cloud metadata) and CGNAT ranges but lets an agent reach any public HTTPS
server. That trade-off is why the auth-proxy variant, where agents reach only the proxy,
is the recommended one without Cilium. PostgreSQL egress for a shared proxy registry
is a commented rule to uncomment, as in the seed manifests.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Any, Final

from ironflow import errors, labels
from ironflow.cluster import documents, proxy_rules
from ironflow.cluster.proxy_address import ExternalProxy, ProxyAddress, ProxyService
from ironflow.egress import addresses

__all__ = [
    "ANTHROPIC_HOST",
    "AUTH_PROXY_NAME",
    "AUTH_PROXY_PORT",
    "EGRESS_PORT",
    "PRIVATE_RANGES",
    "PRIVATE_RANGES_V6",
    "WORKER_POD_NAME",
    "EgressProfile",
    "Topology",
    "cilium_anthropic",
    "cilium_auth_proxy",
    "cilium_external_proxy",
    "egress",
    "plain_anthropic",
    "plain_auth_proxy",
    "plain_dns",
    "plain_external_proxy",
]

ANTHROPIC_HOST: Final = "api.anthropic.com"
AUTH_PROXY_NAME: Final = proxy_rules.AUTH_PROXY_NAME
AUTH_PROXY_PORT: Final = proxy_rules.AUTH_PROXY_PORT
#: The egress proxy's listener on the proxy pods and its Service (named ``egress``): agents and sessions.
EGRESS_PORT: Final = proxy_rules.EGRESS_PORT
#: ``app.kubernetes.io/name`` of the worker's own pods: the proxy admits its admin calls.
WORKER_POD_NAME: Final = "ironflow-worker"
#: Where a plain NetworkPolicy cannot send agents when it cannot name a host: the egress
#: policy's fixed deny set (private networks, the cluster; link-local with the cloud metadata
#: address; CGNAT; loopback, multicast, reserved; IPv6 ULA and link-local).
PRIVATE_RANGES: Final = tuple(map(str, addresses.fixed_deny_within(ipaddress.IPv4Network("0.0.0.0/0"))))
PRIVATE_RANGES_V6: Final = tuple(map(str, addresses.fixed_deny_within(ipaddress.IPv6Network("::/0"))))
_HOST = re.compile(r"([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\.)+[a-z]{2,63}")


@dataclass(frozen=True)
class EgressProfile:
    """Pods labelled ``ironflow.io/egress-profile=<name>`` may also reach ``hosts`` on 443 (Cilium only)."""

    name: str
    hosts: tuple[str, ...]

    def __post_init__(self) -> None:
        if not labels.is_valid_label_value(self.name):
            raise errors.ConfigError(f"egress profile name '{self.name}' is not a valid label value")
        if not self.hosts:
            raise errors.ConfigError(f"egress profile '{self.name}' names no host: give at least one")
        for host in self.hosts:
            if not _HOST.fullmatch(host):
                raise errors.ConfigError(
                    f"egress profile '{self.name}': '{host}' is not a lower-case DNS name like gitlab.com"
                )


@dataclass(frozen=True)
class Topology:
    """The names the policies select on."""

    namespace: str
    worker_namespace: str
    #: Where agents reach the auth proxy; None: they reach api.anthropic.com themselves.
    proxy: ProxyAddress | None
    profiles: tuple[EgressProfile, ...]

    @property
    def proxy_namespace(self) -> str | None:
        """The namespace of a proxy run in the cluster behind a Service; None otherwise."""
        return self.proxy.namespace if isinstance(self.proxy, ProxyService) else None


_RUNNER = {labels.LABEL_COMPONENT: labels.COMPONENT_CLAUDE_RUNNER}
_PROXY_PODS: Final = {labels.LABEL_NAME: AUTH_PROXY_NAME}
_SESSIONS: Final = {labels.LABEL_COMPONENT: labels.COMPONENT_SANDBOX_SESSION}


def _cilium(name: str, namespace: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "cilium.io/v2",
        "kind": "CiliumNetworkPolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def _cilium_dns() -> dict[str, Any]:
    return {
        "toEndpoints": [{"matchLabels": {"k8s:io.kubernetes.pod.namespace": "kube-system", "k8s:k8s-app": "kube-dns"}}],
        "toPorts": [{"ports": [{"port": "53", "protocol": "ANY"}], "rules": {"dns": [{"matchPattern": "*"}]}}],
    }


def _cilium_fqdn(hosts: tuple[str, ...], *ports: int) -> dict[str, Any]:
    return {
        "toFQDNs": [{"matchName": host} for host in hosts],
        "toPorts": [{"ports": [{"port": str(port), "protocol": "TCP"} for port in ports or (443,)]}],
    }


def _cilium_profiles(top: Topology, *, seed_wording: str) -> list[documents.Document]:
    docs = []
    for profile in top.profiles:
        hosts = ", ".join(profile.hosts)
        body = _cilium(
            f"claude-runner-egress-{profile.name}",
            top.namespace,
            {
                "endpointSelector": {"matchLabels": {**_RUNNER, labels.LABEL_EGRESS_PROFILE: profile.name}},
                "egress": [_cilium_dns(), _cilium_fqdn(profile.hosts)],
            },
        )
        docs.append(documents.Document(body, seed_wording.format(name=profile.name, hosts=hosts)))
    return docs


def cilium_anthropic(top: Topology) -> list[documents.Document]:
    """Agents resolve names and reach api.anthropic.com directly (no auth proxy)."""
    main = _cilium(
        "claude-runner-egress-anthropic",
        top.namespace,
        {
            "endpointSelector": {"matchLabels": dict(_RUNNER)},
            "egress": [_cilium_dns(), _cilium_fqdn((ANTHROPIC_HOST,))],
        },
    )
    comment = (
        "FQDN egress for agent pods with Cilium.\n\n"
        "Every claude-runner pod may resolve names through kube-dns and reach\n"
        'api.anthropic.com on 443. The DNS rule with `matchPattern: "*"` is required:\n'
        "Cilium learns the IPs behind toFQDNs names by inspecting DNS answers."
    )
    wording = (
        "Per-profile opening: pods labelled ironflow.io/egress-profile={name} (set\n"
        'with `.egress_profile("{name}")` on the provider or the step) may also reach\n'
        "{hosts}. Cilium policies are additive: this adds to the rule above."
    )
    return [documents.Document(main, comment), *_cilium_profiles(top, seed_wording=wording)]


_POSTGRES_RULE: Final = """\
    # Shared PostgreSQL registry (IRONFLOW_AUTH_PROXY_DATABASE_URL set in
    # auth-proxy.yaml): uncomment ONE of the two rules below, else the proxy
    # times out at startup. Not needed with the in-memory registry. If the
    # database has its own ingress policy, open 5432 there to the proxy pods.
    #
    # In-cluster database: adjust its namespace and pod labels.
    # - toEndpoints:
    #     - matchLabels:
    #         k8s:io.kubernetes.pod.namespace: ironflow-db
    #         app.kubernetes.io/name: postgresql
    #   toPorts:
    #     - ports:
    #         - port: "5432"
    #           protocol: TCP
    #
    # Managed database outside the cluster: adjust to its subnet.
    # - toCIDR:
    #     - 10.0.0.0/24
    #   toPorts:
    #     - ports:
    #         - port: "5432"
    #           protocol: TCP
"""


def cilium_auth_proxy(top: Topology) -> list[documents.Document]:
    """Agents reach only the proxy; the proxy alone reaches api.anthropic.com."""
    proxy_ns = top.proxy_namespace or ""
    proxy_pods = {labels.LABEL_NAME: AUTH_PROXY_NAME}
    port = [{"ports": [{"port": str(AUTH_PROXY_PORT), "protocol": "TCP"}]}]
    both = [{"ports": [{"port": str(p), "protocol": "TCP"} for p in (AUTH_PROXY_PORT, EGRESS_PORT)]}]
    agents = _cilium(
        "claude-runner-egress-auth-proxy",
        top.namespace,
        {
            "endpointSelector": {"matchLabels": dict(_RUNNER)},
            "egress": [
                _cilium_dns(),
                {
                    "toEndpoints": [{"matchLabels": {"k8s:io.kubernetes.pod.namespace": proxy_ns, **proxy_pods}}],
                    "toPorts": both,
                },
            ],
        },
    )
    proxy = _cilium(
        AUTH_PROXY_NAME,
        proxy_ns,
        {
            "endpointSelector": {"matchLabels": dict(proxy_pods)},
            "ingress": [
                {
                    "fromEndpoints": [{"matchLabels": {"k8s:io.kubernetes.pod.namespace": top.namespace, **_RUNNER}}],
                    "toPorts": both,
                },
                {
                    "fromEndpoints": [{"matchLabels": {"k8s:io.kubernetes.pod.namespace": top.namespace, **_SESSIONS}}],
                    "toPorts": both,
                },
                {
                    "fromEndpoints": [
                        {
                            "matchLabels": {
                                "k8s:io.kubernetes.pod.namespace": top.worker_namespace,
                                labels.LABEL_NAME: WORKER_POD_NAME,
                            }
                        },
                    ],
                    "toPorts": port,
                },
            ],
            "egress": [_cilium_dns(), _cilium_fqdn((ANTHROPIC_HOST,))],
        },
    )
    head = (
        "Cilium egress for the auth proxy variant.\n\n"
        "Use INSTEAD of cilium-egress-anthropic.yaml: the agent pods no longer reach\n"
        "api.anthropic.com, only the auth proxy, which alone holds the credential\n"
        "and alone reaches the API. The per-profile policies (gitlab below) are\n"
        "unchanged and stay additive.\n\n"
        f"(a) Agent pods: DNS, and the auth proxy pods on {AUTH_PROXY_PORT} (the model relay) and\n"
        f"{EGRESS_PORT} (the egress proxy, which enforces each step's egress policy)."
    )
    wording = (
        "Per-profile opening, as in cilium-egress-anthropic.yaml: pods labelled\n"
        "ironflow.io/egress-profile={name} may also reach {hosts}."
    )
    proxy_comment = (
        "(b) The auth proxy pods: egress to DNS and api.anthropic.com:443 only, plus\n"
        "PostgreSQL on 5432 with the shared registry (commented-out rule below);\n"
        f"ingress on {AUTH_PROXY_PORT} and {EGRESS_PORT} from the agent pods, on {AUTH_PROXY_PORT} from the worker.\n"
        "Adjust the worker selector to the namespace and labels the worker runs under.\n"
        "Steps with an egress policy (docs/egress.md): add a toFQDNs rule here for the\n"
        "hosts the policies allow; the proxy still decides per step."
    )
    return [
        documents.Document(agents, head),
        *_cilium_profiles(top, seed_wording=wording),
        documents.Document(proxy, proxy_comment, _POSTGRES_RULE),
    ]


def _np(name: str, namespace: str, selector: dict[str, str], spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"podSelector": {"matchLabels": selector}, **spec},
    }


def _np_public() -> dict[str, Any]:
    """Public addresses on any port: the auth proxy's reach (its egress policy decides the port)."""
    return {
        "to": [
            {"ipBlock": {"cidr": "0.0.0.0/0", "except": list(PRIVATE_RANGES)}},
            {"ipBlock": {"cidr": "::/0", "except": list(PRIVATE_RANGES_V6)}},
        ],
    }


def _np_public_https() -> dict[str, Any]:
    return {**_np_public(), "ports": [{"port": 443, "protocol": "TCP"}]}


def plain_dns(top: Topology) -> list[documents.Document]:
    body = _np(
        "claude-runner-egress-dns",
        top.namespace,
        dict(_RUNNER),
        {"policyTypes": ["Egress"], "egress": [proxy_rules.dns_rule()]},
    )
    comment = (
        "Plain NetworkPolicy (clusters without Cilium): agent pods may resolve names\n"
        "through kube-dns. Needed by both networkpolicy-egress-*.yaml variants."
    )
    return [documents.Document(body, comment)]


def plain_anthropic(top: Topology) -> list[documents.Document]:
    body = _np(
        "claude-runner-egress-https",
        top.namespace,
        dict(_RUNNER),
        {"policyTypes": ["Egress"], "egress": [_np_public_https()]},
    )
    comment = (
        "Plain NetworkPolicy, direct variant: agent pods reach public addresses on 443.\n\n"
        "A NetworkPolicy cannot name api.anthropic.com: this lets an agent reach ANY\n"
        "public HTTPS server, while private, link-local (cloud metadata) and CGNAT\n"
        "ranges stay closed. Prefer the auth proxy variant\n"
        "(networkpolicy-egress-auth-proxy.yaml) or Cilium (cilium-egress-*.yaml).\n"
        "Egress profiles (ironflow.io/egress-profile) need Cilium: nothing here."
    )
    return [documents.Document(body, comment)]


def plain_auth_proxy(top: Topology) -> list[documents.Document]:
    proxy_ns = top.proxy_namespace or ""
    proxy_pods = dict(_PROXY_PODS)
    port = [{"port": AUTH_PROXY_PORT, "protocol": "TCP"}]
    both = [{"port": p, "protocol": "TCP"} for p in (AUTH_PROXY_PORT, EGRESS_PORT)]
    sessions = dict(_SESSIONS)
    ns = proxy_rules.namespace_selector
    agents = _np(
        "claude-runner-egress-auth-proxy",
        top.namespace,
        dict(_RUNNER),
        {"policyTypes": ["Egress"], "egress": [proxy_rules.service_rule(proxy_ns)]},
    )
    proxy = _np(
        AUTH_PROXY_NAME,
        proxy_ns,
        dict(proxy_pods),
        {
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [
                {
                    "from": [
                        {
                            "namespaceSelector": ns(top.namespace),
                            "podSelector": {"matchLabels": dict(_RUNNER)},
                        }
                    ],
                    "ports": both,
                },
                {  # sandbox session pods: their commands' HTTPS_PROXY, and a git workspace's clone
                    "from": [
                        {
                            "namespaceSelector": ns(top.namespace),
                            "podSelector": {"matchLabels": sessions},
                        }
                    ],
                    "ports": both,
                },
                {
                    "from": [
                        {
                            "namespaceSelector": ns(top.worker_namespace),
                            "podSelector": {"matchLabels": {labels.LABEL_NAME: WORKER_POD_NAME}},
                        },
                    ],
                    "ports": port,
                },
            ],
            "egress": [proxy_rules.dns_rule(), _np_public()],
        },
    )
    postgres = """\
    # An in-cluster host a step's egress policy opens (a rule naming its
    # address or range: the fixed deny set holds the cluster's): open its pods
    # here too, else the proxy's connection times out. A NetworkPolicy sees the
    # connection after its Service is translated: select the pods, not the
    # Service's address.
    # - to:
    #     - namespaceSelector:
    #         matchLabels:
    #           kubernetes.io/metadata.name: package-mirror
    #
    # Shared PostgreSQL registry (IRONFLOW_AUTH_PROXY_DATABASE_URL set in
    # auth-proxy.yaml): uncomment and adjust, else the proxy times out at startup.
    # - to:
    #     - namespaceSelector:
    #         matchLabels:
    #           kubernetes.io/metadata.name: ironflow-db
    #       podSelector:
    #         matchLabels:
    #           app.kubernetes.io/name: postgresql
    #   ports:
    #     - port: 5432
    #       protocol: TCP
"""
    return [
        documents.Document(
            agents,
            "Plain NetworkPolicy, auth proxy variant (with networkpolicy-egress-dns.yaml):\n"
            f"agent pods reach only the auth proxy pods, on {AUTH_PROXY_PORT} (the model relay) and\n"
            f"{EGRESS_PORT} (the egress proxy); they hold no credential. The proxy enforces each step's\n"
            "egress policy (docs/egress.md): this policy only confines the agent to it.",
        ),
        documents.Document(
            proxy,
            f"The auth proxy pods: ingress on {AUTH_PROXY_PORT} and {EGRESS_PORT} from agent pods, on\n"
            f"{AUTH_PROXY_PORT} from the worker; egress to kube-dns and public addresses on any port.\n"
            "A NetworkPolicy cannot name a host: the proxy itself relays only to the API and\n"
            "lets through only what a step's egress policy allows (and refuses other hosts).",
            postgres,
        ),
    ]


def _external_comment(proxy: ExternalProxy, *, how: str) -> str:
    ports = " and ".join(map(str, proxy_rules.external_ports(proxy)))
    return (
        f"Auth proxy outside the cluster ({proxy.url}): agent pods reach {how}\n"
        f"on {ports} (its egress listener) and nothing else beyond DNS; they hold no credential.\n"
        "The proxy runs elsewhere, so no policy for its own pods is rendered here."
    )


def cilium_external_proxy(top: Topology, proxy: ExternalProxy) -> list[documents.Document]:
    """Agents reach only the proxy outside the cluster: ``toCIDR`` for an IP, ``toFQDNs`` for a name."""
    opened = proxy_rules.external_ports(proxy)
    ports = [{"ports": [{"port": str(port), "protocol": "TCP"} for port in opened]}]
    peer = _cilium_fqdn((proxy.host,), *opened) if proxy.cidr is None else {"toCIDR": [proxy.cidr], "toPorts": ports}
    agents = _cilium(
        "claude-runner-egress-auth-proxy",
        top.namespace,
        {"endpointSelector": {"matchLabels": dict(_RUNNER)}, "egress": [_cilium_dns(), peer]},
    )
    wording = "Per-profile opening: pods labelled ironflow.io/egress-profile={name} may also\nreach {hosts}."
    how = f"only {proxy.cidr}" if proxy.cidr is not None else f"only {proxy.host} (toFQDNs)"
    return [
        documents.Document(agents, "Cilium egress. " + _external_comment(proxy, how=how)),
        *_cilium_profiles(top, seed_wording=wording),
    ]


def plain_external_proxy(top: Topology, proxy: ExternalProxy) -> list[documents.Document]:
    """Agents reach only the proxy's IP; a proxy named by host is refused (a NetworkPolicy names no host)."""
    rule = proxy_rules.proxy_rule(proxy)  # refuses a proxy named by host
    body = _np(
        "claude-runner-egress-auth-proxy", top.namespace, dict(_RUNNER), {"policyTypes": ["Egress"], "egress": [rule]}
    )
    comment = "Plain NetworkPolicy (with networkpolicy-egress-dns.yaml). "
    return [documents.Document(body, comment + _external_comment(proxy, how=f"only {proxy.cidr}"))]


def egress(top: Topology, *, cilium: bool) -> list[documents.Document]:
    """The egress policies of one variant of the rule table."""
    proxy = top.proxy
    if isinstance(proxy, ExternalProxy):
        return cilium_external_proxy(top, proxy) if cilium else plain_dns(top) + plain_external_proxy(top, proxy)
    if cilium:
        return cilium_auth_proxy(top) if proxy is not None else cilium_anthropic(top)
    return plain_dns(top) + (plain_auth_proxy(top) if proxy is not None else plain_anthropic(top))
