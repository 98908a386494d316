"""The ephemeral Kubernetes provider's builders: each returns a copy with one setting changed.

:class:`K8sSettingsBuilders` is the fluent face over
:class:`~ironflow.k8s.settings.ProviderSettings` that
:class:`~ironflow.k8s.pod_provider.K8sEphemeralProvider` inherits; a value that can never
work raises :class:`~ironflow.errors.ConfigError` at the call, with the reference's text.
It never does I/O and never holds a client: what a copy shares with its original (the
provider's connections) is the concrete provider's :meth:`~K8sSettingsBuilders._rebuilt`.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Mapping, Sequence
from datetime import timedelta
from types import MappingProxyType
from typing import Any, Self

from ironflow import errors, labels, step_sandbox
from ironflow._renamed import warn_renamed
from ironflow.auth_proxy import relays as relay_specs
from ironflow.auth_proxy.git_hosts import GitHosts
from ironflow.claude import profile
from ironflow.egress import policy as egress_policy
from ironflow.k8s import environments, step_manifests
from ironflow.k8s.settings import (
    ImagePullPolicy,
    K8sResources,
    ProviderSettings,
    Seconds,
    SessionVolume,
    Toleration,
    frozen_map,
    seconds,
)
from ironflow.kube import clusters
from ironflow.secrets import Secret

__all__ = ["K8sSettingsBuilders"]


def _secret(value: str | Secret) -> Secret:
    return value if isinstance(value, Secret) else Secret(value)


def _check_labels(pod_labels: Mapping[str, str]) -> None:
    for key in pod_labels:
        if labels.is_reserved_label(key):
            raise errors.ConfigError(labels.reserved_label_message(key))


class K8sSettingsBuilders(abc.ABC):
    """Every builder of the provider; each returns a new provider of the same type (``Self``)."""

    settings: ProviderSettings

    @abc.abstractmethod
    def _rebuilt(self, settings: ProviderSettings) -> Self:
        """A new provider over ``settings``; the concrete provider says what the copy shares."""

    def _with(self, **changes: Any) -> Self:
        return self._rebuilt(dataclasses.replace(self.settings, **changes))

    def _relax(self, method: str, **changes: Any) -> Self:
        sandbox = self.settings.sandbox
        if sandbox is None:
            raise errors.ConfigError(f"{method} requires a provider built with K8sEphemeralProvider.sandboxed")
        return self._with(sandbox=dataclasses.replace(sandbox, **changes))

    # -- sandbox relaxations (sandboxed providers only) --

    def allow_writable_root(self) -> Self:
        """Let the agent write its root filesystem (for images that need it)."""
        return self._relax("allow_writable_root", writable_root=True)

    def home_size_limit(self, quantity: str) -> Self:
        return self._relax("home_size_limit", home_size_limit=quantity)

    def tmp_size_limit(self, quantity: str) -> Self:
        return self._relax("tmp_size_limit", tmp_size_limit=quantity)

    def deadline_margin(self, margin: Seconds) -> Self:
        """Time added to the step timeout for ``activeDeadlineSeconds`` and the expiry."""
        return self._relax("deadline_margin", deadline_margin_s=seconds("deadline_margin", margin, allow_zero=True))

    def run_as_user(self, uid: int) -> Self:
        if isinstance(uid, bool) or not isinstance(uid, int) or uid <= 0:
            raise errors.ConfigError("run_as_user must be greater than 0")
        return self._relax("run_as_user", run_as_user=uid)

    def environment_volume(self, volume: environments.EnvironmentVolume) -> Self:
        """Give every step a persistent read-write PVC at ``volume.mount_path``: a new claim,
        or the one named by the step's ``resume_environment(id)``; its id is returned as
        ``AgentResult.environment_id``. The worker then needs create/get/patch/list/delete on
        persistentvolumeclaims (``ironflow manifests --environment-claims``).

        Raises:
            ConfigError: ``invalid environment volume: {reason}``.
        """
        volume.validate()
        return self._with(environment=volume)

    def session_volume(self, volume: SessionVolume) -> Self:
        """Give each sandbox session a HOME claim of ``volume.storage_class`` (owned by its pod), and
        with ``volume.snapshot_class`` take its snapshots and forks as VolumeSnapshots. The worker
        then needs create/delete/patch on persistentvolumeclaims and create/get/delete on
        volumesnapshots.

        Raises:
            ConfigError: ``invalid session volume: {reason}``.
        """
        return self._with(session_volume=volume)

    def conversations_volume(self, claim: str) -> Self:
        """Keep Claude Code's conversations (its transcripts) on a PVC at ``~/.claude/projects``, so
        a later step can resume or continue one; the provider file's ``sandbox.sessions_claim``."""
        return self._conversations_volume("conversations_volume", claim)

    def sessions_volume(self, claim: str) -> Self:
        """The old name of :meth:`conversations_volume` (warns; goes in the next release)."""
        warn_renamed("ironflow.k8s.K8sEphemeralProvider", "sessions_volume", "conversations_volume")
        return self._conversations_volume("sessions_volume", claim)

    def _conversations_volume(self, method: str, claim: str) -> Self:
        if not claim:
            raise errors.ConfigError(f"{method} claim name must not be empty")
        self._relax(method)
        return self._with(conversations_claim=claim)

    # -- credentials --

    def git_credentials(self, hosts: GitHosts) -> Self:
        """The git hosts a git workspace may clone from (``Workspace("https://host/org/repo.git")``):
        each step gets a proxy grant for its workspace's host, the token stays in the proxy.
        Needs :meth:`auth_proxy`."""
        if hosts.upstream is not None:
            raise errors.ConfigError(
                "a git upstream (IRONFLOW_GIT_UPSTREAM) is the local backend's: on Kubernetes the auth proxy "
                "reaches the git host itself"
            )
        return self._with(git_hosts=hosts)

    def relays(self, specs: Sequence[relay_specs.RelaySpec]) -> Self:
        """Hosts every step reaches through the auth proxy with a credential the proxy injects
        (:mod:`ironflow.auth_proxy.relays`): each step gets one token per relay, its value read from
        the relay's Secret when the step starts and handed to the proxy, never to the pod. Needs
        :meth:`auth_proxy`."""
        for spec in specs:
            if spec.credential_secret is None:
                raise errors.ConfigError(
                    f"relay {spec.name!r}: on Kubernetes its credential comes from a Secret; "
                    "give credential_secret: {secret, key}"
                )
        found = relay_specs.clash(specs)
        if found is not None:
            raise errors.ConfigError(f"relays[{found[0]}].{found[1]}: {found[2]}")
        return self._with(relays=tuple(specs))

    def egress(self, policy: egress_policy.EgressPolicy | None) -> Self:
        """What every step may reach besides the model, through the auth proxy's egress proxy
        (docs/egress.md): the step's token carries the policy, and when it opens anything the pod
        gets ``HTTPS_PROXY``/``HTTP_PROXY`` (and lower case) with that token. ``None``: nothing.
        Needs :meth:`auth_proxy` (checked when a step starts)."""
        if policy is not None and not isinstance(policy, egress_policy.EgressPolicy):
            raise errors.ConfigError(f"egress takes an EgressPolicy, not {type(policy).__name__}")
        return self._with(egress=policy)

    def egress_profiles(self, profiles: Mapping[str, egress_policy.EgressPolicy]) -> Self:
        """Named policies of the provider file (``egress_profiles:``) that a command's
        ``--egress-profile`` may open, beside the built-in ones; they open nothing by themselves."""
        return self._with(egress_profiles=MappingProxyType(dict(profiles)))

    def env_from_secret(self, var: str, secret: str, key: str) -> Self:
        """Read ``var`` from a Secret key; the same ``var`` again replaces it in place."""
        entry = step_sandbox.SecretEnvVar(var, secret, key)
        return self._with(secret_env=step_manifests.with_secret_env(self.settings.secret_env, entry))

    def oauth_credentials_from_secret(self, secret: str, key: str) -> Self:
        """Credentials JSON from a Secret, written to ``~/.claude/.credentials.json`` in the pod."""
        return self._with(oauth_credentials_secret=(secret, key))

    def oauth_token_from_secret(self, secret: str, key: str) -> Self:
        return self.env_from_secret("CLAUDE_CODE_OAUTH_TOKEN", secret, key)

    def oauth_credentials(self, credentials_json: str | Secret) -> Self:
        """Inline credentials JSON: written into the pod command (refused when sandboxed or proxied)."""
        return self._with(oauth_credentials=_secret(credentials_json))

    def auth_proxy(self, url: str) -> Self:
        """Send the agent's API calls through the ironflow auth proxy; the pod gets no credential."""
        if not (url.startswith("http://") or url.startswith("https://")):
            raise errors.ConfigError("auth_proxy url must start with http:// or https://")
        return self._with(auth_proxy_url=url.rstrip("/"))

    def auth_proxy_admin_key(self, key: str | Secret) -> Self:
        """Admin key for issuing tokens; overrides ``IRONFLOW_AUTH_PROXY_ADMIN_KEY``."""
        return self._with(auth_proxy_admin_key=_secret(key))

    # -- volumes and settings files --

    def read_only_volume(self, volume: step_sandbox.ReadOnlyVolume) -> Self:
        return self._with(read_only_volumes=(*self.settings.read_only_volumes, volume))

    def read_only_pvc(self, claim: str, mount_path: str) -> Self:
        return self.read_only_volume(step_sandbox.ReadOnlyVolume(step_sandbox.PvcSource(claim), mount_path))

    def read_only_host_path(self, path: str, mount_path: str) -> Self:
        return self.read_only_volume(step_sandbox.ReadOnlyVolume(step_sandbox.HostPathSource(path), mount_path))

    def read_only_config_map(self, name: str, mount_path: str) -> Self:
        return self.read_only_volume(step_sandbox.ReadOnlyVolume(step_sandbox.ConfigMapSource(name), mount_path))

    def volume(self, host_path: str, mount_path: str) -> Self:
        """A hostPath directory, read-write (steps may drop it with ``without_provider_volumes``)."""
        return self._with(volumes=(*self.settings.volumes, (host_path, mount_path)))

    def pvc_volume(self, claim: str, mount_path: str) -> Self:
        return self._with(pvc_volumes=(*self.settings.pvc_volumes, (claim, mount_path)))

    def managed_settings_preset(self, name: str, configmap: str) -> Self:
        """Register a ConfigMap (key ``managed-settings.json``) under a preset name."""
        return self._with(
            managed_settings_presets=frozen_map({**self.settings.managed_settings_presets, name: configmap})
        )

    def default_managed_settings(self, name: str) -> Self:
        """Preset for steps that name none; an unknown name fails each invocation."""
        return self._with(default_managed_settings=name)

    def claude_profile_configmap(self, configmap: str) -> Self:
        """Copy a ConfigMap's files into ``~/.claude``."""
        return self.claude_profile_configmap_at(configmap, "")

    def claude_profile_configmap_at(self, configmap: str, subdir: str) -> Self:
        """Copy a ConfigMap's files into ``~/.claude/<subdir>``; each subdir takes one ConfigMap."""
        return self._with(claude_profiles=profile.add_profile(self.settings.claude_profiles, configmap, subdir))

    # -- labels, scheduling, runtime --

    def pod_label(self, key: str, value: str) -> Self:
        _check_labels({key: value})
        return self._with(pod_labels=frozen_map({**self.settings.pod_labels, key: value}))

    def pod_labels(self, pod_labels: Mapping[str, str]) -> Self:
        """Replace every provider label."""
        _check_labels(pod_labels)
        return self._with(pod_labels=frozen_map(pod_labels))

    def egress_profile(self, name: str) -> Self:
        """Default ``ironflow.io/egress-profile`` label (network policies select on it)."""
        return self._with(egress_profile=name)

    def runtime_class(self, name: str) -> Self:
        """``spec.runtimeClassName``, e.g. ``gvisor``."""
        if not name.strip():
            raise errors.ConfigError("runtime class must not be empty")
        return self._with(runtime_class=name)

    def node_selector(self, key: str, value: str) -> Self:
        return self._with(node_selector=frozen_map({**self.settings.node_selector, key: value}))

    def toleration(self, toleration: Toleration) -> Self:
        return self._with(tolerations=(*self.settings.tolerations, toleration))

    def image_pull_secret(self, name: str) -> Self:
        return self._with(image_pull_secrets=(*self.settings.image_pull_secrets, name))

    def image_pull_policy(self, policy: ImagePullPolicy | str) -> Self:
        try:
            value = ImagePullPolicy(policy)
        except ValueError:
            known = ", ".join(p.value for p in ImagePullPolicy)
            raise errors.ConfigError(f"image_pull_policy must be one of {known}, got '{policy}'") from None
        return self._with(image_pull_policy=value)

    def resources(self, resources: K8sResources) -> Self:
        return self._with(resources=resources)

    def namespace(self, namespace: str) -> Self:
        if not namespace:
            raise errors.ConfigError("namespace must not be empty")
        return self._with(namespace=namespace)

    def claude_path(self, path: str) -> Self:
        return self._with(claude_path=path)

    def working_dir(self, path: str) -> Self:
        """Default working directory; a step's ``working_dir`` wins."""
        return self._with(working_dir=path)

    def service_account(self, name: str) -> Self:
        """Run pods as this account; the token is then mounted as the account decides."""
        return self._with(service_account=name)

    def env(self, name: str, value: str) -> Self:
        """A plain env var (visible in the pod spec: use ``env_from_secret`` for credentials)."""
        return self._with(env_vars=(*self.settings.env_vars, (name, value)))

    def input_init_image(self, image: str) -> Self:
        return self._with(input_init_image=image)

    def timeout(self, timeout: Seconds) -> Self:
        return self._with(timeout_s=seconds("timeout", timeout))

    def active_deadline_seconds(self, deadline: Seconds) -> Self:
        """Explicit ``activeDeadlineSeconds`` (whole seconds); the expiry still uses timeout + margin."""
        return self._with(active_deadline_s=seconds("active_deadline_seconds", deadline))

    def previous_attempt_timeout(self, limit: Seconds) -> Self:
        """How long to wait for a step's previous attempt to be deleted before relaunching."""
        return self._with(previous_attempt_timeout_s=seconds("previous_attempt_timeout", limit))

    def image_pull_grace(self, grace: Seconds) -> Self:
        """How long ErrImagePull / ImagePullBackOff is tolerated (the kubelet retries the pull)
        before the step ends with the reason; 0 ends it at the first failed pull. Default 60 s."""
        return self._with(image_pull_grace_s=seconds("image_pull_grace", grace, allow_zero=True))

    def cluster_config(self, cluster: clusters.ClusterConfig) -> Self:
        """Which API server steps run on: ``DefaultCluster(context)``, ``InCluster()``,
        ``KubeconfigFile(path, context)`` or ``KubeconfigInline(yaml, context)``."""
        return self._with(cluster=clusters.check_cluster(cluster, method="cluster_config"))

    def cluster(self, cluster: clusters.ClusterConfig) -> Self:
        """Short name of :meth:`cluster_config` (same check, same result)."""
        return self.cluster_config(cluster)

    def orphan_reaper(self, interval: Seconds) -> Self:
        """Reap expired objects every ``interval`` (the runtime starts the task)."""
        given = interval.total_seconds() if isinstance(interval, timedelta) else interval
        if not isinstance(given, bool) and isinstance(given, int | float) and given <= 0:
            raise errors.ConfigError("orphan reaper interval must be greater than zero")
        return self._with(orphan_reaper_interval_s=seconds("orphan reaper interval", interval))
