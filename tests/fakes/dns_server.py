"""A hostile DNS server on UDP: scripted A answers that change from one query to the next.

Real DNS on the wire (RFC 1035 messages over UDP), so glibc's ``getaddrinfo`` (the system
resolver every client and ironflow's egress proxy use) asks it as it would ask any server; run
it inside a network namespace of a test's own, with ``/etc/resolv.conf`` bound over there
(``tests/auth_proxy/integration/netns_dns_cases.py``). A name's n-th A query gets the n-th answer
of its script (the last one again after that); AAAA and other types get an empty answer, an
unknown name NXDOMAIN. ``queries`` records each A query's name, so a test sees how often the
proxy looked a name up.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Mapping, Sequence
from typing import Final

__all__ = ["ScriptedDns"]

_A: Final = 1
_IN: Final = 1


def _question(message: bytes) -> tuple[str, int, int]:
    """The first question's name (lower case), type, and the offset just past it."""
    labels, offset = [], 12
    while (size := message[offset]) != 0:
        labels.append(message[offset + 1 : offset + 1 + size].decode("ascii", "replace"))
        offset += 1 + size
    (qtype,) = struct.unpack_from("!H", message, offset + 1)
    return ".".join(labels).lower(), qtype, offset + 5


class ScriptedDns:
    """Answers A queries for the names of ``script`` on ``host:port`` (UDP), in a thread."""

    def __init__(self, script: Mapping[str, Sequence[Sequence[str]]], host: str = "127.0.0.1", port: int = 53) -> None:
        self.script = {name.lower(): [list(answer) for answer in answers] for name, answers in script.items()}
        self.queries: list[str] = []
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, port))
        self.sock.settimeout(0.05)  # the serving thread sees ``stopped`` this often
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> ScriptedDns:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.thread.join(5)
        self.sock.close()

    def answer(self, message: bytes) -> bytes:
        """The reply to one query message."""
        name, qtype, end = _question(message)
        (ident,) = struct.unpack_from("!H", message)
        answers = self.script.get(name)
        addresses: list[str] = []
        if answers is not None and qtype == _A:
            self.queries.append(name)
            addresses = answers[min(len(self.queries_of(name)), len(answers)) - 1]
        flags = 0x8180 if answers is not None else 0x8183  # a response, recursion available; NXDOMAIN
        head = struct.pack("!6H", ident, flags, 1, len(addresses), 0, 0)
        records = b"".join(
            struct.pack("!HHHIH", 0xC00C, _A, _IN, 0, 4) + socket.inet_aton(address) for address in addresses
        )
        return head + message[12:end] + records

    def queries_of(self, name: str) -> list[str]:
        return [query for query in self.queries if query == name]

    def _serve(self) -> None:
        while not self.stopped.is_set():
            try:
                message, peer = self.sock.recvfrom(4096)
            except TimeoutError:
                continue
            try:
                self.sock.sendto(self.answer(message), peer)
            except (IndexError, struct.error, OSError):
                continue  # a malformed query gets no answer
