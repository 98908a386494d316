"""A sandboxed command's output kept bounded on the host: its first and last bytes, and how
much was cut between them (pure).

A sandbox may write gigabytes; its memory limit does not cover what the host reads. So the
host keeps ``keep_bytes`` from the start and ``keep_bytes`` from the end of each stream,
counts the rest, and puts one marker line where it cut: memory stays under three times
``keep_bytes`` however much comes. A caller that streams the output on (``on_output``) sees
every byte; only what is kept for the result is bounded.

>>> c = Captured("stdout", keep_bytes=4)
>>> c.feed(b"0123456789")
>>> c.value(), c.total, c.cut
(b'0123\\n[ironflow: 2 bytes of stdout cut here, 10 in all]\\n6789', 10, 2)
"""

from __future__ import annotations

from typing import Final

__all__ = ["DEFAULT_KEEP_BYTES", "Captured", "cut_marker"]

#: Bytes of each stream's start, and of its end, a result keeps by default.
DEFAULT_KEEP_BYTES: Final = 1 << 20


def cut_marker(name: str, cut: int, total: int) -> str:
    """The line that stands where ``cut`` bytes of ``name`` were left out."""
    return f"\n[ironflow: {cut} bytes of {name} cut here, {total} in all]\n"


class Captured:
    """One stream's head and tail, fed piece by piece; ``total`` counts every byte fed."""

    def __init__(self, name: str, *, keep_bytes: int = DEFAULT_KEEP_BYTES) -> None:
        if keep_bytes < 0:
            raise ValueError(f"keep_bytes must be 0 or more, got {keep_bytes}")
        self.name, self.keep = name, keep_bytes
        self.total = 0
        self._head = bytearray()
        self._tail = bytearray()

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.keep - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if data and self.keep:
            self._tail += data
            if len(self._tail) > 2 * self.keep:  # trimmed now and then, not on every piece
                del self._tail[: len(self._tail) - self.keep]

    @property
    def cut(self) -> int:
        """Bytes left out between the head and the tail."""
        return self.total - len(self._head) - min(len(self._tail), self.keep)

    def value(self) -> bytes:
        """The head, the marker line when something was cut, and the tail."""
        tail = bytes(self._tail[-self.keep :]) if self.keep else b""
        if not self.cut:
            return bytes(self._head) + tail
        return bytes(self._head) + cut_marker(self.name, self.cut, self.total).encode() + tail
