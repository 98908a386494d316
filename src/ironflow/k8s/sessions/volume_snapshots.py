"""A cluster session's HOME claim as a VolumeSnapshot: taken, waited for, recorded, removed (I/O).

With a session volume that names a VolumeSnapshotClass (:mod:`ironflow.k8s.sessions.session_volumes`), a
snapshot is made by the cluster's CSI driver from the session's HOME claim, and the store keeps
only its record (``format: volumesnapshot``, the object's namespace and name, its restore size,
which counts against the store's limit as an archive's bytes do). Nothing of the workspace is
read on this machine, so no tar rule applies here: the files go from one sandbox's volume into
another's. A snapshot the driver reports failed, or not ready in time, is deleted and refused.
The claim is snapshotted while the session's commands may run (as an archive is read): the
driver's copy is crash-consistent at best.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping
from typing import Final

from ironflow import errors, labels
from ironflow.k8s import pods
from ironflow.k8s.sessions import session_volumes
from ironflow.kube import api as kube
from ironflow.sessions import snapshot_store
from ironflow.sessions.snapshot_store import SnapshotStore
from ironflow.sessions.values import SnapshotInfo

__all__ = ["DEFAULT_READY_TIMEOUT_S", "FORMAT", "capture", "named", "remove", "source_of"]

FORMAT: Final = "volumesnapshot"
#: How long the driver may take to cut a snapshot before it is deleted and refused.
DEFAULT_READY_TIMEOUT_S: Final = 120.0
_POLL_S: Final = 0.25


def named(record: Mapping[str, object]) -> tuple[str, str] | None:
    """The namespace and name of the VolumeSnapshot a store record is (None: an archive's record) (pure)."""
    if record.get("format") != FORMAT:
        return None
    return str(record.get("namespace") or ""), str(record.get("volume_snapshot") or "")


def source_of(record: Mapping[str, object], *, namespace: str) -> str | None:
    """The VolumeSnapshot a store record names (None: an archive), when a session of ``namespace``
    may start from it (pure).

    Raises:
        ConfigError: a VolumeSnapshot of another namespace (a claim's dataSource cannot reach it).
    """
    found = named(record)
    if found is None:
        return None
    where, name = found
    if where != namespace or not name:
        raise errors.ConfigError(
            f"snapshot '{record.get('id')}' is a VolumeSnapshot in namespace '{where}': open it there "
            f"(this provider's namespace is '{namespace}')"
        )
    return name


async def capture(
    api: kube.KubeApi,
    store: SnapshotStore,
    *,
    namespace: str,
    snapshot_class: str,
    session_id: str,
    name: str | None,
    backend: str,
    timeout_s: float = DEFAULT_READY_TIMEOUT_S,
) -> SnapshotInfo:
    """A VolumeSnapshot of the session's HOME claim, of ``snapshot_class``, recorded in ``store`` once ready.

    Raises:
        ConfigError: ``name`` is not a label value.
        WorkspaceRefused: its size is past the store's limit.
        SandboxError: the driver failed it; OperationTimeout: not ready in ``timeout_s``.
    """
    snapshot_store.check_name(name)
    async with store.lock:
        with store.staged() as (snapshot_id, place):
            body = session_volumes.volume_snapshot(
                snapshot_id,
                namespace=namespace,
                claim=session_volumes.claim_name(session_id),
                snapshot_class=snapshot_class,
                snapshot_labels={labels.LABEL_SNAPSHOT_ID: snapshot_id, labels.LABEL_SESSION_ID: session_id},
            )
            await api.create(session_volumes.VOLUME_SNAPSHOTS, namespace, body)
            try:
                state = await _ready(api, namespace, snapshot_id, timeout_s)
                left = await asyncio.to_thread(store.left)
                if state.size_bytes > left:
                    raise errors.WorkspaceRefused(
                        f"snapshot refused: the session's volume ({state.size_bytes} bytes) is past the store's "
                        f"limit ({left} bytes left): remove snapshots"
                    )
                info = SnapshotInfo(
                    snapshot_id, name, session_id, state.size_bytes, time.time(), backend, (snapshot_store.WORKSPACE,)
                )
                record = {"format": FORMAT, "namespace": namespace, "volume_snapshot": snapshot_id}
                return store.commit(place, info, record)
            except BaseException:
                await pods.shielded(remove(api, namespace, snapshot_id))
                raise


async def _ready(api: kube.KubeApi, namespace: str, name: str, timeout_s: float) -> session_volumes.SnapshotState:
    deadline = time.monotonic() + timeout_s
    while True:
        state = session_volumes.snapshot_state(await api.get(session_volumes.VOLUME_SNAPSHOTS, namespace, name))
        if state.error is not None:
            raise errors.SandboxError(f"VolumeSnapshot {namespace}/{name} failed: {errors.truncate(state.error, 300)}")
        if state.ready:
            return state
        if time.monotonic() >= deadline:
            raise errors.OperationTimeout(f"VolumeSnapshot {namespace}/{name} was not ready within {timeout_s:g}s")
        await asyncio.sleep(_POLL_S)


async def remove(api: kube.KubeApi, namespace: str, name: str) -> None:
    """Delete the VolumeSnapshot (its content goes with it under a ``Delete`` class); quiet when gone."""
    with contextlib.suppress(errors.KubeNotFound):
        await api.delete(session_volumes.VOLUME_SNAPSHOTS, namespace, name)
