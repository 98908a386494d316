"""Opening paths of a tree a sandbox can write, never by name: each one beneath the tree's
directory fd, with no symlink followed anywhere on the way (I/O).

A sandbox's process can swap a directory for a symlink between the host's look and its open,
and an open by name follows it (``O_NOFOLLOW`` guards the last component only). Every open here
is ``openat2`` with ``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`` from the
root's fd; where the kernel has none (or a filter denies it), one ``openat`` with ``O_NOFOLLOW``
per component, from the same fd: as strict, since a symlink anywhere fails the open (``ELOOP``)
and a ``.``, ``..`` or empty component is refused before any open.
:func:`copy_tree` copies a tree so, counting its bytes against a bound as it goes.
"""

from __future__ import annotations

import errno
import functools
import os
import stat
import struct
import threading
from collections.abc import Callable, Sequence
from concurrent import futures
from typing import Any, Final

__all__ = ["DIR_FLAGS", "Refused", "copy_tree", "lstat_beneath", "open_beneath", "parts", "use_openat2"]

DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: ``openat2``'s number: the same on every architecture that has it (it came after the tables were unified).
_SYS_OPENAT2: Final = 437
_RESOLVE: Final = 0x02 | 0x04 | 0x08  # RESOLVE_NO_MAGICLINKS | RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH
_ATTEMPTS: Final = 8  # openat2 says EAGAIN when a rename raced the walk: tried again, then given up


@functools.cache
def _kernel_call() -> tuple[Any, Callable[..., int]] | None:
    """ctypes and libc's ``syscall``, loaded at the first open beneath a tree (ctypes costs
    milliseconds at the start of every command, and most open nothing so); None off Linux on
    x86_64 or aarch64."""
    uname = os.uname()
    if uname.sysname != "Linux" or uname.machine not in ("x86_64", "aarch64"):
        return None
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    call = libc.syscall
    call.restype = ctypes.c_long
    return ctypes, call


#: Whether opens try ``openat2`` first: until the kernel (or a filter) says it has none.
_has_openat2 = True


def parts(rel: str) -> list[str]:
    """The components of a tree-relative path; one that could leave the tree or mean nothing is refused.

    Raises:
        OSError(EINVAL): an absolute path, or a ``.``, ``..`` or empty component.
    """
    split = rel.split("/")
    if any(p in ("", ".", "..") for p in split) or "\0" in rel:
        raise OSError(errno.EINVAL, "not a plain relative path in the tree")
    return split


def _openat2(dir_fd: int, rel: str, flags: int, mode: int) -> int:
    loaded = _kernel_call()
    if loaded is None:  # no syscall() to reach it here: as a kernel without openat2
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))
    ctypes, call = loaded
    # struct open_how: flags, mode, resolve (three u64).
    how = struct.pack("=QQQ", flags | os.O_CLOEXEC, mode if flags & os.O_CREAT else 0, _RESOLVE)
    path = os.fsencode(rel)
    for _ in range(_ATTEMPTS):
        fd = int(call(ctypes.c_long(_SYS_OPENAT2), ctypes.c_long(dir_fd), path, how, ctypes.c_size_t(len(how))))
        if fd >= 0:
            return fd
        code = ctypes.get_errno()
        if code != errno.EAGAIN:
            raise OSError(code, os.strerror(code))
    raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN))


def _walk(dir_fd: int, names: Sequence[str], flags: int, mode: int) -> int:
    fd = dir_fd
    try:
        for name in names[:-1]:
            nxt = os.open(name, DIR_FLAGS, dir_fd=fd)
            if fd != dir_fd:
                os.close(fd)
            fd = nxt
        return os.open(names[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=fd)
    finally:
        if fd != dir_fd:
            os.close(fd)


def open_beneath(dir_fd: int, rel: str, flags: int, mode: int = 0o600) -> int:
    """``rel`` opened under ``dir_fd`` with ``flags``, no symlink followed on the way or at the end.

    Raises:
        OSError: ``ELOOP`` for a symlink on the way, ``EINVAL`` for a path that is not plain, and
            what ``open`` raises.
    """
    global _has_openat2
    names = parts(rel)
    if _has_openat2:
        try:
            return _openat2(dir_fd, rel, flags, mode)
        except OSError as exc:
            if exc.errno not in (errno.ENOSYS, errno.EPERM) or (exc.errno == errno.EPERM and _works(dir_fd)):
                raise
            _has_openat2 = False  # no openat2 here, or a filter (a container's seccomp) denies it
    return _walk(dir_fd, names, flags, mode)


def _works(dir_fd: int) -> bool:
    """Whether ``openat2`` opens ``.`` of ``dir_fd``: an ``EPERM`` then came from the path, not the call."""
    try:
        os.close(_openat2(dir_fd, ".", DIR_FLAGS, 0))
    except OSError:
        return False
    return True


def use_openat2(enabled: bool) -> bool:
    """Turn ``openat2`` off (tests of the fallback) or back on where it exists; what it was."""
    global _has_openat2
    was = _has_openat2
    _has_openat2 = enabled and _kernel_call() is not None
    return was


def lstat_beneath(root_fd: int, rel: str) -> tuple[os.stat_result, str | None] | None:
    """``lstat`` of ``rel`` under ``root_fd`` and a symlink's text (None: no such path), its
    parent opened as :func:`open_beneath` opens.

    Raises:
        OSError: a symlink or a file on the way (``ELOOP``, ``ENOTDIR``).
    """
    names = parts(rel)
    try:
        parent = os.dup(root_fd) if len(names) == 1 else open_beneath(root_fd, "/".join(names[:-1]), DIR_FLAGS)
    except FileNotFoundError:
        return None
    try:
        st = os.lstat(names[-1], dir_fd=parent)
        return st, os.readlink(names[-1], dir_fd=parent) if stat.S_ISLNK(st.st_mode) else None
    except FileNotFoundError:
        return None
    finally:
        os.close(parent)


class Refused(Exception):
    """What a copy refused: ``path`` (None: the tree as a whole) and why, in words."""

    def __init__(self, path: str | None, why: str) -> None:
        super().__init__(path, why)
        self.path = path
        self.why = why


_COPY_CHUNK: Final = 1 << 30
_FILE_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_NEW_FLAGS: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


#: A file to copy: its directory in the tree, its name, its size.
_File = tuple[str, str, int]


class _Budget:
    def __init__(self, max_file: int, max_total: int) -> None:
        self.max_file, self.left = max_file, max_total
        self.lock = threading.Lock()  # the copy's threads take from one budget
        self.stopped = False  # one thread failed: the others stop at their next file

    def take(self, path: str, copied: int, n: int) -> None:
        if copied + n > self.max_file:
            raise Refused(path, f"over max_file_bytes ({self.max_file})")
        with self.lock:
            self.left -= n
            if self.left < 0:
                raise Refused(None, "over max_total_bytes")


def _copy_bytes(src: int, dst: int, path: str, budget: _Budget) -> None:
    """Every byte of ``src`` into ``dst``, counted as it goes (in the kernel where it can:
    ``copy_file_range`` reflinks where the filesystem has them)."""
    copied, in_kernel = 0, True
    while True:
        want = min(_COPY_CHUNK, budget.max_file - copied + 1, budget.left + 1)
        if in_kernel:
            try:
                n = os.copy_file_range(src, dst, want)
            except OSError as exc:
                if exc.errno not in (errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                    raise
                in_kernel = False
                continue
        else:
            data = os.read(src, min(want, 1 << 20))
            n = len(data)
            view = memoryview(data)
            while view:
                view = view[os.write(dst, view) :]
        if not n:
            return
        budget.take(path, copied, n)
        copied += n


def _copy_file(src_dir: int, dst_dir: int, name: str, path: str, budget: _Budget, owner: int | None) -> None:
    src = os.open(name, _FILE_FLAGS, dir_fd=src_dir)
    try:
        st = os.fstat(src)
        if not stat.S_ISREG(st.st_mode):
            raise Refused(path, "not a regular file any more")
        dst = os.open(name, _NEW_FLAGS, 0o600, dir_fd=dst_dir)
        try:
            _copy_bytes(src, dst, path, budget)
            if owner is not None:
                os.fchown(dst, owner, owner)
            os.fchmod(dst, stat.S_IMODE(st.st_mode) & 0o777)
            os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))
        finally:
            os.close(dst)
    finally:
        os.close(src)


def _copy_files(
    src_root: int, dst_root: int, files: list[_File], budget: _Budget, owner: int | None, threads: int
) -> None:
    """``files`` copied by ``threads`` threads (this one too), each a run of them holding its share of
    the bytes (so each keeps one directory open at a time); the first failure is raised, once all stopped."""
    share, size = sum(f[2] for f in files) / threads, 0
    runs: list[list[_File]] = []
    run: list[_File] = []
    for entry in files:
        run.append(entry)
        size += entry[2]
        if size >= share * (len(runs) + 1) and len(runs) < threads - 1:
            runs.append(run)
            run = []
    runs.append(run)
    with futures.ThreadPoolExecutor(len(runs) - 1) as pool:
        done = [pool.submit(_copy_run, src_root, dst_root, part, budget, owner) for part in runs[1:]]
        try:
            _copy_run(src_root, dst_root, runs[0], budget, owner)
        except BaseException:
            budget.stopped = True
            raise
        finally:
            futures.wait(done)
    for future in done:
        future.result()


def _copy_run(
    src_root: int, dst_root: int, run: list[tuple[str, str, int]], budget: _Budget, owner: int | None
) -> None:
    """One thread's files, each directory opened beneath its root once for the files of it in a row."""
    opened: tuple[str, int, int] | None = None
    try:
        for rel, name, _ in run:
            if budget.stopped:
                return
            if opened is None or opened[0] != rel:
                if opened is not None:
                    os.close(opened[1])
                    os.close(opened[2])
                    opened = None
                src = open_beneath(src_root, rel, DIR_FLAGS) if rel else os.dup(src_root)
                try:
                    dst = open_beneath(dst_root, rel, DIR_FLAGS) if rel else os.dup(dst_root)
                except BaseException:
                    os.close(src)
                    raise
                opened = (rel, src, dst)
            _copy_file(opened[1], opened[2], name, f"{rel}/{name}" if rel else name, budget, owner)
    except BaseException:
        budget.stopped = True
        raise
    finally:
        if opened is not None:
            os.close(opened[1])
            os.close(opened[2])


def _copy_entry(
    src_dir: int, dst_dir: int, item: os.DirEntry[str], path: str, budget: _Budget, owner: int | None
) -> bool:
    """One entry of a directory; True for a directory (to walk next)."""
    st = item.stat(follow_symlinks=False)
    if stat.S_ISDIR(st.st_mode):
        os.mkdir(item.name, 0o700, dir_fd=dst_dir)
        return True
    if stat.S_ISLNK(st.st_mode):
        os.symlink(os.readlink(item.name, dir_fd=src_dir), item.name, dir_fd=dst_dir)
        if owner is not None:
            os.chown(item.name, owner, owner, dir_fd=dst_dir, follow_symlinks=False)
        os.utime(item.name, ns=(st.st_atime_ns, st.st_mtime_ns), dir_fd=dst_dir, follow_symlinks=False)
    elif stat.S_ISREG(st.st_mode):
        _copy_file(src_dir, dst_dir, item.name, path, budget, owner)
    else:
        raise Refused(path, "a special file: a workspace takes only files, directories and symlinks")
    return False


def copy_tree(
    src_root: int, dst_root: int, *, max_file: int, max_total: int, owner: int | None, threads: int = 1
) -> None:
    """Copy the tree under ``src_root`` into the empty directory ``dst_root``: files, directories
    and symlinks (as links), with their modes and mtimes, given to ``owner``; every path opened
    beneath its root, never through a symlink; the bytes counted as they are copied. With
    ``threads`` > 1 the directories are made first, then the files copied by that many threads
    (``copy_file_range`` lets go of the GIL), each half of the bytes; never for a copy that must
    run as one thread's filesystem uid.

    Raises:
        Refused: a special file, a file past ``max_file`` bytes, or past ``max_total`` in all
            (the copy stops there: the caller removes what was made).
        OSError: a path that moved while it was copied (e.g. a directory turned symlink: ``ELOOP``).
    """
    budget = _Budget(max_file, max_total)
    pending = [""]
    dirs: list[tuple[str, os.stat_result]] = [("", os.fstat(src_root))]
    files: list[_File] | None = [] if threads > 1 else None  # copied once every directory is made
    while pending:
        rel = pending.pop()
        src_dir = open_beneath(src_root, rel, DIR_FLAGS) if rel else os.dup(src_root)
        try:
            dst_dir = open_beneath(dst_root, rel, DIR_FLAGS) if rel else os.dup(dst_root)
            try:
                with os.scandir(src_dir) as it:
                    for item in it:
                        path = f"{rel}/{item.name}" if rel else item.name
                        if files is not None and item.is_file(follow_symlinks=False):
                            files.append((rel, item.name, item.stat(follow_symlinks=False).st_size))
                        elif _copy_entry(src_dir, dst_dir, item, path, budget, owner):
                            pending.append(path)
                            dirs.append((path, item.stat(follow_symlinks=False)))
            finally:
                os.close(dst_dir)
        finally:
            os.close(src_dir)
    if files:
        _copy_files(src_root, dst_root, files, budget, owner, threads)
    for rel, st in reversed(dirs):  # deepest first: a read-only directory is filled before its mode is set
        fd = open_beneath(dst_root, rel, DIR_FLAGS) if rel else os.dup(dst_root)
        try:
            if owner is not None:
                os.fchown(fd, owner, owner)
            os.fchmod(fd, stat.S_IMODE(st.st_mode) & 0o1777)
            os.utime(fd, ns=(st.st_atime_ns, st.st_mtime_ns))
        finally:
            os.close(fd)
