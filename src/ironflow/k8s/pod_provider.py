"""The ephemeral Kubernetes provider as configuration: builders, rendering, and its run.

``K8sEphemeralProvider(image)`` is the reference's ``new``; ``.sandboxed(image)`` adds
the hardened posture. Every builder returns a new frozen provider; a value that can
never work raises :class:`~ironflow.errors.ConfigError` at the call, with the
reference's text; ``from_file`` reads a provider file onto these builders
(:mod:`ironflow.k8s.provider_file`). :meth:`K8sEphemeralProvider.manifests` renders, without any I/O, the
objects a step would create. The runtime (``run``, ``release_run``,
``reap_orphans``) is a :class:`~ironflow.k8s.step_runs.StepRunner` over the provider's
settings and its own API clients, which :meth:`~K8sEphemeralProvider.aclose` closes.

Invariant: the provider's ``repr`` holds no credential: the inline OAuth credentials
and the auth-proxy admin key are :class:`~ironflow.secrets.Secret` values.
"""

from __future__ import annotations

import dataclasses
import secrets as _random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from ironflow import errors, labels, results, step_sandbox, steps
from ironflow._renamed import warn_renamed
from ironflow.auth_proxy import issuing
from ironflow.auth_proxy.git_hosts import GitHosts
from ironflow.claude import profile
from ironflow.k8s import environments, hardening, provider_file, reaper, step_manifests, step_objects, step_runs
from ironflow.k8s.sessions import pod_sessions
from ironflow.k8s.settings import (
    ImagePullPolicy,
    K8sResources,
    ProviderSettings,
    Seconds,
    Toleration,
    frozen_map,
    seconds,
)
from ironflow.kube import api as kube
from ironflow.kube import clusters, connections
from ironflow.provider import ACCOUNT_KIND_CLAUDE_SUBSCRIPTION, LogSink, ProviderBase
from ironflow.secrets import Secret

__all__ = ["K8sEphemeralProvider"]


def _secret(value: str | Secret) -> Secret:
    return value if isinstance(value, Secret) else Secret(value)


def _check_labels(pod_labels: Mapping[str, str]) -> None:
    for key in pod_labels:
        if labels.is_reserved_label(key):
            raise errors.ConfigError(labels.reserved_label_message(key))


@dataclass(frozen=True, init=False)
class K8sEphemeralProvider(ProviderBase):
    """One pod per step; create, wait, read, delete. This part is the configuration.

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

    def _with(self, **changes: Any) -> K8sEphemeralProvider:
        """A new provider with changed settings; it shares this one's connections (closing either closes both)."""
        built = K8sEphemeralProvider(dataclasses.replace(self.settings, **changes))
        object.__setattr__(built, "_connections", self._connections)
        return built

    def _relax(self, method: str, **changes: Any) -> K8sEphemeralProvider:
        sandbox = self.settings.sandbox
        if sandbox is None:
            raise errors.ConfigError(f"{method} requires a provider built with K8sEphemeralProvider.sandboxed")
        return self._with(sandbox=dataclasses.replace(sandbox, **changes))

    # -- sandbox relaxations (sandboxed providers only) --

    def allow_writable_root(self) -> K8sEphemeralProvider:
        """Let the agent write its root filesystem (for images that need it)."""
        return self._relax("allow_writable_root", writable_root=True)

    def home_size_limit(self, quantity: str) -> K8sEphemeralProvider:
        return self._relax("home_size_limit", home_size_limit=quantity)

    def tmp_size_limit(self, quantity: str) -> K8sEphemeralProvider:
        return self._relax("tmp_size_limit", tmp_size_limit=quantity)

    def deadline_margin(self, margin: Seconds) -> K8sEphemeralProvider:
        """Time added to the step timeout for ``activeDeadlineSeconds`` and the expiry."""
        return self._relax("deadline_margin", deadline_margin_s=seconds("deadline_margin", margin, allow_zero=True))

    def run_as_user(self, uid: int) -> K8sEphemeralProvider:
        if isinstance(uid, bool) or not isinstance(uid, int) or uid <= 0:
            raise errors.ConfigError("run_as_user must be greater than 0")
        return self._relax("run_as_user", run_as_user=uid)

    def environment_volume(self, volume: environments.EnvironmentVolume) -> K8sEphemeralProvider:
        """Give every step a persistent read-write PVC at ``volume.mount_path``: a new claim,
        or the one named by the step's ``resume_environment(id)``; its id is returned as
        ``AgentResult.environment_id``. The worker then needs create/get/patch/list/delete on
        persistentvolumeclaims (``ironflow manifests --environment-claims``).

        Raises:
            ConfigError: ``invalid environment volume: {reason}``.
        """
        volume.validate()
        return self._with(environment=volume)

    def conversations_volume(self, claim: str) -> K8sEphemeralProvider:
        """Keep Claude Code's conversations (its transcripts) on a PVC at ``~/.claude/projects``, so
        a later step can resume or continue one; the provider file's ``sandbox.sessions_claim``."""
        return self._conversations_volume("conversations_volume", claim)

    def sessions_volume(self, claim: str) -> K8sEphemeralProvider:
        """The old name of :meth:`conversations_volume` (warns; goes in the next release)."""
        warn_renamed("ironflow.k8s.K8sEphemeralProvider", "sessions_volume", "conversations_volume")
        return self._conversations_volume("sessions_volume", claim)

    def _conversations_volume(self, method: str, claim: str) -> K8sEphemeralProvider:
        if not claim:
            raise errors.ConfigError(f"{method} claim name must not be empty")
        self._relax(method)
        return self._with(conversations_claim=claim)

    # -- credentials --

    def git_credentials(self, hosts: GitHosts) -> K8sEphemeralProvider:
        """The git hosts a git workspace may clone from (``Workspace("https://host/org/repo.git")``):
        each step gets a proxy grant for its workspace's host, the token stays in the proxy.
        Needs :meth:`auth_proxy`."""
        if hosts.upstream is not None:
            raise errors.ConfigError(
                "a git upstream (IRONFLOW_GIT_UPSTREAM) is the local backend's: on Kubernetes the auth proxy "
                "reaches the git host itself"
            )
        return self._with(git_hosts=hosts)

    def env_from_secret(self, var: str, secret: str, key: str) -> K8sEphemeralProvider:
        """Read ``var`` from a Secret key; the same ``var`` again replaces it in place."""
        entry = step_sandbox.SecretEnvVar(var, secret, key)
        return self._with(secret_env=step_manifests.with_secret_env(self.settings.secret_env, entry))

    def oauth_credentials_from_secret(self, secret: str, key: str) -> K8sEphemeralProvider:
        """Credentials JSON from a Secret, written to ``~/.claude/.credentials.json`` in the pod."""
        return self._with(oauth_credentials_secret=(secret, key))

    def oauth_token_from_secret(self, secret: str, key: str) -> K8sEphemeralProvider:
        return self.env_from_secret("CLAUDE_CODE_OAUTH_TOKEN", secret, key)

    def oauth_credentials(self, credentials_json: str | Secret) -> K8sEphemeralProvider:
        """Inline credentials JSON: written into the pod command (refused when sandboxed or proxied)."""
        return self._with(oauth_credentials=_secret(credentials_json))

    def auth_proxy(self, url: str) -> K8sEphemeralProvider:
        """Send the agent's API calls through the ironflow auth proxy; the pod gets no credential."""
        if not (url.startswith("http://") or url.startswith("https://")):
            raise errors.ConfigError("auth_proxy url must start with http:// or https://")
        return self._with(auth_proxy_url=url.rstrip("/"))

    def auth_proxy_admin_key(self, key: str | Secret) -> K8sEphemeralProvider:
        """Admin key for issuing tokens; overrides ``IRONFLOW_AUTH_PROXY_ADMIN_KEY``."""
        return self._with(auth_proxy_admin_key=_secret(key))

    # -- volumes and settings files --

    def read_only_volume(self, volume: step_sandbox.ReadOnlyVolume) -> K8sEphemeralProvider:
        return self._with(read_only_volumes=(*self.settings.read_only_volumes, volume))

    def read_only_pvc(self, claim: str, mount_path: str) -> K8sEphemeralProvider:
        return self.read_only_volume(step_sandbox.ReadOnlyVolume(step_sandbox.PvcSource(claim), mount_path))

    def read_only_host_path(self, path: str, mount_path: str) -> K8sEphemeralProvider:
        return self.read_only_volume(step_sandbox.ReadOnlyVolume(step_sandbox.HostPathSource(path), mount_path))

    def read_only_config_map(self, name: str, mount_path: str) -> K8sEphemeralProvider:
        return self.read_only_volume(step_sandbox.ReadOnlyVolume(step_sandbox.ConfigMapSource(name), mount_path))

    def volume(self, host_path: str, mount_path: str) -> K8sEphemeralProvider:
        """A hostPath directory, read-write (steps may drop it with ``without_provider_volumes``)."""
        return self._with(volumes=(*self.settings.volumes, (host_path, mount_path)))

    def pvc_volume(self, claim: str, mount_path: str) -> K8sEphemeralProvider:
        return self._with(pvc_volumes=(*self.settings.pvc_volumes, (claim, mount_path)))

    def managed_settings_preset(self, name: str, configmap: str) -> K8sEphemeralProvider:
        """Register a ConfigMap (key ``managed-settings.json``) under a preset name."""
        return self._with(
            managed_settings_presets=frozen_map({**self.settings.managed_settings_presets, name: configmap})
        )

    def default_managed_settings(self, name: str) -> K8sEphemeralProvider:
        """Preset for steps that name none; an unknown name fails each invocation."""
        return self._with(default_managed_settings=name)

    def claude_profile_configmap(self, configmap: str) -> K8sEphemeralProvider:
        """Copy a ConfigMap's files into ``~/.claude``."""
        return self.claude_profile_configmap_at(configmap, "")

    def claude_profile_configmap_at(self, configmap: str, subdir: str) -> K8sEphemeralProvider:
        """Copy a ConfigMap's files into ``~/.claude/<subdir>``; each subdir takes one ConfigMap."""
        return self._with(claude_profiles=profile.add_profile(self.settings.claude_profiles, configmap, subdir))

    # -- labels, scheduling, runtime --

    def pod_label(self, key: str, value: str) -> K8sEphemeralProvider:
        _check_labels({key: value})
        return self._with(pod_labels=frozen_map({**self.settings.pod_labels, key: value}))

    def pod_labels(self, pod_labels: Mapping[str, str]) -> K8sEphemeralProvider:
        """Replace every provider label."""
        _check_labels(pod_labels)
        return self._with(pod_labels=frozen_map(pod_labels))

    def egress_profile(self, name: str) -> K8sEphemeralProvider:
        """Default ``ironflow.io/egress-profile`` label (network policies select on it)."""
        return self._with(egress_profile=name)

    def runtime_class(self, name: str) -> K8sEphemeralProvider:
        """``spec.runtimeClassName``, e.g. ``gvisor``."""
        if not name.strip():
            raise errors.ConfigError("runtime class must not be empty")
        return self._with(runtime_class=name)

    def node_selector(self, key: str, value: str) -> K8sEphemeralProvider:
        return self._with(node_selector=frozen_map({**self.settings.node_selector, key: value}))

    def toleration(self, toleration: Toleration) -> K8sEphemeralProvider:
        return self._with(tolerations=(*self.settings.tolerations, toleration))

    def image_pull_secret(self, name: str) -> K8sEphemeralProvider:
        return self._with(image_pull_secrets=(*self.settings.image_pull_secrets, name))

    def image_pull_policy(self, policy: ImagePullPolicy | str) -> K8sEphemeralProvider:
        try:
            value = ImagePullPolicy(policy)
        except ValueError:
            known = ", ".join(p.value for p in ImagePullPolicy)
            raise errors.ConfigError(f"image_pull_policy must be one of {known}, got '{policy}'") from None
        return self._with(image_pull_policy=value)

    def resources(self, resources: K8sResources) -> K8sEphemeralProvider:
        return self._with(resources=resources)

    def namespace(self, namespace: str) -> K8sEphemeralProvider:
        if not namespace:
            raise errors.ConfigError("namespace must not be empty")
        return self._with(namespace=namespace)

    def claude_path(self, path: str) -> K8sEphemeralProvider:
        return self._with(claude_path=path)

    def working_dir(self, path: str) -> K8sEphemeralProvider:
        """Default working directory; a step's ``working_dir`` wins."""
        return self._with(working_dir=path)

    def service_account(self, name: str) -> K8sEphemeralProvider:
        """Run pods as this account; the token is then mounted as the account decides."""
        return self._with(service_account=name)

    def env(self, name: str, value: str) -> K8sEphemeralProvider:
        """A plain env var (visible in the pod spec: use ``env_from_secret`` for credentials)."""
        return self._with(env_vars=(*self.settings.env_vars, (name, value)))

    def input_init_image(self, image: str) -> K8sEphemeralProvider:
        return self._with(input_init_image=image)

    def timeout(self, timeout: Seconds) -> K8sEphemeralProvider:
        return self._with(timeout_s=seconds("timeout", timeout))

    def active_deadline_seconds(self, deadline: Seconds) -> K8sEphemeralProvider:
        """Explicit ``activeDeadlineSeconds`` (whole seconds); the expiry still uses timeout + margin."""
        return self._with(active_deadline_s=seconds("active_deadline_seconds", deadline))

    def previous_attempt_timeout(self, limit: Seconds) -> K8sEphemeralProvider:
        """How long to wait for a step's previous attempt to be deleted before relaunching."""
        return self._with(previous_attempt_timeout_s=seconds("previous_attempt_timeout", limit))

    def image_pull_grace(self, grace: Seconds) -> K8sEphemeralProvider:
        """How long ErrImagePull / ImagePullBackOff is tolerated (the kubelet retries the pull)
        before the step ends with the reason; 0 ends it at the first failed pull. Default 60 s."""
        return self._with(image_pull_grace_s=seconds("image_pull_grace", grace, allow_zero=True))

    def cluster_config(self, cluster: clusters.ClusterConfig) -> K8sEphemeralProvider:
        """Which API server steps run on: ``DefaultCluster(context)``, ``InCluster()``,
        ``KubeconfigFile(path, context)`` or ``KubeconfigInline(yaml, context)``."""
        return self._with(cluster=clusters.check_cluster(cluster, method="cluster_config"))

    def cluster(self, cluster: clusters.ClusterConfig) -> K8sEphemeralProvider:
        """Short name of :meth:`cluster_config` (same check, same result)."""
        return self.cluster_config(cluster)

    def orphan_reaper(self, interval: Seconds) -> K8sEphemeralProvider:
        """Reap expired objects every ``interval`` (the runtime starts the task)."""
        given = interval.total_seconds() if isinstance(interval, timedelta) else interval
        if not isinstance(given, bool) and isinstance(given, int | float) and given <= 0:
            raise errors.ConfigError("orphan reaper interval must be greater than zero")
        return self._with(orphan_reaper_interval_s=seconds("orphan reaper interval", interval))

    # -- what this provider offers --

    def sessions(self, *, api: kube.KubeApi | None = None) -> pod_sessions.K8sSessions:
        """This provider's sandbox sessions: one hardened pod each, in its namespace (``api``: a
        connected client of its cluster, else the sessions connect their own)."""
        return pod_sessions.K8sSessions(self.settings, api=api)

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
    ) -> list[dict[str, Any]]:
        """The objects a step creates, in creation order: the prompt ConfigMap (prompts
        over 100,000 bytes), the new environment claim (with ``environment_volume``, unless
        the step resumes one: that claim exists already), then the Pod. No I/O.

        A dry run of :func:`~ironflow.k8s.step_objects.render_step`: ``now`` is unix seconds
        (default: the clock); ``worker_env`` the worker's environment (default: none);
        ``pod_name`` and ``environment_id`` default to generated names; ``workspace_token``
        is the git-host grant's token a git workspace's clone uses.

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
