"""A cluster session's object over its life: made, waited for, cloned into, reached, found, deleted (I/O).

:class:`SessionProvisioner` asks the session host's
:class:`~ironflow.k8s.sessions.objects.SessionObjects` (a pod here, a claim for agent-sandbox)
to make a session's object and wait until its pod runs (the pod steps' fail-fast
classification: a bad image, a missing Secret, no node end the wait at once), clones a git
workspace into it with a grant of its own, links to the runtime its pod runs
(:mod:`ironflow.k8s.sessions.runtime_link`) or starts the exec bridge to it
(:mod:`ironflow.k8s.sessions.bridge`), and finds and deletes it again; an object that may
exist after a failure is deleted on that path. It owns the API client and the grant issuer
it made, and closes them. It never holds a session: the table of sessions this process
holds, their handles and watchers are :class:`~ironflow.k8s.sessions.pod_sessions.K8sSessions`',
which reach the cluster only through it.
"""

from __future__ import annotations

import builtins
import dataclasses
import math

from ironflow import errors
from ironflow.auth_proxy import issuing, tokens
from ironflow.auth_proxy.admin_client import AdminClient
from ironflow.claude import layout
from ironflow.egress import EgressPolicy
from ironflow.k8s import pods
from ironflow.k8s.sessions import bridge, clones, egress_delivery, runtime_exec, runtime_link
from ironflow.k8s.sessions.objects import Found, PodObjects, SessionObjects
from ironflow.k8s.settings import ProviderSettings
from ironflow.k8s.workspaces import clone_exec
from ironflow.kube import api as kube
from ironflow.sessions.values import OpenOptions, SessionInfo
from ironflow.workspaces import Workspace, WorkspaceChanges

__all__ = ["SessionProvisioner"]


class SessionProvisioner:
    """Makes, finds and deletes the sessions' objects in one provider's namespace.

    Args:
        settings: the k8s provider's (image, namespace, cluster, resources, runtime class...).
        objects: what a session is in the cluster (default: a pod of ``settings``).
        api: a connected client; default one for ``settings.cluster``, owned and closed here.
        issuer: grants a git workspace's clone and the session's egress their tokens (default: an admin client of the
            provider's auth proxy, made when first needed and closed here).
        home: the pod's HOME, the exec's working directory, where a workspace is cloned.
    """

    def __init__(
        self,
        settings: ProviderSettings,
        *,
        objects: SessionObjects | None = None,
        api: kube.KubeApi | None = None,
        issuer: issuing.TokenIssuer | None = None,
        home: str = layout.SANDBOX_HOME,
    ) -> None:
        self.settings = settings
        self.objects: SessionObjects = objects or PodObjects(settings)
        self.namespace = settings.namespace
        self._api = api
        self._owns_api = api is None
        self._issuer = issuer
        self._owned_issuer: AdminClient | None = None
        self.where = clone_exec.paths(home)

    async def client(self) -> kube.KubeApi:
        """The API client of the session's cluster (made on first use; closed here when made here)."""
        if self._api is None:
            self._api = await kube.KubeApi.connect(self.objects.cluster)
        return self._api

    async def create(
        self,
        session_id: str,
        options: OpenOptions,
        *,
        now: float,
        timeout_s: float,
        egress: EgressPolicy | None = None,
        home_from: str | None = None,
    ) -> Found:
        """The session's object made and its pod running, its ``egress`` variables delivered
        (:mod:`~ironflow.k8s.sessions.egress_delivery`), a git ``workspace`` cloned in it
        (:meth:`_clone`), its HOME from the VolumeSnapshot ``home_from``; the object is deleted (and
        the egress token revoked) on every failure path.

        Raises:
            ConfigError: a bad label; ``env`` where the objects refuse it. StepConfigError: a credential in ``env``.
            WorkspaceRefused: a workspace that is no git URL, or no auth proxy to clone it through.
            WorkspaceUnsafe: the clone failed.
            SandboxRefused / SandboxFailed: the pod will not run (the cluster's reason).
            SandboxError / OperationTimeout: it did not start in time.
        """
        workspace = options.workspace
        secret = None if workspace is None else clones.check(self.settings, workspace)
        api = await self.client()
        try:
            created = await self.objects.create(api, session_id, options, now=now, home_from=home_from)
        except BaseException as exc:
            if pods.may_exist_after(exc):
                await self.objects.delete(api, session_id)
            raise
        try:
            found = await self.objects.ready(api, created, options, timeout_s=timeout_s)
            if egress is not None:
                await egress_delivery.deliver(
                    api, self._grants(), self.settings, egress, pod=found.pod, container=found.container,
                    session_id=session_id, expires_at=math.ceil(now + options.ttl),
                )  # fmt: skip
            if workspace is not None and secret is not None:
                found = await self._clone(found, workspace, secret, expires_at=now + options.ttl)
        except BaseException:
            await pods.shielded(self.delete(session_id, egress=egress is not None))
            raise
        return found

    async def _clone(
        self, found: Found, spec: Workspace, secret: tokens.SecretCredential, *, expires_at: float
    ) -> Found:
        """Clone ``spec`` into the session's pod with a grant of its own (revoked once the clone
        ends) and record the starting commit on the session's object."""
        assert self.settings.auth_proxy_url is not None  # clones.check
        commit = await clones.clone(
            await self.client(),
            spec,
            issuer=self._grants(),
            secret=secret,
            proxy_url=self.settings.auth_proxy_url,
            where=self.where,
            namespace=self.namespace,
            pod=found.pod,
            container=found.container,
            session_id=found.info.id,
            expires_at=math.ceil(expires_at),
        )
        held = clones.Held(spec, commit)
        await self.objects.annotate(await self.client(), found.info.id, clones.workspace_annotations(held))
        return dataclasses.replace(found, workspace=held)

    def _grants(self) -> issuing.TokenIssuer:
        if self._issuer is None:
            self._issuer = self._owned_issuer = AdminClient(
                self.settings.auth_proxy_url or "", self.settings.auth_proxy_admin_key
            )
        return self._issuer

    async def bridge(self, found: Found, *, max_upload_bytes: int, python: str) -> bridge.Bridge:
        """A started bridge to the runtime in the session's pod (each request an exec into it)."""
        runtime = runtime_exec.PodRuntime(
            await self.client(),
            self.namespace,
            found.pod,
            found.container,
            max_upload_bytes=max_upload_bytes,
            python=python,
            workspace="." if found.workspace is None else self.where.workspace,
        )
        started = bridge.Bridge(runtime, found.info.id, env=found.env, max_upload_bytes=max_upload_bytes)
        await started.start()
        return started

    async def link(
        self,
        found: Found,
        *,
        transport: runtime_link.Transport,
        python: str,
        idle_timeout: float | None,
        max_upload_bytes: int,
    ) -> runtime_link.RuntimeLink | None:
        """The runtime its pod runs, over HTTP with a token of this process (None: reach it by exec)."""
        if found.address is None or transport == "exec":
            if transport == "http":
                raise errors.SandboxError(f"session pod {self.namespace}/{found.pod} does not run the session runtime")
            return None
        return await runtime_link.link(
            await self.client(),
            self.namespace,
            found.pod,
            found.container,
            found.address,
            transport=transport,
            python=python,
            workspace=None if found.workspace is None else self.where.workspace,
            idle_timeout=idle_timeout,
            max_upload_bytes=max_upload_bytes,
        )

    async def lookup(self, session_id: str) -> Found | None:
        """The session as the cluster holds it; None when it has no object."""
        return await self.objects.lookup(await self.client(), session_id)

    async def find(self, *, run_id: str | None = None) -> builtins.list[SessionInfo]:
        """Every open session of the namespace (of ``run_id``), from its labels."""
        return await self.objects.find(await self.client(), run_id=run_id)

    async def delete(self, session_id: str, *, egress: bool = False) -> None:
        """Delete the session's object (every process in it dies); with ``egress``, revoke its
        egress token first."""
        if egress:
            await egress_delivery.revoke(self._grants(), session_id)
        await self.objects.delete(await self.client(), session_id)

    async def changes(self, held: clones.Held, *, pod: str, container: str) -> WorkspaceChanges:
        """The patch of the session's workspace since its starting commit, read in its pod."""
        return await clones.changes(
            await self.client(), held, where=self.where, namespace=self.namespace, pod=pod, container=container
        )

    async def aclose(self) -> None:
        """Close the grant issuer and the API client made here (a given one stays open)."""
        if self._owned_issuer is not None:
            await self._owned_issuer.close()
            self._issuer = self._owned_issuer = None
        if self._owns_api and self._api is not None:
            await self._api.close()
            self._api = None
