"""What a ``PodRun`` or a ``JobRun`` is made of, and the manifest it renders (pure).

The settings the builders of :mod:`ironflow.k8s.commands.pod_runs` set, their checks, and the Pod
or Job they render: ``now`` in, manifest out; no I/O and no API client. Every object
carries ``app.kubernetes.io/managed-by=ironflow``, its component (``pod-run`` /
``job-run``) and an ``ironflow.io/expires-at`` annotation (now + timeout + margin), so
``release_run`` and the reaper find it. No pod gets service links (``enableServiceLinks: false``):
no other Service's address lands in its env.

``restricted`` adds what Pod Security ``restricted`` demands — non-root uid, no privilege
escalation, every capability dropped, ``RuntimeDefault`` seccomp, no service-account
token — from the agent pod's own posture (:mod:`ironflow.k8s.hardening`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ironflow import errors, labels
from ironflow.k8s import hardening
from ironflow.kube import pod_problems, quantities

__all__ = [
    "JobRunSettings",
    "PodRunSettings",
    "ResourceSpec",
    "SecuritySpec",
    "check_duration",
    "check_labels",
    "check_name",
    "check_path",
    "frozen",
    "job_manifest",
    "object_labels",
    "pod_manifest",
    "pvc_volume_name",
]


@dataclass(frozen=True)
class ResourceSpec:
    """CPU / memory / ephemeral-storage quantities; an empty requests or limits map is left out of the pod."""

    cpu_request: str | None = None
    cpu_limit: str | None = None
    memory_request: str | None = None
    memory_limit: str | None = None
    ephemeral_storage_request: str | None = None
    ephemeral_storage_limit: str | None = None

    def render(self) -> dict[str, Any]:
        return quantities.container_resources(
            {
                "cpu": self.cpu_request,
                "memory": self.memory_request,
                "ephemeral-storage": self.ephemeral_storage_request,
            },
            {"cpu": self.cpu_limit, "memory": self.memory_limit, "ephemeral-storage": self.ephemeral_storage_limit},
        )


@dataclass(frozen=True)
class SecuritySpec:
    """Run as a non-root uid/gid; ``fs_group`` owns the mounted volumes."""

    run_as_user: int | None = None
    run_as_group: int | None = None
    fs_group: int | None = None

    def __post_init__(self) -> None:
        for name in ("run_as_user", "run_as_group", "fs_group"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise errors.ConfigError(f"security {name} must not be negative, got {value}")
        if self.run_as_user == 0:
            raise errors.ConfigError("security run_as_user must be greater than 0: the pod runs as non-root")


def pvc_volume_name(index: int) -> str:
    """``workspace`` for the first claim, then ``workspace-1``, ``workspace-2``..."""
    return "workspace" if index == 0 else f"workspace-{index}"


def frozen(value: Mapping[str, str] | None) -> Mapping[str, str]:
    """A read-only copy: the values are frozen, so their maps are too."""
    return MappingProxyType(dict(value or {}))


def check_name(kind: str, name: str) -> None:
    """The object name is a DNS label."""
    # The name is also the container name (and for a Job, the job-name label value).
    if not labels.is_dns_label(name):
        raise errors.ConfigError(
            f"{kind} name '{name}' is not a valid name: use 1-63 lowercase letters, digits and '-', "
            "starting and ending with a letter or digit"
        )


def check_labels(pairs: Mapping[str, str]) -> None:
    """Caller labels: no reserved key, only values Kubernetes accepts."""
    for key, value in pairs.items():
        if labels.is_reserved_label(key):
            raise errors.ConfigError(labels.reserved_label_message(key))
        if value != "" and not labels.is_valid_label_value(value):
            raise errors.ConfigError(
                f"label '{key}' has an invalid value '{value}'; pass it through sanitize_label_value"
            )


def check_duration(what: str, seconds: float) -> float:
    """``seconds`` as a float, refused unless greater than zero."""
    if not seconds > 0:
        raise errors.ConfigError(f"{what} must be greater than zero, got {seconds}")
    return float(seconds)


def check_path(mount_path: str) -> None:
    """A claim mounts at an absolute path."""
    if not mount_path.startswith("/"):
        raise errors.ConfigError(f"pvc mount_path must be absolute, got '{mount_path}'")


def _metadata(
    name: str, namespace: str, object_labels: dict[str, str], *, now: int | None, timeout_s: float, margin_s: float
) -> dict[str, Any]:
    """The object's name and labels, and the expiry the reaper reads: now + timeout + margin."""
    base = int(time.time()) if now is None else now
    return {
        "name": name,
        "namespace": namespace,
        "labels": object_labels,
        "annotations": {labels.ANNOTATION_EXPIRES_AT: str(base + int(timeout_s) + int(margin_s))},
    }


def _container(
    name: str,
    image: str,
    command: str,
    *,
    working_dir: str | None,
    env: tuple[tuple[str, str], ...],
    resources: ResourceSpec | None,
    pvcs: tuple[tuple[str, str], ...],
    security_context: Mapping[str, Any] | None,
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": name, "image": image, "command": ["/bin/sh", "-c", command]}
    if working_dir:
        container["workingDir"] = working_dir
    if env:
        container["env"] = [{"name": k, "value": v} for k, v in env]
    rendered = resources.render() if resources else {}
    if rendered:
        container["resources"] = rendered
    if pvcs:
        container["volumeMounts"] = [
            {"name": pvc_volume_name(i), "mountPath": path} for i, (_, path) in enumerate(pvcs)
        ]
    if security_context:
        container["securityContext"] = dict(security_context)
    return container


def _restricted_pod(uid: int, spec: SecuritySpec | None) -> dict[str, Any]:
    # The agent pod's posture (hardening), with a SecuritySpec's own group/fsGroup winning.
    out = hardening.pod_security_context(hardening.SandboxSettings(run_as_user=uid))
    if spec is not None and spec.run_as_user not in (None, uid):
        raise errors.ConfigError(
            f"PodRun: restricted({uid}) and security(run_as_user={spec.run_as_user}) name two uids; pass one"
        )
    if spec is not None:
        for key, value in (("runAsGroup", spec.run_as_group), ("fsGroup", spec.fs_group)):
            if value is not None:
                out[key] = value
    return out


def _restricted_container(uid: int, read_only_root: bool) -> dict[str, Any]:
    settings = hardening.SandboxSettings(run_as_user=uid, writable_root=not read_only_root)
    return {**hardening.container_security_context(settings), "runAsUser": uid}


def _check_restricted(kind: str, uid: int | None, escalation: bool | None, token: bool | None) -> None:
    # Builders are order-free, so a contradiction is found when the manifest is rendered.
    if uid is None:
        return
    if escalation:
        raise errors.ConfigError(
            f"{kind}: restricted() forbids privilege escalation; drop allow_privilege_escalation(True)"
        )
    if token:
        raise errors.ConfigError(
            f"{kind}: restricted() mounts no service-account token; drop automount_service_account_token(True)"
        )


def _volumes(pvcs: tuple[tuple[str, str], ...]) -> list[dict[str, Any]]:
    return [
        {"name": pvc_volume_name(i), "persistentVolumeClaim": {"claimName": claim}} for i, (claim, _) in enumerate(pvcs)
    ]


@dataclass(frozen=True)
class PodRunSettings:
    """Everything a ``PodRun`` builder sets; defaults are the reference's."""

    namespace: str = "default"
    working_dir: str | None = None
    node_selector: Mapping[str, str] = field(default_factory=lambda: frozen(None))
    image_pull_secret: str | None = None
    pvcs: tuple[tuple[str, str], ...] = ()
    resources: ResourceSpec | None = None
    security: SecuritySpec | None = None
    automount_service_account_token: bool | None = None
    allow_privilege_escalation: bool | None = None
    active_deadline_seconds: int | None = None
    timeout_s: float = 300.0
    poll_interval_s: float = 2.0
    labels: Mapping[str, str] = field(default_factory=lambda: frozen(None))
    expiry_margin_s: float = 60.0
    runtime_class: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    restricted_uid: int | None = None
    restricted_read_only_root: bool = False
    #: How long a failing image pull is tolerated (the kubelet retries it) before the run ends.
    image_pull_grace_s: float = pod_problems.DEFAULT_IMAGE_PULL_GRACE_S


@dataclass(frozen=True)
class JobRunSettings:
    """Everything a ``JobRun`` builder sets; defaults are the reference's."""

    namespace: str = "default"
    backoff_limit: int = 0
    pvcs: tuple[tuple[str, str], ...] = ()
    automount_service_account_token: bool | None = None
    allow_privilege_escalation: bool | None = None
    active_deadline_seconds: int | None = None
    timeout_s: float = 600.0
    poll_interval_s: float = 2.0
    labels: Mapping[str, str] = field(default_factory=lambda: frozen(None))
    expiry_margin_s: float = 60.0
    restricted_uid: int | None = None
    restricted_read_only_root: bool = False
    #: How long a pod's failing image pull is tolerated before the run ends with it.
    image_pull_grace_s: float = pod_problems.DEFAULT_IMAGE_PULL_GRACE_S


def object_labels(component: str, caller: Mapping[str, str]) -> dict[str, str]:
    """Caller labels plus the two ironflow labels, which always win."""
    return {**caller, labels.LABEL_MANAGED_BY: labels.MANAGED_BY_VALUE, labels.LABEL_COMPONENT: component}


def pod_manifest(name: str, image: str, command: str, s: PodRunSettings, *, now: int | None = None) -> dict[str, Any]:
    """The Pod manifest; ``now`` (unix seconds) fixes the expiry annotation."""
    _check_restricted("PodRun", s.restricted_uid, s.allow_privilege_escalation, s.automount_service_account_token)
    security_context: dict[str, Any] = {}
    if s.restricted_uid is not None:
        security_context = _restricted_container(s.restricted_uid, s.restricted_read_only_root)
    elif s.allow_privilege_escalation is not None:
        security_context["allowPrivilegeEscalation"] = s.allow_privilege_escalation
    if s.security is not None and s.restricted_uid is None:
        security_context["runAsNonRoot"] = True
        if s.security.run_as_user is not None:
            security_context["runAsUser"] = s.security.run_as_user
        if s.security.run_as_group is not None:
            security_context["runAsGroup"] = s.security.run_as_group
    spec: dict[str, Any] = {
        "containers": [
            _container(
                name,
                image,
                command,
                working_dir=s.working_dir,
                env=s.env,
                resources=s.resources,
                pvcs=s.pvcs,
                security_context=security_context or None,
            )
        ],
        "restartPolicy": "Never",
        "enableServiceLinks": False,
    }
    if s.restricted_uid is not None:
        spec["securityContext"] = _restricted_pod(s.restricted_uid, s.security)
        spec["automountServiceAccountToken"] = False
        spec["terminationGracePeriodSeconds"] = hardening.STEP_TERMINATION_GRACE_S
    elif s.security is not None:
        pod_security: dict[str, Any] = {"runAsNonRoot": True}
        if s.security.fs_group is not None:
            pod_security["fsGroup"] = s.security.fs_group
        spec["securityContext"] = pod_security
    if s.node_selector:
        spec["nodeSelector"] = dict(s.node_selector)
    if s.image_pull_secret:
        spec["imagePullSecrets"] = [{"name": s.image_pull_secret}]
    if s.pvcs:
        spec["volumes"] = _volumes(s.pvcs)
    if s.automount_service_account_token is not None:
        spec["automountServiceAccountToken"] = s.automount_service_account_token
    if s.active_deadline_seconds is not None:
        spec["activeDeadlineSeconds"] = s.active_deadline_seconds
    if s.runtime_class is not None:
        spec["runtimeClassName"] = s.runtime_class
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _metadata(
            name,
            s.namespace,
            object_labels(labels.COMPONENT_POD_RUN, s.labels),
            now=now,
            timeout_s=s.timeout_s,
            margin_s=s.expiry_margin_s,
        ),
        "spec": spec,
    }


def job_manifest(name: str, image: str, command: str, s: JobRunSettings, *, now: int | None = None) -> dict[str, Any]:
    """The Job manifest; the expiry annotation sits on the Job only, not its pods."""
    _check_restricted("JobRun", s.restricted_uid, s.allow_privilege_escalation, s.automount_service_account_token)
    security_context: dict[str, Any] | None = (
        {"allowPrivilegeEscalation": s.allow_privilege_escalation} if s.allow_privilege_escalation is not None else None
    )
    if s.restricted_uid is not None:
        security_context = _restricted_container(s.restricted_uid, s.restricted_read_only_root)
    pod_spec: dict[str, Any] = {
        "containers": [
            _container(
                name,
                image,
                command,
                working_dir=None,
                env=(),
                resources=None,
                pvcs=s.pvcs,
                security_context=security_context,
            )
        ],
        "restartPolicy": "Never",
        "enableServiceLinks": False,
    }
    if s.pvcs:
        pod_spec["volumes"] = _volumes(s.pvcs)
    if s.automount_service_account_token is not None:
        pod_spec["automountServiceAccountToken"] = s.automount_service_account_token
    if s.restricted_uid is not None:
        pod_spec["securityContext"] = _restricted_pod(s.restricted_uid, None)
        pod_spec["automountServiceAccountToken"] = False
        pod_spec["terminationGracePeriodSeconds"] = hardening.STEP_TERMINATION_GRACE_S
    spec: dict[str, Any] = {
        "backoffLimit": s.backoff_limit,
        "template": {"metadata": {"labels": object_labels(labels.COMPONENT_JOB_RUN, s.labels)}, "spec": pod_spec},
    }
    if s.active_deadline_seconds is not None:
        spec["activeDeadlineSeconds"] = s.active_deadline_seconds
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _metadata(
            name,
            s.namespace,
            object_labels(labels.COMPONENT_JOB_RUN, s.labels),
            now=now,
            timeout_s=s.timeout_s,
            margin_s=s.expiry_margin_s,
        ),
        "spec": spec,
    }
