"""A workspace on this machine: the private copy a step writes, and its patch (I/O).

:func:`prepare` copies the host directory into the run's temp dir (``cp -a``, reflinks where
the filesystem has them) and takes the copy's snapshot; the sandbox binds the copy at
``/workspace``, so the host tree is only ever read. :func:`collect` snapshots the copy again
once the step's processes are gone, hashes only the paths whose ``lstat`` moved (the host's
originals, checked to be the ones copied, and the copy's new bytes) into a private object
store (objects stored, not deflated: it lasts one run), and has git write the diff between
the two trees (``git diff-tree --binary``).
:mod:`ironflow.local.workspace_apply` writes them into the host directory, all or none.

Git never runs in the user's repository: its object store is a bare repository in the run's
temp dir, with no system or global config, so no hook, ``core.fsmonitor`` or filter of the
user's or the step's ever runs. Nothing from the copy is followed through a symlink, and the
apply opens every directory on its way with ``O_NOFOLLOW``: a symlink on the host path fails
the apply, it is never written through.
"""

from __future__ import annotations

import concurrent.futures
import os
import stat
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, TypeVar

from ironflow import errors
from ironflow.claude import layout
from ironflow.local import bwrap, gvisor
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
    "prepare",
    "shown",
    "snapshot",
]

_COPY: Final = "workspace"
_GIT_DIR: Final = "workspace.git"
_SHOWN_PATHS: Final = 5
DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_In = TypeVar("_In")
_Out = TypeVar("_Out")
_KINDS: Final = {stat.S_IFREG: Kind.FILE, stat.S_IFDIR: Kind.DIR, stat.S_IFLNK: Kind.SYMLINK}


@dataclass
class PreparedWorkspace:
    """A workspace made for one run: the host source, its copy, and the copy's first snapshot."""

    spec: Workspace
    source: str
    copy: str
    git_dir: str
    before: Snapshot


def shown(paths: Sequence[str]) -> str:
    listed = ", ".join(f"'{p}'" for p in paths[:_SHOWN_PATHS])
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
    chown_to: int | None = None,
    refusal: type[errors.IronflowError] = errors.WorkspaceRefused,
    earlier: Snapshot | None = None,
) -> dict[str, Entry]:
    """Every path under ``root`` (never following a symlink); refuses what a workspace may not
    hold: a special file, a file over ``max_file_bytes``, more than ``max_total_bytes`` in all.
    ``whose`` names the tree in the message (the source, or the step's copy); ``chown_to``
    gives each entry to that uid first (the sandbox's, on a root worker). A path whose
    ``lstat`` is as in ``earlier`` gets ``earlier``'s own entry (equal, and no new object):
    an entry that is not ``earlier``'s marks a path that moved.

    Raises:
        WorkspaceRefused (or ``refusal``): the tree holds something a workspace may not.
    """
    out: dict[str, Entry] = {}
    total = 0
    pending = [""]
    kinds, seen = _KINDS, earlier or {}
    while pending:  # every path of the tree goes through this loop, twice a run: kept lean
        rel = pending.pop()
        prefix = f"{rel}/" if rel else ""
        with os.scandir(os.path.join(root, rel) if rel else root) as it:
            for item in it:
                path = prefix + item.name
                if chown_to is not None:
                    os.lchown(item.path, chown_to, chown_to)
                st = item.stat(follow_symlinks=False)
                mode = st.st_mode
                kind = kinds.get(stat.S_IFMT(mode))
                target = None
                if kind is Kind.FILE:
                    if st.st_size > spec.max_file_bytes:
                        raise refusal(
                            f"{whose} holds '{path}' of {st.st_size} bytes, over the workspace's "
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
                    target = os.readlink(item.path)
                else:
                    raise refusal(
                        f"{whose} holds {_kind_of(mode)} at '{path}': a workspace takes only files, "
                        "directories and symlinks"
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
                    out[path] = Entry(kind, stat.S_IMODE(mode), st.st_size, st.st_mtime_ns, st.st_ctime_ns, target)
    return out


def prepare(spec: Workspace, run_dir: str, *, sandbox_uid: int | None, source: str | None = None) -> PreparedWorkspace:
    """Copy ``spec.source`` (or ``source``: a git workspace's clone) into ``run_dir`` for a
    sandbox; ``sandbox_uid`` (a root worker's sandbox uid) is given the copy, so the sandbox can write it.

    Raises:
        WorkspaceRefused: the source is no directory, or holds what a workspace may not.
    """
    source = os.path.realpath(source or spec.source)
    if not os.path.isdir(source):
        raise errors.WorkspaceRefused(f"workspace '{spec.source}' is not a directory")
    try:
        snapshot(source, spec, whose=f"workspace '{spec.source}'")  # refused before a byte is copied
    except PermissionError as exc:
        raise errors.WorkspaceRefused(f"workspace '{spec.source}' cannot be read: {exc.strerror}") from None
    copy = os.path.join(run_dir, _COPY)
    done = subprocess.run(
        ["cp", "-a", "--reflink=auto", "--no-target-directory", "--", source, copy],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip().splitlines()
        raise errors.WorkspaceRefused(
            f"workspace '{spec.source}' could not be copied: {errors.truncate(said[-1] if said else '', 300)}"
        )
    if sandbox_uid is not None:
        os.lchown(copy, sandbox_uid, sandbox_uid)
    before = snapshot(copy, spec, whose=f"workspace '{spec.source}'", chown_to=sandbox_uid)
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
        raise errors.ConfigError(gvisor.WRITABLE_NEEDS_ROOT)
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


def _git(args: Sequence[str], env: dict[str, str], data: bytes | None = None, *, config: Sequence[str] = ()) -> bytes:
    settings = [arg for item in ("core.hooksPath=/dev/null", "core.fsmonitor=false", *config) for arg in ("-c", item)]
    done = subprocess.run(
        ["git", *settings, *args],
        input=data,
        capture_output=True,
        env=env,
        check=False,
    )
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip()
        raise errors.SandboxError(f"git {args[0]} failed on the workspace: {errors.truncate(said, 300)}")
    return done.stdout


def _hostentry_of(source: str, path: str) -> Entry | None:
    try:
        st = os.lstat(os.path.join(source, path))
    except FileNotFoundError:
        return None
    return entry_of(st, os.readlink(os.path.join(source, path)) if stat.S_ISLNK(st.st_mode) else None)


def _object_file(git_dir: str, index: int, entry: Entry, path: str) -> str:
    """What to hash for one side of a path: the file itself, or a symlink's text in a file."""
    if entry.kind is not Kind.SYMLINK:
        return path
    holder = os.path.join(git_dir, f"link-{index}")
    with open(holder, "wb") as out:
        out.write(os.fsencode(entry.target or ""))
    return holder


def _tree(env: dict[str, str], git_dir: str, name: str, entries: Sequence[tuple[str, str, str]]) -> str:
    index_env = {**env, "GIT_INDEX_FILE": os.path.join(git_dir, f"index-{name}")}
    records = b"".join(f"{mode} {oid}\t".encode() + os.fsencode(path) + b"\0" for mode, oid, path in entries)
    _git(["update-index", "-z", "--add", "--index-info"], index_env, records)
    return _git(["write-tree"], index_env).decode().strip()


def _hash(env: dict[str, str], files: Sequence[str]) -> list[str]:
    """The object ids of ``files``, each written into the store: stored, not deflated (the store
    lasts one run, and deflating a large file costs more than hashing it; only the objects: the
    patch's binary hunks are deflated as git's are)."""
    if not files:
        return []
    hashing = ["hash-object", "-w", "--no-filters", "--stdin-paths"]
    return _git(hashing, env, "\n".join(files).encode(), config=["core.looseCompression=0"]).decode().split()


def _side_by_side(work: Callable[[_In], _Out], left: _In, right: _In) -> tuple[_Out, _Out]:
    """``work`` on both sides of the diff at once (each a git process: two cores halve the wait);
    an error on either side is raised once both are done."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        first = pool.submit(work, left)
        second = work(right)
        return first.result(), second


def collect(prepared: PreparedWorkspace) -> WorkspaceChanges:
    """What the step changed in its copy, as git's binary diff against the starting state.

    Call only once every process of the step is gone (the copy must hold still).

    Raises:
        WorkspaceUnsafe: the step left a special file, or a file over the size limit.
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
    moved = [
        c.path
        for c in found
        if c.before is not None and not ((h := _hostentry_of(prepared.source, c.path)) and h.same_content_as(c.before))
    ]
    if moved:
        raise errors.WorkspaceConflict(
            f"workspace '{prepared.spec.source}' changed on the host while the step ran: {shown(moved)}", moved
        )
    os.makedirs(prepared.git_dir, exist_ok=True)
    env = _git_env(prepared.git_dir)
    _git(["init", "-q", "--bare", "--template=", prepared.git_dir], env)  # no sample hooks to copy: none runs
    old_files: list[str] = []
    new_files: list[str] = []
    for i, c in enumerate(found):
        if c.before is not None:
            old_files.append(_object_file(prepared.git_dir, 2 * i, c.before, os.path.join(prepared.source, c.path)))
        if c.after is not None:
            new_files.append(_object_file(prepared.git_dir, 2 * i + 1, c.after, os.path.join(prepared.copy, c.path)))
    old_ids, new_ids = map(iter, _side_by_side(lambda files: _hash(env, files), old_files, new_files))
    old_side: list[tuple[str, str, str]] = []
    new_side: list[tuple[str, str, str]] = []
    changed: list[ChangedFile] = []
    for c in found:
        old_id = next(old_ids) if c.before is not None else None
        new_id = next(new_ids) if c.after is not None else None
        kept = confirm(c, old_id, new_id)
        if kept is None:
            continue
        changed.append(kept)
        if c.before is not None and old_id is not None:
            old_side.append((git_mode(c.before), old_id, c.path))
        if c.after is not None and new_id is not None:
            new_side.append((git_mode(c.after), new_id, c.path))
    if not changed:
        return WorkspaceChanges(b"", ())
    old_tree, new_tree = _side_by_side(
        lambda side: _tree(env, prepared.git_dir, *side), ("before", old_side), ("after", new_side)
    )
    patch = _git(["diff-tree", "-r", "-p", "--binary", "--no-renames", "--full-index", old_tree, new_tree], env)
    return WorkspaceChanges(patch, tuple(changed))
