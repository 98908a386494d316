"""How a sandbox is sent through the egress proxy: its address and the variables (pure).

curl, pip, npm, git and Claude Code read ``HTTPS_PROXY``/``HTTP_PROXY`` (some only the lower-case
names) and skip the hosts in ``NO_PROXY``. The step's ``ifap_`` token is the proxy URL's password:
the proxy answers ``407`` without it and checks the token's policy with it. The auth proxy's own
host is always bypassed: the model relay and the relays are there, and the egress proxy would
refuse it (a cluster address is in the fixed deny set). A policy that opens nothing gets no
variables: nothing would pass, and the sandbox's tools fail as they do with no network.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Sequence
from typing import Final

from ironflow.egress import policy

__all__ = ["CLUSTER_PORT", "PROXY_USER", "opens_anything", "proxy_env", "proxy_url"]

#: The egress listener on the auth proxy's pods and its Service in a cluster (port name ``egress``).
CLUSTER_PORT: Final = 3128
#: The user name of the proxy URL: any is accepted, the token (the password) is what counts.
PROXY_USER: Final = "ironflow"
_NAMES: Final = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")


def opens_anything(found: policy.EgressPolicy | None) -> bool:
    """Whether a step's policy lets anything through (no allow rule: no proxy variables)."""
    return found is not None and bool(found.allow)


def proxy_url(auth_proxy_url: str, port: int = CLUSTER_PORT) -> str:
    """The egress proxy beside the auth proxy at ``auth_proxy_url``: the same host, ``port``, plain
    HTTP (``CONNECT`` carries TLS end to end).

    >>> proxy_url("http://ironflow-auth-proxy.ironflow:80")
    'http://ironflow-auth-proxy.ironflow:3128'
    """
    host = urllib.parse.urlsplit(auth_proxy_url).hostname or ""
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


def proxy_env(url: str, token: str | None, *, bypass: Sequence[str]) -> dict[str, str]:
    """The variables sending a sandbox's HTTP(S) through the egress proxy at ``url`` (no user info)
    with ``token`` as its password; ``bypass`` are the hosts reached directly (``NO_PROXY``).
    Without ``token``, the address alone: what an API object may carry (an agent-sandbox
    template), the password added where the token is delivered.

    >>> env = proxy_env("http://proxy.ns:3128", "ifap_x", bypass=["proxy.ns"])
    >>> env["https_proxy"], env["NO_PROXY"]
    ('http://ironflow:ifap_x@proxy.ns:3128', 'proxy.ns')
    >>> proxy_env("http://proxy.ns:3128", None, bypass=[])["HTTPS_PROXY"]
    'http://proxy.ns:3128'
    """
    scheme, _, rest = url.partition("://")
    with_token = url if token is None else f"{scheme}://{PROXY_USER}:{urllib.parse.quote(token, safe='')}@{rest}"
    skipped = ",".join(dict.fromkeys(bypass))
    return {**dict.fromkeys(_NAMES, with_token), "NO_PROXY": skipped, "no_proxy": skipped}
