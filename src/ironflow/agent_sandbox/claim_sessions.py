"""agent-sandbox sandbox sessions: a SandboxClaim that adopts a warm pod, reached by exec (I/O).

``open`` creates a SandboxClaim on the provider's warm pool (:func:`session_claim`, pure);
the controller binds it to a Sandbox (a Ready pool member is adopted at once, else one is
started) and the session is that Sandbox's pod, used as a Kubernetes session's is: the
same bridge and runtime over ``pods/exec`` (:mod:`ironflow.k8s.sessions.pod_sessions`). The pod is the
template's, so its environment is too: ``env`` is refused.

A session can be suspended and resumed (:meth:`AgentSandboxSessions.suspend`, v1beta1): its
Sandbox's pod goes and its PVCs and claim stay; a handle on it fails until it is resumed and
connected again (the new pod runs a new runtime), and while suspended only its TTL ends it.

Every session ends: ``close`` deletes the claim (the Sandbox and the pod go with it by
their ownerReferences); its TTL or idle timeout while this process holds it; else the
claim reaper's ``ironflow.io/expires-at`` pass (the claim is a ``sandbox-claim`` like a
step's), and the controller itself at ``lifecycle.shutdownTime`` (policy Delete).
"""

from __future__ import annotations

import builtins
import math
import secrets
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, ClassVar, Final

from ironflow import errors, labels
from ironflow.agent_sandbox import claims, lifecycle, manifests, models
from ironflow.agent_sandbox.steps import AgentSandboxSettings
from ironflow.auth_proxy import issuing
from ironflow.claude import layout
from ironflow.k8s import command_manifests, pods
from ironflow.k8s import manifests as pod_manifests
from ironflow.k8s.sessions import bridge, clones, session_pod
from ironflow.k8s.sessions.pod_sessions import Found, K8sSessions
from ironflow.kube import api as kube
from ironflow.sessions.client import AsyncSandbox
from ironflow.sessions.values import DEFAULT_TTL_S, SessionInfo, SessionNotFound
from ironflow.workspaces import Workspace

__all__ = ["BACKEND", "AgentSandboxSessions", "claim_info", "session_claim"]

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
    command_manifests.check_duration("ttl", ttl_s)
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
            shutdown_time=manifests.rfc3339(datetime.fromtimestamp(expires, UTC)),
            shutdown_policy=models.ShutdownPolicy.DELETE,
        ),
        labels=models.frozen_map(command_manifests.object_labels(labels.COMPONENT_SANDBOX_CLAIM, claim_labels)),
        annotations=models.frozen_map({labels.ANNOTATION_EXPIRES_AT: str(expires)}),
    )
    return manifests.render(claim)


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


class AgentSandboxSessions(K8sSessions):
    """The sessions of one agent-sandbox provider's warm pool; those this process holds, by id."""

    backend: ClassVar[str] = BACKEND

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
        super().__init__(
            settings.pod.settings,
            api=api,
            start_timeout_s=settings.ready_timeout_s,
            max_upload_bytes=max_upload_bytes,
            python=python,
            issuer=issuer,
            home=home,
        )
        self.agent = settings
        self.resources = claims.resources(settings.api_version)

    async def _client(self) -> kube.KubeApi:
        if self._api is None:
            self._api = await kube.KubeApi.connect(self.agent.cluster_config)
        return self._api

    async def open(
        self,
        *,
        ttl: float = DEFAULT_TTL_S,
        idle_timeout: float | None = None,
        labels: Mapping[str, str] | None = None,
        run_id: str | None = None,
        env: Mapping[str, str] | None = None,
        workspace: Workspace | None = None,
    ) -> AsyncSandbox:
        """A new claim on the warm pool and a handle on its sandbox; the claim is deleted on every failure path.

        A git ``workspace`` is cloned in the claimed pod as a Kubernetes session's is.

        Raises:
            ConfigError: a bad ttl, idle timeout or label; ``env`` (the template's pod has its own).
            WorkspaceRefused: a workspace that is no git URL, or no auth proxy to clone it through.
            WorkspaceUnsafe: the clone failed.
            SandboxRefused / SandboxFailed: the controller says the claim will not become Ready.
            OperationTimeout: not Ready within the provider's ready timeout.
        """
        if env:
            raise errors.ConfigError(
                "agent-sandbox sessions run with the template's environment: set env on the provider "
                "and run 'ironflow sandbox apply-template'"
            )
        if idle_timeout is not None and not idle_timeout > 0:
            raise errors.ConfigError("idle_timeout must be a positive number of seconds")
        secret = None if workspace is None else clones.check(self.settings, workspace)
        session_id = "sbx-" + secrets.token_hex(8)
        now = time.time()
        body = session_claim(session_id, self.agent, ttl_s=ttl, now=now, caller_labels=labels, run_id=run_id)
        api = await self._client()
        try:
            await api.create(self.resources.claims, self.namespace, body)
        except BaseException as exc:
            if pods.may_exist_after(exc):
                await self._delete(session_id)
            raise
        try:
            ready = await claims.wait_ready(
                api, self.resources.claims, self.namespace, session_id, timeout_s=self.start_timeout_s
            )
            if ready is None:
                raise errors.OperationTimeout(
                    f"SandboxClaim '{session_id}' did not become Ready within {self.start_timeout_s:g}s; it was "
                    "deleted. Check the warm pool and the agent-sandbox controller"
                )
            found = await self._found(ready)
            if found is None:
                raise errors.KubernetesError(f"SandboxClaim '{session_id}' is Ready without status.sandbox.name")
            if workspace is not None and secret is not None:
                found = await self._clone(found, workspace, secret, expires_at=now + ttl)
            session = await self._attach(found, idle_timeout, probe=True)
        except BaseException:
            await self._delete(session_id)
            raise
        return self._hold(session, now, ttl)

    async def _found(self, claim: Mapping[str, Any]) -> Found | None:
        info = claim_info(claim)
        sandbox = claims.bound_sandbox(claim)
        if info is None or sandbox is None:
            return None
        pod = await claims.sandbox_pod(await self._client(), self.resources, self.namespace, sandbox)
        held = clones.held_of((claim.get("metadata") or {}).get("annotations"))
        return Found(info, pod, pod_manifests.CONTAINER_NAME, {}, claims.has_condition(claim, "Ready"), held)

    async def _annotate(self, name: str, annotations: Mapping[str, str]) -> None:
        """On the claim: the session's object (its pod is the Sandbox's, gone at a suspend)."""
        patch = {"metadata": {"annotations": annotations}}
        await (await self._client()).patch(self.resources.claims, self.namespace, name, patch)

    async def _lookup(self, session_id: str) -> Found | None:
        try:
            claim = await (await self._client()).get(self.resources.claims, self.namespace, session_id)
        except errors.KubeNotFound:
            return None
        if claim_info(claim) is None:
            return None
        found = await self._found(claim)
        if found is None:  # not bound yet, or no longer: a session that does not run
            raise SessionNotFound(f"sandbox session '{session_id}' is not bound to a sandbox")
        return found

    async def _delete(self, name: str) -> None:
        """Delete the claim (its Sandbox and pod follow); a failure is left to the claim reaper."""
        await claims.delete_quietly(await self._client(), self.resources.claims, self.namespace, name)

    async def find(self, *, run_id: str | None = None) -> builtins.list[SessionInfo]:
        selector = labels.SANDBOX_CLAIM_SELECTOR
        if run_id is not None:
            selector += f",{labels.LABEL_RUN_ID}={labels.sanitize_label_value(run_id)}"
        listed = await (await self._client()).list_all(self.resources.claims, self.namespace, label_selector=selector)
        found = (claim_info(c) for c in listed.items)
        return [info for info in found if info is not None]

    async def suspend(self, session_id: str, *, timeout_s: float | None = None) -> lifecycle.Target:
        """Suspend the session's Sandbox (``operatingMode: Suspended``); with ``timeout_s``, until its pod is gone.

        Raises:
            ConfigError: a v1alpha1 provider (0.4.x suspends by ``replicas``, not handled here).
            KubeNotFound: no such session, or it is not bound. OperationTimeout.
        """
        return await self._set_mode(session_id, models.OperatingMode.SUSPENDED, timeout_s)

    async def resume(self, session_id: str, *, timeout_s: float | None = None) -> lifecycle.Target:
        """Resume the session's Sandbox on its kept PVCs; with ``timeout_s``, until it is Ready again."""
        return await self._set_mode(session_id, models.OperatingMode.RUNNING, timeout_s)

    async def _set_mode(self, session_id: str, mode: models.OperatingMode, timeout_s: float | None) -> lifecycle.Target:
        if self.agent.api_version is not models.ApiVersion.V1BETA1:
            raise errors.ConfigError("suspend and resume need agent-sandbox 1.0 (api_version v1beta1)")
        api = await self._client()
        target = await lifecycle.set_mode(api, self.namespace, session_id, mode, timeout_s=timeout_s)
        held = self._sessions.pop(session_id, None)
        if held is not None:  # its bridge ran in the pod that went (or is a stale one's): connect anew
            held.idle_timeout = None  # only the TTL (the watcher's) ends a suspended session
            await held.bridge.aclose()
        return target
