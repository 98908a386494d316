"""The members of a tar stream from a sandbox, read by our own rules (pure).

A session's runtime makes the tar stream of ``sandbox cp ID:DIR``, and a session that took over
its runtime makes whatever stream it likes, so the host reads it with no help from
:mod:`tarfile`: that module's extraction filter has been bypassed more than once (CVE-2025-4517,
a symlink chain past PATH_MAX, in every Python before 3.11.13/3.12.11/3.13.4) and its header
parser has had its own bugs, so what is safe would depend on the Python patch level. These
functions parse ustar, GNU and pax headers from bytes and admit only regular files, directories
and symlinks that stay inside the tree (:func:`link_refusal`) under relative, normalised names;
:mod:`ironflow.sessions.untar` does the I/O.
"""

from __future__ import annotations

import math
from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass
from typing import Final, Literal

from ironflow import errors

__all__ = [
    "BLOCK",
    "COPIED",
    "EXTENDED",
    "MAX_DEPTH",
    "MAX_EXTENDED_BYTES",
    "ArchiveRefused",
    "Header",
    "Member",
    "link_refusal",
    "link_visits",
    "member",
    "member_path",
    "ordered",
    "padded",
    "parse_header",
    "parse_pax",
    "shown",
]

BLOCK: Final = 512
#: The most a pax or GNU long-name header may hold (names are at most 4095 bytes).
MAX_EXTENDED_BYTES: Final = 1 << 20
#: The deepest a member may be nested (the host holds one directory fd per level as it writes).
MAX_DEPTH: Final = 256
_NAME_MAX: Final = 255
_PATH_MAX: Final = 4095
_USTAR: Final = b"ustar\x00"  # POSIX: the prefix field extends the name; GNU's magic is "ustar "
_KINDS: Final = {
    b"1": "a hardlink",
    b"3": "a character device",
    b"4": "a block device",
    b"6": "a FIFO",
    b"S": "a sparse file",
}
#: Header types that describe the next member (pax, GNU long name and link), not a member.
EXTENDED: Final = frozenset({b"x", b"X", b"g", b"L", b"K"})
#: The end of every refusal of a member for what it is.
COPIED: Final = "only regular files, directories and relative symlinks inside the tree are copied"


class ArchiveRefused(errors.ConfigError):
    """The stream holds what the host does not unpack; the message names the member."""


@dataclass(frozen=True)
class Header:
    """One 512-byte header block, its fields as the block has them."""

    name: bytes
    mode: int
    size: int
    mtime: float
    kind: bytes
    linkname: bytes


@dataclass(frozen=True)
class Member:
    """A regular file, directory or symlink to write: ``path`` is its normalised name,
    components joined by ``/`` (empty for the destination itself); a file's data is ``size``
    bytes at ``offset`` of the stream, a symlink's ``target`` its link text."""

    path: bytes
    kind: Literal["file", "directory", "symlink"]
    mode: int
    mtime: float | None
    offset: int
    size: int
    target: bytes = b""


def shown(name: bytes) -> str:
    """A member's name fit for one error line: escaped (no control character reaches a
    terminal) and cut short."""
    return errors.truncate(repr(name.decode("utf-8", "backslashreplace")), 200)


def padded(size: int) -> int:
    """``size`` rounded up to whole blocks."""
    return -(-size // BLOCK) * BLOCK


def _number(field: bytes, what: str) -> int:
    if field[:1] and field[0] & 0x80:  # GNU base-256: 0x80 positive, 0xff negative
        value = int.from_bytes(field[1:], "big")
        return value if field[0] == 0x80 else value - (1 << (8 * (len(field) - 1)))
    text = field.split(b"\x00", 1)[0].strip(b" ")
    try:
        return int(text, 8) if text else 0
    except ValueError:
        raise ArchiveRefused(f"not a tar stream: the {what} field of a header is {text[:20]!r}") from None


def _checksum_ok(block: bytes) -> bool:
    stored = _number(block[148:156], "checksum")
    unsigned = sum(block[:148]) + 8 * 32 + sum(block[156:])
    signed = unsigned - 256 * sum(1 for b in block[:148] + block[156:] if b > 127)
    return stored in (unsigned, signed)


def parse_header(block: bytes) -> Header | None:
    """The header in ``block``; None for the zero block that ends the archive.

    Raises:
        ArchiveRefused: a short block or a bad checksum (not a tar header: a compressed stream
        is refused here, never expanded).
    """
    if len(block) != BLOCK:
        raise ArchiveRefused("the tar stream ends inside a header")
    if not any(block):
        return None
    if not _checksum_ok(block):
        raise ArchiveRefused("not a tar stream: a header's checksum is wrong")
    name = block[:100].split(b"\x00", 1)[0]
    if block[257:263] == _USTAR and (prefix := block[345:500].split(b"\x00", 1)[0]):
        name = prefix + b"/" + name
    return Header(
        name=name,
        mode=_number(block[100:108], "mode"),
        size=_number(block[124:136], "size"),
        mtime=float(_number(block[136:148], "mtime")),
        kind=block[156:157],
        linkname=block[157:257].split(b"\x00", 1)[0],
    )


def parse_pax(data: bytes) -> dict[bytes, bytes]:
    """The records (``LEN KEY=VALUE\\n``) of a pax extended header.

    Raises:
        ArchiveRefused: a record that does not parse.
    """
    records: dict[bytes, bytes] = {}
    pos = 0
    while pos < len(data) and data[pos] != 0:
        length_text, space, _ = data[pos : pos + 20].partition(b" ")
        length = int(length_text) if space and length_text.isdigit() else 0
        record = data[pos : pos + length]
        key, equals, value = record[len(length_text) + 1 : -1].partition(b"=")
        if length <= len(length_text) + 1 or len(record) != length or record[-1:] != b"\n" or not equals:
            raise ArchiveRefused("not a tar stream: a pax header does not parse")
        records[key] = value
        pos += length
    return records


def member_path(name: bytes) -> bytes:
    """``name`` normalised: ``.`` and empty components dropped (pure).

    Raises:
        ArchiveRefused: an absolute name, a ``..`` component, a NUL byte, a name too long.
    """
    if b"\x00" in name:
        raise ArchiveRefused(f"member {shown(name)} has a NUL byte in its name")
    if name.startswith(b"/"):
        raise ArchiveRefused(f"member {shown(name)} is an absolute path")
    parts = tuple(part for part in name.split(b"/") if part not in (b"", b"."))
    if b".." in parts:
        raise ArchiveRefused(f"member {shown(name)} has a '..' component")
    if len(name) > _PATH_MAX or any(len(part) > _NAME_MAX for part in parts):
        raise ArchiveRefused(f"member {shown(name)} has a name too long for a file system")
    if len(parts) > MAX_DEPTH:
        raise ArchiveRefused(f"member {shown(name)} is nested deeper than {MAX_DEPTH} directories")
    return b"/".join(parts)


def _mtime(header: Header, pax: Mapping[bytes, bytes]) -> float | None:
    try:
        value = float(pax[b"mtime"]) if b"mtime" in pax else header.mtime
    except ValueError:
        return None
    return value if math.isfinite(value) and 0 <= value < 1 << 34 else None


def link_refusal(path: bytes, target: bytes, directories: Container[bytes] | None = None) -> str | None:
    """Why a symlink at ``path`` to ``target`` is not copied (a clause after "which"), or None
    (pure). Its target must be relative and, read from the link's own directory one component
    at a time, never leave the tree. With ``directories`` (every directory the tree makes), a
    ``..`` may only step out of one of them: after a symlink, or a name the tree does not make
    (the destination may hold a link there), ``..`` resolves elsewhere than it reads."""
    if not target:
        return "is empty"
    if b"\x00" in target:
        return "has a NUL byte"
    if len(target) > _PATH_MAX:
        return "is too long"
    if target.startswith(b"/"):
        return "is absolute"
    stack = path.split(b"/")[:-1]
    for part in target.split(b"/"):
        if part in (b"", b"."):
            continue
        if part != b"..":
            stack.append(part)
        elif not stack:
            return "points out of the tree"
        elif directories is not None and (left := b"/".join(stack)) not in directories:
            return f"steps back ('..') out of {shown(left)}, no directory of the tree"
        else:
            stack.pop()
    return None


def link_visits(path: bytes, target: bytes) -> list[bytes]:
    """The names a symlink at ``path`` to ``target`` (one :func:`link_refusal` passed) reaches
    by stepping down, in order (pure): its ``..`` steps only go back to where it was."""
    stack, visits = path.split(b"/")[:-1], []
    for part in target.split(b"/"):
        if part == b"..":
            stack.pop()
        elif part not in (b"", b"."):
            stack.append(part)
            visits.append(b"/".join(stack))
    return visits


def _refused_link(name: bytes, target: bytes, reason: str) -> ArchiveRefused:
    return ArchiveRefused(f"member {shown(name)} is a symlink to {shown(target)}, which {reason}: {COPIED}")


def member(
    header: Header, pax: Mapping[bytes, bytes], long_name: bytes | None, offset: int, long_link: bytes | None = None
) -> Member:
    """The member a header (with the pax records and GNU long name and link before it) describes.

    Raises:
        ArchiveRefused: anything but a regular file, a directory or a symlink whose target is
        relative and stays in the tree (hardlinks, devices, FIFOs, sparse files), a bad name,
        a bad size.
    """
    name = pax.get(b"path", long_name if long_name is not None else header.name)
    while name.startswith(b"./"):  # as the runtime writes names: "./sub/x"
        name = name[2:]
    target = pax.get(b"linkpath", long_link if long_link is not None else header.linkname)
    if header.kind in _KINDS or any(key.startswith(b"GNU.sparse.") for key in pax):
        kind = _KINDS.get(header.kind, "a sparse file")
        to = f" to {shown(target)}" if header.kind == b"1" else ""
        raise ArchiveRefused(f"member {shown(name)} is {kind}{to}: {COPIED}")
    if header.kind == b"2":
        path = member_path(name)
        if (reason := link_refusal(path, target) if path else "is in place of the destination") is not None:
            raise _refused_link(name, target, reason)
        return Member(path, "symlink", 0o777, _mtime(header, pax), offset, 0, target)
    if header.kind == b"5" or (header.kind == b"\x00" and name.endswith(b"/")):
        kind_of: Literal["file", "directory"] = "directory"
    elif header.kind in (b"0", b"\x00", b"7"):
        kind_of = "file"
    else:
        raise ArchiveRefused(f"member {shown(name)} has the unknown type {header.kind!r}")
    try:
        size = int(pax[b"size"]) if b"size" in pax else header.size
    except ValueError:
        raise ArchiveRefused(f"member {shown(name)} has a bad size") from None
    if size < 0 or (kind_of == "directory" and size):
        raise ArchiveRefused(f"member {shown(name)} has a bad size ({size})")
    path = member_path(name)
    if not path and kind_of == "file":
        raise ArchiveRefused(f"member {shown(name)} is a file in place of the destination directory")
    return Member(path, kind_of, header.mode & 0o777, _mtime(header, pax), offset, size)


def ordered(members: Iterable[Member], max_entries: int) -> list[Member]:
    """``members`` parents first (in name order), each name once, none both a file and a
    directory, none beneath a symlink, every symlink's ``..`` out of a directory the members
    make, and at most ``max_entries`` files, directories and symlinks in all, the directories
    their names imply counted too (pure). In this order a name's descendants follow it at
    once, and a name's new components are those past what it shares with the name before.

    Raises:
        ArchiveRefused: naming the first such member.
    """
    result = sorted(members, key=lambda item: item.path.replace(b"/", b"\x00"))
    nodes, previous, directories = 0, [b""], set[bytes]()
    for before, item in zip([None, *result], result, strict=False):
        if before is not None and item.path == before.path:
            raise ArchiveRefused(f"member {shown(item.path)} appears twice")
        if before is not None and before.kind != "directory" and item.path.startswith(before.path + b"/"):
            if before.kind == "symlink":
                through = f"is beneath the symlink {shown(before.path)}: nothing is written through one"
                raise ArchiveRefused(f"member {shown(item.path)} {through}")
            raise ArchiveRefused(f"member {shown(before.path)} is both a file and a directory")
        parts = item.path.split(b"/")
        same = 0
        while same < min(len(parts), len(previous)) and parts[same] == previous[same]:
            same += 1
        directories.update(b"/".join(parts[:end]) for end in range(same + 1, len(parts)))
        if item.kind == "directory":
            directories.add(item.path)
        nodes, previous = nodes + len(parts) - same, parts
        if nodes > max_entries:
            raise ArchiveRefused(f"the tar stream makes more than {max_entries} files and directories")
    for item in result:
        if item.kind == "symlink" and (reason := link_refusal(item.path, item.target, directories)) is not None:
            raise _refused_link(item.path, item.target, reason)
    return result
