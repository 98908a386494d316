"""What a new local session starts with besides its sandbox: a snapshot's files, or a running session's (I/O).

A :class:`Seed` is applied by :class:`~ironflow.local.sessions.local_sessions.LocalSessions` as
it opens the session, on the session's empty ``workspace`` directory (:func:`workspace_dir`
makes it before a cold sandbox starts; a warm one binds its own from its start): ``workspace``
gives the prepared workspace, ``fill`` copies into it (while a cold sandbox starts:
:func:`beside`; into a warm one before its hand-out: :func:`fill_now`), ``home`` fills its HOME
once the sandbox runs.

From a snapshot (:func:`from_snapshot`), both come out of the store, and the session's changes are
against the snapshot (it has no host directory to apply to). A fork (:func:`live`) copies the
parent's workspace and home straight into the new session while the parent is frozen (no trip
through the store: one copy, not two, and the copy runs beside the sandbox's start), and the
fork's workspace keeps the parent's base, its host directory and first snapshot: ``diff`` on a
fork is everything changed since the parent opened, and ``diff --apply`` writes it into the host
directory, as the parent's would (a second apply of another fork meets the first as a conflict).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import os
from collections.abc import Awaitable, Callable

from ironflow import errors
from ironflow.local.sandbox import launch
from ironflow.local.sessions import snapshots, starter
from ironflow.local.workspaces import copies
from ironflow.local.workspaces.tree_reads import DIR_FLAGS

__all__ = ["Seed", "beside", "fill_now", "from_snapshot", "live", "workspace_dir"]


@dataclasses.dataclass(frozen=True)
class Seed:
    """A new session's files: ``workspace(directory)``, ``fill(directory)`` and ``home(directory, opener)``,
    each run in a thread."""

    workspace: Callable[[str], copies.PreparedWorkspace] | None = None
    home: Callable[[str, snapshots.Opener], None] | None = None
    #: The snapshot it came from: kept in the store while the session is open.
    snapshot_id: str | None = None
    #: Fills the workspace directory ``workspace`` made, while the sandbox starts (:func:`beside`).
    fill: Callable[[str], None] | None = None


def from_snapshot(store: snapshots.SnapshotStore, snapshot_id: str, *, isolation: str, owner: int | None) -> Seed:
    """The seed of ``snapshot_id``'s files.

    Raises:
        SnapshotNotFound: no such snapshot. ConfigError: it was taken under another isolation.
    """
    info, _ = store.get(snapshot_id)
    if info.isolation != isolation:
        raise errors.ConfigError(
            f"snapshot '{info.id}' is of a {info.isolation} session: open it with isolation '{info.isolation}'"
        )
    workspace = home = None
    if snapshots.WORKSPACE in info.trees:
        workspace = functools.partial(_restored_workspace, store, snapshot_id, owner)
    if snapshots.HOME in info.trees:
        home = functools.partial(_restored_home, store, snapshot_id, owner)
    return Seed(workspace, home, snapshot_id)


def _restored_workspace(
    store: snapshots.SnapshotStore, snapshot_id: str, owner: int | None, directory: str
) -> copies.PreparedWorkspace:
    prepared = store.restore_workspace(snapshot_id, directory, owner=owner)
    assert prepared is not None  # the snapshot holds one: checked when the seed was made
    return prepared


def _restored_home(
    store: snapshots.SnapshotStore, snapshot_id: str, owner: int | None, directory: str, home: snapshots.Opener
) -> None:
    store.restore_home(snapshot_id, home, owner=owner, scratch=os.path.join(directory, "home-restore"))


def live(parent: starter.StartedSession, owner: int | None, snapshot_id: str | None) -> Seed:
    """A fork's seed, copying from ``parent`` as the fork opens (keep the parent frozen until it has):
    its workspace copied while the fork's sandbox starts (:func:`beside`), its home once it runs.
    ``snapshot_id``: the parent's own base when it was opened from a snapshot (its forks diff against it)."""
    workspace = parent.workspace
    home = functools.partial(snapshots.sandbox_home, parent.proc.pid, parent.group)
    if workspace is None:
        return Seed(None, functools.partial(_home_from, home, owner), snapshot_id)
    source = functools.partial(os.open, workspace.copy, DIR_FLAGS)
    return Seed(
        functools.partial(_workspace_for, workspace, source),
        functools.partial(_home_from, home, owner),
        snapshot_id,
        functools.partial(_filled_workspace, source, owner),
    )


def _workspace_for(
    parent: copies.PreparedWorkspace, source: snapshots.Opener, directory: str
) -> copies.PreparedWorkspace:
    """The fork's (still empty) workspace directory, on the parent's base, once the parent's tree
    is checked as a snapshot's is."""
    snapshots.check_tree(source, snapshots.WORKSPACE)
    copy = os.path.join(directory, snapshots.WORKSPACE)
    return dataclasses.replace(parent, copy=copy, git_dir=os.path.join(directory, "workspace.git"))


def workspace_dir(directory: str) -> str:
    """The session's empty workspace directory, made in its private ``directory`` (0700: the copy
    gives it its source's mode and owner once filled)."""
    path = os.path.join(directory, snapshots.WORKSPACE)
    os.mkdir(path, 0o700)
    return path


def fill_now(seed: Seed, directory: str) -> copies.PreparedWorkspace:
    """The seed's workspace in ``directory``'s existing, empty ``workspace`` directory (a warm
    sandbox's, bound already), ``workspace`` then ``fill``, in this thread."""
    assert seed.workspace is not None
    prepared = seed.workspace(directory)
    if seed.fill is not None:
        seed.fill(directory)
    return prepared


def _filled_workspace(source: snapshots.Opener, owner: int | None, directory: str) -> None:
    """The parent's workspace copied by two threads: a fork waits for its copy (from a warm sandbox,
    nothing else), and ``copy_file_range`` lets go of the GIL."""
    snapshots.copy_into(source, functools.partial(os.open, os.path.join(directory, snapshots.WORKSPACE), DIR_FLAGS),
                        owner=owner, threads=2)  # fmt: skip


def _home_from(parent_home: snapshots.Opener, owner: int | None, directory: str, home: snapshots.Opener) -> None:
    snapshots.check_tree(parent_home, snapshots.HOME)
    snapshots.copy_into(parent_home, home, owner=owner, as_owner=True)


async def beside(launching: Awaitable[starter.WarmSandbox], seed: Seed, directory: str) -> starter.WarmSandbox:
    """``launching`` (the new session's sandbox starting) with ``seed.fill`` copying its files meanwhile
    into the directory its sandbox binds; a failure of either leaves neither running."""
    if seed.fill is None:
        return await launching
    filling = asyncio.ensure_future(asyncio.to_thread(seed.fill, directory))
    try:
        warm = await launching
    except BaseException:
        await asyncio.wait([filling])  # the copy ends before its directory goes
        raise
    try:
        await filling
    except BaseException:
        await asyncio.shield(launch.teardown(warm.proc, warm.group))
        raise
    return warm
