"""``PodRun`` and ``JobRun``: run a plain command in a pod or a Job, then delete it.

For steps that are not agents (a ``cargo test`` check, a migration) but must obey the
same rules as agent pods (see :mod:`ironflow.k8s.commands.specs`): managed-by and
component labels and an ``ironflow.io/expires-at`` annotation, so ``release_run`` and the
reaper find them. Tag them with ``labels.LABEL_RUN_ID`` / ``LABEL_ROOT_RUN_ID`` and a run
release deletes them too. ``exec_pod_run`` shapes the ``PodRun`` of ``ironflow exec
--backend k8s`` from a provider's settings.

The values are frozen and their builders return copies; ``build_pod`` / ``build_job``
are pure (``now`` in, manifest out). ``run`` hands the manifest to
:mod:`ironflow.k8s.commands.execution`, the only I/O: create, wait on the namespace's shared
watch (never one poll loop per object), read the logs, delete on every path.
"""

from __future__ import annotations

import dataclasses
import math
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, Self

from ironflow import errors, labels
from ironflow.claude import layout
from ironflow.k8s import step_manifests
from ironflow.k8s.commands import execution, specs
from ironflow.k8s.settings import RESOURCE_FIELDS, ProviderSettings
from ironflow.kube import api as kube

__all__ = ["EXEC_POD_PREFIX", "JobRun", "PodRun", "command_line", "exec_pod_run"]

#: Pods of ``ironflow exec`` are named ``exec-<unix ms hex>-<8 hex random>``.
EXEC_POD_PREFIX: Final = "exec"


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

    def image_pull_grace(self, seconds: float) -> Self:
        """How long ``ErrImagePull`` / ``ImagePullBackOff`` is tolerated before the run ends with it."""
        if not (math.isfinite(seconds) and seconds >= 0):
            raise errors.ConfigError(f"image_pull_grace must be a finite number of seconds >= 0, got {seconds!r}")
        return self._set(image_pull_grace_s=float(seconds))

    def pvc(self, claim: str, mount_path: str) -> Self:
        """Mount a claim; volumes are named ``workspace``, ``workspace-1``... in call order."""
        if not claim:
            raise errors.ConfigError("pvc claim name must not be empty")
        specs.check_path(mount_path)
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
        specs.check_duration("active_deadline_seconds", seconds)
        return self._set(active_deadline_seconds=max(1, int(seconds)))

    def timeout(self, seconds: float) -> Self:
        """How long ``run()`` waits for the end; also sets the expiry annotation."""
        return self._set(timeout_s=specs.check_duration("timeout", seconds))

    def poll_interval(self, seconds: float) -> Self:
        """Kept for the reference's API; unused: ``run()`` waits on a watch, it never polls."""
        return self._set(poll_interval_s=specs.check_duration("poll_interval", seconds))

    def label(self, key: str, value: str) -> Self:
        """Add a label; the two ``app.kubernetes.io/*`` keys ironflow sets are refused."""
        specs.check_labels({key: value})
        return self._set(labels=specs.frozen({**self.settings.labels, key: value}))

    def labels(self, pairs: Mapping[str, str]) -> Self:
        """Replace the caller labels; a reserved key anywhere in the map is refused."""
        specs.check_labels(pairs)
        return self._set(labels=specs.frozen(pairs))

    def expiry_margin(self, seconds: float) -> Self:
        """Added to the timeout for the ``expires-at`` annotation the reaper reads."""
        if seconds < 0:
            raise errors.ConfigError(f"expiry_margin must not be negative, got {seconds}")
        return self._set(expiry_margin_s=float(seconds))


@dataclass(frozen=True)
class PodRun(_Builders):
    """One pod running ``/bin/sh -c command``; deleted when it ends, whatever happens.

    >>> run = PodRun("check", "rust:1.94", "cargo test").label(labels.LABEL_RUN_ID, "r1")
    >>> pod = run.build_pod(now=1000)
    >>> pod["metadata"]["annotations"]["ironflow.io/expires-at"], pod["spec"]["restartPolicy"]
    ('1360', 'Never')
    """

    name: str
    image: str
    command: str
    settings: specs.PodRunSettings = field(default_factory=specs.PodRunSettings)
    api: kube.KubeApi | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        specs.check_name("PodRun", self.name)
        if not self.image.strip():
            raise errors.ConfigError("PodRun image must not be empty")

    # -- builders --

    def working_dir(self, path: str) -> PodRun:
        return self._set(working_dir=path)

    def node_selector(self, key: str, value: str) -> PodRun:
        return self._set(node_selector=specs.frozen({**self.settings.node_selector, key: value}))

    def image_pull_secret(self, name: str) -> PodRun:
        return self._set(image_pull_secret=name)

    def resources(self, spec: specs.ResourceSpec) -> PodRun:
        return self._set(resources=spec)

    def security(self, spec: specs.SecuritySpec) -> PodRun:
        return self._set(security=spec)

    def runtime_class(self, name: str) -> PodRun:
        if not name.strip():
            raise errors.ConfigError("runtime class must not be empty")
        return self._set(runtime_class=name)

    def proxy_client(self) -> PodRun:
        """Labelled an agent pod (``component=claude-runner``): the NetworkPolicies ironflow renders
        open the auth proxy (its relays and egress listener) to those only. For a pod that reaches
        the proxy, e.g. an ``exec`` pod with an egress policy."""
        return self._set(component=labels.COMPONENT_CLAUDE_RUNNER)

    def env(self, name: str, value: str) -> PodRun:
        """A plain env var; never a secret value (it would be readable in the pod spec)."""
        if not name:
            raise errors.ConfigError("env var name must not be empty")
        return self._set(env=(*self.settings.env, (name, value)))

    def stdin(self, data: bytes) -> PodRun:
        """The command's stdin: ``data`` then EOF. Never in the pod spec or a ConfigMap (it may be
        large or secret): ``run()`` writes it over ``pods/exec`` once the pod runs, so the worker
        needs ``pods/exec`` and the image ``mkfifo`` and ``head``."""
        if not isinstance(data, bytes):
            raise errors.ConfigError(f"stdin must be bytes, got {type(data).__name__}")
        return self._set(stdin=data)

    def scratch(self, mount_path: str, size_limit: str = "1Gi", *, memory: bool = False) -> PodRun:
        """A writable ``emptyDir`` at ``mount_path`` (also under a read-only root), at most
        ``size_limit``; ``memory`` keeps it in RAM. Named ``scratch``, ``scratch-1``... in call order."""
        volume = specs.ScratchVolume(mount_path, size_limit, memory)
        return self._set(scratch=(*self.settings.scratch, volume))

    # -- rendering --

    def input(self) -> dict[str, str]:
        """What the operation was asked to run, for logs and step records (no secret)."""
        return {"image": self.image, "namespace": self.settings.namespace, "name": self.name, "command": self.command}

    def object_labels(self) -> dict[str, str]:
        """Caller labels plus the two ironflow labels, which always win."""
        return specs.object_labels(self.settings.component, self.settings.labels)

    def build_pod(self, *, now: int | None = None) -> dict[str, Any]:
        """The Pod manifest; ``now`` (unix seconds) fixes the expiry annotation."""
        return specs.pod_manifest(self.name, self.image, self.command, self.settings, now=now)

    async def run(self, api: kube.KubeApi | None = None) -> execution.PodRunOutput:
        """Create the pod, wait for it to end on the shared watch, read logs, delete it.

        With :meth:`stdin`, the bytes go over ``pods/exec`` once the pod runs (within the timeout).

        Raises:
            SandboxRefused, SandboxFailed: the pod cannot start or the node stopped it (a bad
                image, a missing Secret, Unschedulable, OOMKilled, Evicted), at once, with the reason.
            OperationTimeout: it did not end within its timeout.
        """
        client = _need_api("PodRun", api or self.api)
        s = self.settings
        return await execution.run_pod(
            client,
            self.build_pod(),
            timeout_s=s.timeout_s,
            image_pull_grace_s=s.image_pull_grace_s,
            stdin=self.stdin_feed(),
        )

    def stdin_feed(self) -> execution.StdinFeed | None:
        """What ``run()`` writes into the pod once it runs (None without :meth:`stdin`); a caller
        that runs :meth:`build_pod`'s manifest itself passes it to ``execution.run_pod``."""
        data = self.settings.stdin
        return None if data is None else execution.StdinFeed(specs.stdin_writer(len(data)), data)


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
    settings: specs.JobRunSettings = field(default_factory=specs.JobRunSettings)
    api: kube.KubeApi | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        specs.check_name("JobRun", self.name)
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
        """Caller labels plus the two ironflow labels, which always win."""
        return specs.object_labels(labels.COMPONENT_JOB_RUN, self.settings.labels)

    def build_job(self, *, now: int | None = None) -> dict[str, Any]:
        """The Job manifest; the expiry annotation sits on the Job only, not its pods."""
        return specs.job_manifest(self.name, self.image, self.command, self.settings, now=now)

    async def run(self, api: kube.KubeApi | None = None) -> execution.PodRunOutput:
        """Create the Job, wait for Complete/Failed, read its pod's logs, delete the Job."""
        client = _need_api("JobRun", api or self.api)
        s = self.settings
        return await execution.run_job(
            client, self.build_job(), timeout_s=s.timeout_s, image_pull_grace_s=s.image_pull_grace_s
        )


def _need_api(kind: str, api: kube.KubeApi | None) -> kube.KubeApi:
    if api is None:
        raise errors.ConfigError(f"{kind}.run needs an API client: pass run(api) or build with .client(api)")
    return api


def command_line(argv: Sequence[str]) -> str:
    """``argv`` as one ``/bin/sh -c`` line that runs exactly these words (each one quoted).

    >>> command_line(["sh", "-c", "echo $HOME; exit 7"])
    "sh -c 'echo $HOME; exit 7'"
    """
    if not argv:
        raise errors.ConfigError("missing command: ironflow exec [OPTIONS] -- CMD [ARGS...]")
    return shlex.join(argv)


def exec_pod_run(
    settings: ProviderSettings, argv: Sequence[str], *, timeout_s: float, now_ms: int, rand32: int
) -> PodRun:
    """The ``PodRun`` that runs ``argv`` once with the provider's placement and hardening.

    ``timeout_s`` bounds the wait and the pod's ``activeDeadlineSeconds`` (rounded up);
    ``now_ms`` and ``rand32`` name the pod (see :func:`manifests.generate_pod_name`). Always
    ``restricted``: a sandboxed provider's uid, read-only root and deadline margin carry
    over; an unsandboxed one gets uid 10001 with a writable root. Not carried over, on
    purpose: env vars and Secret env (a command gets no credential), volumes, the service
    account, the egress-profile label (no egress is granted) and the cluster.

    Raises:
        ConfigError: an empty command, a timeout that is not > 0, a label value
            Kubernetes refuses.
    """
    if not (math.isfinite(timeout_s) and timeout_s > 0):
        raise errors.ConfigError(f"timeout must be a finite number of seconds > 0, got {timeout_s!r}")
    name = step_manifests.generate_pod_name(now_ms, rand32, EXEC_POD_PREFIX)
    sandbox = settings.sandbox
    uid = sandbox.run_as_user if sandbox is not None else layout.SANDBOX_UID
    read_only_root = sandbox is not None and not sandbox.writable_root
    run = (
        PodRun(name, settings.image, command_line(argv))
        .namespace(settings.namespace)
        .restricted(uid, read_only_root=read_only_root)
        .timeout(timeout_s)
        .active_deadline_seconds(math.ceil(timeout_s))
        .image_pull_grace(settings.image_pull_grace_s)
    )
    if sandbox is not None:
        run = run.expiry_margin(sandbox.deadline_margin_s)
    if settings.pod_labels:
        run = run.labels(settings.pod_labels)
    if settings.runtime_class is not None:
        run = run.runtime_class(settings.runtime_class)
    if settings.working_dir is not None:
        run = run.working_dir(settings.working_dir)
    for key, value in settings.node_selector.items():
        run = run.node_selector(key, value)
    if settings.image_pull_secrets:
        run = run.image_pull_secret(settings.image_pull_secrets[0])  # a PodRun carries one pull secret
    resources = {name: getattr(settings.resources, name) for name, *_ in RESOURCE_FIELDS}
    if any(resources.values()):
        run = run.resources(specs.ResourceSpec(**resources))
    return run
