"""Pause, resume and idle suspend of Kubernetes sessions: the workspace into the snapshot store, the pod gone (I/O).

Pausing reads the session's workspace out as a snapshot does (:mod:`~ironflow.k8s.sessions.archives`,
the pod's HOME as one tar archive) into the same snapshot store, named ``paused-<id>``, its record
holding what the pod was opened with (:mod:`~ironflow.k8s.sessions.pause_records`); then the pod
is deleted, so every process of the session ends, as on agent-sandbox, and nothing of it outside
its workspace (/tmp) comes back. The session stays listed, paused, wherever that store is read
(this machine's), and counts against the store's limit like a snapshot. Resuming opens a new pod
for the same id the way ``open`` does (the provider's settings, the session's labels, run and
environment, to the same expiry; a new runtime token of this process), unpacks the archive into
it before its first request (bytes, modes and mtimes kept, as a restore of a snapshot), and removes
the archive. Pausing a paused session or resuming a running one is no error.

Every request to a held session resumes it first, and one opened with ``idle_suspend`` is paused
once idle that long (:mod:`~ironflow.k8s.sessions.suspends`, agent-sandbox's too); ``connect`` and
any request by id from another process resume a paused session first. Its TTL still ends it while
paused: the holder's watcher, else the first listing after it passed, removes the archive. A
session with a git workspace or egress is refused a pause in one line
(:func:`~ironflow.k8s.sessions.pause_records.refusal`).
"""

from __future__ import annotations

import asyncio
import builtins
import dataclasses
import time
from typing import Protocol

from ironflow import errors
from ironflow.k8s import pods
from ironflow.k8s.sessions import archives, pause_records, provisioner, suspends
from ironflow.k8s.sessions.objects import Found
from ironflow.k8s.sessions.pause_records import PausedSession
from ironflow.kube import informer
from ironflow.sessions.client import RuntimeClient
from ironflow.sessions.snapshot_store import SnapshotStore
from ironflow.sessions.values import OpenOptions, SessionInfo, SessionNotFound, SnapshotInfo, check_session_id

__all__ = ["Host", "PodPauses", "check_idle_suspend"]


def check_idle_suspend(options: OpenOptions) -> None:
    """Raises: ConfigError: a session opened so could not be paused (:func:`~.pause_records.refusal`)."""
    why = pause_records.refusal(workspace=options.workspace is not None, env=options.env, idle_suspend=True)
    if why is not None:
        raise errors.ConfigError(why)


class Host(Protocol):
    """What the pauses ask of their session host (:class:`~ironflow.k8s.sessions.pod_sessions.K8sSessions`)."""

    @property
    def backend(self) -> str: ...

    @property
    def namespace(self) -> str: ...

    @property
    def start_timeout_s(self) -> float: ...

    @property
    def store(self) -> SnapshotStore: ...

    def held(self) -> builtins.list[SessionInfo]: ...

    def mark(self, session_id: str, *, paused: bool) -> SessionInfo | None: ...

    async def relink(self, session_id: str) -> None: ...

    async def runtime(self, session_id: str) -> RuntimeClient: ...


class PodPauses:
    """The pauses of one provider's Kubernetes sessions; the sessions themselves are ``host``'s, their
    pods ``cluster``'s, their requests and idle watchers :class:`~ironflow.k8s.sessions.suspends.Suspends`'."""

    def __init__(self, host: Host, cluster: provisioner.SessionProvisioner) -> None:
        self.host, self._cluster = host, cluster
        self.requests = suspends.Suspends(lambda: {info.id for info in host.held()}, self._pause, self._resume)

    async def pause(self, session_id: str) -> SessionInfo:
        """Keep the session's workspace in the store, then delete its pod (its processes end).

        Raises:
            SessionNotFound: no such session. ConfigError: one :func:`~.pause_records.refusal` names.
            WorkspaceRefused: past the store's limit, or a member the tar rules refuse (it runs on).
        """
        return await self.requests.pause(check_session_id(session_id))

    async def _pause(self, session_id: str) -> SessionInfo:
        """:meth:`pause`, under the session's lock."""
        if (kept := await self._kept(session_id)) is not None:
            return kept[1].info
        found = await self._running(session_id)
        if why := pause_records.refusal(workspace=found.workspace is not None, env=found.env):
            raise errors.ConfigError(why)
        info = dataclasses.replace(self._info(session_id, found.info), paused=True)
        record = PausedSession(info, found.env, self.host.namespace, await self._where())
        name, extra = pause_records.archive_name(session_id), {pause_records.RECORD_KEY: record.to_json()}
        self.requests.mark(session_id, paused=True)  # from now a request waits for this lock, then resumes
        try:
            client = await self.host.runtime(session_id)
            try:
                await archives.capture(
                    self.host.store, client, session_id=session_id, name=name, backend=self.host.backend, extra=extra
                )
            finally:
                await client.aclose()
        except BaseException:
            self.requests.mark(session_id, paused=False)  # it runs on, as it was
            raise
        self.host.mark(session_id, paused=True)
        await self._cluster.delete(session_id)
        await self._gone(session_id)
        return record.info

    async def _running(self, session_id: str) -> Found:
        """The session's running pod, as the cluster finds it.

        Raises:
            SessionNotFound: none runs.
        """
        found = await self._cluster.lookup(session_id)
        if found is None or not found.running:
            raise SessionNotFound(f"no open sandbox session '{session_id}' in {self.host.namespace}")
        return found

    def _info(self, session_id: str, found: SessionInfo) -> SessionInfo:
        """The session as held here (its labels and expiry as this process knows them), else as found."""
        return next((info for info in self.host.held() if info.id == session_id), found)

    async def _gone(self, session_id: str) -> None:
        """Back once the pod is gone: its processes have ended, and its name is free for a resume.

        Raises:
            OperationTimeout: it is still there after the start timeout (the session stays paused).
        """
        shared = informer.informer_for(await self._cluster.client(), self.host.namespace)
        if not await shared.wait_deleted(session_id, timeout=self.host.start_timeout_s):
            raise errors.OperationTimeout(
                f"session pod {self.host.namespace}/{session_id} was not gone {self.host.start_timeout_s:.0f}s after "
                "its delete: it stays paused, and the reaper deletes it"
            )

    async def resume(self, session_id: str) -> SessionInfo:
        """Open the paused session's pod again and unpack its workspace into it; back once its runtime
        answers (a held session's link made anew). Resuming a running session is no error.

        Raises:
            SessionNotFound: no such session, or its TTL passed while it was paused.
            SandboxRefused / SandboxFailed / OperationTimeout: the new pod will not run (it stays paused).
            WorkspaceRefused: its archive was changed in the store into one the tar rules refuse.
        """
        return await self.requests.resume(check_session_id(session_id))

    async def _resume(self, session_id: str) -> SessionInfo:
        """:meth:`resume`, under the session's lock."""
        kept = await self._kept(session_id)
        if kept is None:
            return self._info(session_id, (await self._running(session_id)).info)
        snapshot, record = kept
        now = time.time()
        try:
            options = record.options(now)
        except SessionNotFound:
            await asyncio.to_thread(self.host.store.remove, snapshot.id)
            raise
        await self._cluster.create(session_id, options, now=now, timeout_s=self.host.start_timeout_s)
        try:
            await self._restore(session_id, snapshot)
        except BaseException:
            await pods.shielded(self._cluster.delete(session_id))  # still paused: its files wait in the store
            raise
        await asyncio.to_thread(self.host.store.remove, snapshot.id)
        self.requests.mark(session_id, paused=False)
        return self.host.mark(session_id, paused=False) or dataclasses.replace(record.info, paused=False)

    async def _restore(self, session_id: str, snapshot: SnapshotInfo) -> None:
        """The archive into the new pod, through this process's link to it (a held session's anew)."""
        if any(info.id == session_id for info in self.host.held()):
            await self.host.relink(session_id)
        client = await self.host.runtime(session_id)  # a session not held here is now, and followed
        try:
            await archives.restore(self.host.store, snapshot.id, client)
        finally:
            await client.aclose()

    async def paused(self, session_id: str) -> bool:
        """Whether the session is paused (its archive is in the store)."""
        return await self._kept(session_id) is not None

    async def end(self, session_id: str) -> None:
        """The session ended (closed, or its TTL passed): its archive and its requests' record go."""
        await self.drop(session_id)
        await self.requests.forget(session_id)

    async def drop(self, session_id: str) -> bool:
        """Remove a paused session's archive (it is closed or ended); False when it had none."""
        kept = await self._kept(session_id)
        return kept is not None and await asyncio.to_thread(self.host.store.remove, kept[0].id)

    async def listed(self, *, run_id: str | None = None) -> builtins.list[SessionInfo]:
        """The paused sessions of the namespace (of ``run_id``); those whose TTL passed are removed."""
        now, found = time.time(), []
        for snapshot, record in await self._records():
            if record.info.expires_at <= now:
                await asyncio.to_thread(self.host.store.remove, snapshot.id)
            elif run_id is None or record.info.run_id == run_id:
                found.append(record.info)
        return found

    async def _kept(self, session_id: str) -> tuple[SnapshotInfo, PausedSession] | None:
        return next(((s, r) for s, r in await self._records() if r.info.id == session_id), None)

    async def _records(self) -> builtins.list[tuple[SnapshotInfo, PausedSession]]:
        """Every paused session of this namespace and cluster in the store, with its archive."""
        where, store = await self._where(), self.host.store

        def read() -> builtins.list[tuple[SnapshotInfo, PausedSession]]:
            found = []
            for snapshot in store.list():
                if pause_records.session_of(snapshot.name) is None:
                    continue
                try:
                    record = PausedSession.from_json(store.get(snapshot.id)[1].get(pause_records.RECORD_KEY))
                except errors.IronflowError:  # removed meanwhile, or not ours
                    continue
                if (record.namespace, record.cluster) == (self.host.namespace, where):
                    found.append((snapshot, record))
            return found

        return await asyncio.to_thread(read)

    async def _where(self) -> str:
        return (await self._cluster.client()).host
