"""A workspace on this machine: the private copy a step writes, and its patch (I/O).

:func:`prepare` copies the host directory into the run's temp dir (reflinks where the
filesystem has them), counting the bytes against ``max_total_bytes`` as it copies, and takes
the copy's snapshot; the sandbox binds the copy at ``/workspace``, so the host tree is only
ever read. :func:`collect` snapshots the copy again once the step's processes are gone (or
frozen), hashes only the paths whose ``lstat`` moved (the host's originals, checked to be the
ones copied, and the copy's new bytes) into a private object store
(:mod:`ironflow.local.workspaces.blob_store`), and has git write the diff between the two trees
(``git diff-tree --binary``). :mod:`ironflow.local.workspaces.writeback` writes them into the host
directory, all or none.

The host never reads the copy by name: every walk, ``lstat`` and open is beneath the tree's
directory fd with no symlink followed anywhere on the way (:mod:`ironflow.local.workspaces.tree_reads`),
so a directory a sandbox's process swaps for a symlink fails the read, it is never followed.
Git never reads a file either: it is given the blobs the host wrote, and the paths only as
NUL-separated records; a path git refuses to record is named in the error, never dropped.

Git never runs in the user's repository: its object store is a bare repository in the run's
temp dir, with no system or global config, so no hook, ``core.fsmonitor`` or filter of the
user's or the step's ever runs.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Final

from ironflow import errors
from ironflow.claude import layout
from ironflow.local.sandbox import bwrap
from ironflow.local.workspaces import blob_store, tree_reads
from ironflow.local.workspaces.tree_reads import DIR_FLAGS
from ironflow.workspaces import (
    WORKSPACE_PATH,
    ChangedFile,
    Entry,
    Kind,
    Snapshot,
    Workspace,
    WorkspaceChanges,
    candidates,
    confirm,
    git_mode,
)

__all__ = [
    "DIR_FLAGS",
    "PreparedWorkspace",
    "check_mounts",
    "collect",
    "entry_of",
    "escaped",
    "prepare",
    "shown",
    "snapshot",
]

_COPY: Final = "workspace"
_GIT_DIR: Final = "workspace.git"
_SHOWN_PATHS: Final = 5
_KINDS: Final = {stat.S_IFREG: Kind.FILE, stat.S_IFDIR: Kind.DIR, stat.S_IFLNK: Kind.SYMLINK}
_READ_FLAGS: Final = os.O_RDONLY | os.O_NONBLOCK  # a FIFO swapped in does not block the open


@dataclass
class PreparedWorkspace:
    """A workspace made for one run: the host source, its copy, and the copy's first snapshot."""

    spec: Workspace
    source: str
    copy: str
    git_dir: str
    before: Snapshot


def escaped(path: str) -> str:
    """``path`` fit for one line of a message: a byte that is not printable (a newline, an escape,
    a byte that is not UTF-8) as ``\\xNN``, a backslash doubled."""
    out = []
    for char in path:
        if char == "\\":
            out.append("\\\\")
        elif char.isprintable():
            out.append(char)
        else:
            out.extend(f"\\x{b:02x}" for b in os.fsencode(char))
    return "".join(out)


def shown(paths: Sequence[str]) -> str:
    listed = ", ".join(f"'{escaped(p)}'" for p in paths[:_SHOWN_PATHS])
    more = len(paths) - _SHOWN_PATHS
    return listed + (f" and {more} more" if more > 0 else "")


def entry_of(st: os.stat_result, target: str | None) -> Entry | None:
    kind = _KINDS.get(stat.S_IFMT(st.st_mode))
    if kind is None:
        return None
    return Entry(kind, stat.S_IMODE(st.st_mode), st.st_size, st.st_mtime_ns, st.st_ctime_ns, target)


def _kind_of(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device")):
        if test(mode):
            return name
    return "a device" if stat.S_ISBLK(mode) else "a special file"


def snapshot(
    root: str,
    spec: Workspace,
    *,
    whose: str,
    refusal: type[errors.IronflowError] = errors.WorkspaceRefused,
    earlier: Snapshot | None = None,
) -> dict[str, Entry]:
    """Every path under ``root`` (never following a symlink: each directory is opened beneath
    ``root``'s fd); refuses what a workspace may not hold: a special file, a file over
    ``max_file_bytes``, more than ``max_total_bytes`` in all.
    ``whose`` names the tree in the message (the source, or the step's copy). A path whose
    ``lstat`` is as in ``earlier`` gets ``earlier``'s own entry (equal, and no new object):
    an entry that is not ``earlier``'s marks a path that moved.

    Raises:
        WorkspaceRefused (or ``refusal``): the tree holds something a workspace may not, or
            a directory of it turned into something else while it was read.
    """
    out: dict[str, Entry] = {}
    total = 0
    pending = [""]
    kinds, seen = _KINDS, earlier or {}
    root_fd = os.open(root, DIR_FLAGS)
    try:
        while pending:  # every path of the tree goes through this loop, twice a run: kept lean
            rel = pending.pop()
            prefix = f"{rel}/" if rel else ""
            try:
                dir_fd = tree_reads.open_beneath(root_fd, rel, DIR_FLAGS) if rel else os.dup(root_fd)
            except OSError:
                raise refusal(f"{whose} changed while it was read: '{escaped(rel)}' is no directory now") from None
            try:
                with os.scandir(dir_fd) as it:
                    for item in it:
                        path = prefix + item.name
                        st = item.stat(follow_symlinks=False)
                        mode = st.st_mode
                        kind = kinds.get(stat.S_IFMT(mode))
                        target = None
                        if kind is Kind.FILE:
                            if st.st_size > spec.max_file_bytes:
                                raise refusal(
                                    f"{whose} holds '{escaped(path)}' of {st.st_size} bytes, over the workspace's "
                                    f"max_file_bytes ({spec.max_file_bytes})"
                                )
                            total += st.st_size
                            if total > spec.max_total_bytes:
                                raise refusal(
                                    f"{whose} holds over {spec.max_total_bytes} bytes (the workspace's max_total_bytes)"
                                )
                        elif kind is Kind.DIR:
                            pending.append(path)
                        elif kind is Kind.SYMLINK:
                            target = os.readlink(item.name, dir_fd=dir_fd)
                        else:
                            raise refusal(
                                f"{whose} holds {_kind_of(mode)} at '{escaped(path)}': a workspace takes only "
                                "files, directories and symlinks"
                            )
                        old = seen.get(path)
                        if (
                            old is not None
                            and old.mtime_ns == st.st_mtime_ns
                            and old.ctime_ns == st.st_ctime_ns
                            and old.size == st.st_size
                            and old.mode == stat.S_IMODE(mode)
                            and old.kind is kind
                            and old.target == target
                        ):
                            out[path] = old
                        else:
                            out[path] = Entry(
                                kind, stat.S_IMODE(mode), st.st_size, st.st_mtime_ns, st.st_ctime_ns, target
                            )
            finally:
                os.close(dir_fd)
    finally:
        os.close(root_fd)
    return out


def copy_tree(
    source: str,
    copy: str,
    spec: Workspace,
    *,
    whose: str,
    owner: int | None,
    refusal: type[errors.IronflowError] = errors.WorkspaceRefused,
    made: bool = False,
) -> None:
    """``source`` copied into the new directory ``copy`` (:func:`ironflow.local.workspaces.tree_reads.copy_tree`:
    beneath fds, the bytes counted against the workspace's bounds as they are copied); on any
    refusal nothing of the copy is left. ``made``: ``copy`` exists, empty (a warm sandbox binds it),
    and is filled, never removed: its owner on a refusal.

    Raises:
        WorkspaceRefused (or ``refusal``): a special file, a file or a total over the bounds, a
            path that moved while it was copied.
    """
    if not made:
        os.mkdir(copy, 0o700)

    def gone() -> None:
        if not made:  # a made directory is its owner's to remove
            shutil.rmtree(copy, ignore_errors=True)

    try:
        src = os.open(source, DIR_FLAGS)
        try:
            dst = os.open(copy, DIR_FLAGS)
            try:
                tree_reads.copy_tree(
                    src, dst, max_file=spec.max_file_bytes, max_total=spec.max_total_bytes, owner=owner
                )
            finally:
                os.close(dst)
        finally:
            os.close(src)
    except tree_reads.Refused as exc:
        gone()
        if exc.path is None:
            raise refusal(
                f"{whose} holds over {spec.max_total_bytes} bytes (the workspace's max_total_bytes): "
                "the copy stopped there"
            ) from None
        raise refusal(f"{whose} holds '{escaped(exc.path)}': {exc.why}") from None
    except OSError as exc:
        gone()
        raise refusal(
            f"{whose} could not be copied (it changed while it was read?): {os.strerror(exc.errno or errno.EIO)}"
            + (f" at '{escaped(os.fsdecode(exc.filename))}'" if exc.filename else "")
        ) from None


def prepare(
    spec: Workspace, run_dir: str, *, sandbox_uid: int | None, source: str | None = None, made: bool = False
) -> PreparedWorkspace:
    """Copy ``spec.source`` (or ``source``: a git workspace's clone) into ``run_dir`` for a
    sandbox; ``sandbox_uid`` (a root worker's sandbox uid) is given the copy, so the sandbox can write it.
    ``made``: the copy's directory exists, empty (:func:`copy_tree`).

    Raises:
        WorkspaceRefused: the source is no directory, or holds what a workspace may not.
    """
    source = os.path.realpath(source or spec.source)
    if not os.path.isdir(source):
        raise errors.WorkspaceRefused(f"workspace '{spec.source}' is not a directory")
    whose = f"workspace '{spec.source}'"
    try:
        snapshot(source, spec, whose=whose)  # refused before a byte is copied
    except PermissionError as exc:
        raise errors.WorkspaceRefused(f"workspace '{spec.source}' cannot be read: {exc.strerror}") from None
    copy = os.path.join(run_dir, _COPY)
    copy_tree(source, copy, spec, whose=whose, owner=sandbox_uid, made=made)
    before = snapshot(copy, spec, whose=whose)
    return PreparedWorkspace(spec, source, copy, os.path.join(run_dir, _GIT_DIR), before)


def check_mounts(
    isolation: str,
    host_uid: int | None,
    writable: tuple[bwrap.WritableMount, ...],
    mounts: tuple[bwrap.ReadOnlyMount, ...],
    workspace: Workspace | None,
) -> None:
    """Each writable host path must be a directory, owned by ``host_uid`` (the sandbox's uid on
    a root worker: the uid it writes as); no other mount may take the workspace's place. Under
    gVisor a non-root worker (``host_uid`` None) cannot give the step anything writable.

    Raises:
        ConfigError: a mount that cannot work.
    """
    if workspace is not None:
        for ro in mounts:
            top = os.path.normpath(ro.target)
            if top == WORKSPACE_PATH or top.startswith(WORKSPACE_PATH + "/"):
                raise errors.ConfigError(f"a mount cannot go at '{ro.target}': the workspace is at {WORKSPACE_PATH}")
    if not writable and workspace is None:
        return
    if isolation == "gvisor" and host_uid is None:
        from ironflow.local.sandbox import gvisor  # its refusal's words, for gVisor only

        raise errors.ConfigError(gvisor.WRITABLE_NEEDS_ROOT)
    if isolation == "docker" and host_uid is None:
        from ironflow.local.sandbox import docker  # only a Docker sandbox loads it

        raise errors.ConfigError(docker.WRITABLE_NEEDS_ROOT)
    for mount in writable:
        if not os.path.isdir(mount.source):
            raise errors.ConfigError(f"writable mount source '{mount.source}' is not a directory")
        problem = layout.mount_path_problem("writable volume", mount.target)
        if problem is not None:
            raise errors.ConfigError(problem)
        if host_uid is not None and os.stat(mount.source).st_uid != host_uid:
            raise errors.ConfigError(
                f"writable mount source '{mount.source}' must be owned by the sandbox's host uid on a root "
                f"worker: chown {host_uid} '{mount.source}'"
            )
        top = os.path.normpath(mount.target)
        if workspace is not None and (top == WORKSPACE_PATH or top.startswith(WORKSPACE_PATH + "/")):
            raise errors.ConfigError(f"a mount cannot go at '{mount.target}': the workspace is at {WORKSPACE_PATH}")


# --- the diff ------------------------------------------------------------------------------


def _git_env(git_dir: str) -> dict[str, str]:
    """Git with nothing of the user's: no system or global config, no inherited ``GIT_*``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_DIR=git_dir,
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_TERMINAL_PROMPT="0",
        HOME=git_dir,
        LC_ALL="C",
    )
    return env


def _git(args: Sequence[str], env: dict[str, str], data: bytes | None = None) -> bytes:
    settings = [arg for item in ("core.hooksPath=/dev/null", "core.fsmonitor=false") for arg in ("-c", item)]
    done = subprocess.run(
        ["git", *settings, *args],
        input=data,
        capture_output=True,
        env=env,
        cwd=env["GIT_DIR"],  # never the worker's own directory
        check=False,
    )
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip()
        raise errors.SandboxError(f"git {args[0]} failed on the workspace: {errors.truncate(escaped(said), 300)}")
    return done.stdout


def _tree(env: dict[str, str], git_dir: str, name: str, entries: Sequence[tuple[str, str, str]]) -> str:
    """The tree of ``entries``; a path git will not record (it skips it with a warning) is refused, named."""
    index_env = {**env, "GIT_INDEX_FILE": os.path.join(git_dir, f"index-{name}")}
    records = b"".join(f"{mode} {oid}\t".encode() + os.fsencode(path) + b"\0" for mode, oid, path in entries)
    _git(["update-index", "-z", "--add", "--index-info"], index_env, records)
    recorded = set(_git(["ls-files", "-z"], index_env).split(b"\0"))
    dropped = [path for _, _, path in entries if os.fsencode(path) not in recorded]
    if dropped:
        raise errors.WorkspaceUnsafe(f"the workspace holds paths git cannot record in a patch: {shown(dropped)}")
    return _git(["write-tree"], index_env).decode().strip()


def _blob(git_dir: str, root_fd: int, path: str, entry: Entry) -> str:
    """The id of ``entry``'s content, written into the store: a symlink's text, or the file at
    ``path`` under ``root_fd`` opened beneath it, read by the host. ``OSError`` or
    :class:`~ironflow.local.workspaces.blob_store.Changed` when it is not as ``entry`` says."""
    if entry.kind is Kind.SYMLINK:
        return blob_store.write_bytes(git_dir, os.fsencode(entry.target or ""))
    fd = tree_reads.open_beneath(root_fd, path, _READ_FLAGS)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size != entry.size or st.st_mtime_ns != entry.mtime_ns:
            raise blob_store.Changed
        return blob_store.write_blob(git_dir, fd, entry.size)
    finally:
        os.close(fd)


def _moved(root_fd: int, found: Sequence[ChangedFile]) -> list[str]:
    """The paths whose host original is not the one copied (read beneath the source's fd)."""
    out = []
    for c in found:
        if c.before is None:
            continue
        try:
            now = tree_reads.lstat_beneath(root_fd, c.path)
        except OSError:
            now = None
        entry = now and entry_of(*now)
        if entry is None or not entry.same_content_as(c.before):
            out.append(c.path)
    return out


def _hash_sides(prepared: PreparedWorkspace, found: Sequence[ChangedFile]) -> list[ChangedFile]:
    """The changes git sees, each with its new content's blob id (:func:`~ironflow.workspaces.confirm`)."""
    source_fd = os.open(prepared.source, DIR_FLAGS)
    try:
        moved = _moved(source_fd, found)
        if moved:
            raise errors.WorkspaceConflict(
                f"workspace '{prepared.spec.source}' changed on the host while the step ran: {shown(moved)}", moved
            )
        copy_fd = os.open(prepared.copy, DIR_FLAGS)
        try:
            changed = []
            for c in found:
                try:
                    old_id = None if c.before is None else _blob(prepared.git_dir, source_fd, c.path, c.before)
                except (OSError, blob_store.Changed):
                    raise errors.WorkspaceConflict(
                        f"workspace '{prepared.spec.source}' changed on the host while the step ran: {shown([c.path])}",
                        [c.path],
                    ) from None
                try:
                    new_id = None if c.after is None else _blob(prepared.git_dir, copy_fd, c.path, c.after)
                except (OSError, blob_store.Changed):
                    raise errors.WorkspaceUnsafe(
                        f"the step's workspace changed while it was read: {shown([c.path])}"
                    ) from None
                kept = confirm(c, old_id, new_id)
                if kept is not None:
                    changed.append(replace(kept, before_id=old_id, after_id=new_id))
            return changed
        finally:
            os.close(copy_fd)
    finally:
        os.close(source_fd)


def collect(prepared: PreparedWorkspace) -> WorkspaceChanges:
    """What the step changed in its copy, as git's binary diff against the starting state.

    Call only once every process of the step is gone or frozen (the copy must hold still:
    one that moves fails the diff, it is never read through a symlink).

    Raises:
        WorkspaceUnsafe: the step left a special file, a file over the size limit, or a path git
            cannot record; the copy changed while it was read.
        WorkspaceConflict: a host original changed while the step ran (the diff's left side is gone).
    """
    before = prepared.before
    after = snapshot(
        prepared.copy, prepared.spec, whose="the step's workspace", refusal=errors.WorkspaceUnsafe, earlier=before
    )
    # A path the step left alone has its first entry again: only the others can be changes.
    was = {path: entry for path, entry in before.items() if after.get(path) is not entry}
    now = {path: entry for path, entry in after.items() if before.get(path) is not entry}
    found = candidates(was, now)
    if not found:
        return WorkspaceChanges(b"", ())
    os.makedirs(prepared.git_dir, exist_ok=True)
    env = _git_env(prepared.git_dir)
    # No sample hooks to copy (none runs); SHA-1, the ids workspace_objects writes.
    _git(["init", "-q", "--bare", "--template=", "--object-format=sha1", prepared.git_dir], env)
    changed = _hash_sides(prepared, found)
    if not changed:
        return WorkspaceChanges(b"", ())
    old_side = [(git_mode(c.before), c.before_id, c.path) for c in changed if c.before and c.before_id]
    new_side = [(git_mode(c.after), c.after_id, c.path) for c in changed if c.after and c.after_id]
    old_tree = _tree(env, prepared.git_dir, "before", old_side)
    new_tree = _tree(env, prepared.git_dir, "after", new_side)
    patch = _git(["diff-tree", "-r", "-p", "--binary", "--no-renames", "--full-index", old_tree, new_tree], env)
    return WorkspaceChanges(patch, tuple(changed))
