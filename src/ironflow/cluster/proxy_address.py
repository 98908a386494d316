"""The auth proxy's in-cluster URL read as a Service: its name, namespace and port (pure).

The manifests select the proxy's pods by namespace and label, so the URL must name a
Service: ``http(s)://<service>.<namespace>[.svc[.<cluster domain>]][:<port>]``. The port
is the Service's (80 for ``http``, 443 for ``https`` when the URL has none); the pods
listen on :data:`ironflow.cluster.network.AUTH_PROXY_PORT` behind it. A URL that names an
IP address or a host outside the cluster cannot be turned into such a policy, so it is
refused with one line saying what to write instead; it never yields a guessed namespace.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from ironflow import errors, labels

__all__ = ["DEFAULT_PORTS", "ProxyService", "parse_proxy_url"]

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


def parse_proxy_url(url: str) -> ProxyService:
    """The Service an in-cluster proxy URL names; ConfigError (one line) when it names none.

    >>> parse_proxy_url("http://ironflow-auth-proxy.ironflow-system").port
    80
    >>> parse_proxy_url("http://proxy.auth.svc.cluster.local:8080").namespace
    'auth'
    """
    parts = urlsplit(url)
    if parts.scheme not in DEFAULT_PORTS:
        raise errors.ConfigError(f"auth proxy url '{url}' must start with http:// or https://")
    host = parts.hostname or ""
    try:
        port = parts.port
    except ValueError:
        raise errors.ConfigError(f"auth proxy url '{url}' has an invalid port: give 1-65535") from None
    if parts.path not in {"", "/"} or parts.query or parts.fragment or parts.username or parts.password:
        raise errors.ConfigError(f"auth proxy url '{url}' must be scheme://host[:port] only, e.g. {_EXAMPLE}")
    if _is_ip(host):
        raise errors.ConfigError(
            f"auth proxy url '{url}' is an IP address: the policies select the proxy's pods by namespace, "
            f"so name its Service, e.g. {_EXAMPLE}"
        )
    names = host.split(".")
    in_cluster = len(names) == 2 or (len(names) >= 3 and names[2] == "svc")
    if len(names) < 2 or not all(labels.is_dns_label(n) for n in names[:2]):
        raise errors.ConfigError(
            f"auth proxy url '{url}' does not name the proxy's namespace: use "
            f"http://<service>.<namespace>, e.g. {_EXAMPLE}"
        )
    if not in_cluster:
        raise errors.ConfigError(
            f"auth proxy url '{url}' names a host outside the cluster: the manifests run the proxy as a Service; "
            f"use http://<service>.<namespace>[.svc.cluster.local], e.g. {_EXAMPLE}"
        )
    if port == 0:
        raise errors.ConfigError(f"auth proxy url '{url}' has an invalid port: give 1-65535")
    return ProxyService(
        scheme=parts.scheme,
        service=names[0],
        namespace=names[1],
        port=DEFAULT_PORTS[parts.scheme] if port is None else port,
        host=host,
    )


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
