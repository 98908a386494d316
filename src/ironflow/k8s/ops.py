"""``PodRun`` and ``JobRun``: run a plain command in a pod or a Job, then delete it.

For steps that are not agents (a ``cargo test`` check, a migration) but must obey the
same rules: every object carries ``app.kubernetes.io/managed-by=ironflow``, its
component (``pod-run`` / ``job-run``) and an ``ironflow.io/expires-at`` annotation, so
``release_run`` and the reaper find it. Tag them with ``LABEL_RUN_ID`` /
``LABEL_ROOT_RUN_ID`` and a run release deletes them too.

The values are frozen and their builders return copies; ``build_pod`` / ``build_job``
are pure (``now`` in, manifest out), and importing this module loads no API client.
``run`` is the only I/O (in :mod:`ironflow.k8s.ops_runtime`): create, wait on the
namespace's shared pod watch (never one poll loop per object), read the logs, delete on
every path after the create. A command that fails is a result with ``success=False``;
only the API or the clock failing is an error.

The reference's builders render exactly what they set, which Pod Security ``restricted``
refuses (no ``capabilities.drop: [ALL]``, no ``seccompProfile``). ``restricted()`` adds
what that profile demands — non-root uid, no privilege escalation, every capability
dropped, ``RuntimeDefault`` seccomp, no service-account token — so a PodRun or JobRun is
admitted in an agents namespace such as the example's ``ironflow-agents``.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, Protocol, Self

from ironflow import errors, labels
from ironflow.claude import layout
from ironflow.k8s import hardening

if TYPE_CHECKING:  # the builders stay pure: the API is imported only when a run starts
    from ironflow.kube import api as kube

__all__ = [
    "LABEL_ROOT_RUN_ID",
    "LABEL_RUN_ID",
    "LABEL_STEP",
    "JobRun",
    "JobRunSettings",
    "PodRun",
    "PodRunOutput",
    "PodRunSettings",
    "ResourceSpec",
    "SecuritySpec",
    "pvc_volume_name",
]

LABEL_RUN_ID: Final = labels.LABEL_RUN_ID
LABEL_ROOT_RUN_ID: Final = labels.LABEL_ROOT_RUN_ID
LABEL_STEP: Final = labels.LABEL_STEP


# --- values ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ResourceSpec:
    """CPU / memory quantities; an empty requests or limits map is left out of the pod."""

    cpu_request: str | None = None
    cpu_limit: str | None = None
    memory_request: str | None = None
    memory_limit: str | None = None

    def render(self) -> dict[str, Any]:
        requests = {k: v for k, v in (("cpu", self.cpu_request), ("memory", self.memory_request)) if v}
        limits = {k: v for k, v in (("cpu", self.cpu_limit), ("memory", self.memory_limit)) if v}
        out: dict[str, Any] = {}
        if requests:
            out["requests"] = requests
        if limits:
            out["limits"] = limits
        return out


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
class PodRunOutput:
    """How the command ended: ``phase`` is ``Succeeded`` or ``Failed``; logs are best effort.

    ``exit_code`` is the container's, when the kubelet recorded one (None otherwise).
    """

    success: bool
    logs: str
    phase: str
    exit_code: int | None = None


def pvc_volume_name(index: int) -> str:
    """``workspace`` for the first claim, then ``workspace-1``, ``workspace-2``..."""
    return "workspace" if index == 0 else f"workspace-{index}"


def _frozen(value: Mapping[str, str] | None) -> Mapping[str, str]:
    return MappingProxyType(dict(value or {}))


def _check_name(kind: str, name: str) -> None:
    # The name is also the container name (and for a Job, the job-name label value).
    if not labels.is_dns_label(name):
        raise errors.ConfigError(
            f"{kind} name '{name}' is not a valid name: use 1-63 lowercase letters, digits and '-', "
            "starting and ending with a letter or digit"
        )


def _check_labels(pairs: Mapping[str, str]) -> None:
    for key, value in pairs.items():
        if labels.is_reserved_label(key):
            raise errors.ConfigError(labels.reserved_label_message(key))
        if value != "" and not labels.is_valid_label_value(value):
            raise errors.ConfigError(
                f"label '{key}' has an invalid value '{value}'; pass it through sanitize_label_value"
            )


def _check_duration(what: str, seconds: float) -> float:
    if not seconds > 0:
        raise errors.ConfigError(f"{what} must be greater than zero, got {seconds}")
    return float(seconds)


def _check_path(mount_path: str) -> None:
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


# --- builders both share ----------------------------------------------------------------


class _CommonSettings(Protocol):
    @property
    def pvcs(self) -> tuple[tuple[str, str], ...]: ...

    @property
    def labels(self) -> Mapping[str, str]: ...


class _Builders:
    """The builders ``PodRun`` and ``JobRun`` share; each returns a changed copy."""

    settings: _CommonSettings

    @property
    def kind(self) -> str:
        """The operation kind recorded with the step: ``k8s``."""
        return "k8s"

    def _set(self, **changes: Any) -> Self:
        settings = dataclasses.replace(self.settings, **changes)  # type: ignore[type-var]
        return dataclasses.replace(self, settings=settings)  # type: ignore[type-var]

    def client(self, api: kube.KubeApi) -> Self:
        """The API connection ``run()`` uses."""
        return dataclasses.replace(self, api=api)  # type: ignore[type-var]

    def namespace(self, namespace: str) -> Self:
        return self._set(namespace=namespace)

    def pvc(self, claim: str, mount_path: str) -> Self:
        """Mount a claim; volumes are named ``workspace``, ``workspace-1``... in call order."""
        if not claim:
            raise errors.ConfigError("pvc claim name must not be empty")
        _check_path(mount_path)
        return self._set(pvcs=(*self.settings.pvcs, (claim, mount_path)))

    def automount_service_account_token(self, enabled: bool) -> Self:
        return self._set(automount_service_account_token=enabled)

    def allow_privilege_escalation(self, allowed: bool) -> Self:
        return self._set(allow_privilege_escalation=allowed)

    def restricted(self, uid: int = layout.SANDBOX_UID, *, read_only_root: bool = False) -> Self:
        """Meet Pod Security ``restricted``: run as ``uid`` (non-root; also group and
        fsGroup), no privilege escalation, drop ALL capabilities, seccomp ``RuntimeDefault``,
        no service-account token. The root filesystem stays writable (a build writes
        caches there) unless ``read_only_root``."""
        if isinstance(uid, bool) or not isinstance(uid, int) or uid <= 0:
            raise errors.ConfigError(f"restricted uid must be a positive integer (non-root), got {uid!r}")
        return self._set(restricted_uid=uid, restricted_read_only_root=read_only_root)

    def active_deadline_seconds(self, seconds: float) -> Self:
        """Deadline enforced by the kubelet (pod) or the Job controller, in whole seconds."""
        _check_duration("active_deadline_seconds", seconds)
        return self._set(active_deadline_seconds=max(1, int(seconds)))

    def timeout(self, seconds: float) -> Self:
        """How long ``run()`` waits for the end; also sets the expiry annotation."""
        return self._set(timeout_s=_check_duration("timeout", seconds))

    def poll_interval(self, seconds: float) -> Self:
        """Kept for the reference's API; unused: ``run()`` waits on a watch, it never polls."""
        return self._set(poll_interval_s=_check_duration("poll_interval", seconds))

    def label(self, key: str, value: str) -> Self:
        """Add a label; the two ``app.kubernetes.io/*`` keys ironflow sets are refused."""
        _check_labels({key: value})
        return self._set(labels=_frozen({**self.settings.labels, key: value}))

    def labels(self, pairs: Mapping[str, str]) -> Self:
        """Replace the caller labels; a reserved key anywhere in the map is refused."""
        _check_labels(pairs)
        return self._set(labels=_frozen(pairs))

    def expiry_margin(self, seconds: float) -> Self:
        """Added to the timeout for the ``expires-at`` annotation the reaper reads."""
        if seconds < 0:
            raise errors.ConfigError(f"expiry_margin must not be negative, got {seconds}")
        return self._set(expiry_margin_s=float(seconds))


# --- PodRun ------------------------------------------------------------------------------


@dataclass(frozen=True)
class PodRunSettings:
    """Everything a ``PodRun`` builder sets; defaults are the reference's."""

    namespace: str = "default"
    working_dir: str | None = None
    node_selector: Mapping[str, str] = field(default_factory=lambda: _frozen(None))
    image_pull_secret: str | None = None
    pvcs: tuple[tuple[str, str], ...] = ()
    resources: ResourceSpec | None = None
    security: SecuritySpec | None = None
    automount_service_account_token: bool | None = None
    allow_privilege_escalation: bool | None = None
    active_deadline_seconds: int | None = None
    timeout_s: float = 300.0
    poll_interval_s: float = 2.0
    labels: Mapping[str, str] = field(default_factory=lambda: _frozen(None))
    expiry_margin_s: float = 60.0
    runtime_class: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    restricted_uid: int | None = None
    restricted_read_only_root: bool = False


@dataclass(frozen=True)
class PodRun(_Builders):
    """One pod running ``/bin/sh -c command``; deleted when it ends, whatever happens.

    >>> run = PodRun("check", "rust:1.94", "cargo test").label(LABEL_RUN_ID, "r1")
    >>> pod = run.build_pod(now=1000)
    >>> pod["metadata"]["annotations"]["ironflow.io/expires-at"], pod["spec"]["restartPolicy"]
    ('1360', 'Never')
    """

    name: str
    image: str
    command: str
    settings: PodRunSettings = PodRunSettings()
    api: kube.KubeApi | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check_name("PodRun", self.name)
        if not self.image.strip():
            raise errors.ConfigError("PodRun image must not be empty")

    # -- builders --

    def working_dir(self, path: str) -> PodRun:
        return self._set(working_dir=path)

    def node_selector(self, key: str, value: str) -> PodRun:
        return self._set(node_selector=_frozen({**self.settings.node_selector, key: value}))

    def image_pull_secret(self, name: str) -> PodRun:
        return self._set(image_pull_secret=name)

    def resources(self, spec: ResourceSpec) -> PodRun:
        return self._set(resources=spec)

    def security(self, spec: SecuritySpec) -> PodRun:
        return self._set(security=spec)

    def runtime_class(self, name: str) -> PodRun:
        if not name.strip():
            raise errors.ConfigError("runtime class must not be empty")
        return self._set(runtime_class=name)

    def env(self, name: str, value: str) -> PodRun:
        """A plain env var; never a secret value (it would be readable in the pod spec)."""
        if not name:
            raise errors.ConfigError("env var name must not be empty")
        return self._set(env=(*self.settings.env, (name, value)))

    # -- rendering --

    def input(self) -> dict[str, str]:
        """What the operation was asked to run, for logs and step records (no secret)."""
        return {"image": self.image, "namespace": self.settings.namespace, "name": self.name, "command": self.command}

    def object_labels(self) -> dict[str, str]:
        """Caller labels plus the two ironflow labels, which always win."""
        return {
            **self.settings.labels,
            labels.LABEL_MANAGED_BY: labels.MANAGED_BY_VALUE,
            labels.LABEL_COMPONENT: labels.COMPONENT_POD_RUN,
        }

    def build_pod(self, *, now: int | None = None) -> dict[str, Any]:
        """The Pod manifest; ``now`` (unix seconds) fixes the expiry annotation."""
        s = self.settings
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
                    self.name,
                    self.image,
                    self.command,
                    working_dir=s.working_dir,
                    env=s.env,
                    resources=s.resources,
                    pvcs=s.pvcs,
                    security_context=security_context or None,
                )
            ],
            "restartPolicy": "Never",
        }
        if s.restricted_uid is not None:
            spec["securityContext"] = _restricted_pod(s.restricted_uid, s.security)
            spec["automountServiceAccountToken"] = False
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
                self.name,
                s.namespace,
                self.object_labels(),
                now=now,
                timeout_s=s.timeout_s,
                margin_s=s.expiry_margin_s,
            ),
            "spec": spec,
        }

    async def run(self, api: kube.KubeApi | None = None) -> PodRunOutput:
        """Create the pod, wait for it to end on the shared watch, read logs, delete it."""
        from ironflow.k8s import ops_runtime

        return await ops_runtime.run_pod(self, _need_api("PodRun", api or self.api))


# --- JobRun ------------------------------------------------------------------------------


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
    labels: Mapping[str, str] = field(default_factory=lambda: _frozen(None))
    expiry_margin_s: float = 60.0
    restricted_uid: int | None = None
    restricted_read_only_root: bool = False


@dataclass(frozen=True)
class JobRun(_Builders):
    """A ``batch/v1`` Job running ``/bin/sh -c command``; deleted (with its pods) when done.

    >>> job = JobRun("migrate", "postgres:16", "psql -f m.sql").build_job(now=0)
    >>> job["metadata"]["annotations"], job["spec"]["template"]["metadata"].get("annotations")
    ({'ironflow.io/expires-at': '660'}, None)
    """

    name: str
    image: str
    command: str
    settings: JobRunSettings = JobRunSettings()
    api: kube.KubeApi | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check_name("JobRun", self.name)
        if not self.image.strip():
            raise errors.ConfigError("JobRun image must not be empty")

    def backoff_limit(self, limit: int) -> JobRun:
        if limit < 0:
            raise errors.ConfigError(f"backoff_limit must not be negative, got {limit}")
        return self._set(backoff_limit=limit)

    def input(self) -> dict[str, Any]:
        return {
            "image": self.image,
            "namespace": self.settings.namespace,
            "name": self.name,
            "command": self.command,
            "backoff_limit": self.settings.backoff_limit,
        }

    def object_labels(self) -> dict[str, str]:
        return {
            **self.settings.labels,
            labels.LABEL_MANAGED_BY: labels.MANAGED_BY_VALUE,
            labels.LABEL_COMPONENT: labels.COMPONENT_JOB_RUN,
        }

    def build_job(self, *, now: int | None = None) -> dict[str, Any]:
        """The Job manifest; the expiry annotation sits on the Job only, not its pods."""
        s = self.settings
        _check_restricted("JobRun", s.restricted_uid, s.allow_privilege_escalation, s.automount_service_account_token)
        security_context: dict[str, Any] | None = (
            {"allowPrivilegeEscalation": s.allow_privilege_escalation}
            if s.allow_privilege_escalation is not None
            else None
        )
        if s.restricted_uid is not None:
            security_context = _restricted_container(s.restricted_uid, s.restricted_read_only_root)
        pod_spec: dict[str, Any] = {
            "containers": [
                _container(
                    self.name,
                    self.image,
                    self.command,
                    working_dir=None,
                    env=(),
                    resources=None,
                    pvcs=s.pvcs,
                    security_context=security_context,
                )
            ],
            "restartPolicy": "Never",
        }
        if s.pvcs:
            pod_spec["volumes"] = _volumes(s.pvcs)
        if s.automount_service_account_token is not None:
            pod_spec["automountServiceAccountToken"] = s.automount_service_account_token
        if s.restricted_uid is not None:
            pod_spec["securityContext"] = _restricted_pod(s.restricted_uid, None)
            pod_spec["automountServiceAccountToken"] = False
        spec: dict[str, Any] = {
            "backoffLimit": s.backoff_limit,
            "template": {"metadata": {"labels": self.object_labels()}, "spec": pod_spec},
        }
        if s.active_deadline_seconds is not None:
            spec["activeDeadlineSeconds"] = s.active_deadline_seconds
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": _metadata(
                self.name,
                s.namespace,
                self.object_labels(),
                now=now,
                timeout_s=s.timeout_s,
                margin_s=s.expiry_margin_s,
            ),
            "spec": spec,
        }

    async def run(self, api: kube.KubeApi | None = None) -> PodRunOutput:
        """Create the Job, wait for Complete/Failed, read its pod's logs, delete the Job."""
        from ironflow.k8s import ops_runtime

        return await ops_runtime.run_job(self, _need_api("JobRun", api or self.api))


def _need_api(kind: str, api: kube.KubeApi | None) -> kube.KubeApi:
    if api is None:
        raise errors.ConfigError(f"{kind}.run needs an API client: pass run(api) or build with .client(api)")
    return api
