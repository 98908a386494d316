"""A workspace's changes written into the host directory, all or none (I/O).

Every path is checked first: still as it was copied (or still absent), and no symlink on the
way to it (each directory is opened with ``O_NOFOLLOW``); one that is not fails the apply with
the paths named, and nothing is written. A symlink the step made that points outside the tree
is never applied, nor a path in a ``.git`` directory, nor a change that would leave a directory
looking like a git repository (``HEAD`` and ``objects``): git run there would take its config
(a ``core.pager``, a hook) as the repository's. A file's new content is written from the blob
the patch was made of (:mod:`ironflow.local.workspaces.blob_store`), never read from the step's
copy again; files are written under a temporary name and renamed into place.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
from collections.abc import Iterator, Sequence
from typing import Final

from ironflow import errors
from ironflow.local.workspaces import blob_store, tree_reads
from ironflow.local.workspaces.copies import DIR_FLAGS, PreparedWorkspace, collect, entry_of, escaped, shown
from ironflow.workspaces import Change, ChangedFile, Entry, Kind, WorkspaceChanges, escapes, is_git_internal

__all__ = ["apply_changes", "finish"]

#: What makes a directory a git repository to git's discovery (with ``refs``, which a patch can add too).
_REPOSITORY: Final = ("head", "objects")


async def finish(prepared: PreparedWorkspace, *, succeeded: bool) -> WorkspaceChanges:
    """What the step changed in its workspace, written back when it succeeded and the
    workspace asks for it (in a thread: a copy can be large)."""
    changes = await asyncio.to_thread(collect, prepared)
    if succeeded and prepared.spec.apply and changes.files:
        changes = await asyncio.to_thread(apply_changes, prepared, changes)
    return changes


@contextlib.contextmanager
def _parent(root_fd: int, path: str, *, create: bool) -> Iterator[int | None]:
    """The directory holding ``path`` under ``root_fd``, each step opened with O_NOFOLLOW;
    None when a step is missing and ``create`` is off. A symlink on the way raises."""
    fd = os.dup(root_fd)
    try:
        for part in path.split("/")[:-1]:
            try:
                nxt = os.open(part, DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    yield None
                    return
                os.mkdir(part, 0o755, dir_fd=fd)
                nxt = os.open(part, DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
        yield fd
    finally:
        os.close(fd)


def _current(root_fd: int, path: str) -> Entry | None:
    with _parent(root_fd, path, create=False) as fd:
        if fd is None:
            return None
        name = path.rsplit("/", 1)[-1]
        try:
            st = os.lstat(name, dir_fd=fd)
        except FileNotFoundError:
            return None
        target = os.readlink(name, dir_fd=fd) if stat.S_ISLNK(st.st_mode) else None
        return entry_of(st, target) or Entry(Kind.FILE, 0, -1, 0)  # a special file: never the expected one


def _problems(root_fd: int, files: Sequence[ChangedFile]) -> list[str]:
    out = []
    for f in files:
        try:
            now = _current(root_fd, f.path)
        except OSError:  # a symlink or a file where a directory should be
            out.append(f.path)
            continue
        if f.before is None:
            if now is not None and now.kind is not Kind.DIR:
                out.append(f.path)
        elif now is None or not now.same_content_as(f.before):
            out.append(f.path)
    return out


def _write(root_fd: int, git_dir: str, f: ChangedFile) -> None:
    assert f.after is not None
    name = f.path.rsplit("/", 1)[-1]
    temp = f".{name}.ironflow-apply"
    with _parent(root_fd, f.path, create=True) as fd:
        assert fd is not None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp, dir_fd=fd)
        if f.after.kind is Kind.SYMLINK:
            os.symlink(f.after.target or "", temp, dir_fd=fd)
        else:
            assert f.after_id is not None, "a change not made by collect()"
            dst = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=fd)
            try:
                blob_store.copy_blob(git_dir, f.after_id, dst)
                os.fchmod(dst, 0o755 if f.after.executable else 0o644)
            finally:
                os.close(dst)
        with contextlib.suppress(FileNotFoundError, OSError):
            os.rmdir(name, dir_fd=fd)  # an emptied directory the file replaces
        os.rename(temp, name, src_dir_fd=fd, dst_dir_fd=fd)


def _delete(root_fd: int, path: str) -> None:
    parts = path.split("/")
    with _parent(root_fd, path, create=False) as fd:
        if fd is None:
            return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(parts[-1], dir_fd=fd)
    for depth in range(len(parts) - 1, 0, -1):  # directories the deletion emptied go too, as git apply does
        parent = "/".join(parts[:depth])
        with _parent(root_fd, parent, create=False) as fd, contextlib.suppress(OSError):
            if fd is not None:
                os.rmdir(parent.rsplit("/", 1)[-1], dir_fd=fd)


def _present(root_fd: int, files: Sequence[ChangedFile], directory: str, name: str) -> bool:
    """Whether ``directory/name`` (any case) is there once ``files`` are applied."""
    prefix = f"{directory}/" if directory else ""
    for f in files:
        if f.after is not None and f.path.startswith(prefix) and f.path[len(prefix) :].split("/", 1)[0].lower() == name:
            return True
    try:
        fd = tree_reads.open_beneath(root_fd, directory, DIR_FLAGS) if directory else os.dup(root_fd)
    except OSError:  # no such directory (yet), or a symlink: the apply's own check names it
        return False
    try:
        with os.scandir(fd) as it:
            return any(item.name.lower() == name for item in it)
    finally:
        os.close(fd)


def _repositories(root_fd: int, files: Sequence[ChangedFile]) -> list[str]:
    """Directories the apply would leave looking like a git repository, where it writes a part of one."""
    touched: set[str] = set()
    for f in files:
        if f.after is None:
            continue
        parts = f.path.split("/")
        touched.update("/".join(parts[:depth]) for depth, part in enumerate(parts) if part.lower() in _REPOSITORY)
    return sorted(d for d in touched if all(_present(root_fd, files, d, name) for name in _REPOSITORY))


def _refuse_unsafe(root_fd: int, files: Sequence[ChangedFile]) -> None:
    """Nothing that would reach outside the tree or make git on the host run the step's config.

    Raises:
        WorkspaceConflict: such a path, named.
    """
    outside = [f.path for f in files if f.after and f.after.target and escapes(f.path, f.after.target)]
    if outside:
        raise errors.WorkspaceConflict(
            f"not applied: the step made symlinks pointing outside the workspace: {shown(outside)}", outside
        )
    internal = [f.path for f in files if is_git_internal(f.path)]
    if internal:
        raise errors.WorkspaceConflict(f"not applied: paths in a .git directory: {shown(internal)}", internal)
    planted = _repositories(root_fd, files)
    if planted:
        raise errors.WorkspaceConflict(
            "not applied: the change would leave a git repository (HEAD and objects) at "
            + ", ".join(f"'{escaped(d or '.')}'" for d in planted[:5])
            + ": git run there would read its config",
            planted,
        )


def apply_changes(prepared: PreparedWorkspace, changes: WorkspaceChanges) -> WorkspaceChanges:
    """Write ``changes`` into the host directory: every path is checked first (still as it
    was copied, or still absent; no symlink on its way), and one that is not fails the apply
    with nothing written.

    Raises:
        WorkspaceConflict: a path changed on the host, the step's symlink points outside the
            tree, or the change holds a git repository (:func:`_refuse_unsafe`).
    """
    root_fd = os.open(prepared.source, DIR_FLAGS)
    try:
        _refuse_unsafe(root_fd, changes.files)
        conflicts = _problems(root_fd, changes.files)
        if conflicts:
            raise errors.WorkspaceConflict(
                f"not applied: changed on the host since the copy was made: {shown(conflicts)}", conflicts
            )
        for f in changes.files:
            if f.change is Change.DELETED or (f.before and f.after and f.before.kind is not f.after.kind):
                _delete(root_fd, f.path)
        for f in changes.files:
            if f.after is not None:
                _write(root_fd, prepared.git_dir, f)
    finally:
        os.close(root_fd)
    return WorkspaceChanges(changes.patch, changes.files, applied=True)
