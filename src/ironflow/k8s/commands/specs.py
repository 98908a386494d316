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

A scratch volume is an ``emptyDir`` with a size limit, writable under a read-only root. Stdin
never enters the manifest: a PodRun given stdin runs its command with a FIFO in a memory
``emptyDir`` as stdin, and the bytes arrive after the pod starts over ``pods/exec`` stdin
(:func:`stdin_writer`), as a session's clone token does.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

from ironflow import errors, labels
from ironflow.k8s import hardening
from ironflow.kube import pod_problems, quantities

__all__ = [
    "STDIN_FIFO",
    "JobRunSettings",
    "PodRunSettings",
    "ResourceSpec",
    "ScratchVolume",
    "SecuritySpec",
    "check_duration",
    "check_labels",
    "check_mounts",
    "check_name",
    "check_path",
    "frozen",
    "job_manifest",
    "object_labels",
    "pod_manifest",
    "pvc_volume_name",
    "restricted_container_security",
    "restricted_pod_security",
    "scratch_volume_name",
    "stdin_writer",
]

#: The FIFO a PodRun given stdin reads it from, in a memory ``emptyDir`` of its own.
STDIN_FIFO: Final = "/ironflow-stdin/in"
_STDIN_VOLUME: Final = "ironflow-stdin"
#: Make the FIFO (or find the writer's), then run the command (``$0``) with it as stdin: the
#: open blocks until the writer opens it, and the writer closing it is the command's EOF.
_STDIN_SHELL: Final = f'mkfifo {STDIN_FIFO} 2>/dev/null; exec /bin/sh -c "$0" < {STDIN_FIFO}'


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


@dataclass(frozen=True)
class ScratchVolume:
    """An ``emptyDir`` mounted writable at ``mount_path``, at most ``size_limit`` (the kubelet
    evicts the pod past it); ``memory`` puts it in RAM (counted against the memory limit)."""

    mount_path: str
    size_limit: str = "1Gi"
    memory: bool = False

    def __post_init__(self) -> None:
        check_path(self.mount_path, what="scratch")
        problem = quantities.quantity_problem("scratch size_limit", self.size_limit, example="1Gi")
        if problem is not None:
            raise errors.ConfigError(problem)
        if quantities.quantity_value(self.size_limit) <= 0:
            raise errors.ConfigError(f"scratch size_limit must be greater than zero, got '{self.size_limit}'")

    def volume(self, name: str) -> dict[str, Any]:
        empty_dir: dict[str, Any] = {"sizeLimit": self.size_limit}
        if self.memory:
            empty_dir["medium"] = "Memory"
        return {"name": name, "emptyDir": empty_dir}


def scratch_volume_name(index: int) -> str:
    """``scratch`` for the first scratch volume, then ``scratch-1``, ``scratch-2``..."""
    return "scratch" if index == 0 else f"scratch-{index}"


def stdin_writer(size: int) -> tuple[str, ...]:
    """The exec that writes the first ``size`` bytes of its own stdin into the command's FIFO.

    ``pods/exec`` cannot close stdin, so the writer reads a known length and exits: its close
    is the command's EOF. A command that exits unread ends it too (the write fails).

    >>> stdin_writer(5)[-1]
    'mkfifo /ironflow-stdin/in 2>/dev/null; head -c 5 > /ironflow-stdin/in'
    """
    return ("/bin/sh", "-c", f"mkfifo {STDIN_FIFO} 2>/dev/null; head -c {int(size)} > {STDIN_FIFO}")


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


def check_path(mount_path: str, *, what: str = "pvc") -> None:
    """A volume mounts at an absolute path."""
    if not mount_path.startswith("/"):
        raise errors.ConfigError(f"{what} mount_path must be absolute, got '{mount_path}'")


def check_mounts(kind: str, paths: list[str]) -> None:
    """No two volumes at one path (nor at the stdin FIFO's directory)."""
    seen: set[str] = set()
    for path in paths:
        norm = path.rstrip("/") or "/"
        if norm in seen:
            raise errors.ConfigError(f"{kind}: two volumes mount at '{path}'; give each its own path")
        seen.add(norm)


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
    scratch: tuple[ScratchVolume, ...] = (),
    stdin: bool = False,
) -> dict[str, Any]:
    argv = ["/bin/sh", "-c", _STDIN_SHELL, command] if stdin else ["/bin/sh", "-c", command]
    container: dict[str, Any] = {"name": name, "image": image, "command": argv}
    if working_dir:
        container["workingDir"] = working_dir
    if env:
        container["env"] = [{"name": k, "value": v} for k, v in env]
    rendered = resources.render() if resources else {}
    if rendered:
        container["resources"] = rendered
    mounts = [{"name": pvc_volume_name(i), "mountPath": path} for i, (_, path) in enumerate(pvcs)]
    mounts += [{"name": scratch_volume_name(i), "mountPath": v.mount_path} for i, v in enumerate(scratch)]
    if stdin:
        mounts.append({"name": _STDIN_VOLUME, "mountPath": STDIN_FIFO.rsplit("/", 1)[0]})
    if mounts:
        container["volumeMounts"] = mounts
    if security_context:
        container["securityContext"] = dict(security_context)
    return container


def restricted_pod_security(uid: int, spec: SecuritySpec | None) -> dict[str, Any]:
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


def restricted_container_security(uid: int, read_only_root: bool) -> dict[str, Any]:
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


def _volumes(
    pvcs: tuple[tuple[str, str], ...], scratch: tuple[ScratchVolume, ...] = (), *, stdin: bool = False
) -> list[dict[str, Any]]:
    out = [
        {"name": pvc_volume_name(i), "persistentVolumeClaim": {"claimName": claim}} for i, (claim, _) in enumerate(pvcs)
    ]
    out += [v.volume(scratch_volume_name(i)) for i, v in enumerate(scratch)]
    if stdin:  # a FIFO takes no space: the limit only caps what else lands there
        out.append({"name": _STDIN_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}})
    return out


#: A PodRun's own component (a name here: the settings' ``labels`` field hides the module).
_POD_RUN: Final = labels.COMPONENT_POD_RUN


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
    scratch: tuple[ScratchVolume, ...] = ()
    #: Fed to the command after the pod starts, never rendered; may be secret, so never shown.
    stdin: bytes | None = field(default=None, repr=False)
    #: The pod's ``component`` label: ``claude-runner`` for a pod that reaches the auth proxy
    #: (the rendered NetworkPolicies open the proxy to those only).
    component: str = _POD_RUN


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
    stdin = s.stdin is not None
    paths = [p for _, p in s.pvcs] + [v.mount_path for v in s.scratch]
    check_mounts("PodRun", paths + ([STDIN_FIFO.rsplit("/", 1)[0]] if stdin else []))
    security_context: dict[str, Any] = {}
    if s.restricted_uid is not None:
        security_context = restricted_container_security(s.restricted_uid, s.restricted_read_only_root)
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
                scratch=s.scratch,
                stdin=stdin,
            )
        ],
        "restartPolicy": "Never",
        "enableServiceLinks": False,
    }
    if s.restricted_uid is not None:
        spec["securityContext"] = restricted_pod_security(s.restricted_uid, s.security)
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
    if s.pvcs or s.scratch or stdin:
        spec["volumes"] = _volumes(s.pvcs, s.scratch, stdin=stdin)
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
            object_labels(s.component, s.labels),
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
        security_context = restricted_container_security(s.restricted_uid, s.restricted_read_only_root)
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
        pod_spec["securityContext"] = restricted_pod_security(s.restricted_uid, None)
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
