"""Workspaces: a repository in, a reviewable change out (pure values and rules).

A step given a :class:`Workspace` works on a private copy of a host directory, shown at
:data:`WORKSPACE_PATH` in the sandbox; the host tree is never written while the step runs.
What comes back is a :class:`WorkspaceChanges`: every file the step created, changed,
deleted or made executable, as a unified diff in git's format (binary files as git binary
patches) that ``git apply`` takes, and the list of changed paths.

The change set is found by comparing two :data:`Snapshot` s of the copy, taken before and
after the step, by type, mode, size, mtime and ctime (a step can reset a file's mtime, never
its ctime), then by content: a file whose bytes and git mode did not change is no change.
Git tracks files, not directories, so an empty directory never shows in a patch.
Paths inside a ``.git`` directory are never part of a change: a patch or an apply that wrote
``.git/config`` or ``.git/hooks`` would run the step's code on the host.

The I/O (copying, walking, hashing, applying) is the backend's (:mod:`ironflow.local.workspaces.copies`).
"""

from __future__ import annotations

import base64
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from ironflow import errors
from ironflow.workspaces import git_script

__all__ = [
    "DEFAULT_MAX_FILE_BYTES",
    "DEFAULT_MAX_TOTAL_BYTES",
    "PVC_PREFIX",
    "WORKSPACE_PATH",
    "Change",
    "ChangedFile",
    "Entry",
    "Kind",
    "Snapshot",
    "Workspace",
    "WorkspaceChanges",
    "candidates",
    "confirm",
    "escapes",
    "git_mode",
    "is_git_internal",
    "is_git_source",
    "is_pvc_source",
    "push_message",
]

#: How a PersistentVolumeClaim source starts: ``pvc:NAME[/SUBPATH]``.
PVC_PREFIX: Final = "pvc:"
_CLAIM: Final = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")
#: Where a step sees its workspace, and its working directory.
WORKSPACE_PATH: Final = "/workspace"
#: The largest file a workspace takes in or gives back.
DEFAULT_MAX_FILE_BYTES: Final = 100 * 1024 * 1024
#: The most a workspace holds, all files together.
DEFAULT_MAX_TOTAL_BYTES: Final = 4 * 1024 * 1024 * 1024
_EXECUTABLE: Final = 0o111


class Kind(StrEnum):
    """What a workspace may hold: anything else (a device, a socket, a FIFO) is refused."""

    FILE = "file"
    DIR = "dir"
    SYMLINK = "symlink"


@dataclass(frozen=True, slots=True)
class Entry:
    """One path of a workspace as ``lstat`` saw it (``target``: a symlink's text)."""

    kind: Kind
    mode: int
    size: int
    mtime_ns: int
    ctime_ns: int = 0
    target: str | None = None

    @property
    def executable(self) -> bool:
        return self.kind is Kind.FILE and bool(self.mode & _EXECUTABLE)

    def same_content_as(self, other: Entry) -> bool:
        """Same type, size, mtime, executable bit and link text: how the host's original is
        checked to be the one the copy was made from (a copy keeps mtime, never ctime)."""
        return (
            self.kind is other.kind
            and self.size == other.size
            and self.mtime_ns == other.mtime_ns
            and self.executable == other.executable
            and self.target == other.target
        )


#: A workspace's entries by path relative to its root, ``/``-separated, no leading ``./``.
Snapshot = Mapping[str, Entry]


class Change(StrEnum):
    ADDED = "added"
    MODIFIED = "modified"
    DELETED = "deleted"
    MODE = "mode"


@dataclass(frozen=True)
class ChangedFile:
    """One path the step changed; ``before``/``after`` are None where it did not exist.
    ``before_id``/``after_id``: the ids of their content in the run's private object store,
    where the backend keeps one (the local one's apply writes the new content from it)."""

    path: str
    change: Change
    before: Entry | None
    after: Entry | None
    before_id: str | None = None
    after_id: str | None = None


@dataclass(frozen=True)
class WorkspaceChanges:
    """What a step did to its workspace: the diff (bytes: a text file need not be UTF-8),
    and the paths it touched (sorted)."""

    patch: bytes
    files: tuple[ChangedFile, ...]
    applied: bool = False
    #: The branch of the git source the changes were pushed to (a git workspace's ``push_branch``).
    pushed_branch: str | None = None

    @property
    def changed_paths(self) -> tuple[str, ...]:
        return tuple(f.path for f in self.files)

    def to_json(self) -> dict[str, Any]:
        """JSON without loss: the patch as text, or as base64 (``patch_base64``) when it holds
        bytes that are not UTF-8."""
        out: dict[str, Any] = {}
        try:
            out["patch"] = self.patch.decode()
        except UnicodeDecodeError:
            out["patch_base64"] = base64.b64encode(self.patch).decode()
        out["changed_files"] = [{"path": f.path, "change": f.change.value} for f in self.files]
        out["applied"] = self.applied
        out["pushed_branch"] = self.pushed_branch
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> WorkspaceChanges:
        """:meth:`to_json`'s output back (the entries' ``lstat`` are not kept)."""
        raw = data.get("patch_base64")
        patch = base64.b64decode(raw) if isinstance(raw, str) else str(data.get("patch", "")).encode()
        files = tuple(ChangedFile(f["path"], Change(f["change"]), None, None) for f in data.get("changed_files", ()))
        pushed = data.get("pushed_branch")
        return cls(patch, files, bool(data.get("applied", False)), pushed if isinstance(pushed, str) else None)


def push_message(what: str, text: str) -> str:
    """A pushed commit's message: what made the change (a step's name, ``exec``) and the first
    line of its prompt or command, at most 200 characters of it."""
    first = text.splitlines()[0] if text else ""
    return f"ironflow {what}: " + errors.truncate(first, 200)


@dataclass(frozen=True)
class Workspace:
    """What a step works on at :data:`WORKSPACE_PATH`: a private copy of a host directory, or a
    clone of a git repository made in a sandbox through the auth proxy's secret relay (the git
    host's credential stays in the proxy).

    Args:
        source: a host directory (read, never written, while the step runs), a git URL
            ``https://host/org/repo.git``, or (Kubernetes only) a PersistentVolumeClaim
            ``pvc:NAME[/SUBPATH]``, mounted writable: the step writes it in place.
        apply: after a successful step, write its changes into the host directory ``source``
            (all or none: a path changed on the host meanwhile fails the apply, changing nothing).
        max_file_bytes: the largest file taken in or given back.
        max_total_bytes: the most the copy may hold, all files together.
        ref: a git source's branch, tag or full commit id (None: its default branch).
        push_branch: after a successful step, commit its changes and push them to this new
            branch of the git source (a branch that exists is never moved).
        keep_on_retry: a retry of the step (same run and step) starts from the tree the failed
            attempt left, not from the source; the change set stays relative to the source.
            Default: each attempt starts afresh. The local backend keeps it; a pod's is gone
            with its pod, so Kubernetes refuses it (a PVC workspace is kept by nature).
    """

    source: str
    apply: bool = False
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    max_total_bytes: int = DEFAULT_MAX_TOTAL_BYTES
    ref: str | None = None
    push_branch: str | None = None
    keep_on_retry: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.source, str) or not self.source.strip() or "\x00" in self.source:
            raise errors.ConfigError("workspace source must be a host directory path or a git URL")
        if not isinstance(self.keep_on_retry, bool):
            raise errors.ConfigError("workspace keep_on_retry must be true or false")
        for name in ("max_file_bytes", "max_total_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise errors.ConfigError(f"workspace {name} must be a positive whole number of bytes, got {value!r}")
        if not self.is_git:
            if self.ref is not None or self.push_branch is not None:
                raise errors.ConfigError("workspace ref and push_branch need a git URL source")
            if self.is_pvc:
                _check_pvc(self.source, apply=self.apply)
            return
        url, embedded = git_script.parse_git_source(self.source)
        if embedded is not None:
            raise errors.ConfigError("give a git workspace's ref as ref=, not as @<ref> in the source")
        object.__setattr__(self, "source", url)
        if self.apply:
            raise errors.ConfigError(
                "apply writes a host directory; a git workspace gives its change back by push_branch"
            )
        if self.ref is not None:
            git_script.check_ref(self.ref, "workspace ref")
        if self.push_branch is not None:
            git_script.check_ref(self.push_branch, "workspace push_branch")

    @classmethod
    def parse(cls, text: str, **options: Any) -> Workspace:
        """``DIR`` or ``GIT_URL[@REF]`` (the command line's form) as a workspace."""
        if is_git_source(text):
            url, ref = git_script.parse_git_source(text)
            return cls(url, ref=ref, **options)
        return cls(text, **options)

    @property
    def is_git(self) -> bool:
        return is_git_source(self.source)

    @property
    def is_pvc(self) -> bool:
        """A Kubernetes PersistentVolumeClaim, ``pvc:NAME[/SUBPATH]``, mounted writable in the step's pod."""
        return is_pvc_source(self.source)

    @property
    def pvc(self) -> tuple[str, str | None]:
        """A PVC source's claim name and sub path (None: the claim's root)."""
        claim, _, sub_path = self.source[len(PVC_PREFIX) :].partition("/")
        return claim, sub_path or None

    @property
    def git_host(self) -> str:
        """A git source's host, as the proxy's secret allowlist names it."""
        return self.source.split("://", 1)[1].split("/", 1)[0]


def _check_pvc(source: str, *, apply: bool) -> None:
    claim, _, sub_path = source[len(PVC_PREFIX) :].partition("/")
    if not _CLAIM.fullmatch(claim) or len(claim) > 253:
        raise errors.ConfigError(
            f"invalid pvc workspace '{source}': expected pvc:NAME[/SUBPATH] with NAME a PersistentVolumeClaim's name"
        )
    parts = sub_path.split("/") if sub_path else []
    if any(p in ("", ".", "..") for p in parts) or "\x00" in sub_path:
        raise errors.ConfigError(
            f"invalid pvc workspace '{source}': the sub path must be relative, without '.' or '..'"
        )
    if apply:
        raise errors.ConfigError("a pvc workspace is written in place: apply has nothing to write")


def is_pvc_source(text: str) -> bool:
    """Whether a workspace source names a Kubernetes PersistentVolumeClaim (``pvc:NAME[/SUBPATH]``)."""
    return text.startswith(PVC_PREFIX)


def is_git_source(text: str) -> bool:
    """Whether a workspace source names a git URL rather than a host directory."""
    return "://" in text or text.startswith("git@")


def is_git_internal(path: str) -> bool:
    """Whether ``path`` lies in a ``.git`` directory (any case: a case-folding filesystem
    reads ``.GIT`` as ``.git``), or is one."""
    return any(part.lower() == ".git" for part in path.split("/"))


def escapes(path: str, target: str) -> bool:
    """Whether a symlink at ``path`` whose text is ``target`` points outside the tree it is in."""
    if posixpath.isabs(target):
        return True
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
    return joined == ".." or joined.startswith("../")


def git_mode(entry: Entry) -> str:
    """The mode git records for an entry: a symlink, an executable file, or a plain one."""
    if entry.kind is Kind.SYMLINK:
        return "120000"
    return "100755" if entry.executable else "100644"


def candidates(before: Snapshot, after: Snapshot) -> tuple[ChangedFile, ...]:
    """Every file or symlink whose ``lstat`` differs between the snapshots, sorted by path:
    the paths whose contents are worth hashing (:func:`confirm` keeps the real changes).

    Directories are not changes of their own (git tracks none); a path that turned from a
    file into a directory is the file's deletion plus the new files under it. Paths in a
    ``.git`` directory are left out (:func:`is_git_internal`).
    """
    out: list[ChangedFile] = []
    for path in sorted(before.keys() | after.keys()):
        if is_git_internal(path):
            continue
        old, new = before.get(path), after.get(path)
        old = old if old is not None and old.kind is not Kind.DIR else None
        new = new if new is not None and new.kind is not Kind.DIR else None
        if (old is None and new is None) or old == new:
            continue
        change = Change.ADDED if old is None else Change.DELETED if new is None else Change.MODIFIED
        out.append(ChangedFile(path, change, old, new))
    return tuple(out)


def confirm(candidate: ChangedFile, old_id: str | None, new_id: str | None) -> ChangedFile | None:
    """The change git sees, given the object ids of both sides, or None: a file whose
    bytes and mode are the same (rewritten in place, or its timestamps moved) is no change."""
    if candidate.before is None or candidate.after is None:
        return candidate
    old_mode, new_mode = git_mode(candidate.before), git_mode(candidate.after)
    if old_id == new_id:
        if old_mode == new_mode:
            return None
        if candidate.before.kind is candidate.after.kind:
            return ChangedFile(candidate.path, Change.MODE, candidate.before, candidate.after)
    return candidate
