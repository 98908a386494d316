"""``PodRun`` and ``JobRun``: run a plain command in a pod or a Job, then delete it.

For steps that are not agents (a ``cargo test`` check, a migration) but must obey the
same rules: every object carries ``app.kubernetes.io/managed-by=ironflow``, its
component (``pod-run`` / ``job-run``) and an ``ironflow.io/expires-at`` annotation, so
``release_run`` and the reaper find it. Tag them with ``LABEL_RUN_ID`` /
``LABEL_ROOT_RUN_ID`` and a run release deletes them too.

The values are frozen and their builders return copies; ``build_pod`` / ``build_job``
are pure (``now`` in, manifest out). ``run`` is the only I/O: create, wait on the
namespace's shared pod watch (never one poll loop per object), read the logs, delete on
every path after the create. A command that fails is a result with ``success=False``;
only the API or the clock failing is an error.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

from ironflow import errors
from ironflow.k8s import labels

if TYPE_CHECKING:  # the builders stay pure: the API is imported only when a run starts
    from ironflow.k8s import api as kube

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

_DNS_LABEL: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_MAX_NAME: Final = 63


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
    """How the command ended: ``phase`` is ``Succeeded`` or ``Failed``; logs are best effort."""

    success: bool
    logs: str
    phase: str


def pvc_volume_name(index: int) -> str:
    """``workspace`` for the first claim, then ``workspace-1``, ``workspace-2``..."""
    return "workspace" if index == 0 else f"workspace-{index}"


def _frozen(value: Mapping[str, str] | None) -> Mapping[str, str]:
    return MappingProxyType(dict(value or {}))


def _check_name(kind: str, name: str) -> None:
    # The name is also the container name (and for a Job, the job-name label value).
    if len(name) > _MAX_NAME or not _DNS_LABEL.fullmatch(name):
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


def _expiry(now: int | None, timeout_s: float, margin_s: float) -> str:
    base = int(time.time()) if now is None else now
    return str(base + int(timeout_s) + int(margin_s))


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


def _volumes(pvcs: tuple[tuple[str, str], ...]) -> list[dict[str, Any]]:
    return [
        {"name": pvc_volume_name(i), "persistentVolumeClaim": {"claimName": claim}} for i, (claim, _) in enumerate(pvcs)
    ]


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


@dataclass(frozen=True)
class PodRun:
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

    @property
    def kind(self) -> str:
        """The operation kind recorded with the step: ``k8s``."""
        return "k8s"

    def _set(self, **changes: Any) -> PodRun:
        return dataclasses.replace(self, settings=dataclasses.replace(self.settings, **changes))

    # -- builders --

    def client(self, api: kube.KubeApi) -> PodRun:
        """The API connection ``run()`` uses."""
        return dataclasses.replace(self, api=api)

    def namespace(self, namespace: str) -> PodRun:
        return self._set(namespace=namespace)

    def working_dir(self, path: str) -> PodRun:
        return self._set(working_dir=path)

    def node_selector(self, key: str, value: str) -> PodRun:
        return self._set(node_selector=_frozen({**self.settings.node_selector, key: value}))

    def image_pull_secret(self, name: str) -> PodRun:
        return self._set(image_pull_secret=name)

    def pvc(self, claim: str, mount_path: str) -> PodRun:
        """Mount a claim; volumes are named ``workspace``, ``workspace-1``... in call order."""
        if not claim:
            raise errors.ConfigError("pvc claim name must not be empty")
        _check_path(mount_path)
        return self._set(pvcs=(*self.settings.pvcs, (claim, mount_path)))

    def resources(self, spec: ResourceSpec) -> PodRun:
        return self._set(resources=spec)

    def security(self, spec: SecuritySpec) -> PodRun:
        return self._set(security=spec)

    def automount_service_account_token(self, enabled: bool) -> PodRun:
        return self._set(automount_service_account_token=enabled)

    def allow_privilege_escalation(self, allowed: bool) -> PodRun:
        return self._set(allow_privilege_escalation=allowed)

    def active_deadline_seconds(self, seconds: float) -> PodRun:
        """Kubelet-enforced deadline, in whole seconds (truncated)."""
        _check_duration("active_deadline_seconds", seconds)
        return self._set(active_deadline_seconds=max(1, int(seconds)))

    def timeout(self, seconds: float) -> PodRun:
        return self._set(timeout_s=_check_duration("timeout", seconds))

    def poll_interval(self, seconds: float) -> PodRun:
        """How often the watch cache is re-read if no event arrives (a safety net, not polling)."""
        return self._set(poll_interval_s=_check_duration("poll_interval", seconds))

    def label(self, key: str, value: str) -> PodRun:
        """Add a label; the two ``app.kubernetes.io/*`` keys ironflow sets are refused."""
        _check_labels({key: value})
        return self._set(labels=_frozen({**self.settings.labels, key: value}))

    def labels(self, pairs: Mapping[str, str]) -> PodRun:
        """Replace the caller labels; a reserved key anywhere in the map is refused."""
        _check_labels(pairs)
        return self._set(labels=_frozen(pairs))

    def expiry_margin(self, seconds: float) -> PodRun:
        """Added to the timeout for the ``expires-at`` annotation the reaper reads."""
        if seconds < 0:
            raise errors.ConfigError(f"expiry_margin must not be negative, got {seconds}")
        return self._set(expiry_margin_s=float(seconds))

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
        security_context: dict[str, Any] = {}
        if s.allow_privilege_escalation is not None:
            security_context["allowPrivilegeEscalation"] = s.allow_privilege_escalation
        if s.security is not None:
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
        if s.security is not None:
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
            "metadata": {
                "name": self.name,
                "namespace": s.namespace,
                "labels": self.object_labels(),
                "annotations": {
                    labels.ANNOTATION_EXPIRES_AT: _expiry(now, s.timeout_s, s.expiry_margin_s),
                },
            },
            "spec": spec,
        }

    async def run(self, api: kube.KubeApi | None = None) -> PodRunOutput:
        """Create the pod, wait for it to end on the shared watch, read logs, delete it."""
        return await _run_pod(self, _need_api("PodRun", api or self.api))


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


@dataclass(frozen=True)
class JobRun:
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

    @property
    def kind(self) -> str:
        """The operation kind recorded with the step: ``k8s``."""
        return "k8s"

    def _set(self, **changes: Any) -> JobRun:
        return dataclasses.replace(self, settings=dataclasses.replace(self.settings, **changes))

    def client(self, api: kube.KubeApi) -> JobRun:
        return dataclasses.replace(self, api=api)

    def namespace(self, namespace: str) -> JobRun:
        return self._set(namespace=namespace)

    def backoff_limit(self, limit: int) -> JobRun:
        if limit < 0:
            raise errors.ConfigError(f"backoff_limit must not be negative, got {limit}")
        return self._set(backoff_limit=limit)

    def pvc(self, claim: str, mount_path: str) -> JobRun:
        if not claim:
            raise errors.ConfigError("pvc claim name must not be empty")
        _check_path(mount_path)
        return self._set(pvcs=(*self.settings.pvcs, (claim, mount_path)))

    def automount_service_account_token(self, enabled: bool) -> JobRun:
        return self._set(automount_service_account_token=enabled)

    def allow_privilege_escalation(self, allowed: bool) -> JobRun:
        return self._set(allow_privilege_escalation=allowed)

    def active_deadline_seconds(self, seconds: float) -> JobRun:
        _check_duration("active_deadline_seconds", seconds)
        return self._set(active_deadline_seconds=max(1, int(seconds)))

    def timeout(self, seconds: float) -> JobRun:
        return self._set(timeout_s=_check_duration("timeout", seconds))

    def poll_interval(self, seconds: float) -> JobRun:
        return self._set(poll_interval_s=_check_duration("poll_interval", seconds))

    def label(self, key: str, value: str) -> JobRun:
        _check_labels({key: value})
        return self._set(labels=_frozen({**self.settings.labels, key: value}))

    def labels(self, pairs: Mapping[str, str]) -> JobRun:
        _check_labels(pairs)
        return self._set(labels=_frozen(pairs))

    def expiry_margin(self, seconds: float) -> JobRun:
        if seconds < 0:
            raise errors.ConfigError(f"expiry_margin must not be negative, got {seconds}")
        return self._set(expiry_margin_s=float(seconds))

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
        security_context = (
            {"allowPrivilegeEscalation": s.allow_privilege_escalation}
            if s.allow_privilege_escalation is not None
            else None
        )
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
        spec: dict[str, Any] = {
            "backoffLimit": s.backoff_limit,
            "template": {"metadata": {"labels": self.object_labels()}, "spec": pod_spec},
        }
        if s.active_deadline_seconds is not None:
            spec["activeDeadlineSeconds"] = s.active_deadline_seconds
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": self.name,
                "namespace": s.namespace,
                "labels": self.object_labels(),
                "annotations": {
                    labels.ANNOTATION_EXPIRES_AT: _expiry(now, s.timeout_s, s.expiry_margin_s),
                },
            },
            "spec": spec,
        }

    async def run(self, api: kube.KubeApi | None = None) -> PodRunOutput:
        """Create the Job, wait for Complete/Failed, read its pod's logs, delete the Job."""
        return await _run_job(self, _need_api("JobRun", api or self.api))


def _need_api(kind: str, api: kube.KubeApi | None) -> kube.KubeApi:
    if api is None:
        raise errors.ConfigError(f"{kind}.run needs an API client: pass run(api) or build with .client(api)")
    return api


# --- running (the only I/O) --------------------------------------------------------------


def _pod_ended(pod: Mapping[str, Any] | None) -> bool:
    return pod is not None and (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _job_outcome(job: Mapping[str, Any]) -> str | None:
    """``Succeeded`` / ``Failed`` once the Job has a true Complete / Failed condition."""
    for cond in (job.get("status") or {}).get("conditions") or ():
        if cond.get("status") == "True" and cond.get("type") in ("Complete", "Failed"):
            return "Succeeded" if cond["type"] == "Complete" else "Failed"
    return None


async def _create(api: kube.KubeApi, resource: kube.Resource, namespace: str, body: dict[str, Any]) -> None:
    from ironflow.k8s import api as kube
    from ironflow.k8s import pods

    name = body["metadata"]["name"]
    try:
        await api.create(resource, namespace, body)
    except (errors.KubeUnavailable, asyncio.CancelledError):
        # No answer (or no time to read it): the object may exist all the same. Remove it, then fail.
        await pods.delete_quietly(
            api, resource, namespace, name, background=resource == kube.JOBS, expires_at=_expiry_of(body)
        )
        raise


def _expiry_of(body: Mapping[str, Any]) -> str | None:
    return (body.get("metadata", {}).get("annotations") or {}).get(labels.ANNOTATION_EXPIRES_AT)


async def _read_log(api: kube.KubeApi, namespace: str, pod: str) -> str:

    try:
        return await api.read_log(namespace, pod)
    except errors.KubernetesError:
        return ""  # logs are best effort: the outcome is the phase


async def _run_pod(run: PodRun, api: kube.KubeApi) -> PodRunOutput:
    from ironflow.k8s import api as kube
    from ironflow.k8s import pods

    s = run.settings
    body = run.build_pod()
    await _create(api, kube.PODS, s.namespace, body)
    try:
        pod = await pods.wait_for_pod(api, s.namespace, run.name, _pod_ended, s.timeout_s)
        if pod is None:
            raise errors.OperationTimeout(f"pod '{run.name}' did not finish within {s.timeout_s:g}s")
        phase = pods.phase(pod)
        logs = await _read_log(api, s.namespace, run.name)
        return PodRunOutput(success=phase == "Succeeded", logs=logs, phase=phase)
    finally:
        await pods.delete_quietly(api, kube.PODS, s.namespace, run.name, expires_at=_expiry_of(body))


async def _wait_job(api: kube.KubeApi, namespace: str, name: str) -> str:
    """The Job's outcome, from a watch on that one Job (it starts with a list: no race)."""
    from ironflow.k8s import api as kube

    events = api.watch(kube.JOBS, namespace, field_selector=f"metadata.name={name}")
    try:
        async for event in events:
            for job in event.items if event.type == "RELISTED" else (event.object,):
                if event.type != "DELETED" and (outcome := _job_outcome(job)) is not None:
                    return outcome
            if event.type == "DELETED":
                raise errors.KubeNotFound(f"job '{name}' was deleted before it finished", status=404)
    finally:
        await events.aclose()
    raise errors.KubeUnavailable(f"the watch on job '{name}' ended", status=0)


async def _run_job(run: JobRun, api: kube.KubeApi) -> PodRunOutput:
    from ironflow.k8s import api as kube
    from ironflow.k8s import pods

    s = run.settings
    body = run.build_job()
    await _create(api, kube.JOBS, s.namespace, body)
    try:
        try:
            phase = await asyncio.wait_for(_wait_job(api, s.namespace, run.name), timeout=s.timeout_s)
        except TimeoutError:
            raise errors.OperationTimeout(f"job '{run.name}' did not finish within {s.timeout_s:g}s") from None
        logs = ""
        try:
            job_pods = (await api.list(kube.PODS, s.namespace, label_selector=f"job-name={run.name}")).items
        except errors.KubernetesError:
            job_pods = []
        if job_pods:
            logs = await _read_log(api, s.namespace, str(job_pods[0]["metadata"]["name"]))
        return PodRunOutput(success=phase == "Succeeded", logs=logs, phase=phase)
    finally:
        await pods.delete_quietly(api, kube.JOBS, s.namespace, run.name, background=True, expires_at=_expiry_of(body))
