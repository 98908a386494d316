"""The server name a TLS ClientHello asks for (pure): what an egress ``CONNECT`` tunnel may carry.

The egress proxy does not terminate TLS (no MITM), so the only name it can hold a tunnel to
is the one in the client's first flight: the ``server_name`` extension (RFC 6066) of the
ClientHello (RFC 8446 §4.1.2; TLS 1.0–1.3 share its layout). Reading is strict: anything that
is not one well-formed ClientHello in handshake records, or names more than one host, is a
:class:`NotClientHello` (a ``ValueError``) with a short reason; no input raises anything else.
Bytes are bounded: a ClientHello larger than :data:`MAX_HELLO_BYTES` is refused.

>>> hello = bytes.fromhex("16030100")  # a record header alone: more is needed
>>> bytes_needed(hello) > 0
True
"""

from __future__ import annotations

import struct
from typing import Final

__all__ = ["MAX_HELLO_BYTES", "NotClientHello", "bytes_needed", "hello_length", "read", "server_name"]

#: Records of a ClientHello together (a post-quantum key share makes it ~2 KB; 64 KiB is generous).
MAX_HELLO_BYTES: Final = 64 * 1024
_HANDSHAKE: Final = 0x16
_CLIENT_HELLO: Final = 0x01
_SERVER_NAME: Final = 0x0000
_HOST_NAME: Final = 0x00
_MAX_RECORD: Final = (1 << 14) + 256  # a plaintext record's payload, with slack
_EXTENSION: Final = struct.Struct(">HH")  # an extension's type and length
_PRINTABLE: Final = bytes(range(0x21, 0x7F))


class NotClientHello(ValueError):
    """The bytes are not one ClientHello this proxy can read; the message says why."""


def _records(data: bytes) -> tuple[bytes, int]:
    """The handshake bytes of the whole records in ``data``, and how many more bytes the
    record being read needs (5 for the next header when ``data`` ends on a boundary)."""
    if len(data) > MAX_HELLO_BYTES:
        raise NotClientHello("ClientHello too large")
    payload = bytearray()
    at = 0
    while at < len(data):
        header = data[at : at + 5]
        if header[0] != _HANDSHAKE:
            raise NotClientHello("not a TLS handshake record")
        if len(header) >= 2 and header[1] != 0x03:
            raise NotClientHello("not a TLS record version")
        if len(header) < 5:
            return bytes(payload), 5 - len(header)
        length = int.from_bytes(header[3:5], "big")
        if not 0 < length <= _MAX_RECORD:
            raise NotClientHello("bad TLS record length")
        body = data[at + 5 : at + 5 + length]
        if len(body) < length:
            return bytes(payload), length - len(body)
        payload += body
        at += 5 + length
    return bytes(payload), 5


def bytes_needed(data: bytes) -> int:
    """0 when ``data`` holds a whole ClientHello, else how many more bytes to read (at least 1)."""
    return _needed(data, *_records(data))


def hello_length(data: bytes) -> int | None:
    """How many leading bytes of ``data`` hold its ClientHello, read as a stream would read it (a
    record at a time, :func:`bytes_needed` bytes each, until the message is whole); ``None`` while
    more must come (the usual one-record first flight is :func:`read`'s shortcut). Raises
    :class:`NotClientHello` as :func:`bytes_needed` does."""
    taken = 0
    while (more := bytes_needed(data[:taken])) > 0:
        if len(data) < taken + more:
            return None
        taken += more
    return taken


def _needed(data: bytes, payload: bytes, more: int) -> int:
    if len(payload) >= 4:
        if payload[0] != _CLIENT_HELLO:
            raise NotClientHello("the first handshake message is not a ClientHello")
        if len(payload) >= 4 + int.from_bytes(payload[1:4], "big"):
            return 0
    if len(data) + more > MAX_HELLO_BYTES:
        raise NotClientHello("ClientHello too large")
    return more


def _host_name(payload: bytes, at: int, end: int) -> str:
    """The one host name of the server_name extension's contents at ``payload[at:end]``."""
    names, stop = _vector(payload, at, 2, end)
    if stop != end:
        raise NotClientHello("bad server_name extension")
    found: str | None = None
    while names < stop:
        if names + 3 > stop:
            raise NotClientHello("truncated ClientHello")
        kind, (start, names) = payload[names], _vector(payload, names + 1, 2, stop)
        if kind == _HOST_NAME:
            if found is not None:
                raise NotClientHello("server_name must name exactly one host")
            found = _decoded(payload[start:names])
    if found is None:
        raise NotClientHello("server_name must name exactly one host")
    return found


def _decoded(name: bytes) -> str:
    if not name or name.translate(None, _PRINTABLE):  # what is left once printable ASCII is deleted
        raise NotClientHello("server_name is not a printable ASCII host name")
    return name.decode("ascii").lower().rstrip(".")


def _vector(data: bytes, at: int, width: int, stop: int) -> tuple[int, int]:
    """Where the contents of the vector at ``at`` (its length in ``width`` bytes) start and end."""
    start = at + width
    if start > stop:
        raise NotClientHello("truncated ClientHello")
    end = start + int.from_bytes(data[at:start], "big")
    if end > stop:
        raise NotClientHello("truncated ClientHello")
    return start, end


def server_name(data: bytes) -> str | None:
    """The host the ClientHello in ``data`` names (lowercase, no trailing dot), ``None`` when it
    names none; :class:`NotClientHello` when ``data`` is not exactly one whole ClientHello."""
    payload, more = _records(data)
    if _needed(data, payload, more) != 0:
        raise NotClientHello("incomplete ClientHello")
    return _name_in(payload)


def read(data: bytes) -> tuple[int, str | None] | None:
    """How many leading bytes of ``data`` hold its ClientHello (as :func:`hello_length`) and the
    host it names (as :func:`server_name`); ``None`` while more must come. The usual first flight,
    one record holding the whole ClientHello, has its records read once for both."""
    n = len(data)
    if 5 < n <= _MAX_RECORD + 5 and n == 5 + ((data[3] << 8) | data[4]) and data[0] == _HANDSHAKE and data[1] == 3:
        payload = data[5:]  # one record, as _records reads it; anything odd takes the long way below
        if (
            len(payload) >= 4
            and payload[0] == _CLIENT_HELLO
            and len(payload) >= 4 + int.from_bytes(payload[1:4], "big")
        ):
            return n, _name_in(payload)
    taken = hello_length(data)
    return None if taken is None else (taken, server_name(data[:taken]))


def _after_header(payload: bytes) -> int:
    """Where a whole ClientHello's extensions start (``len(payload)``: it has none), past the message
    header, version, random, session id, cipher suites and compression methods.

    By offsets, inline: this runs once per tunnel, before its first byte, and a call costs more
    than the arithmetic it would hide (each length below is :func:`_vector`'s, checked alike)."""
    n = len(payload)
    if n < 4 or (end := 4 + int.from_bytes(payload[1:4], "big")) > n:
        raise NotClientHello("truncated ClientHello")
    if end != n:
        raise NotClientHello("data after the ClientHello")
    at = 4 + 2 + 32  # after the message header, legacy_version and random
    if at + 1 > n or (at := at + 1 + (sid := payload[at])) > n:
        raise NotClientHello("truncated ClientHello")
    if sid > 32:
        raise NotClientHello("session id too long")
    if at + 2 > n or (at := at + 2 + (suites := (payload[at] << 8) | payload[at + 1])) > n:
        raise NotClientHello("truncated ClientHello")
    if suites == 0 or suites % 2:
        raise NotClientHello("bad cipher suites")
    if at + 1 > n or (at := at + 1 + (methods := payload[at])) > n:
        raise NotClientHello("truncated ClientHello")
    if methods == 0:
        raise NotClientHello("no compression methods")
    return at


def _name_in(payload: bytes) -> str | None:
    """:func:`server_name` of a whole ClientHello's handshake bytes."""
    at, n = _after_header(payload), len(payload)
    if at == n:
        return None  # no extensions at all (TLS 1.0 era)
    if at + 2 > n:
        raise NotClientHello("truncated ClientHello")
    end = at + 2 + ((payload[at] << 8) | payload[at + 1])
    if end > n:
        raise NotClientHello("truncated ClientHello")
    if end != n:
        raise NotClientHello("data after the extensions")
    at += 2
    # By offsets into the payload, one unpack per extension: this runs once per tunnel, before its
    # first byte, and a ClientHello has 10-20 extensions.
    kinds: list[int] = []
    sni: tuple[int, int] | None = None
    try:
        while at < end:
            kind, length = _EXTENSION.unpack_from(payload, at)
            kinds.append(kind)
            if kind == _SERVER_NAME:
                sni = (at + 4, at + 4 + length)
            at += 4 + length
    except struct.error:
        raise NotClientHello("truncated ClientHello") from None
    if at != end:
        raise NotClientHello("truncated ClientHello")
    if len(set(kinds)) != len(kinds):
        raise NotClientHello("a repeated extension")
    return None if sni is None else _host_name(payload, *sni)
