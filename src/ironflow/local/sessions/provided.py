"""What a local session needs of its provider: the :class:`LocalSandbox` protocol.

A local session runs in its provider's sandbox: the same isolation, shape, limits and process
supervisor as the provider's steps, its git hosts and timeout for a workspace, its Claude Code
CLI and credential for an agent step. The sessions ask for those through this protocol and
never import the provider: the provider hands its sessions out (``provider.sessions()``), so
the provider imports the sessions, not the reverse.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from ironflow.auth_proxy import relays
from ironflow.auth_proxy.git_hosts import GitHosts
from ironflow.egress import EgressPolicy
from ironflow.local.sandbox import argv, environment, launch, limits

__all__ = ["LocalSandbox"]


class LocalSandbox(Protocol):
    """The local provider as its sessions see it (:class:`~ironflow.local.sandbox_provider.LocalSandboxProvider`)."""

    @property
    def isolation(self) -> environment.Isolation: ...

    @property
    def env(self) -> Mapping[str, str]: ...

    @property
    def temp_dir(self) -> str | None: ...

    @property
    def timeout(self) -> float: ...

    @property
    def limits(self) -> limits.SandboxLimits: ...

    @property
    def git_hosts(self) -> GitHosts: ...

    @property
    def processes(self) -> launch.SandboxProcesses: ...

    @property
    def relays(self) -> tuple[relays.Relay, ...]: ...

    def egress_with(self, extra: EgressPolicy | None) -> EgressPolicy | None: ...

    def shape(self) -> argv.SandboxShape: ...

    def claude_cli(self) -> str: ...

    def bypass_allowed(self) -> bool: ...

    def proxy_credential(self) -> environment.ProxyCredential: ...
