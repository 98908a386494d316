"""Typed values for the agent-sandbox kinds, both API versions: Sandbox (:class:`AgentSandbox`),
SandboxTemplate, SandboxClaim, SandboxWarmPool (pure data, frozen).

A value is what the user means; :mod:`ironflow.agent_sandbox.rendering` turns it into the
object of its ``api_version`` and checks it. The two versions differ where the seed and the
current release differ, and a field of the other version is refused at render time:

=========================  ==================================  ==================================
field                      v1alpha1 (v0.4.x, the seed)         v1beta1 (v0.5+, 1.0)
=========================  ==================================  ==================================
Sandbox suspend            ``replicas`` 0 or 1                 ``operatingMode`` Running/Suspended
claim -> pool/template     ``sandboxTemplateRef`` + ``warmpool``  ``warmPoolRef.name`` (a pool)
                           policy (none, default, <pool>)
claim lifecycle            ``spec.lifecycle``                  ``spec.lifecycle``
Sandbox lifecycle          inline in ``spec``                  inline in ``spec``
claim VCTs, template       no                                  yes
``volumeClaimTemplatesPolicy``
=========================  ==================================  ==================================

Builders never hold a credential: a claim's env is visible in the API, so the auth-proxy
token never goes there (the provider writes it into the sandbox over exec).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, Final, TypeVar

from ironflow._renamed import renamed_names

__all__ = [
    "CORE_GROUP",
    "EXTENSIONS_GROUP",
    "AgentSandbox",
    "AgentSandboxObject",
    "ApiVersion",
    "ClaimEnvVar",
    "EnvVarsInjectionPolicy",
    "Lifecycle",
    "NetworkPolicyManagement",
    "NetworkPolicyRules",
    "OperatingMode",
    "PodTemplate",
    "SandboxClaim",
    "SandboxTemplate",
    "SandboxWarmPool",
    "ShutdownPolicy",
    "UpdateStrategy",
    "VolumeClaimTemplate",
    "VolumeClaimTemplatesPolicy",
    "frozen_map",
]

CORE_GROUP: Final = "agents.x-k8s.io"
EXTENSIONS_GROUP: Final = "extensions.agents.x-k8s.io"


class ApiVersion(StrEnum):
    V1ALPHA1 = "v1alpha1"
    V1BETA1 = "v1beta1"


class ShutdownPolicy(StrEnum):
    """``DeleteForeground`` exists on claims only."""

    DELETE = "Delete"
    DELETE_FOREGROUND = "DeleteForeground"
    RETAIN = "Retain"


class OperatingMode(StrEnum):
    RUNNING = "Running"
    SUSPENDED = "Suspended"


class EnvVarsInjectionPolicy(StrEnum):
    DISALLOWED = "Disallowed"
    ALLOWED = "Allowed"
    OVERRIDES = "Overrides"


VolumeClaimTemplatesPolicy = EnvVarsInjectionPolicy


class NetworkPolicyManagement(StrEnum):
    MANAGED = "Managed"
    UNMANAGED = "Unmanaged"


class UpdateStrategy(StrEnum):
    ON_REPLENISH = "OnReplenish"
    RECREATE = "Recreate"


def frozen_map(value: Mapping[str, str] | None = None) -> Mapping[str, str]:
    """A read-only copy (the default of every label and annotation field)."""
    return MappingProxyType(dict(value or {}))


def _map() -> Mapping[str, str]:
    return frozen_map()


@dataclass(frozen=True)
class PodTemplate:
    """``podTemplate``: labels, annotations and a full core PodSpec (a plain dict)."""

    spec: Mapping[str, Any]
    labels: Mapping[str, str] = field(default_factory=_map)
    annotations: Mapping[str, str] = field(default_factory=_map)


@dataclass(frozen=True)
class VolumeClaimTemplate:
    """One PVC template; the controller names the PVC ``<name>-<sandbox>`` and mounts it as volume ``name``."""

    name: str
    storage: str = "5Gi"
    access_modes: tuple[str, ...] = ("ReadWriteOnce",)
    storage_class_name: str | None = None
    labels: Mapping[str, str] = field(default_factory=_map)


@dataclass(frozen=True)
class NetworkPolicyRules:
    """Custom rules of a managed NetworkPolicy; an empty tuple denies that direction."""

    ingress: tuple[Mapping[str, Any], ...] = ()
    egress: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class Lifecycle:
    """Expiry of a claim (``spec.lifecycle``); ``shutdown_time`` is RFC 3339, e.g. ``2026-12-31T23:59:59Z``."""

    shutdown_time: str | None = None
    shutdown_policy: ShutdownPolicy | None = None
    ttl_seconds_after_finished: int | None = None


@dataclass(frozen=True)
class ClaimEnvVar:
    """A per-claim env var (needs the template's ``envVarsInjectionPolicy``; forces a cold start)."""

    name: str
    value: str
    container_name: str | None = None

    def __repr__(self) -> str:
        # A claim's env is visible to anyone who can read claims; still, never echo values.
        return f"ClaimEnvVar(name={self.name!r}, value='***', container_name={self.container_name!r})"


_T = TypeVar("_T")


class _Replace:
    def replace(self: _T, **changes: Any) -> _T:
        """A copy with ``changes`` (dataclass field names)."""
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]


@dataclass(frozen=True)
class AgentSandbox(_Replace):
    """``agents.x-k8s.io`` Sandbox: one pod, optional PVCs from templates, optional headless Service.

    Named after the project so it is not taken for the ``Sandbox`` handle a sandbox session hands
    out; the kind stays ``Sandbox``."""

    name: str
    pod_template: PodTemplate
    namespace: str = "default"
    api_version: ApiVersion = ApiVersion.V1BETA1
    volume_claim_templates: tuple[VolumeClaimTemplate, ...] = ()
    shutdown_time: str | None = None
    shutdown_policy: ShutdownPolicy | None = None
    service: bool | None = None
    #: v1beta1 only
    operating_mode: OperatingMode | None = None
    #: v1alpha1 only: 0 (suspended) or 1
    replicas: int | None = None
    labels: Mapping[str, str] = field(default_factory=_map)
    annotations: Mapping[str, str] = field(default_factory=_map)

    kind: ClassVar[str] = "Sandbox"


@dataclass(frozen=True)
class SandboxTemplate(_Replace):
    """``extensions.agents.x-k8s.io`` SandboxTemplate: the blueprint claims and warm pools copy."""

    name: str
    pod_template: PodTemplate
    namespace: str = "default"
    api_version: ApiVersion = ApiVersion.V1BETA1
    volume_claim_templates: tuple[VolumeClaimTemplate, ...] = ()
    network_policy_management: NetworkPolicyManagement | None = None
    #: None: the controller's secure default (Managed only)
    network_policy: NetworkPolicyRules | None = None
    env_vars_injection_policy: EnvVarsInjectionPolicy | None = None
    #: v1beta1 only
    volume_claim_templates_policy: VolumeClaimTemplatesPolicy | None = None
    service: bool | None = None
    labels: Mapping[str, str] = field(default_factory=_map)
    annotations: Mapping[str, str] = field(default_factory=_map)

    kind: ClassVar[str] = "SandboxTemplate"

    @property
    def injection_policy(self) -> EnvVarsInjectionPolicy:
        """The effective policy (the CRD default is Disallowed)."""
        return self.env_vars_injection_policy or EnvVarsInjectionPolicy.DISALLOWED


@dataclass(frozen=True)
class SandboxClaim(_Replace):
    """``extensions.agents.x-k8s.io`` SandboxClaim: one sandbox from a pool (v1beta1) or a template (v1alpha1).

    ``warm_pool`` is the pool name in v1beta1 (required), the policy (``none``, ``default``
    or a pool name) in v1alpha1; ``template`` is the v1alpha1 ``sandboxTemplateRef``.
    """

    name: str
    namespace: str = "default"
    api_version: ApiVersion = ApiVersion.V1BETA1
    warm_pool: str | None = None
    template: str | None = None
    lifecycle: Lifecycle | None = None
    pod_labels: Mapping[str, str] = field(default_factory=_map)
    pod_annotations: Mapping[str, str] = field(default_factory=_map)
    env: tuple[ClaimEnvVar, ...] = ()
    #: v1beta1 only; forces a cold start
    volume_claim_templates: tuple[VolumeClaimTemplate, ...] = ()
    labels: Mapping[str, str] = field(default_factory=_map)
    annotations: Mapping[str, str] = field(default_factory=_map)

    kind: ClassVar[str] = "SandboxClaim"


@dataclass(frozen=True)
class SandboxWarmPool(_Replace):
    """``extensions.agents.x-k8s.io`` SandboxWarmPool: ``replicas`` idle sandboxes of a template."""

    name: str
    template: str
    namespace: str = "default"
    api_version: ApiVersion = ApiVersion.V1BETA1
    #: v1alpha1 requires it; v1beta1 defaults to 1
    replicas: int | None = None
    update_strategy: UpdateStrategy | None = None
    labels: Mapping[str, str] = field(default_factory=_map)
    annotations: Mapping[str, str] = field(default_factory=_map)

    kind: ClassVar[str] = "SandboxWarmPool"


AgentSandboxObject = AgentSandbox | SandboxTemplate | SandboxClaim | SandboxWarmPool


# The old names (ironflow._renamed), for one release: a type checker reads an alias, a run warns.
if TYPE_CHECKING:
    Sandbox = AgentSandbox
else:
    __getattr__ = renamed_names(__name__)
