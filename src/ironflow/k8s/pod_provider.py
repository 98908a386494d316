"""The ephemeral Kubernetes provider: rendering a step and running it, over its builders.

``K8sEphemeralProvider(image)`` is the reference's ``new``; ``.sandboxed(image)`` adds
the hardened posture. The builders (each returns a new frozen provider) are
:class:`~ironflow.k8s.builders.K8sSettingsBuilders`, which the provider inherits;
``from_file`` reads a provider file onto them (:mod:`ironflow.k8s.provider_file`).
:meth:`K8sEphemeralProvider.manifests` renders, without any I/O, the
objects a step would create. The runtime (``run``, ``release_run``,
``reap_orphans``) is a :class:`~ironflow.k8s.step_runs.StepRunner` over the provider's
settings and its own API clients, which :meth:`~K8sEphemeralProvider.aclose` closes.

Invariant: the provider's ``repr`` holds no credential: the inline OAuth credentials
and the auth-proxy admin key are :class:`~ironflow.secrets.Secret` values.
"""

from __future__ import annotations

import secrets as _random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Self

from ironflow import errors, results, steps
from ironflow.auth_proxy import issuing
from ironflow.k8s import environments, hardening, provider_file, reaper, step_manifests, step_objects, step_runs
from ironflow.k8s.builders import K8sSettingsBuilders
from ironflow.k8s.sessions import pod_sessions
from ironflow.k8s.settings import ProviderSettings, Seconds
from ironflow.kube import api as kube
from ironflow.kube import connections
from ironflow.provider import ACCOUNT_KIND_CLAUDE_SUBSCRIPTION, LogSink, ProviderBase
from ironflow.secrets import Secret

__all__ = ["K8sEphemeralProvider"]


@dataclass(frozen=True, init=False)
class K8sEphemeralProvider(K8sSettingsBuilders, ProviderBase):
    """One pod per step; create, wait, read, delete. The builders come from :class:`K8sSettingsBuilders`.

    >>> p = K8sEphemeralProvider.sandboxed("ghcr.io/acme/claude-runner:2.1.332-1").namespace("agents")
    >>> p.settings.namespace, p.settings.sandbox.run_as_user
    ('agents', 10001)
    """

    settings: ProviderSettings
    #: The API clients this provider opened (one per loop and cluster), closed by :meth:`aclose`.
    _connections: connections.Connections = field(repr=False, compare=False)

    def __init__(self, image: str | ProviderSettings) -> None:
        settings = image if isinstance(image, ProviderSettings) else ProviderSettings(image=image)
        object.__setattr__(self, "settings", settings)
        object.__setattr__(self, "_connections", connections.Connections())

    @classmethod
    def sandboxed(cls, image: str) -> K8sEphemeralProvider:
        """The hardened provider: non-root uid 10001, read-only root, no SA token, size-limited HOME."""
        return cls(image)._with(sandbox=hardening.SandboxSettings())

    @property
    def is_sandboxed(self) -> bool:
        return self.settings.sandbox is not None

    def _rebuilt(self, settings: ProviderSettings) -> Self:
        """A new provider with these settings; it shares this one's connections (closing either closes both)."""
        built = type(self)(settings)
        object.__setattr__(built, "_connections", self._connections)
        return built

    # -- what this provider offers --

    def sessions(self, *, api: kube.KubeApi | None = None, transport: str = "auto") -> pod_sessions.K8sSessions:
        """This provider's sandbox sessions: one hardened pod each, in its namespace (``api``: a
        connected client of its cluster, else the sessions connect their own; ``transport``: how
        they reach its runtime, :class:`~ironflow.k8s.sessions.pod_sessions.K8sSessions`)."""
        return pod_sessions.K8sSessions(self.settings, api=api, transport=transport)

    def account_kind(self) -> str | None:
        """``claude_subscription`` only with an auth proxy: accounts reach only the proxy."""
        return ACCOUNT_KIND_CLAUDE_SUBSCRIPTION if self.settings.auth_proxy_url is not None else None

    def manifests(
        self,
        config: steps.AgentConfig,
        *,
        now: int | None = None,
        proxy_token: str | Secret | None = None,
        worker_env: Mapping[str, str] | None = None,
        pod_name: str | None = None,
        environment_id: str | None = None,
        workspace_token: str | Secret | None = None,
        egress_token: str | Secret | None = None,
    ) -> list[dict[str, Any]]:
        """The objects a step creates, in creation order: the prompt ConfigMap (prompts
        over 100,000 bytes), the new environment claim (with ``environment_volume``, unless
        the step resumes one: that claim exists already), then the Pod. No I/O.

        A dry run of :func:`~ironflow.k8s.step_objects.render_step`: ``now`` is unix seconds
        (default: the clock); ``worker_env`` the worker's environment (default: none);
        ``pod_name`` and ``environment_id`` default to generated names; ``workspace_token``
        is the git-host grant's token a git workspace's clone uses; ``egress_token`` the egress-only
        token of the pod's proxy variables (a policy that opens something; none: no such variables).

        Raises:
            PromptTooLarge, ToolProfileUnsupported, StepConfigError: the step is refused.
            ConfigError: ``proxy_token`` without ``auth_proxy``.
        """
        now_s = int(time.time()) if now is None else now
        name = pod_name or step_manifests.generate_pod_name(now_s * 1000, _random.randbits(32))
        env_id = environment_id or environments.generate_environment_name(now_s * 1000, _random.randbits(32))
        token = Secret(proxy_token) if isinstance(proxy_token, str) else proxy_token
        objects = step_objects.render_step(
            self.settings,
            config,
            now=now_s,
            pod_name=name,
            token=token,
            worker_env=worker_env if worker_env is not None else {},
            environment_id=env_id,
            workspace_token=Secret(workspace_token) if isinstance(workspace_token, str) else workspace_token,
            egress_token=Secret(egress_token) if isinstance(egress_token, str) else egress_token,
        )
        return objects.in_creation_order()

    # -- runtime: a StepRunner over the provider's own connections --

    def runner(
        self,
        *,
        api: kube.KubeApi | connections.ApiSource | None = None,
        issuer: issuing.TokenIssuer | None = None,
        worker_env: Mapping[str, str] | None = None,
        tokens: bool = True,
    ) -> step_runs.StepRunner:
        """The runner of this provider; ``api`` defaults to the provider's own client for its
        cluster (closed by :meth:`aclose`)."""
        source = self._connections.source(self.settings.cluster) if api is None else api
        return step_runs.StepRunner.of(self.settings, api=source, issuer=issuer, worker_env=worker_env, tokens=tokens)

    async def run(self, config: steps.AgentConfig, *, logs: LogSink | None = None) -> results.AgentResult:
        """Run the step in a single-use pod and delete everything it created (``k8s.step_runs``);
        with ``logs``, each stream-json line reaches the sink as it arrives."""
        step_runner = self.runner()
        try:
            return await step_runner.run(config, logs=logs)
        finally:
            await step_runner.aclose()

    async def release_run(self, run_id: str) -> int:
        """Delete every pod, JobRun Job and prompt of the run (and its sub-runs); pods deleted."""
        step_runner = self.runner()
        try:
            return await step_runner.release_run(run_id)
        finally:
            await step_runner.aclose()

    async def reap_orphans(self, *, dry_run: bool = False) -> reaper.ReapReport:
        """One reaping pass over the provider's namespace."""
        return await self.runner(tokens=False).reap_orphans(dry_run=dry_run)

    def spawn_orphan_reaper(self, interval: Seconds | None = None) -> reaper.OrphanReaper:
        """Reap every ``interval`` (default: :meth:`orphan_reaper`'s) in the background; ``await h.stop()``."""
        chosen = self.settings.orphan_reaper_interval_s if interval is None else interval
        if chosen is None:
            raise errors.ConfigError("spawn_orphan_reaper needs an interval: pass one or set orphan_reaper(interval)")
        interval_s = chosen.total_seconds() if isinstance(chosen, timedelta) else float(chosen)
        return self.runner(tokens=False).spawn_orphan_reaper(interval_s)

    async def aclose(self) -> None:
        """Close the API clients this provider opened on the running loop."""
        await self._connections.aclose()

    # -- loading from YAML --

    @classmethod
    def from_file(cls, path: str | Path) -> K8sEphemeralProvider:
        """Load provider settings from a YAML file (schema: docs/k8s-provider.md); a relative
        ``cluster.kubeconfig`` path is taken from the file's directory.

        Raises:
            ConfigError: unreadable file, bad YAML, an unknown key (with the nearest known one),
                a wrong type; each names the key path.
        """
        top = provider_file.load(path)
        return provider_file.read(top, start=cls._start, base=Path(path).parent)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, base: str | Path | None = None) -> K8sEphemeralProvider:
        """Build from a mapping of settings (the YAML schema); every builder's check applies.

        ``base`` is the directory a relative ``cluster.kubeconfig`` path is taken from
        (default: kept as written, i.e. the working directory).
        """
        top = provider_file.top_section(data)
        return provider_file.read(top, start=cls._start, base=None if base is None else Path(base))

    @classmethod
    def _start(cls, image: str, sandboxed: bool) -> K8sEphemeralProvider:
        return cls.sandboxed(image) if sandboxed else cls(image)
