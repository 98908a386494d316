"""The auth proxy's URL read as where the agents reach it: a Service, an IP or a host (pure).

=====================================================  ==============================================
URL host                                               reads as
=====================================================  ==============================================
``<service>.<namespace>[.svc[.<cluster domain>]]``     :class:`ProxyService`: the policies select the
                                                       proxy's pods by namespace and label, on the
                                                       port they listen on
                                                       (:data:`ironflow.cluster.network.AUTH_PROXY_PORT`);
                                                       the URL's port is the Service's
an IPv4 / IPv6 address                                 :class:`ExternalProxy`: egress to that address
                                                       alone (``/32``, ``/128``) on the URL's port
any other DNS name (``proxy.example.com``)             :class:`ExternalProxy` by name: Cilium's
                                                       ``toFQDNs`` opens it; a plain NetworkPolicy
                                                       cannot, so that is refused, naming the fixes
=====================================================  ==============================================

The port is the URL's, else the scheme's (80 for ``http``, 443 for ``https``). A URL is
never turned into a guessed namespace: a host that fits none of the rows is refused with
one line saying what to write instead.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from ironflow import errors, labels
from ironflow.egress import variables

__all__ = [
    "DEFAULT_PORTS",
    "ExternalProxy",
    "ProxyAddress",
    "ProxyService",
    "parse_proxy_address",
    "parse_proxy_url",
]

DEFAULT_PORTS: Final = {"http": 80, "https": 443}
_EXAMPLE: Final = "http://ironflow-auth-proxy.ironflow-system"


@dataclass(frozen=True)
class ProxyService:
    """Where agents and the worker reach the proxy: a Service in the cluster."""

    scheme: str
    service: str
    namespace: str
    #: The Service's port (the URL's, else the scheme's default).
    port: int
    #: The host as written (``<service>.<namespace>`` or a longer in-cluster form).
    host: str

    @property
    def url(self) -> str:
        """The URL with its port always written, as the worker's provider file carries it."""
        return f"{self.scheme}://{self.host}:{self.port}"


@dataclass(frozen=True)
class ExternalProxy:
    """A proxy the manifests do not run: reached at an IP address or a DNS name, on ``port``."""

    scheme: str
    #: An IP address (IPv6 without brackets) or a lower-case DNS name.
    host: str
    #: The port the agents connect to (no Service in between): the one every policy opens.
    port: int

    @property
    def cidr(self) -> str | None:
        """The host as a one-address CIDR (``/32``, ``/128``); None for a DNS name."""
        try:
            address = ipaddress.ip_address(self.host)
        except ValueError:
            return None
        return f"{address}/{address.max_prefixlen}"

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"

    def plain_policy_problem(self) -> str | None:
        """Why a plain NetworkPolicy cannot open this proxy (it names no host), or None."""
        if self.cidr is not None:
            return None
        return (
            f"auth proxy host {self.host} is a DNS name, and a plain NetworkPolicy opens egress by "
            f"IP only: give the proxy's IP ({self.scheme}://203.0.113.7:{self.port}), run it in the cluster behind a "
            f"Service ({_EXAMPLE}), or render Cilium policies (--cilium), whose toFQDNs names the host"
        )


ProxyAddress = ProxyService | ExternalProxy


def parse_proxy_address(url: str) -> ProxyAddress:
    """What an auth proxy URL names (the table above); ConfigError (one line) when it names nothing usable.

    >>> parse_proxy_address("http://ironflow-auth-proxy.ironflow-system").port
    80
    >>> parse_proxy_address("http://proxy.auth.svc.cluster.local:8080").namespace
    'auth'
    >>> parse_proxy_address("http://10.0.0.5:8080").cidr
    '10.0.0.5/32'
    """
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # "Invalid IPv6 URL": a bracket left open
        raise errors.ConfigError(f"auth proxy url '{url}' is not a URL ({exc}), e.g. {_EXAMPLE}") from None
    if parts.scheme not in DEFAULT_PORTS:
        raise errors.ConfigError(f"auth proxy url '{url}' must start with http:// or https://")
    host = parts.hostname or ""
    try:
        port = parts.port
    except ValueError:
        raise errors.ConfigError(f"auth proxy url '{url}' has an invalid port: give 1-65535") from None
    if port == 0:
        raise errors.ConfigError(f"auth proxy url '{url}' has an invalid port: give 1-65535")
    if parts.path not in {"", "/"} or parts.query or parts.fragment or parts.username or parts.password:
        raise errors.ConfigError(f"auth proxy url '{url}' must be scheme://host[:port] only, e.g. {_EXAMPLE}")
    chosen_port = DEFAULT_PORTS[parts.scheme] if port is None else port
    if chosen_port == variables.CLUSTER_PORT:  # agents are sent to the same host's 3128 for egress
        raise errors.ConfigError(
            f"auth proxy url '{url}': port {chosen_port} is the proxy's egress listener; give another"
        )
    if _is_ip(host):
        return ExternalProxy(scheme=parts.scheme, host=str(ipaddress.ip_address(host)), port=chosen_port)
    names = host.split(".")
    if len(names) < 2 or not all(labels.is_dns_label(n) for n in names) or names[-1].isdigit():
        raise errors.ConfigError(
            f"auth proxy url '{url}' names neither a Service (http://<service>.<namespace>, e.g. {_EXAMPLE}) "
            "nor an IP address or a DNS name outside the cluster"
        )
    if len(names) == 2 or names[2] == "svc":
        return ProxyService(scheme=parts.scheme, service=names[0], namespace=names[1], port=chosen_port, host=host)
    return ExternalProxy(scheme=parts.scheme, host=host, port=chosen_port)


def parse_proxy_url(url: str) -> ProxyService:
    """The Service an in-cluster proxy URL names, for the proxy's own Deployment and Service.

    >>> parse_proxy_url("http://ironflow-auth-proxy.ironflow-system:8080").service
    'ironflow-auth-proxy'
    """
    address = parse_proxy_address(url)
    if isinstance(address, ExternalProxy):
        what = "an IP address" if address.cidr is not None else "a host outside the cluster"
        raise errors.ConfigError(
            f"auth proxy url '{url}' is {what}: the proxy's Deployment and Service need its in-cluster "
            f"Service URL http://<service>.<namespace>[.svc.cluster.local], e.g. {_EXAMPLE}"
        )
    return address


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
