"""A sandboxed command's output kept bounded on the host: its first and last bytes, and how
much was cut between them; and the lines a log sink is given, each cut at :data:`MAX_LINE_BYTES` (pure).

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

from collections.abc import Callable
from typing import Final

__all__ = ["DEFAULT_KEEP_BYTES", "MAX_LINE_BYTES", "Captured", "SinkLines", "cut_marker"]

#: Bytes of each stream's start, and of its end, a result keeps by default.
DEFAULT_KEEP_BYTES: Final = 1 << 20
#: The longest line a log sink is given: a longer one is cut there and its rest dropped (a
#: transcript stores 4 MiB in all; one line of gigabytes must not sit in the host's memory).
MAX_LINE_BYTES: Final = 4 << 20


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


class SinkLines:
    """A stream's pieces as lines for a log sink, bounded as well: a line past :data:`MAX_LINE_BYTES`
    is given cut, with a note, and the rest of it is dropped as it comes."""

    def __init__(self, name: str, log: Callable[[str, str], None]) -> None:
        """``log(name, line)`` is given each line (a log sink's ``log``)."""
        self.name, self.log = name, log
        self.pending = bytearray()
        self.dropping = 0  # bytes of the current over-long line dropped so far

    def feed(self, data: bytes) -> None:
        start = 0
        while start < len(data):
            end = data.find(b"\n", start)
            stop = len(data) if end < 0 else end
            if self.dropping:
                self.dropping += stop - start
            else:
                room = MAX_LINE_BYTES - len(self.pending)
                self.pending += data[start : min(stop, start + room)]
                self.dropping = max(stop - start - room, 0)
            if end < 0:
                return
            self._emit()
            start = end + 1

    def end(self) -> None:
        if self.pending or self.dropping:
            self._emit()

    def _emit(self) -> None:
        line = self.pending.decode(errors="replace")
        if self.dropping:
            line += f" [ironflow: line cut at {MAX_LINE_BYTES} bytes, {self.dropping} more dropped]"
        self.log(self.name, line)
        self.pending.clear()
        self.dropping = 0
