"""The auth proxy: no Claude credential ever enters a sandbox.

The pod holds an opaque ``ifap_`` token bound to its run, step and expiry; the proxy
alone holds the credential and alone reaches the Anthropic API. A second, egress-only token
(no credential behind it) opens the egress proxy (``egress_server``), which lets the step reach
what its grant's egress policy allows. Layers point one way: ``tokens``/``policy``/
``header_policy``/``config``/``crypto``/``client_hello``/``egress_requests`` (values and pure
decisions) → ``registry``/``postgres``/``hub`` (where grants live) → ``logs``/``metrics`` →
``handlers``, ``egress_server`` (over ``tunnels``) → ``app`` → ``__main__``. The worker side is
``issuing`` (a step's tokens from issue to revoke, for every backend) over ``client`` (the admin
API over HTTP); of this package they import only ``tokens``.
"""

from typing import TYPE_CHECKING

from ironflow._lazy import lazy_exports

if TYPE_CHECKING:
    from ironflow.auth_proxy.admin_client import AdminClient, IssuedToken, admin_key_from
    from ironflow.auth_proxy.app import RunningProxy, create_app, run_auth_proxy
    from ironflow.auth_proxy.config import AuthProxyConfig
    from ironflow.auth_proxy.crypto import KeyRing, MissingKeyVersion
    from ironflow.auth_proxy.issuing import Credential, TokenIssuer, resolve_credential, secret_pod_env
    from ironflow.auth_proxy.registry import GrantRegistry, MemoryRegistry, RegistryUnavailable, Resolution
    from ironflow.auth_proxy.tokens import Grant, Injection, Limits, SecretCredential

__all__ = [
    "AdminClient",
    "AuthProxyConfig",
    "Credential",
    "Grant",
    "GrantRegistry",
    "Injection",
    "IssuedToken",
    "KeyRing",
    "Limits",
    "MemoryRegistry",
    "MissingKeyVersion",
    "RegistryUnavailable",
    "Resolution",
    "RunningProxy",
    "SecretCredential",
    "TokenIssuer",
    "admin_key_from",
    "create_app",
    "resolve_credential",
    "run_auth_proxy",
    "secret_pod_env",
]

__getattr__ = lazy_exports(
    __name__,
    {
        "app": ("RunningProxy", "create_app", "run_auth_proxy"),
        "admin_client": ("AdminClient", "IssuedToken", "admin_key_from"),
        "issuing": ("Credential", "TokenIssuer", "resolve_credential", "secret_pod_env"),
        "config": ("AuthProxyConfig",),
        "crypto": ("KeyRing", "MissingKeyVersion"),
        "registry": ("GrantRegistry", "MemoryRegistry", "RegistryUnavailable", "Resolution"),
        "tokens": ("Grant", "Injection", "Limits", "SecretCredential"),
    },
)
