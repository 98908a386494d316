"""agent-sandbox sandbox sessions: a SandboxClaim that adopts a warm pod, reached by exec (I/O).

``open`` creates a SandboxClaim on the provider's warm pool (:func:`session_claim`, pure);
the controller binds it to a Sandbox (a Ready pool member is adopted at once, else one is
started) and the session is that Sandbox's pod, used as a Kubernetes session's is: the
same bridge and runtime over ``pods/exec``. :class:`AgentSandboxSessions` holds a Kubernetes
session host (:mod:`ironflow.k8s.sessions.pod_sessions`) and tells it where sessions live
(:class:`ClaimObjects`, its :class:`~ironflow.k8s.sessions.objects.SessionObjects`); it
overrides nothing of the host. The pod is the template's, so its environment is too: ``env``
is refused.

A session's workspace is snapshotted and forked as a Kubernetes session's is (an archive through
its runtime: :mod:`ironflow.k8s.sessions.archives`). A session can be paused and resumed, and
paused when idle (``OpenOptions(idle_suspend=...)``): its Sandbox's pod goes, its claim and PVCs
stay, and with the provider's ``home_volume`` its HOME is one of them
(:mod:`~ironflow.agent_sandbox.claim_pauses`). The next request through a handle or a server
resumes it, and ``connect`` resumes a session it finds suspended; while paused only its TTL ends it.

Every session ends: ``close`` deletes the claim (the Sandbox and the pod go with it by
their ownerReferences); its TTL or idle timeout while this process holds it; else the
claim reaper's ``ironflow.io/expires-at`` pass (the claim is a ``sandbox-claim`` like a
step's), and the controller itself at ``lifecycle.shutdownTime`` (policy Delete).
"""

from __future__ import annotations

import builtins
import contextlib
import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

from ironflow import errors, labels
from ironflow.agent_sandbox import claim_pauses, claims, models, rendering
from ironflow.agent_sandbox.step_render import AgentSandboxSettings
from ironflow.auth_proxy import issuing
from ironflow.claude import layout
from ironflow.k8s import step_manifests as pod_manifests
from ironflow.k8s.commands import specs
from ironflow.k8s.sessions import bridge, clones, session_pod
from ironflow.k8s.sessions.objects import Found
from ironflow.k8s.sessions.pod_sessions import K8sSessions
from ironflow.k8s.settings import ProviderSettings
from ironflow.kube import api as kube
from ironflow.kube import clusters
from ironflow.secrets import Secret
from ironflow.sessions.client import AsyncSandbox
from ironflow.sessions.values import OpenOptions, SessionInfo, SessionNotFound, SnapshotInfo
from ironflow.workspaces import WorkspaceChanges

__all__ = ["BACKEND", "AgentSandboxSessions", "ClaimObjects", "claim_info", "session_claim"]

BACKEND: Final = "agent-sandbox"


def session_claim(
    session_id: str,
    settings: AgentSandboxSettings,
    *,
    ttl_s: float,
    now: float,
    caller_labels: Mapping[str, str] | None = None,
    run_id: str | None = None,
) -> dict[str, Any]:
    """The session's SandboxClaim on the warm pool; ``now`` (epoch seconds) fixes its expiry (pure).

    Raises:
        ConfigError: a bad ttl, a reserved or invalid label, a run id that is no label value.
    """
    specs.check_duration("ttl", ttl_s)
    chosen = session_pod.check_labels(caller_labels, run_id)
    expires = math.ceil(now + ttl_s)
    claim_labels = {**chosen, labels.LABEL_SESSION_ID: session_id}
    if run_id is not None:
        claim_labels[labels.LABEL_RUN_ID] = run_id
    claim = models.SandboxClaim(
        name=session_id,
        namespace=settings.namespace,
        api_version=settings.api_version,
        warm_pool=settings.pool,
        template=settings.template if settings.api_version is models.ApiVersion.V1ALPHA1 else None,
        lifecycle=models.Lifecycle(
            shutdown_time=rendering.rfc3339(datetime.fromtimestamp(expires, UTC)),
            shutdown_policy=models.ShutdownPolicy.DELETE,
        ),
        labels=models.frozen_map(specs.object_labels(labels.COMPONENT_SANDBOX_CLAIM, claim_labels)),
        annotations=models.frozen_map({labels.ANNOTATION_EXPIRES_AT: str(expires)}),
    )
    return rendering.render(claim)


def claim_info(claim: Mapping[str, Any]) -> SessionInfo | None:
    """The session a claim holds, or None when it is no session's (a step's) or is being deleted (pure)."""
    meta = claim.get("metadata") or {}
    claim_labels: Mapping[str, str] = meta.get("labels") or {}
    if claim_labels.get(labels.LABEL_COMPONENT) != labels.COMPONENT_SANDBOX_CLAIM or meta.get("deletionTimestamp"):
        return None
    session_id = claim_labels.get(labels.LABEL_SESSION_ID, "")
    if session_id != meta.get("name"):
        return None
    return SessionInfo(
        id=session_id,
        backend=BACKEND,
        isolation="sandbox",
        created_at=session_pod.created_at(meta),
        expires_at=float(labels.expires_at(meta.get("annotations")) or 0),
        labels={k: v for k, v in claim_labels.items() if k not in session_pod.OWN_KEYS},
        run_id=claim_labels.get(labels.LABEL_RUN_ID),
    )


class ClaimObjects:
    """An agent-sandbox session is a SandboxClaim on the warm pool, bound to a Sandbox whose pod
    runs the session (:class:`~ironflow.k8s.sessions.objects.SessionObjects`)."""

    backend: Final = BACKEND

    def __init__(self, settings: AgentSandboxSettings) -> None:
        self.settings = settings
        self.namespace = settings.namespace
        self.resources = claims.resources(settings.api_version)

    @property
    def cluster(self) -> clusters.ClusterConfig | None:
        return self.settings.cluster_config

    async def create(
        self, api: kube.KubeApi, session_id: str, options: OpenOptions, *, now: float, home_from: str | None = None
    ) -> Mapping[str, Any]:
        """Raises: ConfigError: ``env`` (the template's pod has its own), a bad ttl or label; a VolumeSnapshot
        ``home_from`` (the template's pod has its own volumes)."""
        if home_from is not None:
            raise errors.ConfigError("agent-sandbox sessions start from an archive snapshot, not a VolumeSnapshot")
        if options.env:
            raise errors.ConfigError(
                "agent-sandbox sessions run with the template's environment: set env on the provider "
                "and run 'ironflow sandbox apply-template'"
            )
        body = session_claim(
            session_id, self.settings, ttl_s=options.ttl, now=now, caller_labels=options.labels, run_id=options.run_id
        )
        return await api.create(self.resources.claims, self.namespace, body)

    async def ready(
        self, api: kube.KubeApi, created: Mapping[str, Any], options: OpenOptions, *, timeout_s: float
    ) -> Found:
        """Raises: OperationTimeout: not Ready in time. SandboxRefused / SandboxFailed: the controller's no."""
        name = str(created["metadata"]["name"])
        ready = await claims.wait_ready(api, self.resources.claims, self.namespace, name, timeout_s=timeout_s)
        if ready is None:
            raise errors.OperationTimeout(
                f"SandboxClaim '{name}' did not become Ready within {timeout_s:g}s; it was "
                "deleted. Check the warm pool and the agent-sandbox controller"
            )
        found = await self._found(api, ready)
        if found is None:
            raise errors.KubernetesError(f"SandboxClaim '{name}' is Ready without status.sandbox.name")
        return found

    async def _found(self, api: kube.KubeApi, claim: Mapping[str, Any]) -> Found | None:
        info = claim_info(claim)
        sandbox = claims.bound_sandbox(claim)
        if info is None or sandbox is None:
            return None
        pod = await claims.sandbox_pod(api, self.resources, self.namespace, sandbox)
        held = clones.held_of((claim.get("metadata") or {}).get("annotations"))
        return Found(info, pod, pod_manifests.CONTAINER_NAME, {}, claims.has_condition(claim, "Ready"), held)

    async def annotate(self, api: kube.KubeApi, session_id: str, annotations: Mapping[str, str]) -> None:
        """On the claim: the session's object (its pod is the Sandbox's, gone at a suspend)."""
        await api.patch(self.resources.claims, self.namespace, session_id, {"metadata": {"annotations": annotations}})

    async def lookup(self, api: kube.KubeApi, session_id: str) -> Found | None:
        try:
            claim = await api.get(self.resources.claims, self.namespace, session_id)
        except errors.KubeNotFound:
            return None
        if claim_info(claim) is None:
            return None
        found = await self._found(api, claim)
        if found is None:  # not bound yet, or no longer: a session that does not run
            raise SessionNotFound(f"sandbox session '{session_id}' is not bound to a sandbox")
        return found

    async def delete(self, api: kube.KubeApi, session_id: str) -> None:
        """Delete the claim (its Sandbox and pod follow); a failure is left to the claim reaper."""
        await claims.delete_quietly(api, self.resources.claims, self.namespace, session_id)

    async def find(self, api: kube.KubeApi, *, run_id: str | None = None) -> builtins.list[SessionInfo]:
        selector = labels.SANDBOX_CLAIM_SELECTOR
        if run_id is not None:
            selector += f",{labels.LABEL_RUN_ID}={labels.sanitize_label_value(run_id)}"
        listed = await api.list_all(self.resources.claims, self.namespace, label_selector=selector)
        found = (claim_info(c) for c in listed.items)
        return [info for info in found if info is not None]


class AgentSandboxSessions:
    """The sessions of one agent-sandbox provider's warm pool; those this process holds, by id.

    A Kubernetes session host (:class:`~ironflow.k8s.sessions.pod_sessions.K8sSessions`) over
    :class:`ClaimObjects`: holding, bridging, watching and closing are the host's; pause, resume
    and idle suspend are :class:`~ironflow.agent_sandbox.claim_pauses.ClaimPauses`'.
    """

    backend: Final = BACKEND

    def __init__(
        self,
        settings: AgentSandboxSettings,
        *,
        api: kube.KubeApi | None = None,
        max_upload_bytes: int = bridge.DEFAULT_MAX_UPLOAD_BYTES,
        python: str = "python3",
        issuer: issuing.TokenIssuer | None = None,
        home: str = layout.SANDBOX_HOME,
    ) -> None:
        self.agent = settings
        self.objects = ClaimObjects(settings)
        self.host = K8sSessions(
            settings.pod.settings,
            objects=self.objects,
            api=api,
            start_timeout_s=settings.ready_timeout_s,
            max_upload_bytes=max_upload_bytes,
            python=python,
            issuer=issuer,
            home=home,
            activity=lambda session_id: self.pauses.active(session_id),
        )
        self.pauses = claim_pauses.ClaimPauses(settings, self.host)
        self.namespace = self.host.namespace

    @property
    def settings(self) -> ProviderSettings:
        """The pod settings of the pool's template, as its sessions' pods run with."""
        return self.host.settings

    async def open(self, options: OpenOptions | None = None) -> AsyncSandbox:
        """A new claim on the warm pool and a handle on its sandbox; the claim is deleted on every failure path.

        A git ``workspace`` is cloned in the claimed pod as a Kubernetes session's is.

        Raises:
            ConfigError: a bad label; ``env`` (the template's pod has its own).
            WorkspaceRefused: a workspace that is no git URL, or no auth proxy to clone it through.
            WorkspaceUnsafe: the clone failed.
            SandboxRefused / SandboxFailed: the controller says the claim will not become Ready.
            OperationTimeout: not Ready within the provider's ready timeout.
        """
        idle_suspend = None if options is None else options.idle_suspend
        if idle_suspend is not None:
            self.pauses.check()  # before anything is made
        sandbox = await self.host.open(options)
        self.pauses.track(sandbox.id, idle_suspend)
        return sandbox

    async def connect(self, session_id: str) -> AsyncSandbox:
        """A handle on an open session; one found suspended is resumed first (a request is coming)."""
        held = any(info.id == session_id for info in self.host.held())
        if not held and claim_pauses.pause_refusal(self.agent) is None and await self.pauses.suspended(session_id):
            await self.pauses.resume(session_id)
        sandbox = await self.host.connect(session_id)
        if not held:
            self.pauses.track(session_id, None)
        return sandbox

    async def pause(self, session_id: str) -> SessionInfo:
        """Suspend the session's Sandbox: its pod goes, its home's PVC stays (:mod:`.claim_pauses`)."""
        return await self.pauses.pause(session_id)

    async def resume(self, session_id: str) -> SessionInfo:
        """Run it again on its kept PVCs, back once its runtime answers."""
        return await self.pauses.resume(session_id)

    def active(self, session_id: str) -> contextlib.AbstractAsyncContextManager[None]:
        """A request under way: a paused session is resumed first and kept from idle suspend."""
        return self.pauses.active(session_id)

    async def list(self) -> builtins.list[SessionInfo]:
        return await self.host.list()

    async def find(self, *, run_id: str | None = None) -> builtins.list[SessionInfo]:
        return await self.host.find(run_id=run_id)

    async def changes(self, session_id: str, *, apply: bool = False) -> WorkspaceChanges:
        return await self.host.changes(session_id, apply=apply)

    async def close(self, session_id: str) -> bool:
        await self.pauses.forget(session_id)
        return await self.host.close(session_id)

    async def release_run(self, run_id: str) -> int:
        return await self.host.release_run(run_id)

    def held(self) -> builtins.list[SessionInfo]:
        return self.host.held()

    def route(self, session_id: str) -> tuple[str, Secret]:
        return self.host.route(session_id)

    async def release(self) -> None:
        await self.pauses.aclose()
        await self.host.release()

    async def aclose(self) -> None:
        await self.pauses.aclose()
        await self.host.aclose()

    # -- snapshots and forks: the host's (the claimed pod's workspace as an archive) --

    async def snapshot(self, session_id: str, *, name: str | None = None) -> SnapshotInfo:
        return await self.host.snapshot(session_id, name=name)

    async def snapshots(self) -> builtins.list[SnapshotInfo]:
        return await self.host.snapshots()

    async def remove_snapshot(self, snapshot_id: str) -> bool:
        return await self.host.remove_snapshot(snapshot_id)

    async def fork(self, session_id: str, *, count: int = 1) -> builtins.list[AsyncSandbox]:
        """``count`` new claims on the warm pool, each starting with one snapshot of this session's workspace."""
        return await self.host.fork(session_id, count=count)

    async def __aenter__(self) -> AgentSandboxSessions:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
