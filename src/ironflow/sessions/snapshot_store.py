"""The snapshot store every session backend shares: records, ids, the size limit, staging (I/O).

A snapshot is a directory of the store, ``$IRONFLOW_SNAPSHOT_DIR`` or
``${XDG_STATE_HOME:-~/.local/state}/ironflow/snapshots`` (0700), holding its ``snapshot.json``
record and what its backend keeps of the session: local sessions a copy of each tree
(:mod:`ironflow.local.sessions.snapshots`), cluster sessions their workspace as one tar archive
(:mod:`ironflow.k8s.sessions.archives`). A new snapshot is written under a temporary name
(:meth:`SnapshotStore.staged`) and renamed in whole, so a half-written one is never listed; the
store's snapshots together stay under its limit (a backend checks what it adds against
:meth:`SnapshotStore.left`). This module reads no session: what goes in is the backend's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import shutil
from collections.abc import Iterator, Mapping
from typing import Final

from ironflow import errors, labels
from ironflow.sessions.values import SnapshotInfo, SnapshotNotFound, check_snapshot_id

__all__ = [
    "DEFAULT_LIMIT_BYTES",
    "HOME",
    "SNAPSHOT_DIR_ENV",
    "SNAPSHOT_LIMIT_ENV",
    "WORKSPACE",
    "SnapshotStore",
    "check_name",
    "default_store_dir",
    "parse_limit",
    "remove_tree",
]

SNAPSHOT_DIR_ENV: Final = "IRONFLOW_SNAPSHOT_DIR"
SNAPSHOT_LIMIT_ENV: Final = "IRONFLOW_SNAPSHOT_LIMIT"
_UNITS: Final = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
#: The most every snapshot of the store holds together, unless told otherwise.
DEFAULT_LIMIT_BYTES: Final = 10 << 30
#: The trees a snapshot may hold: the session's workspace, its HOME.
WORKSPACE: Final = "workspace"
HOME: Final = "home"
_META: Final = "snapshot.json"
_NEW: Final = ".new-"
_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def default_store_dir(env: Mapping[str, str] | None = None) -> str:
    """Where snapshots live unless the caller names a directory."""
    env = os.environ if env is None else env
    if chosen := env.get(SNAPSHOT_DIR_ENV):
        return chosen
    base = env.get("XDG_STATE_HOME") or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "ironflow", "snapshots")


def parse_limit(text: str) -> int:
    """Bytes in ``500M``, ``10G`` or ``1048576`` (pure).

    >>> parse_limit("10G"), parse_limit("512")
    (10737418240, 512)

    Raises:
        ConfigError: not a positive size.
    """
    value = text.strip().upper().removesuffix("B").removesuffix("I")
    digits, unit = (value[:-1], value[-1]) if value[-1:] in ("K", "M", "G", "T") else (value, "")
    if not digits.isdigit() or int(digits) <= 0:
        raise errors.ConfigError(f"invalid snapshot store limit '{errors.truncate(text, 40)}': use e.g. 500M or 10G")
    return int(digits) * _UNITS[unit]


def check_name(name: str | None) -> None:
    """A snapshot's name, when it has one, is a label value (pure).

    Raises:
        ConfigError: it is not.
    """
    if name is not None and not labels.is_valid_label_value(name):
        raise errors.ConfigError("a snapshot name is 1-63 of [A-Za-z0-9._-], alphanumeric at both ends")


def _unlock(root: str) -> None:
    """Every directory under ``root`` made writable by its owner (a tree may hold 0500 ones), by fd."""
    try:
        root_fd = os.open(root, _DIR_FLAGS)
    except OSError:
        return
    pending = [root_fd]
    while pending:
        fd = pending.pop()
        try:
            os.fchmod(fd, 0o700)
            with os.scandir(fd) as it:
                for item in it:
                    if item.is_dir(follow_symlinks=False):
                        try:
                            pending.append(os.open(item.name, _DIR_FLAGS, dir_fd=fd))
                        except OSError:
                            continue
        except OSError:
            pass
        finally:
            os.close(fd)


def remove_tree(place: str) -> None:
    """``place`` and everything in it, whatever modes its directories have; quiet when it is gone."""
    _unlock(place)
    shutil.rmtree(place, ignore_errors=True)


class SnapshotStore:
    """The snapshots on this machine: list, get, remove, and a staging place for a new one.

    Args:
        directory: the store (made 0700 if missing; default :func:`default_store_dir`).
        limit_bytes: the most its snapshots hold together, a capture past it refused (default
            ``$IRONFLOW_SNAPSHOT_LIMIT``, else 10 GiB).

    Raises:
        ConfigError: ``$IRONFLOW_SNAPSHOT_LIMIT`` is not a size.
    """

    def __init__(self, directory: str | None = None, *, limit_bytes: int | None = None) -> None:
        self.directory = os.path.abspath(directory or default_store_dir())
        env_limit = os.environ.get(SNAPSHOT_LIMIT_ENV)
        if limit_bytes is None:
            limit_bytes = parse_limit(env_limit) if env_limit else DEFAULT_LIMIT_BYTES
        self.limit_bytes = limit_bytes
        #: One capture at a time: each sees what the one before took (a backend holds it as it captures).
        self.lock = asyncio.Lock()

    def _ensure(self) -> None:
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        os.chmod(self.directory, 0o700)

    def path(self, snapshot_id: str) -> str:
        """The snapshot's directory (checked to be an id: never a path of the caller's)."""
        return os.path.join(self.directory, check_snapshot_id(snapshot_id))

    def list(self) -> list[SnapshotInfo]:
        """Every snapshot, oldest first (a directory without a readable record is skipped)."""
        found = []
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        for name in names:
            try:
                with open(os.path.join(self.directory, name, _META)) as f:
                    found.append(SnapshotInfo.from_json(json.load(f)))
            except (OSError, ValueError, KeyError, errors.ConfigError):
                continue
        return sorted(found, key=lambda info: (info.created_at, info.id))

    def get(self, snapshot_id: str) -> tuple[SnapshotInfo, dict[str, object]]:
        """The snapshot and its whole record (with what its backend added).

        Raises:
            SnapshotNotFound: none has this id.
        """
        try:
            with open(os.path.join(self.path(snapshot_id), _META)) as f:
                doc = json.load(f)
        except (OSError, ValueError):
            raise SnapshotNotFound(f"no snapshot '{snapshot_id}': `ironflow sandbox snapshots` lists them") from None
        return SnapshotInfo.from_json(doc), doc

    def used(self) -> int:
        return sum(info.size_bytes for info in self.list())

    def left(self) -> int:
        """The bytes a new snapshot may still take under the store's limit."""
        return self.limit_bytes - self.used()

    def remove(self, snapshot_id: str) -> bool:
        path = self.path(snapshot_id)
        if not os.path.isdir(path):
            return False
        _unlock(path)
        shutil.rmtree(path)
        return True

    @contextlib.contextmanager
    def staged(self) -> Iterator[tuple[str, str]]:
        """A new snapshot's id and its private directory to fill; the caller ends with
        :meth:`commit`, and the directory goes on any exception out of the block."""
        self._ensure()
        snapshot_id = "snap-" + secrets.token_hex(8)
        place = os.path.join(self.directory, _NEW + snapshot_id)
        os.mkdir(place, 0o700)
        try:
            yield snapshot_id, place
        except BaseException:
            remove_tree(place)
            raise

    def commit(self, place: str, info: SnapshotInfo, extra: Mapping[str, object] | None = None) -> SnapshotInfo:
        """Write the staged snapshot's record (``info``, then ``extra``) and make it a snapshot of the store."""
        doc = {**info.to_json(), **(extra or {})}
        with open(os.path.join(place, _META), "x") as f:
            json.dump(doc, f)
        os.rename(place, self.path(info.id))
        return info
