"""Unpack a tar stream from a sandbox into a host directory, and pack one for a sandbox (I/O).

Nothing a session sends is trusted (a session may have taken over its runtime), and this does
not lean on :mod:`tarfile`'s extraction filter, so it holds on any Python patch level:

* the stream is read by :mod:`~ironflow.sessions.tar_members` (regular files,
  directories and relative symlinks that stay inside the tree, no member beneath a symlink:
  an absolute or escaping symlink, a hardlink, device, FIFO or sparse member is refused by
  name, never skipped; relative normalised names, no ``..``, no NUL); members, name bytes
  and data are capped;
* every check runs before the first write (all or nothing): the whole index, then the
  destination (no name on a member's way a symlink, no file where a directory goes);
* every file and directory is written relative to a directory fd opened ``O_NOFOLLOW`` one
  component at a time, a file created ``O_EXCL|O_NOFOLLOW`` under a fresh name and renamed
  over its place, so a symlink that appears in the destination meanwhile is never followed;
  the symlinks come last, made the same way (``symlinkat`` under a fresh name, renamed), so
  nothing is written through one of the stream's own; modes lose setuid/setgid/sticky and
  pass the umask; owners are never set.

:func:`pack` makes the stream of a host directory the same way round, by the same rules,
read through directory fds, the size capped as it is written.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import os
import secrets
import stat
import tarfile
from collections.abc import Iterator
from typing import BinaryIO, Final

from ironflow.sessions.tar_members import (
    BLOCK,
    COPIED,
    EXTENDED,
    MAX_EXTENDED_BYTES,
    ArchiveRefused,
    Member,
    link_refusal,
    link_visits,
    member,
    ordered,
    padded,
    parse_header,
    parse_pax,
    shown,
)

__all__ = ["DEFAULT_MAX_ENTRIES", "MAX_NAME_BYTES", "ArchiveRefused", "extract", "pack", "read_index"]

#: The most members a stream from a sandbox may hold, unless the caller says otherwise.
DEFAULT_MAX_ENTRIES: Final = 100_000
#: The most bytes all of a stream's names may hold together (they are kept in memory).
MAX_NAME_BYTES: Final = 32 << 20
_CHUNK: Final = 1 << 20
_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def read_index(stream: BinaryIO, length: int, *, max_entries: int) -> tuple[list[Member], int]:
    """The members of the tar stream in ``stream`` (``length`` bytes), parents first, and
    how many headers named a member (the destination's own ``.`` among them).

    Raises:
        ArchiveRefused: the first member or header the rules refuse, or a cap passed.
    """
    members: list[Member] = []
    count = name_bytes = extended = 0
    pax: dict[bytes, bytes] = {}
    long_name: bytes | None = None
    long_link: bytes | None = None
    pos = 0
    while (header := parse_header(_read_at(stream, pos, BLOCK) or _no_end())) is not None:
        start = pos + BLOCK
        if header.kind in EXTENDED:
            extended += header.size
            if header.size < 0 or extended > MAX_EXTENDED_BYTES or start + header.size > length:
                raise ArchiveRefused("the tar stream has an extended header too large or cut short")
            data = _read_at(stream, start, header.size)
            if header.kind in (b"x", b"X"):
                pax.update(parse_pax(data))
            elif header.kind == b"L":
                long_name = data.split(b"\x00", 1)[0]
            elif header.kind == b"K":
                long_link = data.split(b"\x00", 1)[0]
            pos = start + padded(header.size)
            continue
        item = member(header, pax, long_name, start, long_link)
        count += 1
        name_bytes += len(item.path) + len(item.target)
        if count > max_entries or name_bytes > MAX_NAME_BYTES:
            raise ArchiveRefused(f"the tar stream holds more than {max_entries} members or {MAX_NAME_BYTES} name bytes")
        if start + item.size > length:
            raise ArchiveRefused(f"the tar stream ends inside member {shown(item.path)}")
        if item.path:  # the destination itself is no member to write
            members.append(item)
        pax, long_name, long_link, extended = {}, None, None, 0
        pos = start + padded(item.size)
    return ordered(members, max_entries), count


def _no_end() -> bytes:
    """A stream that stops where a header should be was cut: a copy that failed partway in
    the sandbox (a file it could not read) must not pass for the whole tree."""
    raise ArchiveRefused("the tar stream stops before its end-of-archive block: the copy failed partway")


def _read_at(stream: BinaryIO, offset: int, size: int) -> bytes:
    stream.seek(offset)
    return stream.read(size)


class _Walk:
    """Directory fds down one path under the destination, each opened ``O_NOFOLLOW`` from its
    parent's (never a symlink, never ``..``). Members come parents first, so the next one
    shares most of the path: only the components that differ are opened, and the work is
    bounded by the tree's size, not by its depth times its members."""

    def __init__(self, dest_fd: int) -> None:
        self.dest = dest_fd
        self._names: list[bytes] = []
        self._fds: list[int] = []

    def close(self, keep: int = 0) -> None:
        """Close all but the first ``keep`` fds."""
        while len(self._fds) > keep:
            self._names.pop()
            os.close(self._fds.pop())

    def enter(self, path: bytes, *, create: bool, mode: int = 0o777) -> int | None:
        """The fd of directory ``path`` (``b""``: the destination); None when it is missing
        and not ``create``. ``mode`` is the last component's when it is made.

        Raises:
            ArchiveRefused: a component is a symlink or not a directory.
        """
        parts = path.split(b"/") if path else []
        same = 0
        while same < min(len(parts), len(self._names)) and parts[same] == self._names[same]:
            same += 1
        self.close(same)
        for i in range(same, len(parts)):
            at = self._fds[-1] if self._fds else self.dest
            fd = self._open(at, parts, i, create, mode if i == len(parts) - 1 else 0o777)
            if fd is None:
                return None
            self._names.append(parts[i])
            self._fds.append(fd)
        return self._fds[-1] if self._fds else self.dest

    def _open(self, at: int, parts: list[bytes], i: int, create: bool, mode: int) -> int | None:
        try:
            return os.open(parts[i], _DIR_FLAGS, dir_fd=at)
        except FileNotFoundError:
            if not create:
                return None
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                where = shown(b"/".join(parts[: i + 1]))
                raise ArchiveRefused(f"{where} in the destination {_what(at, parts[i])}") from None
            raise
        with contextlib.suppress(FileExistsError):  # made meanwhile: opened as anything else would be
            os.mkdir(parts[i], (mode & 0o777) | 0o700, dir_fd=at)
        return self._open(at, parts, i, False, mode)


def _what(dir_fd: int, name: bytes) -> str:
    """What ``name`` is, in words, for a refusal."""
    try:
        mode = os.lstat(name, dir_fd=dir_fd).st_mode
    except OSError:
        return "is gone"
    if stat.S_ISLNK(mode):
        return "is a symlink (nothing is written through one)"
    return "is a directory" if stat.S_ISDIR(mode) else "is not a directory"


def _parent_and_name(path: bytes) -> tuple[bytes, bytes]:
    parent, _, name = path.rpartition(b"/")
    return parent, name


def _check_destination(walk: _Walk, members: list[Member]) -> None:
    """Refuse before any write what the destination already holds in the members' way: a
    file may replace only a file, a symlink only a file or a symlink (never followed)."""
    for item in members:
        if item.kind == "directory":
            walk.enter(item.path, create=False)
            continue
        parent, name = _parent_and_name(item.path)
        fd = walk.enter(parent, create=False)
        if fd is None:
            continue
        try:
            mode = os.lstat(name, dir_fd=fd).st_mode
        except FileNotFoundError:
            continue
        if not (stat.S_ISREG(mode) or (item.kind == "symlink" and stat.S_ISLNK(mode))):
            what = _what(fd, name) if stat.S_ISLNK(mode) or stat.S_ISDIR(mode) else "is a special file"
            raise ArchiveRefused(f"{shown(item.path)} in the destination {what}")
    _check_link_ways(walk.dest, members)


def _check_link_ways(dest_fd: int, members: list[Member]) -> None:
    """A link's target may reach names the stream does not make; where the destination
    already holds a symlink there, the new link would lead wherever that one does (out of
    the tree, maybe): refused. Call after the destination's directories were checked."""
    keys = [item.path.replace(b"/", b"\x00") for item in members]  # ordered() sorted them so
    for item in (item for item in members if item.kind == "symlink"):
        for visit in link_visits(item.path, item.target):
            key = visit.replace(b"/", b"\x00")
            at = bisect.bisect_left(keys, key)
            if at < len(keys) and keys[at] == key and members[at].kind != "directory":
                break  # a file or a link of the stream: replaced, and its own rules hold
            if at < len(keys) and (keys[at] == key or keys[at].startswith(key + b"\x00")):
                continue  # a directory the stream makes (checked: no symlink on its way)
            try:
                mode = os.lstat(visit, dir_fd=dest_fd).st_mode  # every name before it a directory
            except (FileNotFoundError, NotADirectoryError):
                break
            if stat.S_ISLNK(mode):
                to = f"member {shown(item.path)} is a symlink to {shown(item.target)}"
                raise ArchiveRefused(f"{to} through {shown(visit)}, a symlink already in the destination")
            if not stat.S_ISDIR(mode):
                break


def _write_file(dir_fd: int, name: bytes, item: Member, stream: BinaryIO) -> int:
    """Write ``item``'s data under a fresh name, then rename it over ``name`` (a symlink
    there is replaced, never followed); its size."""
    temp = b".ironflow-untar-" + secrets.token_hex(8).encode()
    written = 0
    try:
        with open(os.open(temp, _NEW_FILE, item.mode, dir_fd=dir_fd), "wb") as out:
            stream.seek(item.offset)
            while written < item.size:
                data = stream.read(min(_CHUNK, item.size - written))
                if not data:
                    raise ArchiveRefused(f"the tar stream ends inside member {shown(item.path)}")
                out.write(data)
                written += len(data)
            out.flush()
            if item.mtime is not None:
                os.utime(out.fileno(), (item.mtime, item.mtime))
        os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        _unlink(dir_fd, temp)
        raise
    return written


def _write_link(dir_fd: int, name: bytes, item: Member) -> None:
    """Make ``item``'s symlink under a fresh name, then rename it over ``name`` (what is there
    is replaced, never followed)."""
    temp = b".ironflow-untar-" + secrets.token_hex(8).encode()
    os.symlink(item.target, temp, dir_fd=dir_fd)
    try:
        if item.mtime is not None:
            os.utime(temp, (item.mtime, item.mtime), dir_fd=dir_fd, follow_symlinks=False)
        os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        _unlink(dir_fd, temp)
        raise


def _unlink(dir_fd: int, name: bytes) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name, dir_fd=dir_fd)


def extract(stream: BinaryIO, dest: str, *, max_bytes: int, max_entries: int = DEFAULT_MAX_ENTRIES) -> int:
    """Unpack the tar stream in ``stream`` (a seekable file of ours) into directory ``dest``
    (made if missing); the number of members. Every check on the stream and on ``dest``
    comes before the first write, and the symlinks are made after every file and directory,
    so nothing is written through one.

    Raises:
        ArchiveRefused: a member or the destination the rules refuse, or a cap passed; the
        message names the member and says what was written. OSError: ``dest`` cannot be written.
    """
    length = stream.seek(0, os.SEEK_END)
    try:
        if length > max_bytes:
            raise ArchiveRefused(f"the tar stream is over the {max_bytes} byte limit")
        members, count = read_index(stream, length, max_entries=max_entries)
        os.makedirs(dest, exist_ok=True)
        dest_fd = os.open(dest, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # the caller's own choice: followed
    except ArchiveRefused as exc:
        raise ArchiveRefused(f"{exc.message}; nothing was written") from None
    walk = _Walk(dest_fd)
    done = written = 0
    try:
        _check_destination(walk, members)
        links = [item for item in members if item.kind == "symlink"]
        for item in [item for item in members if item.kind != "symlink"] + links:
            done += 1
            if item.kind == "directory":
                walk.enter(item.path, create=True, mode=item.mode)
                continue
            parent, name = _parent_and_name(item.path)
            dir_fd = walk.enter(parent, create=True)
            assert dir_fd is not None  # made when missing
            if item.kind == "symlink":
                _write_link(dir_fd, name, item)
                continue
            written += _write_file(dir_fd, name, item, stream)
            if written > max_bytes:  # counted as written, not taken from the headers
                raise ArchiveRefused(f"the tar stream's files are over the {max_bytes} byte limit")
    except ArchiveRefused as exc:
        what = f"{done - 1} of {len(members)} members were written" if done > 1 else "nothing was written"
        raise ArchiveRefused(f"{exc.message}; {what}") from None
    finally:
        walk.close()
        os.close(dest_fd)
    return count


def _tree(root: int) -> Iterator[tuple[str, int, os.stat_result]]:
    """``(path, parent fd, lstat)`` of every entry under directory fd ``root``, parents first,
    each directory opened ``O_NOFOLLOW`` from its parent's fd (held while its entries go by)."""
    stack: list[tuple[int, str, Iterator[tuple[str, os.stat_result]]]] = [(root, "", _entries(root))]
    try:
        while stack:
            dir_fd, prefix, entries = stack[-1]
            entry = next(entries, None)
            if entry is None:
                stack.pop()
                if dir_fd != root:
                    os.close(dir_fd)
                continue
            name, info = entry
            path = f"{prefix}/{name}" if prefix else name
            yield path, dir_fd, info
            if stat.S_ISDIR(info.st_mode):
                fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
                stack.append((fd, path, _entries(fd)))
    finally:
        for dir_fd, _, _ in stack:
            if dir_fd != root:
                os.close(dir_fd)


def _entries(dir_fd: int) -> Iterator[tuple[str, os.stat_result]]:
    with os.scandir(dir_fd) as entries:
        found = sorted((entry.name, entry.stat(follow_symlinks=False)) for entry in entries)
    return iter(found)


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file"


def pack(local_dir: str, out: BinaryIO, *, max_bytes: int) -> None:
    """Write the tar stream of ``local_dir``'s contents (its ``.`` first, its symlinks last)
    into ``out``, by the rules :func:`extract` takes it back with.

    Raises:
        ArchiveRefused: an entry is not a regular file, a directory or a relative symlink that
        stays in the tree (named), or the stream would pass ``max_bytes`` (found as it is
        written). OSError: an entry cannot be read.
    """
    over = f"'{local_dir}' is over the {max_bytes} byte limit as a tar stream"
    root = os.open(local_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    links: list[tuple[str, str, os.stat_result]] = []
    directories: set[bytes] = set()
    try:
        with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
            tar.addfile(_info(".", os.fstat(root)))
            for path, dir_fd, info in _tree(root):
                shown_path = f"'{os.path.join(local_dir, path)}'"
                if stat.S_ISLNK(info.st_mode):
                    links.append((path, os.readlink(os.path.basename(path), dir_fd=dir_fd), info))
                    continue
                is_file = stat.S_ISREG(info.st_mode)
                if not (is_file or stat.S_ISDIR(info.st_mode)):
                    raise ArchiveRefused(f"{shown_path} is {_kind(info.st_mode)}: {COPIED}")
                if out.tell() + 3 * BLOCK + len(path) + (padded(info.st_size) if is_file else 0) > max_bytes:
                    raise ArchiveRefused(over)
                if is_file:
                    _add_file(tar, dir_fd, path, info, shown_path)
                else:
                    directories.add(os.fsencode(path))
                    tar.addfile(_info(path, info))
            for path, target, info in links:
                _check_link(local_dir, path, target, directories)
                if out.tell() + 4 * BLOCK + len(path) + len(target) > max_bytes:
                    raise ArchiveRefused(over)
                tar.addfile(_info(path, info, target))
    finally:
        os.close(root)
    if out.tell() > max_bytes:  # the end blocks and the record's padding
        raise ArchiveRefused(over)


def _check_link(local_dir: str, path: str, target: str, directories: set[bytes]) -> None:
    """Refuse a symlink of the host tree that :func:`extract` would refuse."""
    reason = link_refusal(os.fsencode(path), os.fsencode(target), directories)
    if reason is not None:
        to = shown(os.fsencode(target))
        raise ArchiveRefused(f"'{os.path.join(local_dir, path)}' is a symlink to {to}, which {reason}: {COPIED}")


def _add_file(tar: tarfile.TarFile, dir_fd: int, path: str, info: os.stat_result, shown_path: str) -> None:
    fd = os.open(os.path.basename(path), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    with open(fd, "rb") as source:
        now = os.fstat(fd)
        if not stat.S_ISREG(now.st_mode) or now.st_size != info.st_size:
            raise ArchiveRefused(f"{shown_path} changed while it was copied")
        try:
            tar.addfile(_info(path, info), source)
        except OSError as exc:  # tarfile's "unexpected end of data": it shrank meanwhile
            raise ArchiveRefused(f"{shown_path} changed while it was copied") from exc


def _info(name: str, info: os.stat_result, target: str | None = None) -> tarfile.TarInfo:
    member = tarfile.TarInfo(name)
    member.mode = stat.S_IMODE(info.st_mode) & 0o777
    member.mtime = int(info.st_mtime)
    if stat.S_ISDIR(info.st_mode):
        member.type = tarfile.DIRTYPE
    elif target is not None:
        member.type, member.linkname = tarfile.SYMTYPE, target
    else:
        member.size = info.st_size
    return member
