"""A cluster session's workspace as a snapshot: one tar archive in the shared store, out of one session
and into a new one (I/O).

A Kubernetes or agent-sandbox session's snapshot is its runtime's workspace (its root: the pod's
HOME, or the clone of a git workspace), streamed out through the runtime's tar endpoint (HTTP, or
the exec bridge) into :mod:`~ironflow.sessions.snapshot_store` as ``workspace.tar``, and streamed
into a new session's workspace before its first use (``?exact=1``: modes and mtimes kept, less
setuid/setgid; owners never). Files only: no process, no memory, nothing outside the workspace;
no PVC clone or VolumeSnapshot is made.

The stream is the sandbox's word (a session may have taken over its runtime), so it is held to
the store's limit as it arrives, and read by :mod:`~ironflow.sessions.untar`'s own rules before it
is kept and again before it is sent (the store's file may have been changed on disk): an
absolute or ``..`` name, a hard link, a device, FIFO or sparse member, a symlink leaving the tree
or a member beneath one is refused, named, in one line, and nothing is kept or restored. The new
session's runtime checks every path again as it writes.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Mapping
from typing import BinaryIO, Final

from ironflow import errors
from ironflow.sessions import snapshot_store, untar
from ironflow.sessions.client import RuntimeClient
from ironflow.sessions.snapshot_store import SnapshotStore
from ironflow.sessions.values import SnapshotInfo

__all__ = ["ARCHIVE", "BACKENDS", "capture", "check_restorable", "restore"]

#: The file of a cluster snapshot, in its directory of the store.
ARCHIVE: Final = "workspace.tar"
#: The backends whose snapshots are archives of the workspace: either opens the other's.
BACKENDS: Final = ("k8s", "agent-sandbox")
_TAR: Final = "/ironflow/v1/tar/."
_CHUNK: Final = 1 << 16


def _refused(why: str) -> errors.WorkspaceRefused:
    return errors.WorkspaceRefused(f"snapshot refused: {why}")


def _check(archive: BinaryIO, length: int) -> None:
    """The archive read by the host's own tar rules (nothing written).

    Raises:
        WorkspaceRefused: the first member they refuse, named.
    """
    try:
        untar.read_index(archive, length, max_entries=untar.DEFAULT_MAX_ENTRIES)
    except untar.ArchiveRefused as exc:
        raise _refused(f"the session's workspace archive: {exc.message}") from None


async def capture(
    store: SnapshotStore,
    client: RuntimeClient,
    *,
    session_id: str,
    name: str | None,
    backend: str,
    extra: Mapping[str, object] | None = None,
) -> SnapshotInfo:
    """The session's workspace, through ``client``, as a new snapshot of ``store`` (``extra``: more
    of its record, e.g. a paused session's).

    Raises:
        ConfigError: ``name`` is not a label value.
        WorkspaceRefused: past the store's limit, or a member the tar rules refuse.
        SandboxError: the runtime could not be reached or broke off.
    """
    snapshot_store.check_name(name)
    async with store.lock:
        left = await asyncio.to_thread(store.left)
        with store.staged() as (snapshot_id, place):
            path = os.path.join(place, ARCHIVE)
            with open(path, "xb+") as archive:  # noqa: ASYNC230 - a private new file, written as the stream comes
                size = 0
                response = await client.request("GET", _TAR)
                async with response:
                    with client.answer("the workspace's tar stream"):
                        async for data in response.content.iter_chunked(_CHUNK):
                            size += len(data)
                            if size > left:
                                raise _refused(
                                    f"the session's workspace is past the store's limit ({left} bytes left): "
                                    "remove snapshots or files"
                                )
                            archive.write(data)
                archive.flush()
                await asyncio.to_thread(_check, archive, size)
            info = SnapshotInfo(snapshot_id, name, session_id, size, time.time(), backend, (snapshot_store.WORKSPACE,))
            return store.commit(place, info, {"format": "tar", **(extra or {})})


def check_restorable(store: SnapshotStore, snapshot_id: str) -> SnapshotInfo:
    """The snapshot, when a cluster session can start from it: a cluster session's, its archive
    passing the tar rules (before anything is made for the session; :func:`restore` checks again).

    Raises:
        SnapshotNotFound: no such snapshot. ConfigError: a local session's (its trees, not an archive).
        WorkspaceRefused: a member the tar rules refuse.
    """
    info, _ = store.get(snapshot_id)
    path = os.path.join(store.path(snapshot_id), ARCHIVE)
    if info.isolation not in BACKENDS or not os.path.isfile(path):
        raise errors.ConfigError(
            f"snapshot '{snapshot_id}' is of a {info.isolation or 'local'} session: open it on that backend "
            "(a cluster session starts from a cluster session's snapshot)"
        )
    with open(path, "rb") as archive:
        _check(archive, os.fstat(archive.fileno()).st_size)
    return info


async def restore(store: SnapshotStore, snapshot_id: str, client: RuntimeClient) -> int:
    """The snapshot's archive, checked again as it is sent (the file may have changed since), unpacked
    into the workspace of the session behind ``client``; returns its entries.

    Raises:
        SnapshotNotFound / ConfigError / WorkspaceRefused: as :func:`check_restorable` (nothing sent).
        ConfigError / PermissionError: the session's runtime refused a member.
    """
    info, _ = store.get(snapshot_id)
    if info.isolation not in BACKENDS:
        raise errors.ConfigError(f"snapshot '{snapshot_id}' is of a {info.isolation} session: open it on that backend")
    with open(os.path.join(store.path(snapshot_id), ARCHIVE), "rb") as archive:  # noqa: ASYNC230 - the store's file
        await asyncio.to_thread(_check, archive, os.fstat(archive.fileno()).st_size)
        archive.seek(0)
        doc = await client.json("PUT", f"{_TAR}?exact=1", data=_chunks(archive))
    return int(doc["entries"])


async def _chunks(archive: BinaryIO) -> AsyncIterator[bytes]:
    while data := await asyncio.to_thread(archive.read, _CHUNK):
        yield data
