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

from typing import Final

__all__ = ["MAX_HELLO_BYTES", "NotClientHello", "bytes_needed", "hello_length", "server_name"]

#: Records of a ClientHello together (a post-quantum key share makes it ~2 KB; 64 KiB is generous).
MAX_HELLO_BYTES: Final = 64 * 1024
_HANDSHAKE: Final = 0x16
_CLIENT_HELLO: Final = 0x01
_SERVER_NAME: Final = 0x0000
_HOST_NAME: Final = 0x00
_MAX_RECORD: Final = (1 << 14) + 256  # a plaintext record's payload, with slack


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
    more must come. Raises :class:`NotClientHello` as :func:`bytes_needed` does."""
    if len(data) > 5 and len(data) == 5 + int.from_bytes(data[3:5], "big") and bytes_needed(data) == 0:
        return len(data)  # the usual first flight: one record, the whole ClientHello, nothing after it
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


class _Cursor:
    """Reads length-prefixed fields; any overrun is a :class:`NotClientHello`."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def take(self, count: int) -> bytes:
        if count < 0 or self.at + count > len(self.data):
            raise NotClientHello("truncated ClientHello")
        piece = self.data[self.at : self.at + count]
        self.at += count
        return piece

    def number(self, width: int) -> int:
        return int.from_bytes(self.take(width), "big")

    def vector(self, width: int) -> _Cursor:
        return _Cursor(self.take(self.number(width)))

    @property
    def done(self) -> bool:
        return self.at == len(self.data)


def _host_name(extension: _Cursor) -> str:
    names = extension.vector(2)
    if not extension.done:
        raise NotClientHello("bad server_name extension")
    found: list[str] = []
    while not names.done:
        kind = names.number(1)
        name = names.vector(2).data
        if kind == _HOST_NAME:
            found.append(_decoded(name))
    if len(found) != 1:
        raise NotClientHello("server_name must name exactly one host")
    return found[0]


def _decoded(name: bytes) -> str:
    if not name or not all(0x21 <= byte <= 0x7E for byte in name):
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
    # By offsets into the payload, not cursors: this runs once per tunnel, before its first byte.
    at, stop = _vector(payload, 1, 3, len(payload))  # after the message type
    if stop != len(payload):
        raise NotClientHello("data after the ClientHello")
    if at + 2 + 32 > stop:  # legacy_version, random
        raise NotClientHello("truncated ClientHello")
    start, at = _vector(payload, at + 2 + 32, 1, stop)
    if at - start > 32:
        raise NotClientHello("session id too long")
    start, at = _vector(payload, at, 2, stop)
    if at == start or (at - start) % 2:
        raise NotClientHello("bad cipher suites")
    start, at = _vector(payload, at, 1, stop)
    if at == start:
        raise NotClientHello("no compression methods")
    if at == stop:
        return None  # no extensions at all (TLS 1.0 era)
    at, end = _vector(payload, at, 2, stop)
    if end != stop:
        raise NotClientHello("data after the extensions")
    name: str | None = None
    seen: set[int] = set()
    while at < end:  # by offsets, not cursors: a ClientHello has 10-20 extensions
        if at + 4 > end:
            raise NotClientHello("truncated ClientHello")
        kind, after = (payload[at] << 8) | payload[at + 1], at + 4 + ((payload[at + 2] << 8) | payload[at + 3])
        if after > end:
            raise NotClientHello("truncated ClientHello")
        if kind in seen:
            raise NotClientHello("a repeated extension")
        seen.add(kind)
        if kind == _SERVER_NAME:
            name = _host_name(_Cursor(payload[at + 4 : after]))
        at = after
    return name
