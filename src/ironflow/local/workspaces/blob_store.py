"""The diff's private object store: git blobs written from fds the host opened, read back by id (I/O).

Git is never handed a file name to read: a name is only ever data (a newline in it, or any
byte, cannot make git open another file, e.g. one in the worker's current directory). The
host opens each file itself (:mod:`ironflow.local.workspaces.tree_reads`) and writes git's loose object:
``zlib("blob <size>\\0" + data)`` at ``objects/<id[:2]>/<id[2:]>``, the id the SHA-1 of those
bytes. Stored, not deflated: the store lasts one run, and deflating a large file costs more
than hashing it. The apply writes a file's new content from its blob, so the host directory
gets exactly the bytes the patch shows.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import zlib
from typing import Final

__all__ = ["Changed", "copy_blob", "write_blob", "write_bytes"]

_CHUNK: Final = 1 << 20


class Changed(Exception):
    """The file did not hold the size it was opened for (it changed while it was read)."""


def _place(git_dir: str, oid: str) -> str:
    return os.path.join(git_dir, "objects", oid[:2], oid[2:])


class _Writer:
    def __init__(self, git_dir: str, size: int) -> None:
        self.git_dir = git_dir
        header = f"blob {size}\0".encode()
        self.digest = hashlib.sha1(header, usedforsecurity=False)
        self.packer = zlib.compressobj(0)
        self.temp = os.path.join(git_dir, "objects", f"tmp-{os.getpid()}-{id(self)}")
        self.fd = os.open(self.temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o444)
        self._out(self.packer.compress(header))

    def _out(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view) :]

    def add(self, data: bytes) -> None:
        self.digest.update(data)
        self._out(self.packer.compress(data))

    def done(self) -> str:
        self._out(self.packer.flush())
        os.close(self.fd)
        self.fd = -1
        oid = self.digest.hexdigest()
        place = _place(self.git_dir, oid)
        os.makedirs(os.path.dirname(place), exist_ok=True)
        os.replace(self.temp, place)
        return oid

    def drop(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.temp)


def write_bytes(git_dir: str, data: bytes) -> str:
    """``data`` (a symlink's text) as a blob in the store; its id."""
    writer = _Writer(git_dir, len(data))
    try:
        writer.add(data)
        return writer.done()
    finally:
        writer.drop()


def write_blob(git_dir: str, fd: int, size: int) -> str:
    """The ``size`` bytes read from ``fd`` as a blob in the store; its id.

    Raises:
        Changed: the file ended before ``size`` bytes, or holds more.
    """
    writer = _Writer(git_dir, size)
    try:
        left = size
        while left:
            chunk = os.read(fd, min(left, _CHUNK))
            if not chunk:
                raise Changed
            writer.add(chunk)
            left -= len(chunk)
        if os.read(fd, 1):
            raise Changed
        return writer.done()
    finally:
        writer.drop()


def copy_blob(git_dir: str, oid: str, dst: int) -> None:
    """Write the content of blob ``oid`` of the store to the fd ``dst``.

    Raises:
        ValueError: no such blob in the store, or not one this module wrote.
    """
    try:
        src = os.open(_place(git_dir, oid), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ValueError(f"blob {oid} is not in the workspace's object store") from None
    unpacker = zlib.decompressobj()
    header: bytes | None = b""
    try:
        while chunk := os.read(src, _CHUNK):
            data = unpacker.decompress(chunk)
            if header is not None:
                header += data
                if b"\0" not in header:
                    continue
                head, _, data = header.partition(b"\0")
                if not head.startswith(b"blob "):
                    raise ValueError(f"object {oid} is not a blob")
                header = None
            view = memoryview(data)
            while view:
                view = view[os.write(dst, view) :]
    finally:
        os.close(src)
    if header is not None or not unpacker.eof:
        raise ValueError(f"blob {oid} is cut short")
