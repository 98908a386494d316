"""A local session's workspace: made at open as a step's is, its change set on request (I/O).

A session opened with a :class:`~ironflow.workspaces.Workspace` gets the same private copy a
step gets (:func:`ironflow.local.workspaces.copies.prepare` for a host directory, :func:`ironflow.local.
git_workspaces.clone` for a git URL: the same helpers, never a copy), bound read-write at
``/workspace``, the runtime's working directory. :func:`changes` is the step's
:func:`~ironflow.local.workspaces.writeback.finish`: the patch of everything changed since open, with
the same host protections, applied to the host directory (all or none) only when asked. The
copy lives in the session's private directory and goes with it at close.

While the session runs, its copy is measured (:mod:`ironflow.local.workspaces.bound`): past the
workspace's ``max_total_bytes`` the session ends, and the reason answers the calls after it.

The session's processes run while the host reads their copy: every task of its cgroup is
frozen for the read (:meth:`~ironflow.local.sandbox.cgroups.SandboxCgroup.frozen`), so nothing moves under it.
Without a freezer the read is of a copy of the copy, made beneath its fd with no symlink
followed and counted against ``max_total_bytes`` (:func:`~ironflow.local.workspaces.copies.copy_tree`):
a path that moves during it fails the read, it never leads outside.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import os
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from typing import Final

from ironflow import errors
from ironflow.local.sandbox import cgroups
from ironflow.local.sessions.provided import LocalSandbox
from ironflow.local.workspaces import bound, git_sync, writeback
from ironflow.local.workspaces import copies as local_workspaces
from ironflow.workspaces import Workspace, WorkspaceChanges

__all__ = ["changes", "prepare", "stop_past_bound"]

log = logging.getLogger("ironflow.local")

_READ_COPY: Final = "workspace-read-"
#: How many ended sessions' reasons a provider keeps to answer with (the oldest go first).
_ENDED_KEPT: Final = 256


async def prepare(
    provider: LocalSandbox, spec: Workspace, directory: str, *, made: bool = False
) -> local_workspaces.PreparedWorkspace:
    """The session's copy of ``spec`` in its private ``directory`` (``made``: into the empty copy
    directory a warm sandbox binds; a host directory's only, never a clone).

    Raises:
        WorkspaceRefused: a PVC source, or the source cannot be copied or cloned (named).
    """
    if spec.is_pvc:
        raise errors.WorkspaceRefused(
            f"workspace '{spec.source}' is a Kubernetes PersistentVolumeClaim: local sessions take a directory "
            "or a git URL"
        )
    if spec.push_branch is not None:
        raise errors.WorkspaceRefused("a session's workspace cannot push: take its patch with changes()")
    shape = provider.shape()
    local_workspaces.check_mounts(provider.isolation, shape.writable_uid, (), (), spec)  # gVisor: a root worker
    if spec.is_git and not made:
        return await git_sync.clone(
            spec, directory, processes=provider.processes, shape=shape, hosts=provider.git_hosts,
            limit_s=provider.timeout,
        )  # fmt: skip
    if spec.is_git:
        raise errors.SandboxError("a git workspace is cloned before its sandbox starts: never into a warm one")
    prepare = functools.partial(local_workspaces.prepare, sandbox_uid=shape.writable_uid, made=made)
    return await asyncio.to_thread(prepare, spec, directory)


def _collect_from_a_copy(prepared: local_workspaces.PreparedWorkspace) -> WorkspaceChanges:
    """:func:`~ironflow.local.workspaces.copies.collect` of a copy of the session's copy (no freezer)."""
    place = os.path.join(tempfile.mkdtemp(prefix=_READ_COPY, dir=os.path.dirname(prepared.copy)), "copy")
    try:
        whose = "the session's workspace"
        local_workspaces.copy_tree(
            prepared.copy, place, prepared.spec, whose=whose, owner=None, refusal=errors.WorkspaceUnsafe
        )
        return local_workspaces.collect(dataclasses.replace(prepared, copy=place))
    finally:
        shutil.rmtree(os.path.dirname(place), ignore_errors=True)


async def changes(
    prepared: local_workspaces.PreparedWorkspace, *, apply: bool, group: cgroups.SandboxCgroup | None
) -> WorkspaceChanges:
    """Everything changed in the copy since open (read with the session's cgroup ``group``
    frozen, or from a copy of it); with ``apply``, written into the host directory too (all or
    none; a git workspace has none to write).

    Raises:
        WorkspaceUnsafe, WorkspaceConflict: as for a step (:mod:`ironflow.local.workspaces.copies`); the
            copy of the copy is over a bound, or a path moved while it was made.
        WorkspaceRefused: ``apply`` on a git workspace.
        SandboxError: the session's processes could not be frozen.
    """
    if apply and prepared.spec.is_git:
        raise errors.WorkspaceRefused("a git workspace has no host directory to apply to: take its patch")
    if group is not None and group.can_freeze:
        try:
            async with group.frozen():
                found = await asyncio.to_thread(local_workspaces.collect, prepared)
        except cgroups.FreezeFailed as exc:
            raise errors.SandboxError(f"the session could not be frozen to read its workspace: {exc}") from None
    else:
        found = await asyncio.to_thread(_collect_from_a_copy, prepared)
    if apply and found.files:
        return await asyncio.to_thread(writeback.apply_changes, prepared, found)
    return found


def stop_past_bound(
    prepared: local_workspaces.PreparedWorkspace,
    session_id: str,
    ended: dict[str, str],
    kill: Callable[[], Awaitable[None]],
) -> asyncio.Task[None]:
    """A task that kills the session's sandbox (``kill``; its watcher then tears it down) once its
    copy holds more than the workspace's ``max_total_bytes``; the reason goes in ``ended`` first,
    for the calls after it."""

    async def stop() -> None:
        reason = await bound.over_bound(prepared.copy, prepared.spec.max_total_bytes)
        log.warning("sandbox session %s stopped: %s", session_id, reason)
        ended[session_id] = reason
        while len(ended) > _ENDED_KEPT:  # dicts keep insertion order: the oldest first
            del ended[next(iter(ended))]
        await kill()

    return asyncio.create_task(stop())
