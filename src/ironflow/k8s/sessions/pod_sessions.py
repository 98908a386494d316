"""Kubernetes sandbox sessions: the table of sessions held here, each a hardened pod running the runtime (I/O).

``open`` has the :class:`~ironflow.k8s.sessions.provisioner.SessionProvisioner` make the
session's object and wait for it (a pod of :mod:`ironflow.k8s.sessions.session_pod`, waited
for with the pod steps' fail-fast classification), then reach its runtime: over HTTP at the
pod's address with a token of this process (:mod:`ironflow.k8s.sessions.runtime_link`, the
``transport`` says when), else through a :class:`~ironflow.k8s.sessions.bridge.Bridge`, one
exec per request (checked with one request), and holds the session: the handle is the same
:class:`~ironflow.sessions.client.AsyncSandbox` local
sessions hand out. This module never calls the Kubernetes API itself; the provisioner does.

What a session is in the cluster (a pod here, a claim for agent-sandbox) is the host's
:class:`~ironflow.k8s.sessions.objects.SessionObjects`. Sessions are found again from the
cluster: ``connect(id)`` reattaches from any process, ``list`` and ``find`` list them by
label, ``close`` and ``release_run`` delete their objects. Every session
ends: ``close``, its TTL or idle timeout while this process runs, else the reaper's
``ironflow.io/expires-at`` pass, and ``activeDeadlineSeconds`` as the backstop. A session opened
with an egress policy gets a token of its own for its life
(:mod:`~ironflow.k8s.sessions.egress_delivery`), revoked when it is closed or torn down here.
A pod session pauses (its workspace kept in the snapshot store, its pod deleted) and resumes, and
a paused one resumes before any request: :mod:`~ironflow.k8s.sessions.pauses`.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import dataclasses
import functools
import logging
import secrets
import time
from collections.abc import Callable
from typing import Final

from ironflow import errors
from ironflow.auth_proxy import issuing
from ironflow.claude import layout
from ironflow.k8s.sessions import archives, bridge, clones, egress_delivery, pauses, provisioner, runtime_link
from ironflow.k8s.sessions.objects import Found, SessionObjects
from ironflow.k8s.settings import ProviderSettings
from ironflow.kube import api as kube
from ironflow.secrets import Secret
from ironflow.sessions import snapshot_store
from ironflow.sessions.client import AsyncSandbox, RuntimeClient
from ironflow.sessions.snapshot_store import SnapshotStore
from ironflow.sessions.values import OpenOptions, SessionInfo, SessionNotFound, SnapshotInfo, check_session_id
from ironflow.workspaces import WorkspaceChanges

__all__ = ["DEFAULT_START_TIMEOUT_S", "K8sSessions"]

log = logging.getLogger("ironflow.k8s")

#: How long a session pod may take to be Running (an image pull included).
DEFAULT_START_TIMEOUT_S: Final = 300.0
_IDLE_CHECK_S: Final = 1.0


@dataclasses.dataclass(eq=False)
class _Session:
    info: SessionInfo
    link: bridge.Bridge | runtime_link.RuntimeLink
    idle_timeout: float | None
    pod: str
    container: str
    workspace: clones.Held | None = None
    watcher: asyncio.Task[None] | None = None
    released: bool = False
    #: Opened with an egress policy: its token is revoked when it ends.
    egress: bool = False
    #: Its pod is gone for a pause (agent-sandbox): its TTL still ends it, its idle timeout waits.
    paused: bool = False


class K8sSessions:
    """The sandbox sessions of one provider's namespace; those this process holds, by id.

    Holding, probing, watching, handing out handles and closing are here; making, reaching, finding
    and deleting a session's object is the :class:`~ironflow.k8s.sessions.provisioner.SessionProvisioner`'s,
    and what a session is in the cluster ``objects``'s (a pod by default; agent-sandbox passes its claims).

    Args:
        settings: the k8s provider's (image, namespace, cluster, resources, runtime class...).
        objects: what a session is in the cluster (default: a pod of ``settings``).
        api: a connected client; default one for ``settings.cluster``, owned and closed here.
        python: the image's Python (the runtime needs 3.11, the standard library only).
        issuer: grants a git workspace's clone its token (default: an admin client of the
            provider's auth proxy, made when first needed and closed here).
        home: the pod's HOME, the exec's working directory, where a workspace is cloned.
        transport: ``auto`` (HTTP to the runtime the pod runs when it answers from here, else
            exec), ``http`` (refuse a session it cannot reach so) or ``exec`` (each request an exec).
        snapshot_store: where snapshots of the sessions' workspaces go (default: the shared store,
            made when first used; :mod:`~ironflow.k8s.sessions.archives`).
        activity: around each request of a handle handed out here, by session id (agent-sandbox's
            pauses: a paused session is resumed first); a pod session's own pauses by default.
    """

    def __init__(
        self,
        settings: ProviderSettings,
        *,
        objects: SessionObjects | None = None,
        api: kube.KubeApi | None = None,
        start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
        max_upload_bytes: int = bridge.DEFAULT_MAX_UPLOAD_BYTES,
        python: str = "python3",
        issuer: issuing.TokenIssuer | None = None,
        home: str = layout.SANDBOX_HOME,
        transport: str = "auto",
        snapshot_store: SnapshotStore | None = None,
        activity: Callable[[str], contextlib.AbstractAsyncContextManager[None]] | None = None,
    ) -> None:
        self.transport = runtime_link.check_transport(transport)
        self._cluster = provisioner.SessionProvisioner(settings, objects=objects, api=api, issuer=issuer, home=home)
        #: A pod session's pauses (agent-sandbox brings its own, over its claims).
        self._pauses = pauses.PodPauses(self, self._cluster) if objects is None else None
        self._activity = activity or (None if self._pauses is None else self._pauses.requests.active)
        self.settings = settings
        self.objects: SessionObjects = self._cluster.objects
        self.namespace = settings.namespace
        self.start_timeout_s = start_timeout_s
        self.max_upload_bytes = max_upload_bytes
        self.python = python
        self._sessions: dict[str, _Session] = {}
        self.where = self._cluster.where
        self._store = snapshot_store

    @property
    def backend(self) -> str:
        return self.objects.backend

    async def client(self) -> kube.KubeApi:
        """The API client of the session's cluster (made on first use; closed here when made here)."""
        return await self._cluster.client()

    # -- opening --

    async def open(self, options: OpenOptions | None = None) -> AsyncSandbox:
        """A new session (its object: a pod, a claim) and a handle on it; the object is deleted on
        every failure path.

        A git ``workspace`` is cloned in the pod (by the provisioner) and is its commands' working
        directory; :meth:`changes` gives what changed there.

        Raises:
            ConfigError: a bad label; ``env`` where the objects refuse it; relays (not delivered to sessions);
                egress without an auth proxy, or on agent-sandbox when the template was rendered without it.
            StepConfigError: a credential in ``env``.
            WorkspaceRefused: a workspace that is no git URL, or no auth proxy to clone it through.
            WorkspaceUnsafe: the clone failed.
            SandboxRefused / SandboxFailed: the pod will not run (the cluster's reason).
            SandboxError / OperationTimeout: it did not start in time, or cannot run the runtime.
            SnapshotNotFound: ``from_snapshot`` names none; ConfigError: a local session's.
            WorkspaceRefused: the snapshot's archive holds a member the tar rules refuse.
        """
        options = options or OpenOptions()
        if options.from_snapshot is not None:
            if options.workspace is not None:
                raise errors.ConfigError("a session starts from a snapshot or a workspace, not both")
            await asyncio.to_thread(archives.check_restorable, self.store, options.from_snapshot)
        if self.settings.relays:  # refused, never silently dropped
            raise errors.ConfigError("relays: reach agent steps on Kubernetes; sandbox sessions do not get them yet")
        egress, options = egress_delivery.opened_with(self.settings, options, backend=self.objects.backend)
        if options.idle_suspend is not None and self._pauses is not None:
            pauses.check_idle_suspend(options)
        session_id = "sbx-" + secrets.token_hex(8)
        now = time.time()
        found = await self._cluster.create(session_id, options, now=now, timeout_s=self.start_timeout_s, egress=egress)
        try:
            session = await self._attach(found, options.idle_timeout, probe=True)
            if options.from_snapshot is not None:
                await self._restore(session, options.from_snapshot)
        except BaseException:
            await self._cluster.delete(session_id, egress=egress is not None)
            raise
        if self._pauses is not None:
            self._pauses.requests.track(session_id, options.idle_suspend)
        return self._hold(session, now, options.ttl)

    def _hold(self, session: _Session, now: float, ttl: float) -> AsyncSandbox:
        """Watch a session just opened (its TTL, its idle timeout) and hand out its first handle."""
        session.info = dataclasses.replace(session.info, created_at=now, expires_at=now + ttl)
        session.watcher = asyncio.create_task(self._watch(session))
        how = "http" if isinstance(session.link, runtime_link.RuntimeLink) else "exec"
        opened = (session.info.id, self.namespace, session.pod, ttl, how)
        log.info("sandbox session %s opened in pod %s/%s (ttl %.0fs, %s)", *opened)
        return self._handle(session)

    async def _attach(self, found: Found, idle_timeout: float | None, *, probe: bool) -> _Session:
        """Reach the session's runtime: over HTTP (checked with this process's token), else by exec."""
        info = found.info
        started = await self._attach_link(found, idle_timeout)
        session = _Session(info, started, idle_timeout, found.pod, found.container, found.workspace)
        session.egress = egress_delivery.has_egress(self.settings, found.env, backend=self.objects.backend)
        if probe and isinstance(started, bridge.Bridge):
            try:
                await self._probe(session)
            except BaseException:
                await started.aclose()
                raise
        self._sessions[info.id] = session
        return session

    async def _restore(self, session: _Session, snapshot_id: str) -> None:
        """The snapshot's workspace unpacked into a session just opened, before its first use."""
        client = self._client_of(session)
        try:
            await archives.restore(self.store, snapshot_id, client)
        except BaseException:
            await session.link.aclose()
            self._sessions.pop(session.info.id, None)
            raise
        finally:
            await client.aclose()

    async def _probe(self, session: _Session) -> None:
        """One request through the pod: it has Python and the runtime answers."""
        client = self._client_of(session, hooked=False)  # a resume's own probe: not a request to resume for
        try:
            await client.json("GET", "/")
        finally:
            await client.aclose()

    async def _watch(self, session: _Session) -> None:
        """Until the TTL passes or the session sits idle too long; then its pod is deleted."""
        try:
            while (left := session.info.expires_at - time.time()) > 0:
                await asyncio.sleep(min(left, _IDLE_CHECK_S) if session.idle_timeout else left)
                if session.idle_timeout and await self._idle_over(session, session.idle_timeout):
                    log.info("sandbox session %s idle for %.0fs: closing", session.info.id, session.idle_timeout)
                    break
            else:
                log.info("sandbox session %s expired", session.info.id)
        finally:
            if not session.released:
                await asyncio.shield(self._teardown(session.info.id, egress=session.egress))

    async def _idle_over(self, session: _Session, limit: float) -> bool:
        """Whether the session sat idle past ``limit``: by this process's requests through its bridge;
        over HTTP the runtime counts every holder's and ends itself, so its pod stops running."""
        if session.paused or isinstance(session.link, bridge.Bridge):  # a paused one's idle timeout waits
            return not session.paused and session.link.idle_for() >= limit
        if await session.link.answers():
            return False
        found = await self._cluster.lookup(session.info.id)
        return found is None or not found.running

    async def _teardown(self, session_id: str, *, egress: bool) -> None:
        session = self._sessions.pop(session_id, None)
        if session is not None:
            await session.link.aclose()
        await self._cluster.delete(session_id, egress=egress)
        if self._pauses is not None:
            await self._pauses.end(session_id)

    # -- using --

    def _client_of(self, session: _Session, *, hooked: bool = True) -> RuntimeClient:
        hook = self._activity if hooked else None
        activity = None if hook is None else functools.partial(hook, session.info.id)
        if isinstance(session.link, runtime_link.RuntimeLink):
            return session.link.client(activity=activity)
        return RuntimeClient(
            unix_path=session.link.socket_path,
            headers={"Authorization": f"Bearer {session.link.token.reveal()}"},
            activity=activity,
        )

    def _handle(self, session: _Session) -> AsyncSandbox:
        session_id = session.info.id

        async def closer() -> None:
            await self.close(session_id)

        return AsyncSandbox(session.info, self._client_of(session), closer)

    async def connect(self, session_id: str) -> AsyncSandbox:
        """A handle on an open session, held here or found by its pod (reattach from any process).

        Raises:
            SessionNotFound: no session pod has this id.
        """
        return self._handle(await self._reach(session_id))

    async def _reach(self, session_id: str, *, resume: bool = True) -> _Session:
        """The session held here, else found by its pod and held; a paused one resumed first."""
        check_session_id(session_id)
        if resume and self._pauses is not None and await self._pauses.paused(session_id):
            await self._pauses.resume(session_id)
        session = self._sessions.get(session_id)
        if session is None:
            found = await self._cluster.lookup(session_id)
            if found is None:
                raise SessionNotFound(f"no open sandbox session '{session_id}' in {self.namespace}")
            if not found.running:
                raise SessionNotFound(f"sandbox session '{session_id}' has ended (its pod no longer runs)")
            session = await self._attach(found, None, probe=False)
            if self._pauses is not None:  # its requests resume it once paused
                self._pauses.requests.track(session_id, None)
        return session

    async def runtime(self, session_id: str) -> RuntimeClient:
        """A client of its runtime outside the request hooks (a pause's capture, a resume's restore)."""
        return self._client_of(await self._reach(session_id, resume=False), hooked=False)

    async def changes(self, session_id: str, *, apply: bool = False) -> WorkspaceChanges:
        """The patch of everything changed in the session's workspace since open (its commands may
        run on: this is the tree as the report reads it); ``apply`` is refused (no host directory).

        Raises:
            SessionNotFound: no such session. ConfigError: it was opened without a workspace.
            WorkspaceRefused: ``apply``. WorkspaceUnsafe: as a pod step's report.
        """
        check_session_id(session_id)
        session = self._sessions.get(session_id)
        if session is not None:
            held, pod, container = session.workspace, session.pod, session.container
        else:
            found = await self._cluster.lookup(session_id)
            if found is None or not found.running:
                raise SessionNotFound(f"no open sandbox session '{session_id}' in {self.namespace}")
            held, pod, container = found.workspace, found.pod, found.container
        if held is None:
            raise errors.ConfigError(f"sandbox session '{session_id}' was opened without a workspace")
        if apply:
            raise clones.refuse_apply()
        return await self._cluster.changes(held, pod=pod, container=container)

    def route(self, session_id: str) -> tuple[str, Secret]:
        """Where a session held here answers (its runtime's ``http://`` URL, else its bridge's socket)
        and this process's token for it, for a server that forwards to it."""
        session = self._sessions.get(check_session_id(session_id))
        if session is None:
            raise SessionNotFound(f"no open sandbox session '{session_id}'")
        if isinstance(session.link, runtime_link.RuntimeLink):
            return session.link.base_url, session.link.token
        return session.link.socket_path, session.link.token

    def held(self) -> builtins.list[SessionInfo]:
        """The sessions this process opened (or reattached)."""
        return [s.info for s in self._sessions.values()]

    async def list(self) -> builtins.list[SessionInfo]:
        """Every open session of the namespace, held here or not."""
        return await self.find()

    async def find(self, *, run_id: str | None = None) -> builtins.list[SessionInfo]:
        """Every open session of the namespace (of ``run_id``), from its labels; paused ones from the store."""
        running = await self._cluster.find(run_id=run_id)
        return running + ([] if self._pauses is None else await self._pauses.listed(run_id=run_id))

    async def close(self, session_id: str) -> bool:
        """End a session: its object is deleted (every process in it dies). False when none was open."""
        check_session_id(session_id)
        session = self._sessions.get(session_id)
        if session is not None and session.watcher is not None and not session.watcher.done():
            session.watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await session.watcher
            return True
        egress = session is not None and session.egress
        if session is None:
            found = await self._cluster.lookup(session_id)
            if found is None:
                return self._pauses is not None and await self._pauses.drop(session_id)
            egress = egress_delivery.has_egress(self.settings, found.env, backend=self.objects.backend)
        await self._teardown(session_id, egress=egress)
        return True

    # -- snapshots and forks: the workspace as an archive (archives) --

    @property
    def store(self) -> SnapshotStore:
        """The snapshot store (the shared default, made when first used)."""
        if self._store is None:
            self._store = SnapshotStore()
        return self._store

    async def snapshot(self, session_id: str, *, name: str | None = None) -> SnapshotInfo:
        """The session's workspace as a new snapshot: its files only, read while its commands may run on
        (a cluster session is not frozen: quiesce it first for a consistent tree).

        Raises:
            SessionNotFound: no such session. WorkspaceRefused: past the store's limit, or a member
            the tar rules refuse. ConfigError: a bad name.
        """
        snapshot_store.check_name(name)  # before anything is reached
        client = self._client_of(await self._reach(session_id))
        try:
            return await archives.capture(self.store, client, session_id=session_id, name=name, backend=self.backend)
        finally:
            await client.aclose()

    async def snapshots(self) -> builtins.list[SnapshotInfo]:
        """Every snapshot of the store, oldest first (a local session's among them: ``open`` refuses those)."""
        return await asyncio.to_thread(self.store.list)

    async def remove_snapshot(self, snapshot_id: str) -> bool:
        return await asyncio.to_thread(self.store.remove, snapshot_id)

    async def fork(self, session_id: str, *, count: int = 1) -> builtins.list[AsyncSandbox]:
        """``count`` new sessions, each starting with one snapshot of this one's workspace (kept in the
        store), with its TTL left, labels and run; opened together, and all closed if one fails."""
        if not 1 <= count <= 100:
            raise errors.ConfigError("a fork makes 1 to 100 sessions")
        parent = (await self._reach(session_id)).info
        base = await self.snapshot(session_id, name=f"fork-of-{session_id}")
        options = OpenOptions(ttl=max(1.0, parent.expires_at - time.time()), labels=parent.labels,
                              run_id=parent.run_id, from_snapshot=base.id)  # fmt: skip
        opened = await asyncio.gather(*(self.open(options) for _ in range(count)), return_exceptions=True)
        handles = [h for h in opened if isinstance(h, AsyncSandbox)]
        if failed := next((e for e in opened if isinstance(e, BaseException)), None):
            for handle in handles:
                await handle.close()
            raise failed
        return handles

    async def release_run(self, run_id: str) -> int:
        """Close every session of ``run_id`` in the namespace, held here or not; returns how many."""
        ids = {info.id for info in await self.find(run_id=run_id)}
        ids |= {s.info.id for s in self._sessions.values() if s.info.run_id == run_id}
        for session_id in ids:
            await self.close(session_id)
        return len(ids)

    # -- pause and resume: the pod goes, the workspace waits in the store (pauses) --

    def _pausing(self) -> pauses.PodPauses:
        if self._pauses is None:  # agent-sandbox's host: its backend pauses its claims itself
            raise errors.ConfigError(f"{self.backend} sessions pause through their own backend")
        return self._pauses

    async def pause(self, session_id: str) -> SessionInfo:
        """Keep the session's workspace in the snapshot store, delete its pod (its processes end)."""
        return await self._pausing().pause(session_id)

    async def resume(self, session_id: str) -> SessionInfo:
        """A new pod for the paused session, its workspace unpacked into it before its first request."""
        return await self._pausing().resume(session_id)

    def active(self, session_id: str) -> contextlib.AbstractAsyncContextManager[None]:
        """A request under way: a paused session is resumed first and kept from idle suspend."""
        return self._pausing().requests.active(session_id)

    def mark(self, session_id: str, *, paused: bool) -> SessionInfo | None:
        """Record that a held session's pod went for a pause, or is back; its info (None: not held here)."""
        session = self._sessions.get(session_id)
        if session is None:
            return None
        session.paused = paused
        session.info = dataclasses.replace(session.info, paused=paused)
        return session.info

    async def relink(self, session_id: str) -> None:
        """Reach a held session's runtime again once its pod runs anew (a resume; SessionNotFound: it does
        not run): the bridge execs by the pod's name, which the new pod keeps, so its handles work on; over
        HTTP a new link, which ``route`` gives a server (an HTTP handle from before: ``connect`` again)."""
        session = self._sessions.get(session_id)
        found = None if session is None else await self._cluster.lookup(session_id)
        if session is None or found is None or not found.running:
            raise SessionNotFound(f"sandbox session '{session_id}' does not run")
        session.pod = found.pod
        if isinstance(session.link, runtime_link.RuntimeLink):
            session.link = await self._attach_link(found, session.idle_timeout)
        await self._probe(session)

    async def _attach_link(self, found: Found, idle_timeout: float | None) -> bridge.Bridge | runtime_link.RuntimeLink:
        limit, python = self.max_upload_bytes, self.python
        linked = await self._cluster.link(
            found, transport=self.transport, python=python, idle_timeout=idle_timeout, max_upload_bytes=limit
        )
        return linked or await self._cluster.bridge(found, max_upload_bytes=limit, python=python)

    async def release(self) -> None:
        """Let go of every session held here (they live on to their TTL) and of the client."""
        for session in builtins.list(self._sessions.values()):
            session.released = True
            if session.watcher is not None:
                session.watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await session.watcher
            await session.link.aclose()
        self._sessions.clear()
        if self._pauses is not None:
            await self._pauses.requests.aclose()
        await self._cluster.aclose()

    async def aclose(self) -> None:
        """Close every session held here, then the client."""
        for session_id in builtins.list(self._sessions):
            await self.close(session_id)
        await self.release()

    async def __aenter__(self) -> K8sSessions:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
