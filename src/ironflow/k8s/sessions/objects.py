"""Where cluster sessions live: the object that is a session, and how it is made, found and removed (I/O).

:class:`~ironflow.k8s.sessions.pod_sessions.K8sSessions` holds sessions (bridges, watchers,
handles) the same way whatever a session is in the cluster; what differs is behind
:class:`SessionObjects`: a bare pod here (:class:`PodObjects`), a SandboxClaim bound to a
warm pool's pod for agent-sandbox (``ironflow.agent_sandbox.claim_sessions``). The host
never reads or writes a session's object itself; it asks its ``SessionObjects``.
"""

from __future__ import annotations

import builtins
import dataclasses
import logging
import math
from collections.abc import Mapping
from typing import Any, Final, Protocol

from ironflow import errors, labels
from ironflow.k8s import pod_wait, pods
from ironflow.k8s.sessions import clones, runtime_pod, session_pod, session_volumes
from ironflow.k8s.settings import ProviderSettings
from ironflow.kube import api as kube
from ironflow.kube import clusters, pod_problems, pod_status
from ironflow.sessions.values import OpenOptions, SessionInfo

__all__ = ["Found", "PodObjects", "SessionObjects"]

log = logging.getLogger("ironflow.k8s")

#: What the hardening adds to the container's env: the pod's own, not the caller's.
_HARDENING_ENV: Final = frozenset({"HOME", "TMPDIR"})


@dataclasses.dataclass(frozen=True)
class Found:
    """A session as the cluster holds it: where its commands run, and whether it still can."""

    info: SessionInfo
    pod: str
    container: str
    env: Mapping[str, str]
    running: bool = True
    #: The session's git workspace and the starting commit its clone recorded (None: none).
    workspace: clones.Held | None = None
    #: ``podIP:port`` of the runtime its pod runs as its main process (None: reached by exec only).
    address: str | None = None


class SessionObjects(Protocol):
    """What a session is in the cluster, for the session host to make, find and remove.

    ``create`` may leave an object behind when it fails (the host deletes it when the API
    says one may exist); ``home_from`` names a VolumeSnapshot the session's HOME starts from (only
    where its objects have a HOME claim); ``ready`` waits until the session's pod runs and says where.
    """

    @property
    def backend(self) -> str: ...

    @property
    def cluster(self) -> clusters.ClusterConfig | None: ...

    async def create(
        self, api: kube.KubeApi, session_id: str, options: OpenOptions, *, now: float, home_from: str | None = None
    ) -> Mapping[str, Any]: ...

    async def ready(
        self, api: kube.KubeApi, created: Mapping[str, Any], options: OpenOptions, *, timeout_s: float
    ) -> Found: ...

    async def lookup(self, api: kube.KubeApi, session_id: str) -> Found | None:
        """The session of this id (None: there is none)."""
        ...

    async def annotate(self, api: kube.KubeApi, session_id: str, annotations: Mapping[str, str]) -> None:
        """Record ``annotations`` on the session's object, where another process finds them."""
        ...

    async def delete(self, api: kube.KubeApi, session_id: str) -> None:
        """Remove the session's object (a failure is logged and left to the reaper)."""
        ...

    async def find(self, api: kube.KubeApi, *, run_id: str | None = None) -> builtins.list[SessionInfo]:
        """Every open session of the namespace (of ``run_id``), from its labels."""
        ...


class PodObjects:
    """A Kubernetes session is one pod of the provider's image, named by the session id; with a
    session volume, and the claim holding its HOME, made first and then owned by the pod."""

    backend: Final = session_pod.BACKEND

    def __init__(self, settings: ProviderSettings) -> None:
        self.settings = settings
        self.namespace = settings.namespace

    @property
    def cluster(self) -> clusters.ClusterConfig | None:
        return self.settings.cluster

    async def create(
        self, api: kube.KubeApi, session_id: str, options: OpenOptions, *, now: float, home_from: str | None = None
    ) -> Mapping[str, Any]:
        """Raises: ConfigError: a bad label or ttl; ``home_from`` without a session volume."""
        volume = self.settings.session_volume
        if home_from is not None and volume is None:
            raise errors.ConfigError("a session starts from a VolumeSnapshot only with a session volume")
        claim = None if volume is None else session_volumes.claim_name(session_id)
        body = session_pod.session_pod(
            session_id,
            self.settings,
            ttl_s=options.ttl,
            now=now,
            caller_labels=options.labels,
            run_id=options.run_id,
            env=options.env,
            home_claim=claim,
        )
        if volume is None:
            return await api.create(kube.PODS, self.namespace, body)
        expires = math.ceil(now + options.ttl)
        made = session_volumes.home_claim(
            session_id, namespace=self.namespace, volume=volume, expires_at=expires, source=home_from
        )
        # The claim first: a pod naming a claim that does not exist yet is unschedulable, which ends the wait.
        await api.create(kube.PERSISTENTVOLUMECLAIMS, self.namespace, made)
        try:
            created = await api.create(kube.PODS, self.namespace, body)
            owned = session_volumes.owner_patch(created)
            await api.patch(kube.PERSISTENTVOLUMECLAIMS, self.namespace, made["metadata"]["name"], owned)
        except BaseException:
            await pods.shielded(self._delete_claim(api, session_id))
            raise
        return created

    async def ready(
        self, api: kube.KubeApi, created: Mapping[str, Any], options: OpenOptions, *, timeout_s: float
    ) -> Found:
        name, uid = str(created["metadata"]["name"]), created["metadata"].get("uid")
        grace = pod_problems.PullGrace(self.settings.image_pull_grace_s)
        # by uid: a resumed session's pod has its name, and its old pod's late DELETED is not this one's
        try:
            pod = await pod_wait.wait_for(api, self.namespace, name, pod_status.pod_started, timeout_s, grace, uid=uid)
        except errors.KubeNotFound:  # deleted by another hand while it started: the pod will not run
            raise errors.SandboxFailed(f"session pod {name}", "Deleted", "it was deleted before it ran") from None
        if pod is None:
            raise errors.SandboxError(f"session pod {name} was not Running after {timeout_s:.0f}s")
        if pod_status.phase(pod) != "Running":
            raise errors.SandboxError(f"session pod {name} ended before it was used (phase {pod_status.phase(pod)})")
        info = session_pod.info_of(created, settings_labels=self.settings.pod_labels)
        assert info is not None  # rendered as a session pod just now
        address = runtime_pod.address_of(pod, session_pod.CONTAINER)
        return Found(info, name, session_pod.CONTAINER, dict(options.env), address=address)

    async def lookup(self, api: kube.KubeApi, session_id: str) -> Found | None:
        try:
            pod = await api.get(kube.PODS, self.namespace, session_id)
        except errors.KubeNotFound:
            return None
        info = session_pod.info_of(pod, settings_labels=self.settings.pod_labels)
        if info is None:
            return None
        running = pod_status.phase(pod) == "Running"
        held = clones.held_of((pod.get("metadata") or {}).get("annotations"))
        address = runtime_pod.address_of(pod, session_pod.CONTAINER)
        return Found(info, session_id, session_pod.CONTAINER, _plain_env(pod), running, held, address)

    async def annotate(self, api: kube.KubeApi, session_id: str, annotations: Mapping[str, str]) -> None:
        await api.patch(kube.PODS, self.namespace, session_id, {"metadata": {"annotations": annotations}})

    async def delete(self, api: kube.KubeApi, session_id: str) -> None:
        """Delete the pod at once (no grace: a session's processes are disposable), even when cancelled;
        a failure is logged and left to the reaper, as the pod's expiry is set."""
        try:
            await pods.shielded(api.delete(kube.PODS, self.namespace, session_id, grace_period_seconds=0))
        except errors.KubeNotFound:
            pass
        except errors.KubernetesError as exc:
            log.warning("could not delete session pod %s/%s (the reaper will): %s", self.namespace, session_id, exc)
        if self.settings.session_volume is not None:
            await pods.shielded(self._delete_claim(api, session_id))

    async def _delete_claim(self, api: kube.KubeApi, session_id: str) -> None:
        """Delete the session's HOME claim (its pod's owner reference would also take it, once set)."""
        claim = session_volumes.claim_name(session_id)
        try:
            await api.delete(kube.PERSISTENTVOLUMECLAIMS, self.namespace, claim)
        except errors.KubeNotFound:
            pass
        except errors.KubernetesError as exc:
            log.warning("could not delete session claim %s/%s: %s", self.namespace, claim, exc)

    async def find(self, api: kube.KubeApi, *, run_id: str | None = None) -> builtins.list[SessionInfo]:
        selector = labels.SANDBOX_SESSION_SELECTOR
        if run_id is not None:
            selector += f",{labels.LABEL_RUN_ID}={labels.sanitize_label_value(run_id)}"
        listed = await api.list_all(kube.PODS, self.namespace, label_selector=selector)
        found = (session_pod.info_of(p, settings_labels=self.settings.pod_labels) for p in listed.items)
        return [info for info in found if info is not None]


def _plain_env(pod: Mapping[str, Any]) -> dict[str, str]:
    """The session's environment, as its pod's container holds it (plain values only)."""
    for container in (pod.get("spec") or {}).get("containers") or ():
        if container.get("name") == session_pod.CONTAINER:
            env = container.get("env") or ()
            return {e["name"]: str(e["value"]) for e in env if "value" in e and e["name"] not in _HARDENING_ENV}
    return {}
