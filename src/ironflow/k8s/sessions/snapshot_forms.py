"""A cluster session host's snapshots: which form each takes, where a new session starts from (I/O).

A snapshot of a session is an archive of its workspace read through its runtime
(:mod:`~ironflow.k8s.sessions.archives`), or, for pod sessions whose HOME is a claim of a
session volume with a VolumeSnapshotClass, a VolumeSnapshot of that claim
(:mod:`~ironflow.k8s.sessions.volume_snapshots`). Both are records of one shared
:class:`~ironflow.sessions.snapshot_store.SnapshotStore`, listed and bounded together; this
module picks the form, checks a snapshot before a session is made from it, and removes
either kind whole.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Awaitable, Callable

from ironflow import errors
from ironflow.k8s.sessions import archives, volume_snapshots
from ironflow.k8s.settings import SessionVolume
from ironflow.kube import api as kube
from ironflow.sessions.client import RuntimeClient
from ironflow.sessions.snapshot_store import SnapshotStore
from ironflow.sessions.values import SnapshotInfo, SnapshotNotFound

__all__ = ["ClusterSnapshots"]


class ClusterSnapshots:
    """The snapshots of one host's sessions.

    Args:
        store: the snapshot store (default: the shared one, made when first used).
        namespace: the sessions' namespace (a VolumeSnapshot lives there).
        backend: the sessions' backend, recorded on each snapshot.
        volume: the sessions' HOME volume when it is a claim (pod sessions only).
        api: the cluster's client, when one is needed.
    """

    def __init__(
        self,
        store: SnapshotStore | None,
        *,
        namespace: str,
        backend: str,
        volume: SessionVolume | None,
        api: Callable[[], Awaitable[kube.KubeApi]],
    ) -> None:
        self._store = store
        self.namespace = namespace
        self.backend = backend
        self.volume = volume
        #: Set: a snapshot is a VolumeSnapshot of this class of the session's HOME claim (else an archive).
        self.snapshot_class = None if volume is None else volume.snapshot_class
        self._api = api

    @property
    def store(self) -> SnapshotStore:
        if self._store is None:
            self._store = SnapshotStore()
        return self._store

    async def capture(self, session_id: str, runtime: Callable[[], RuntimeClient], *, name: str | None) -> SnapshotInfo:
        """A new snapshot of the session: of its claim, or its workspace read through ``runtime()``.

        Raises:
            ConfigError: a bad name. WorkspaceRefused: past the store's limit, or a member the tar
            rules refuse. SandboxError / OperationTimeout: the runtime or the driver failed.
        """
        if self.snapshot_class is not None:
            return await volume_snapshots.capture(
                await self._api(), self.store, namespace=self.namespace, snapshot_class=self.snapshot_class,
                session_id=session_id, name=name, backend=self.backend,
            )  # fmt: skip
        client = runtime()
        try:
            return await archives.capture(self.store, client, session_id=session_id, name=name, backend=self.backend)
        finally:
            await client.aclose()

    def source(self, snapshot_id: str) -> str | None:
        """The VolumeSnapshot a new session's HOME starts from (None: its archive, checked by the tar
        rules, is unpacked once it runs); before anything is made for the session.

        Raises:
            SnapshotNotFound: none has this id. ConfigError: a local session's, a VolumeSnapshot of
            another namespace or where sessions have no HOME claim. WorkspaceRefused: a member the
            tar rules refuse.
        """
        _, record = self.store.get(snapshot_id)
        found = volume_snapshots.source_of(record, namespace=self.namespace)
        if found is None:
            archives.check_restorable(self.store, snapshot_id)
        elif self.volume is None:
            raise _no_volume(snapshot_id)
        return found

    async def restore(self, snapshot_id: str, client: RuntimeClient) -> None:
        """An archive snapshot unpacked into the session behind ``client``."""
        await archives.restore(self.store, snapshot_id, client)

    async def list(self) -> builtins.list[SnapshotInfo]:
        return await asyncio.to_thread(self.store.list)

    async def remove(self, snapshot_id: str) -> bool:
        """Remove a snapshot: its VolumeSnapshot first when it is one, then its record."""
        try:
            _, record = await asyncio.to_thread(self.store.get, snapshot_id)
        except SnapshotNotFound:
            return False
        found = volume_snapshots.named(record)
        if found is not None and all(found):
            await volume_snapshots.remove(await self._api(), *found)
        return await asyncio.to_thread(self.store.remove, snapshot_id)


def _no_volume(snapshot_id: str) -> errors.ConfigError:
    return errors.ConfigError(
        f"snapshot '{snapshot_id}' is a VolumeSnapshot: open it with a session volume (session_volume: in the "
        "provider file)"
    )
