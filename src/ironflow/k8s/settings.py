"""Every setting of the Kubernetes pod backend, as typed frozen values (pure).

:class:`ProviderSettings` is what the provider's builders and the settings file build,
once; the renderer (``step_manifests``) and the ``StepRunner`` (``step_runs``) read it and never the provider.
Values that can never work are refused at construction with
:class:`~ironflow.errors.ConfigError`; checks that need the step happen at invocation.

Invariant: the ``repr`` holds no credential (inline OAuth credentials and the
auth-proxy admin key are :class:`~ironflow.secrets.Secret`; plain env values show ``***``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Final

from ironflow import errors, labels, step_sandbox
from ironflow._renamed import warn_renamed
from ironflow.auth_proxy import relays as relay_specs
from ironflow.auth_proxy.git_hosts import GitHosts
from ironflow.claude import profile
from ironflow.egress import policy as egress_policy
from ironflow.k8s import environments, hardening
from ironflow.kube import clusters, pod_problems, quantities
from ironflow.secrets import Secret

__all__ = [
    "DEFAULT_IMAGE_PULL_GRACE_S",
    "DEFAULT_INPUT_INIT_IMAGE",
    "DEFAULT_PREVIOUS_ATTEMPT_TIMEOUT_S",
    "DEFAULT_SESSION_VOLUME_SIZE",
    "DEFAULT_TIMEOUT_S",
    "RESOURCE_FIELDS",
    "ImagePullPolicy",
    "K8sResources",
    "ProviderSettings",
    "Seconds",
    "SessionVolume",
    "Toleration",
    "frozen_map",
    "seconds",
]

DEFAULT_TIMEOUT_S: Final = 300.0
DEFAULT_PREVIOUS_ATTEMPT_TIMEOUT_S: Final = 60.0
DEFAULT_INPUT_INIT_IMAGE: Final = "curlimages/curl:8.10.1"
#: How long a failing image pull is tolerated before the step ends (the kubelet retries it).
DEFAULT_IMAGE_PULL_GRACE_S: Final = pod_problems.DEFAULT_IMAGE_PULL_GRACE_S

Seconds = float | int | timedelta

#: A sandbox session's HOME claim unless the provider says otherwise.
DEFAULT_SESSION_VOLUME_SIZE: Final = "1Gi"


def frozen_map(value: Mapping[str, str] | None) -> Mapping[str, str]:
    return MappingProxyType(dict(value or {}))


class ImagePullPolicy(StrEnum):
    ALWAYS = "Always"
    IF_NOT_PRESENT = "IfNotPresent"
    NEVER = "Never"


#: (field, requests/limits, the Kubernetes resource name, an example) for each setting of :class:`K8sResources`.
RESOURCE_FIELDS: Final = (
    ("cpu_request", "requests", "cpu", "500m"),
    ("memory_request", "requests", "memory", "1Gi"),
    ("ephemeral_storage_request", "requests", "ephemeral-storage", "2Gi"),
    ("cpu_limit", "limits", "cpu", "2"),
    ("memory_limit", "limits", "memory", "4Gi"),
    ("ephemeral_storage_limit", "limits", "ephemeral-storage", "10Gi"),
)


@dataclass(frozen=True, kw_only=True)
class K8sResources:
    """The agent container's requests and limits (Kubernetes quantities); None leaves one out.

    The defaults fit a Claude Code step that builds and tests code: the CLI alone (Node) peaks
    near 185 MiB on a short two-turn step with one Bash call (measured, Claude Code 2.1.332), a
    long conversation's context and the builds and test runs it starts take several times that, so
    1 GiB is requested and 4 GiB is the ceiling; half a core is requested (the agent mostly
    waits on the model) and two cores bound a runaway build. The limits are also the hostile-agent bound: memory and
    ephemeral storage cannot grow until the node evicts its neighbours. 10 GiB of ephemeral
    storage covers the size-limited emptyDirs (HOME 1 GiB, /tmp 512 MiB, a git workspace's
    clone and base copy up to 4 GiB each) plus logs; each emptyDir keeps its own tighter limit.
    :meth:`none` leaves all six to the namespace's LimitRange.
    """

    cpu_request: str | None = "500m"
    memory_request: str | None = "1Gi"
    ephemeral_storage_request: str | None = "2Gi"
    cpu_limit: str | None = "2"
    memory_limit: str | None = "4Gi"
    ephemeral_storage_limit: str | None = "10Gi"

    def __post_init__(self) -> None:
        for name, _, _, example in RESOURCE_FIELDS:
            value = getattr(self, name)
            problem = (
                None if value is None else quantities.quantity_problem(f"resources.{name}", value, example=example)
            )
            if problem is not None:
                raise errors.ConfigError(problem)
        for kind in ("cpu", "memory", "ephemeral_storage"):
            request, limit = getattr(self, f"{kind}_request"), getattr(self, f"{kind}_limit")
            if (
                request is not None
                and limit is not None
                and quantities.quantity_value(request) > quantities.quantity_value(limit)
            ):
                raise errors.ConfigError(
                    f"resources.{kind}_request {request} is above resources.{kind}_limit {limit}: "
                    f"lower {kind}_request too (or set it to none)"
                )

    @classmethod
    def from_keys(cls, values: Mapping[str, str], *, where: str = "resources") -> K8sResources:
        """The defaults with each key given replaced, as the provider file spells them; ``none`` drops one.

        >>> K8sResources.from_keys({"cpu_limit": "4", "ephemeral_storage_limit": "none"}).render()["limits"]
        {'cpu': '4', 'memory': '4Gi'}
        """
        known = [name for name, *_ in RESOURCE_FIELDS]
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise errors.ConfigError(f"{where}: unknown key '{unknown[0]}': known are {', '.join(known)}")
        return cls(**{name: None if value == "none" else value for name, value in values.items()})

    @classmethod
    def none(cls) -> K8sResources:
        """No requests and no limits: the namespace's LimitRange (if any) decides."""
        return cls(**{name: None for name, *_ in RESOURCE_FIELDS})

    def render(self) -> dict[str, Any] | None:
        blocks: dict[str, dict[str, str | None]] = {"requests": {}, "limits": {}}
        for name, block, resource, _ in RESOURCE_FIELDS:
            blocks[block][resource] = getattr(self, name)
        return quantities.container_resources(blocks["requests"], blocks["limits"]) or None


_OPERATORS: Final = ("Equal", "Exists")
_EFFECTS: Final = ("NoSchedule", "PreferNoSchedule", "NoExecute")


@dataclass(frozen=True)
class Toleration:
    """A pod toleration; fields left None are omitted from the manifest."""

    key: str | None = None
    operator: str | None = None
    value: str | None = None
    effect: str | None = None
    toleration_seconds: int | None = None

    def __post_init__(self) -> None:
        if self.operator is not None and self.operator not in _OPERATORS:
            raise errors.ConfigError(
                f"toleration operator must be one of {', '.join(_OPERATORS)}, got '{self.operator}'"
            )
        if self.effect is not None and self.effect not in _EFFECTS:
            raise errors.ConfigError(f"toleration effect must be one of {', '.join(_EFFECTS)}, got '{self.effect}'")
        if self.operator == "Exists" and self.value:
            raise errors.ConfigError("a toleration with operator Exists must not have a value")
        if self.key is None and self.operator != "Exists":
            raise errors.ConfigError("a toleration without a key must use operator Exists (it matches every taint)")
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise errors.ConfigError("toleration_seconds only applies to effect NoExecute")

    def render(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, key in (
            ("key", "key"),
            ("operator", "operator"),
            ("value", "value"),
            ("effect", "effect"),
            ("toleration_seconds", "tolerationSeconds"),
        ):
            value = getattr(self, name)
            if value is not None:
                out[key] = value
        return out


@dataclass(frozen=True)
class SessionVolume:
    """Where a session's HOME lives: a claim of ``storage_class`` of ``size``; with
    ``snapshot_class``, its snapshots and forks are VolumeSnapshots of that class.

    >>> SessionVolume("csi-hostpath").size
    '1Gi'
    """

    storage_class: str
    size: str = DEFAULT_SESSION_VOLUME_SIZE
    #: None: snapshots stay archives read through the runtime.
    snapshot_class: str | None = None

    def problem(self) -> str | None:
        """Why this volume cannot be used, or None."""
        if not labels.is_dns_subdomain(self.storage_class):
            return f"storage_class must be a StorageClass name, got '{errors.truncate(self.storage_class, 80)}'"
        if self.snapshot_class is not None and not labels.is_dns_subdomain(self.snapshot_class):
            return (
                f"snapshot_class must be a VolumeSnapshotClass name, got '{errors.truncate(self.snapshot_class, 80)}'"
            )
        return quantities.quantity_problem("size", self.size, example="1Gi")


@dataclass(frozen=True)
class ProviderSettings:
    """Every setting of the provider (§1.1); build it through the provider's builders."""

    image: str
    namespace: str = "default"
    claude_path: str = "claude"
    working_dir: str | None = None
    resources: K8sResources = field(default_factory=K8sResources)
    service_account: str | None = None
    image_pull_policy: ImagePullPolicy = ImagePullPolicy.IF_NOT_PRESENT
    #: (name, value) in insertion order; each name once.
    env_vars: tuple[tuple[str, str], ...] = ()
    image_pull_secrets: tuple[str, ...] = ()
    oauth_credentials: Secret | None = None
    #: Which API server to talk to; None is :class:`~ironflow.kube.clusters.DefaultCluster`.
    cluster: clusters.ClusterConfig | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    pod_labels: Mapping[str, str] = field(default_factory=lambda: frozen_map(None))
    #: (host path, mount path)
    volumes: tuple[tuple[str, str], ...] = ()
    #: (claim name, mount path)
    pvc_volumes: tuple[tuple[str, str], ...] = ()
    input_init_image: str = DEFAULT_INPUT_INIT_IMAGE
    node_selector: Mapping[str, str] = field(default_factory=lambda: frozen_map(None))
    tolerations: tuple[Toleration, ...] = ()
    active_deadline_s: float | None = None
    sandbox: hardening.SandboxSettings | None = None
    #: The PVC keeping Claude Code's conversations at ``~/.claude/projects`` (``conversations_volume``;
    #: the provider file's ``sandbox.sessions_claim``); None: each pod's conversations go with it.
    conversations_claim: str | None = None
    secret_env: tuple[step_sandbox.SecretEnvVar, ...] = ()
    #: (secret, key) holding the credentials JSON
    oauth_credentials_secret: tuple[str, str] | None = None
    read_only_volumes: tuple[step_sandbox.ReadOnlyVolume, ...] = ()
    managed_settings_presets: Mapping[str, str] = field(default_factory=lambda: frozen_map(None))
    default_managed_settings: str | None = None
    claude_profiles: tuple[profile.ClaudeProfile, ...] = ()
    egress_profile: str | None = None
    previous_attempt_timeout_s: float = DEFAULT_PREVIOUS_ATTEMPT_TIMEOUT_S
    #: ErrImagePull / ImagePullBackOff end the step only after this long; other reasons at once.
    image_pull_grace_s: float = DEFAULT_IMAGE_PULL_GRACE_S
    runtime_class: str | None = None
    auth_proxy_url: str | None = None
    auth_proxy_admin_key: Secret | None = None
    orphan_reaper_interval_s: float | None = None
    #: A persistent per-step PVC (§1.12); None: steps get none.
    environment: environments.EnvironmentVolume | None = None
    #: Sandbox sessions' HOME on a claim of this class (and their snapshots as VolumeSnapshots); None: an emptyDir.
    session_volume: SessionVolume | None = None
    #: The git hosts a git workspace clones from, their tokens kept in the auth proxy (the repr shows none).
    git_hosts: GitHosts | None = None
    #: Hosts every step reaches through the auth proxy with a credential it injects (values: in Secrets).
    relays: tuple[relay_specs.RelaySpec, ...] = ()
    #: What every step's egress proxy lets through (docs/egress.md); None: nothing but the model.
    egress: egress_policy.EgressPolicy | None = None
    #: The provider file's own ``egress_profiles:``, which ``--egress-profile`` may name beside the built-in ones.
    egress_profiles: Mapping[str, egress_policy.EgressPolicy] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        if not self.image.strip():
            raise errors.ConfigError("image must not be empty: name the claude-runner image to run")
        for check in _CHECKS:
            problem = check(self)
            if problem is not None:
                raise errors.ConfigError(problem)

    def __repr__(self) -> str:
        # Plain env values show as '***': a caller may still put a credential there
        # (refused at invocation when sandboxed or proxied, but a repr comes first).
        parts = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "env_vars":
                value = tuple((name, "***") for name, _ in value)
            elif isinstance(value, MappingProxyType):
                value = dict(value)
            parts.append(f"{f.name}={value!r}")
        return f"ProviderSettings({', '.join(parts)})"

    @property
    def sessions_claim(self) -> str | None:
        """The old name of :attr:`conversations_claim` (warns; goes in the next release)."""
        warn_renamed("ironflow.k8s.settings.ProviderSettings", "sessions_claim", "conversations_claim")
        return self.conversations_claim


def seconds(name: str, value: Seconds, *, allow_zero: bool = False) -> float:
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise errors.ConfigError(f"{name} must be a number of seconds or a timedelta, got {type(value).__name__}")
    if not math.isfinite(seconds) or seconds < 0 or (seconds == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise errors.ConfigError(f"{name} must be a finite number of seconds {bound}, got {seconds!r}")
    return float(seconds)


# --- the checks ProviderSettings makes when it is built (each names the setting) ----------------

_DNS_LABEL_RULE: Final = "1-63 lowercase letters, digits and '-', starting and ending with a letter or digit"
_DNS_SUBDOMAIN_RULE: Final = "lowercase letters, digits, '-' and '.', 1-253 characters"


def _names_problem(s: ProviderSettings) -> str | None:
    if not labels.is_dns_label(s.namespace):
        return f"namespace must be a DNS label ({_DNS_LABEL_RULE}), got '{s.namespace}'"
    if s.runtime_class is not None and s.runtime_class.strip() and not labels.is_dns_subdomain(s.runtime_class):
        return f"runtime_class must be a RuntimeClass name ({_DNS_SUBDOMAIN_RULE}), got '{s.runtime_class}'"
    return None


def _env_problem(s: ProviderSettings) -> str | None:
    seen: set[str] = set()
    for name, _ in s.env_vars:  # never the value: it may be a credential
        if not step_sandbox.is_env_name(name):
            return f"env name must be an environment variable name ([A-Za-z_][A-Za-z0-9_]*), got {name!r}"
        if name in seen:
            return f"env sets {name} twice; set each variable once"
        seen.add(name)
    return None


def _labels_problem(s: ProviderSettings) -> str | None:
    for where, pairs in (("pod_labels", s.pod_labels), ("node_selector", s.node_selector)):
        for key, value in pairs.items():
            problem = labels.label_key_problem(key) or labels.label_value_problem(key, value)
            if problem is not None:
                return f"{where}: {problem}"
    if s.egress_profile is not None and (not s.egress_profile or not labels.is_valid_label_value(s.egress_profile)):
        return (
            f"egress_profile must be a label value (up to 63 characters [A-Za-z0-9._-], alphanumeric at both "
            f"ends), got {s.egress_profile!r}"
        )
    return None


def _paths_problem(s: ProviderSettings) -> str | None:
    # A read-only host path is a pod_settings.HostPathSource, checked when it was made; a volume's is a
    # plain string, checked here by the same rule.
    for i, (host_path, _) in enumerate(s.volumes):
        try:
            step_sandbox.HostPathSource(host_path)
        except errors.ConfigError as exc:
            return f"volumes[{i}]: {exc.message}"
    return None


def _grace_problem(s: ProviderSettings) -> str | None:
    grace = s.image_pull_grace_s
    if isinstance(grace, bool) or not isinstance(grace, int | float):
        return f"image_pull_grace must be a number of seconds, got {type(grace).__name__}"
    if not math.isfinite(grace) or grace < 0:
        return f"image_pull_grace must be a finite number of seconds >= 0, got {grace!r}"
    return None


def _session_volume_problem(s: ProviderSettings) -> str | None:
    problem = None if s.session_volume is None else s.session_volume.problem()
    return None if problem is None else f"invalid session volume: {problem}"


_CHECKS: Final[tuple[Callable[[ProviderSettings], str | None], ...]] = (
    _grace_problem,
    _session_volume_problem,
    _names_problem,
    _env_problem,
    _labels_problem,
    _paths_problem,
)
