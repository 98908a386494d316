"""Tar streams a hostile sandbox runtime could send, built member by member (test helpers).

Each builder returns the stream's bytes; ``outside`` names the file a stream would write beside
the destination if it escaped, so a test can assert it was not.
"""

from __future__ import annotations

import gzip
import io
import os
import tarfile

__all__ = ["Tar", "path_max_chain", "raw_member"]


class Tar:
    """A tar stream made one member at a time, as :mod:`tarfile` writes headers (never read here)."""

    def __init__(self, fmt: int = tarfile.PAX_FORMAT) -> None:
        self._buf = io.BytesIO()
        self._tar = tarfile.TarFile(fileobj=self._buf, mode="w", format=fmt)

    def dir(self, name: str, mode: int = 0o755) -> Tar:
        info = tarfile.TarInfo(name)
        info.type, info.mode = tarfile.DIRTYPE, mode
        self._tar.addfile(info)
        return self

    def file(self, name: str, data: bytes = b"x", mode: int = 0o644) -> Tar:
        info = tarfile.TarInfo(name)
        info.size, info.mode = len(data), mode
        self._tar.addfile(info, io.BytesIO(data))
        return self

    def link(self, name: str, target: str, *, hard: bool = False) -> Tar:
        info = tarfile.TarInfo(name)
        info.type, info.linkname = (tarfile.LNKTYPE if hard else tarfile.SYMTYPE), target
        self._tar.addfile(info)
        return self

    def special(self, name: str, kind: bytes) -> Tar:
        info = tarfile.TarInfo(name)
        info.type = kind
        self._tar.addfile(info)
        return self

    def raw(self, block: bytes) -> Tar:
        """Bytes as they are, after what came before (a header this class would not write)."""
        self._tar.fileobj.write(block)
        self._tar.offset += len(block)
        return self

    def data(self) -> bytes:
        self._tar.close()
        return self._buf.getvalue()

    def gzipped(self) -> bytes:
        return gzip.compress(self.data())


def raw_member(name: bytes, kind: bytes, size: int = 0, data: bytes = b"") -> bytes:
    """One ustar header (and ``data``, padded) with any type byte and a right checksum."""
    header = bytearray(512)
    header[: len(name)] = name
    header[100:108] = b"0000644\x00"
    header[124:136] = f"{size:011o}\x00".encode()
    header[136:148] = b"00000000000\x00"
    header[156:157] = kind
    header[257:265] = b"ustar\x0000"
    header[148:156] = b" " * 8
    header[148:156] = f"{sum(header):06o}\x00 ".encode()
    return bytes(header) + data + bytes(-len(data) % 512)


def path_max_chain(dest: str, *, hardlink: bool = True) -> Tar:
    """CVE-2025-4517's shape (as CPython's own regression test builds it): nested directories
    and symlinks whose expanded path passes PATH_MAX, a symlink ``escape`` that resolves to
    ``dest``'s parent through them, a hardlink (unless not ``hardlink``) and files written
    through it. On a Python before 3.11.13 ``extractall(filter="data")`` writes ``newfile``
    beside ``dest``."""
    steps = "abcdefghijklmnop"
    max_path = os.pathconf(os.path.dirname(dest), "PC_PATH_MAX")
    component = "d" * ((max_path - len(dest) - 1) // (len(steps) + 1))
    tar, path = Tar(), ""
    for step in steps:
        tar.dir(os.path.join(path, component), 0o777)
        tar.link(os.path.join(path, step), component)
        path = os.path.join(path, component)
    linkpath = os.path.join(*steps, "l" * 254)
    tar.link(linkpath, os.path.join(*[".."] * len(steps)))
    tar.link("escape", os.path.join(linkpath, ".."))
    if hardlink:
        tar.link("flaglink", os.path.join("escape", "flag"), hard=True)
        tar.file("flaglink", b"overwrite")
    return tar.file("escape/newfile", b"new")
