"""The git hosts a provider's workspaces reach through the auth proxy, and their credentials (pure).

A git host's token is handed to the proxy as a proxied secret (§6.9) for that one host, HTTP
Basic ``username:token`` (GitHub's and GitLab's form for a token); a sandbox or a pod only
ever holds the opaque ``ifap_`` token of that grant. Every backend (local, Kubernetes) takes
its git workspaces' credentials as a :class:`GitHosts`. A git host is one relay
(:mod:`ironflow.auth_proxy.relays`): Basic injection, any method and path of that host.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ironflow import errors
from ironflow.secrets import Secret

if TYPE_CHECKING:  # a secret is made when a workspace clones: holding hosts loads no token types
    from ironflow.auth_proxy import tokens

__all__ = ["GitCredential", "GitHosts"]


@dataclass(frozen=True)
class GitCredential:
    """A git host's token, sent by the proxy as HTTP Basic ``username:token``, never seen by a sandbox."""

    value: Secret = field(repr=False)
    username: str = "x-access-token"


@dataclass(frozen=True)
class GitHosts:
    """The git hosts a provider's workspaces may clone from and push to, and how they are reached.

    ``upstream`` sends the relay's ``/r/<host>/…`` to ``<upstream>/<host>/…`` instead of
    ``https://<host>/…`` (a mirror, or a test's loopback server; the in-process proxy only).
    """

    credentials: Mapping[str, GitCredential] = field(default_factory=dict)
    upstream: str | None = None

    def secret_for(self, host: str) -> tokens.SecretCredential:
        """The proxied secret for ``host``.

        Raises:
            WorkspaceRefused: no credential is set for it.
        """
        found = self.credentials.get(host)
        if found is None:
            raise errors.WorkspaceRefused(
                f"no git credential for '{host}': give the provider git_credentials for it "
                "(ironflow's CLI reads IRONFLOW_GIT_TOKEN)"
            )
        from ironflow.auth_proxy import relays, tokens

        relay = relays.RelaySpec("git", host, tokens.Injection("basic", username=found.username))
        return relay.with_value(found.value).secret()
