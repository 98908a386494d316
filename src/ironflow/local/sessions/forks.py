"""What a new local session starts with besides its sandbox: a snapshot's files, or a running session's (I/O).

A :class:`Seed` is applied by :class:`~ironflow.local.sessions.local_sessions.LocalSessions` as
it opens the session: ``workspace`` makes its workspace copy in the new session's directory (before
the sandbox starts: the copy is bound at ``/workspace``), ``home`` fills its HOME once the sandbox
runs (:func:`~ironflow.local.sessions.snapshots.fill_home`).

From a snapshot (:func:`from_snapshot`), both come out of the store, and the session's changes are
against the snapshot (it has no host directory to apply to). A fork (:func:`stage`) copies the
parent's workspace and home straight into staging directories while the parent is frozen (no trip
through the store: one copy, not two), and the fork's workspace keeps the parent's base, its host
directory and first snapshot: ``diff`` on a fork is everything changed since the parent opened,
and ``diff --apply`` writes it into the host directory, as the parent's would (a second apply
of another fork meets the first as a conflict).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable, Sequence

from ironflow import errors
from ironflow.local.sessions import snapshots, starter
from ironflow.local.workspaces import copies
from ironflow.local.workspaces.tree_reads import DIR_FLAGS

__all__ = ["Seed", "from_snapshot", "stage"]


@dataclasses.dataclass(frozen=True)
class Seed:
    """A new session's files: ``workspace(directory)`` and ``home(directory, opener)``, each run in a thread."""

    workspace: Callable[[str], copies.PreparedWorkspace] | None = None
    home: Callable[[str, snapshots.Opener], None] | None = None
    #: The snapshot it came from: kept in the store while the session is open.
    snapshot_id: str | None = None


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


def stage(
    parent: starter.StartedSession, staging: Sequence[str], owner: int | None, snapshot_id: str | None
) -> list[Seed]:
    """One seed per directory of ``staging`` (empty, private): the parent's workspace copy and home
    copied into each now; call it with the parent frozen. ``snapshot_id``: the parent's own base
    when it was opened from a snapshot (its forks diff against it too).

    Raises:
        WorkspaceRefused: the parent's files hold what a snapshot takes not (a FIFO, a hard link).
    """
    workspace = parent.workspace
    home = functools.partial(snapshots.sandbox_home, parent.proc.pid, parent.group)
    seeds = []
    for place in staging:
        adopt = None
        if workspace is not None:
            staged_workspace = os.path.join(place, snapshots.WORKSPACE)
            snapshots.copy_checked(functools.partial(os.open, workspace.copy, DIR_FLAGS), staged_workspace, owner)
            adopt = functools.partial(_adopted, workspace, staged_workspace)
        staged_home = os.path.join(place, snapshots.HOME)
        snapshots.copy_checked(home, staged_home, owner)
        seeds.append(Seed(adopt, functools.partial(_filled, staged_home, owner), snapshot_id))
    return seeds


def _adopted(parent: copies.PreparedWorkspace, staged: str, directory: str) -> copies.PreparedWorkspace:
    """The staged copy moved into the new session's directory, on the parent's base."""
    copy = os.path.join(directory, snapshots.WORKSPACE)
    os.rename(staged, copy)  # the same filesystem (both under the sessions' state dir): instant
    return dataclasses.replace(parent, copy=copy, git_dir=os.path.join(directory, "workspace.git"))


def _filled(staged: str, owner: int | None, directory: str, home: snapshots.Opener) -> None:
    snapshots.fill_home(staged, home, owner=owner)
