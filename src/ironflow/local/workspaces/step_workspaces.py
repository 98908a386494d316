"""A step's or a command's workspace on this machine: opened before it runs, finished after (I/O).

:func:`open_workspace` makes the private copy a sandbox writes (a host directory's copy, or a
git source's clone made in a sandbox of its own); :func:`close_workspace` reads what the run
changed and, when it succeeded and asked, applies it to the host directory or pushes it. A
Kubernetes claim is refused here: it only means something on the k8s backend. A session's
workspace is :mod:`ironflow.local.sessions.changesets`' (the same helpers, never a copy).
"""

from __future__ import annotations

import asyncio

from ironflow import errors
from ironflow.local.sandbox import argv, launch
from ironflow.local.workspaces import copies, git_sync, writeback
from ironflow.workspaces import Workspace, WorkspaceChanges

__all__ = ["close_workspace", "open_workspace"]


async def open_workspace(
    spec: Workspace,
    tmp: str,
    *,
    processes: launch.SandboxProcesses,
    shape: argv.SandboxShape,
    hosts: git_sync.GitHosts,
    limit_s: float,
) -> copies.PreparedWorkspace:
    """The run's copy of ``spec`` in its temp dir ``tmp``, owned by the uid the sandbox writes as."""
    # A host directory's copy, or a git source's clone (made in a sandbox of its own).
    if spec.is_pvc:
        raise errors.WorkspaceRefused(
            f"workspace '{spec.source}' is a Kubernetes PersistentVolumeClaim: run the step on the k8s backend"
        )
    if spec.is_git:
        return await git_sync.clone(spec, tmp, processes=processes, shape=shape, hosts=hosts, limit_s=limit_s)
    return await asyncio.to_thread(copies.prepare, spec, tmp, sandbox_uid=shape.writable_uid)


async def close_workspace(
    prepared: copies.PreparedWorkspace,
    succeeded: bool,
    message: str,
    *,
    processes: launch.SandboxProcesses,
    shape: argv.SandboxShape,
    hosts: git_sync.GitHosts,
    limit_s: float,
) -> WorkspaceChanges:
    """What the step changed; applied to the host directory, or pushed, when it succeeded and asked."""
    changes = await writeback.finish(prepared, succeeded=succeeded)
    if succeeded and prepared.spec.push_branch is not None:
        changes = await git_sync.push(
            prepared, changes, processes=processes, shape=shape, hosts=hosts, limit_s=limit_s, message=message
        )
    return changes
