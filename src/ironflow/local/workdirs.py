"""Each run's temp dir (``ironflow-local-*``) and session dir (``ifs-*``), marked with its owner,
the sweep of the ones whose owner is gone, and the list of those whose owner lives (I/O).

A run's temp dir holds the proxy socket and the managed settings, and goes when the call
returns; a session's holds its runtime socket and goes when the session closes. A worker that
is SIGKILLed cannot remove either, so the next provider (or sessions) start does. Only a
directory made here is ever swept: it holds a marker naming its owning process by boot, pid
namespace, pid and start time (``/proc/<pid>/stat``), so a reused pid does not pass for the
owner. A directory is kept when anything is unclear: no marker yet (it is written just after
the directory is made), an unreadable one, another user's directory, an owner in another pid
namespace (its pids are not ours to look up). Nothing is followed through a symlink, and one
sweep looks at a bounded number of entries. :func:`live_dirs` (``ironflow ps``) lists, by the
same markers, the directories whose owner surely runs now: one per running local agent step.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

__all__ = [
    "KEPT_PREFIX",
    "PREFIX",
    "LiveDir",
    "Owner",
    "claim",
    "current_owner",
    "format_marker",
    "live_dirs",
    "marked_dir",
    "parse_marker",
    "run_dir",
    "start_time",
    "surely_gone",
    "sweep",
]

log = logging.getLogger("ironflow.local")

PREFIX: Final = "ironflow-local-"
#: The directories of workspaces kept for a retry (:mod:`ironflow.local.workspaces.kept`).
KEPT_PREFIX: Final = "ironflow-kept-"
_MARKER: Final = ".ironflow-owner"
_MARKER_VERSION: Final = "ironflow-local-owner/1"
_MARKER_MAX_BYTES: Final = 256
#: Entries of the temp dir one sweep looks at (a shared /tmp may hold many).
_SCAN_MAX: Final = 4096
#: Field 22 of /proc/<pid>/stat, counted after the command name (fields 1 and 2).
_START_TIME_INDEX: Final = 22 - 3


@dataclass(frozen=True)
class Owner:
    """The process a temp dir belongs to, as this machine names it while it runs."""

    boot_id: str
    pid_namespace: str
    pid: int
    start_time: int


@dataclass(frozen=True)
class LiveDir:
    """A marked directory whose owner runs now, and when it was made (its marker's mtime)."""

    path: str
    owner: Owner
    created_at: float


def format_marker(owner: Owner) -> str:
    """The marker file's text (pure)."""
    return f"{_MARKER_VERSION} {owner.boot_id} {owner.pid_namespace} {owner.pid} {owner.start_time}\n"


def parse_marker(text: str) -> Owner | None:
    """The owner a marker names, or None when it is not one of ours (pure)."""
    fields = text.split()
    if len(fields) != 5 or fields[0] != _MARKER_VERSION or not (fields[3].isdigit() and fields[4].isdigit()):
        return None
    return Owner(fields[1], fields[2], int(fields[3]), int(fields[4]))


def start_time(pid: int) -> int | None:
    """When ``pid`` started (clock ticks after boot), or None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: the fields follow the last ')'.
    fields = stat[stat.rfind(b")") + 1 :].split()
    return int(fields[_START_TIME_INDEX]) if len(fields) > _START_TIME_INDEX else None


def _machine() -> tuple[str, str]:
    with open("/proc/sys/kernel/random/boot_id") as f:
        boot_id = f.read().strip()
    return boot_id, os.readlink("/proc/self/ns/pid")


def current_owner() -> Owner | None:
    """This process as a marker names it, or None where /proc does not say."""
    return _owner(os.getpid())  # by pid: a forked child is another owner


@functools.cache
def _owner(pid: int) -> Owner | None:
    """Read once per process: none of it changes while the process lives."""
    try:
        boot_id, namespace = _machine()
    except OSError:
        return None
    start = start_time(pid)
    return None if start is None else Owner(boot_id, namespace, pid, start)


def marked_dir(temp_dir: str | None, prefix: str = PREFIX) -> str:
    """A fresh private (0700) ``prefix*`` directory in ``temp_dir`` (None: the system's), marked as
    this process's; the caller removes it."""
    path = tempfile.mkdtemp(prefix=prefix, dir=temp_dir)
    owner = current_owner()
    if owner is not None:
        fd = os.open(os.path.join(path, _MARKER), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, format_marker(owner).encode())
        finally:
            os.close(fd)
    return path


def claim(path: str) -> None:
    """Mark ``path`` (a marked directory an earlier process left) as this process's, so no sweep takes it."""
    owner = current_owner()
    if owner is None:
        return
    temp = os.path.join(path, _MARKER + ".new")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, format_marker(owner).encode())
    finally:
        os.close(fd)
    os.replace(temp, os.path.join(path, _MARKER))


@contextlib.contextmanager
def run_dir(temp_dir: str | None) -> Iterator[str]:
    """A fresh marked ``ironflow-local-*`` directory in ``temp_dir``, removed when the block ends."""
    path = marked_dir(temp_dir)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _marked_owner(path: str) -> tuple[Owner, float] | None:
    """The owner the marker of directory ``path`` names and the marker's mtime, opened without
    following a symlink."""
    try:
        directory = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        fd = os.open(_MARKER, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=directory)
        try:
            owner = parse_marker(os.read(fd, _MARKER_MAX_BYTES).decode(errors="replace"))
            return None if owner is None else (owner, os.fstat(fd).st_mtime)
        finally:
            os.close(fd)
    except OSError:
        return None
    finally:
        os.close(directory)


def _stale(owner: Owner, boot_id: str, namespace: str) -> bool:
    """Whether ``owner`` is surely gone: another boot, or no process with its pid and start time."""
    if owner.boot_id != boot_id:
        return True
    if owner.pid_namespace != namespace:
        return False  # its pids mean nothing here
    return start_time(owner.pid) != owner.start_time


def surely_gone(owner: Owner) -> bool:
    """Whether ``owner`` ran on this boot, in this pid namespace, and runs no more; False when
    unclear (another machine's owner, say, sharing a Docker daemon)."""
    try:
        boot_id, namespace = _machine()
    except OSError:
        return False
    return (owner.boot_id, owner.pid_namespace) == (boot_id, namespace) and _stale(owner, boot_id, namespace)


def _marked_dirs(temp_dir: str | None, prefix: str | tuple[str, ...]) -> Iterator[LiveDir]:
    """This user's marked ``prefix*`` dirs (any of the prefixes) in ``temp_dir`` (None: the system's),
    owner alive or not; at most :data:`_SCAN_MAX` entries looked at."""
    with contextlib.suppress(OSError), os.scandir(temp_dir or tempfile.gettempdir()) as entries:
        for count, entry in enumerate(entries):
            if count >= _SCAN_MAX:
                break
            if not entry.name.startswith(prefix) or not entry.is_dir(follow_symlinks=False):
                continue
            with contextlib.suppress(OSError):
                if entry.stat(follow_symlinks=False).st_uid != os.geteuid():
                    continue
                marked = _marked_owner(entry.path)
                if marked is not None:
                    yield LiveDir(entry.path, *marked)


def sweep(temp_dir: str | None, prefix: str | tuple[str, ...] = PREFIX) -> int:
    """Remove the ``prefix*`` dirs (any of the prefixes, in one scan) in ``temp_dir`` (None: the system's)
    whose owner is gone; how many."""
    try:
        boot_id, namespace = _machine()
    except OSError:
        return 0  # no /proc to tell the living from the dead: keep everything
    removed = 0
    for found in _marked_dirs(temp_dir, prefix):
        if not _stale(found.owner, boot_id, namespace):
            continue
        with contextlib.suppress(OSError):
            shutil.rmtree(found.path)  # fd-based on Linux: never follows a symlink inside
            removed += 1
            log.info("removed the stale sandbox temp dir %s (owner pid %d is gone)", found.path, found.owner.pid)
    return removed


def live_dirs(temp_dir: str | None, prefix: str = PREFIX) -> list[LiveDir]:
    """The ``prefix*`` dirs in ``temp_dir`` (None: the system's) whose owner surely runs now: this
    boot, this pid namespace, its pid's start time; oldest first."""
    try:
        boot_id, namespace = _machine()
    except OSError:
        return []
    alive = [
        d for d in _marked_dirs(temp_dir, prefix)
        if d.owner.boot_id == boot_id and d.owner.pid_namespace == namespace and not _stale(d.owner, boot_id, namespace)
    ]  # fmt: skip
    return sorted(alive, key=lambda d: d.created_at)
