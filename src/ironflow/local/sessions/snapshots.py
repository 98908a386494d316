"""Snapshots of local sessions: an immutable copy of a session's files in a store on the host (I/O).

A snapshot holds up to two trees of a session: ``workspace`` (its copy at ``/workspace``) and
``home`` (its HOME, a tmpfs inside the sandbox, reached through ``/proc/PID/root`` of a process
of the sandbox: the host's view of the sandbox's own mounts). gVisor keeps a session's HOME in
its own memory, out of the host's reach: a gVisor snapshot holds the workspace only, and a gVisor
session without one is refused. The store, its records and its limit are the backends' shared
:mod:`~ironflow.sessions.snapshot_store`; a local snapshot's trees are directories in it.

Everything in a session's trees is the sandbox's word, so it is read as an attacker's: every open
is beneath the tree's fd with no symlink followed on the way or at the end
(:mod:`~ironflow.local.workspaces.tree_reads`), symlinks are kept as links (their text, never their
target), and before a byte is copied the tree is scanned and refused whole, in one line, for a
FIFO, socket or device, a file with more than one hard link, or more bytes than the store has
left under its limit (a sparse file counts by its size). Modes and mtimes are kept (setuid and
setgid are dropped). The copy is ``copy_file_range``: a reflink where the filesystem has them
(btrfs, XFS), an in-kernel copy where not; never a hard link, since a session writes its tree.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import dataclasses
import functools
import os
import signal
import stat
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Final

from ironflow import errors
from ironflow.claude import layout
from ironflow.local.sandbox import cgroups
from ironflow.local.sessions import freezer
from ironflow.local.workspaces import copies, tree_reads
from ironflow.local.workspaces.tree_reads import DIR_FLAGS
from ironflow.sessions import snapshot_store
from ironflow.sessions.values import SnapshotInfo
from ironflow.workspaces import Workspace

__all__ = [
    "HOME",
    "WORKSPACE",
    "SnapshotStore",
    "check_tree",
    "copy_into",
    "fill_home",
    "sandbox_home",
    "trees_of",
]

WORKSPACE: Final = snapshot_store.WORKSPACE
HOME: Final = snapshot_store.HOME
_SPECIAL: Final = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a device",
    stat.S_IFBLK: "a device",
}
#: A restored tree is bounded by the snapshot itself (it passed the store's limit): no second bound.
_NO_BOUND: Final = 1 << 62

#: Opens a tree's root directory (the caller's fd to close).
Opener = Callable[[], int]


def _refused(why: str) -> errors.WorkspaceRefused:
    return errors.WorkspaceRefused(f"snapshot refused: {why}")


def _scan(root_fd: int, tree: str, left: int) -> int:
    """The bytes of the tree under ``root_fd``, after checking it holds only what a snapshot takes.

    Raises:
        WorkspaceRefused: a special file, a hard link, or past ``left`` bytes (named).
    """
    total, pending = 0, [""]
    while pending:
        rel = pending.pop()
        dir_fd = tree_reads.open_beneath(root_fd, rel, DIR_FLAGS) if rel else os.dup(root_fd)
        try:
            with os.scandir(dir_fd) as it:
                for item in it:
                    path = f"{rel}/{item.name}" if rel else item.name
                    st = item.stat(follow_symlinks=False)
                    shown = f"{tree}/{copies.escaped(path)}"
                    if stat.S_ISDIR(st.st_mode):
                        pending.append(path)
                    elif stat.S_ISREG(st.st_mode):
                        if st.st_nlink > 1:
                            raise _refused(f"'{shown}' is a hard link ({st.st_nlink} names): copy it to a file")
                        total += st.st_size
                        if total > left:
                            raise _refused(
                                f"'{shown}' ({st.st_size} bytes) takes the snapshot past the store's limit "
                                f"({left} bytes left): remove snapshots or the file"
                            )
                    elif not stat.S_ISLNK(st.st_mode):
                        kind = _SPECIAL.get(stat.S_IFMT(st.st_mode), "a special file")
                        raise _refused(f"'{shown}' is {kind}: a snapshot takes files, directories and symlinks")
        finally:
            os.close(dir_fd)
    return total


def _copy(src_fd: int, dst: str, *, owner: int | None) -> None:
    os.mkdir(dst, 0o700)
    dst_fd = os.open(dst, DIR_FLAGS)
    try:
        tree_reads.copy_tree(src_fd, dst_fd, max_file=_NO_BOUND, max_total=_NO_BOUND, owner=owner)
    finally:
        os.close(dst_fd)


def sandbox_home(pid: int, group: cgroups.SandboxCgroup | None) -> int:
    """An fd of the sandbox's HOME as the host sees it: ``/proc/P/root`` of bubblewrap's own child
    (the sandbox's init, which nothing in the sandbox can replace or move: a process that made
    mounts of its own is never asked), then beneath it, no symlink followed. ``group``: checked to
    hold it.

    Raises:
        SandboxError: no process of the sandbox has its own mounts (it ended).
    """
    try:
        outer = os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        raise errors.SandboxError("the session's sandbox is gone") from None
    members = set(group.pids()) if group is not None else None
    for candidate in freezer.children(pid):
        if members is not None and candidate not in members:
            continue
        try:
            pidfd = os.pidfd_open(candidate)
        except OSError:
            continue
        try:
            if os.readlink(f"/proc/{candidate}/ns/mnt") == outer:
                continue
            root = os.open(f"/proc/{candidate}/root", DIR_FLAGS & ~os.O_NOFOLLOW)  # the one link that must be followed
            try:
                signal.pidfd_send_signal(pidfd, 0)  # still that process: the root opened is its sandbox's
                return tree_reads.open_beneath(root, layout.SANDBOX_HOME.lstrip("/"), DIR_FLAGS)
            finally:
                os.close(root)
        except OSError:
            continue
        finally:
            os.close(pidfd)
    raise errors.SandboxError("the session's sandbox has no process left to read its home through")


def trees_of(
    pid: int, group: cgroups.SandboxCgroup | None, workspace: copies.PreparedWorkspace | None, isolation: str
) -> dict[str, Opener]:
    """What a snapshot of a session holds: its workspace copy, and under bubblewrap its home.

    Raises:
        ConfigError: a gVisor session without a workspace (its home is in gVisor's memory).
    """
    trees: dict[str, Opener] = {}
    if workspace is not None:
        copy = workspace.copy
        trees[WORKSPACE] = lambda: os.open(copy, DIR_FLAGS)
    if isolation == "bwrap":
        trees[HOME] = functools.partial(sandbox_home, pid, group)
    elif not trees:
        raise errors.ConfigError(
            "a gVisor session keeps its home in gVisor's own memory, out of the host's reach: snapshots of "
            "gVisor sessions hold their workspace, so open one with a workspace"
        )
    return trees


class SnapshotStore(snapshot_store.SnapshotStore):
    """The shared store (:class:`~ironflow.sessions.snapshot_store.SnapshotStore`) with local
    sessions' trees: capture them, and copy one out for a new session."""

    async def capture(
        self,
        trees: Mapping[str, Opener],
        *,
        session_id: str,
        name: str | None,
        isolation: str,
        workspace: Workspace | None = None,
    ) -> SnapshotInfo:
        """A new snapshot of ``trees`` (each opened by its opener, read beneath its fd); the caller
        holds the session still meanwhile.

        Raises:
            WorkspaceRefused: past the store's limit, or a tree holds what a snapshot takes not.
            ConfigError: ``name`` is not a label value.
        """
        snapshot_store.check_name(name)
        async with self.lock:
            return await asyncio.to_thread(self._capture, trees, session_id, name, isolation, workspace)

    def _capture(
        self,
        trees: Mapping[str, Opener],
        session_id: str,
        name: str | None,
        isolation: str,
        workspace: Workspace | None,
    ) -> SnapshotInfo:
        try:
            with self.staged() as (snapshot_id, place):
                left, size = self.left(), 0
                for tree, opener in trees.items():
                    root = opener()
                    try:
                        size += _scan(root, tree, left - size)
                        _copy(root, os.path.join(place, tree), owner=None)
                    finally:
                        os.close(root)
                info = SnapshotInfo(snapshot_id, name, session_id, size, time.time(), isolation, tuple(trees))
                extra = None
                if workspace is not None:
                    extra = {"max_file_bytes": workspace.max_file_bytes, "max_total_bytes": workspace.max_total_bytes}
                return self.commit(place, info, extra)
        except tree_reads.Refused as exc:
            raise _refused(f"'{copies.escaped(exc.path or '')}': {exc.why}") from None
        except OSError as exc:
            where = f" at '{copies.escaped(os.fsdecode(exc.filename))}'" if exc.filename else ""
            raise _refused(f"the session's files could not be read{where}: {exc.strerror or exc}") from None

    def restore_workspace(
        self, snapshot_id: str, run_dir: str, *, owner: int | None
    ) -> copies.PreparedWorkspace | None:
        """The snapshot's workspace copied into ``run_dir``'s (empty) ``workspace`` directory as a session's
        prepared workspace (its changes are against the snapshot; it has no host directory to apply to),
        None without one."""
        info, doc = self.get(snapshot_id)
        if WORKSPACE not in info.trees:
            return None
        source = os.path.join(self.path(snapshot_id), WORKSPACE)
        spec = Workspace(source)
        if isinstance(files := doc.get("max_file_bytes"), int) and isinstance(total := doc.get("max_total_bytes"), int):
            spec = dataclasses.replace(spec, max_file_bytes=files, max_total_bytes=total)  # the parent's bounds
        copy = os.path.join(run_dir, WORKSPACE)
        src = os.open(source, DIR_FLAGS)
        try:
            _copy_into(src, functools.partial(os.open, copy, DIR_FLAGS), owner=owner)
        finally:
            os.close(src)
        before = copies.snapshot(copy, spec, whose=f"snapshot '{snapshot_id}'")
        return copies.PreparedWorkspace(spec, source, copy, os.path.join(run_dir, "workspace.git"), before)

    def restore_home(self, snapshot_id: str, home: Opener, *, owner: int | None, scratch: str) -> None:
        """The snapshot's home copied into a new session's (empty) HOME, opened by ``home``, by way
        of ``scratch`` (:func:`fill_home`)."""
        src = os.open(os.path.join(self.path(snapshot_id), HOME), DIR_FLAGS)
        try:
            _copy(src, scratch, owner=owner)
        finally:
            os.close(src)
        fill_home(scratch, home, owner=owner)


def check_tree(opener: Opener, tree: str) -> None:
    """The tree ``opener`` opens, checked as a snapshot's is (no byte limit).

    Raises:
        WorkspaceRefused: a special file or a hard link in it; a path that moved while it was read.
    """
    root = opener()
    try:
        _scan(root, tree, _NO_BOUND)
    except OSError as exc:
        raise _refused(f"the session's files could not be read: {exc.strerror or exc}") from None
    finally:
        os.close(root)


def copy_into(source: Opener, target: Opener, *, owner: int | None, as_owner: bool = False, threads: int = 1) -> None:
    """The tree ``source`` opens copied into the empty directory ``target`` opens, given to ``owner``
    (``as_owner``: written by this thread with ``owner`` as its filesystem uid, for a sandbox's HOME:
    see :func:`fill_home`; else by ``threads`` threads, :func:`~ironflow.local.workspaces.tree_reads.copy_tree`).

    Raises:
        WorkspaceRefused: a path moved while it was read, or could not be written.
    """
    src = source()
    try:
        if as_owner and owner is not None:
            with _fsuid(owner):
                _copy_into(src, target, owner=None)
        else:
            _copy_into(src, target, owner=owner, threads=threads)
    except (OSError, tree_reads.Refused) as exc:
        raise _refused(f"the session's files could not be copied: {getattr(exc, 'strerror', None) or exc}") from None
    finally:
        os.close(src)


def fill_home(staged: str, home: Opener, *, owner: int | None) -> None:
    """``staged`` (given to ``owner``) copied into a new session's empty HOME, then removed.

    A root worker's own uid is not mapped in the sandbox's user namespace (the kernel refuses its
    new files there, EOVERFLOW), so the copy runs with ``owner``, the sandbox's host uid, as this
    thread's filesystem uid.
    """
    try:
        staged_fd = os.open(staged, DIR_FLAGS)
        try:
            with _fsuid(owner) if owner is not None else contextlib.nullcontext():
                _copy_into(staged_fd, home, owner=None)
        finally:
            os.close(staged_fd)
    finally:
        snapshot_store.remove_tree(staged)


def _copy_into(src: int, opener: Opener, *, owner: int | None, threads: int = 1) -> None:
    dst = opener()
    try:
        tree_reads.copy_tree(src, dst, max_file=_NO_BOUND, max_total=_NO_BOUND, owner=owner, threads=threads)
    finally:
        os.close(dst)


@contextlib.contextmanager
def _fsuid(uid: int) -> Iterator[None]:
    """This thread's filesystem uid and gid ``uid`` for the block (Linux keeps them per thread)."""
    libc = ctypes.CDLL(None, use_errno=True)
    old_uid, old_gid = libc.setfsuid(uid), libc.setfsgid(uid)
    try:
        if libc.setfsuid(-1) != uid or libc.setfsgid(-1) != uid:
            raise errors.SandboxError("could not take the sandbox's uid to restore its home")
        yield
    finally:
        libc.setfsgid(old_gid)
        libc.setfsuid(old_uid)
