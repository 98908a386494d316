"""The egress listener's connections on protocol callbacks: the head, then a ``CONNECT`` tunnel's bytes.

A tunnel's first byte waits on the proxy's CPU, so its connections skip streams: :class:`Client`
gathers the request head (within ``header_timeout_s``, at most ``max_head`` bytes) and hands it
to the server's one handler task; for a tunnel the handler connects an :class:`Upstream` and
calls :meth:`Client.splice_to`. The splice gathers the ClientHello exactly as stream reads
would (:func:`client_hello.read`), has the handler's ``check`` judge the name it asks for, and
from then on each chunk goes straight from one transport to the other: no stream buffer, no task
per direction, one wake-up of the handler when the tunnel ends. Limits as :func:`tunnels.relay`:
a half-close is passed on, the tunnel ends when both directions have, idleness and the token's
byte budget cut it (one timer a tunnel: the ClientHello's deadline, then the idle check). A
transport above its high-water mark pauses its peer's reading.
Plain HTTP leaves this module at :meth:`Client.streams` (its body framing reads a stream).

Nothing of the upstream reaches a client whose ClientHello was not checked: what it sends
before is held (its reading paused past :data:`_HELD` bytes) and dropped if the check fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Final, cast

from ironflow.auth_proxy import client_hello, tunnels

__all__ = ["Client", "Splice", "Upstream"]

_END: Final = b"\r\n\r\n"
#: Bytes a side may send before its splice relays (a ClientHello fits); past them its reading pauses.
_HELD: Final = client_hello.MAX_HELLO_BYTES


class _Side(asyncio.Protocol):
    """One socket of a tunnel: bytes it sends before the relay starts are held, with its EOF and loss."""

    __slots__ = ("ended", "held", "lost", "paused", "splice", "transport")

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.splice: Splice | None = None
        self.held = b""
        self.ended = False  # EOF before the relay
        self.lost = False
        self.paused = False

    def hold(self, data: bytes) -> None:
        self.held += data
        if len(self.held) > _HELD and self.transport is not None and not self.paused:
            self.paused = True
            self.transport.pause_reading()

    def hand_over(self, to: asyncio.Protocol) -> None:
        """What was held, then the EOF or the loss, to ``to`` (what reads this side from now on)."""
        held, self.held = self.held, b""
        if self.paused and self.transport is not None and not self.transport.is_closing():
            self.paused = False
            self.transport.resume_reading()
        if held:
            to.data_received(held)
        if self.lost:
            to.connection_lost(None)
        elif self.ended:
            to.eof_received()

    def close(self) -> None:
        """End this side's connection (what is buffered is sent first) and its splice, and let go of
        both: the references between a transport, its protocol and the splice are cycles, which the
        collector would otherwise have to find, every tunnel."""
        if self.splice is not None:
            self.splice.cut()
        if self.transport is not None:
            self.transport.close()
        self.transport = self.splice = None

    def pause_writing(self) -> None:
        if self.splice is not None:
            self.splice.throttle(self, pause=True)

    def resume_writing(self) -> None:
        if self.splice is not None:
            self.splice.throttle(self, pause=False)


class Client(_Side):
    """The listener's protocol: the head, then (a tunnel) the client side of a :class:`Splice`.

    ``on_head(client, head)`` gets the head (``None``: larger than ``max_head``). A silent or
    half-sent head is closed."""

    __slots__ = ("_header_timeout_s", "_max_head", "_on_head", "_reading", "_reading_head", "_timer", "loop")

    def __init__(
        self,
        on_head: Callable[[Client, bytes | None], None],
        *,
        reading: set[Client],
        loop: asyncio.AbstractEventLoop,
        header_timeout_s: float,
        max_head: int,
    ) -> None:
        super().__init__()
        self.loop = loop
        self._on_head = on_head
        self._header_timeout_s = header_timeout_s
        self._max_head = max_head
        self._reading_head = True
        self._reading = reading  # the clients whose head is still coming: a closing listener closes them
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not asyncio's subclasses
        self._timer = self.loop.call_later(self._header_timeout_s, self.transport.close)
        self._reading.add(self)

    def data_received(self, data: bytes) -> None:
        if self.splice is not None:
            self.splice.from_client(data)
        elif not self._reading_head:
            self.hold(data)
        else:
            self._head(data)

    def _head(self, data: bytes) -> None:
        seen = len(self.held)
        self.held += data
        end = self.held.find(_END, max(0, seen - 3))
        if end < 0 and len(self.held) <= self._max_head:
            return
        self._reading_head = False
        self._reading.discard(self)
        self._stop_timer()
        if end < 0 or end + 4 > self._max_head:
            self._on_head(self, None)
            return
        head, self.held = self.held[: end + 4], self.held[end + 4 :]
        self._on_head(self, head)

    def eof_received(self) -> bool | None:
        if self.splice is not None:
            return self.splice.eof_from(self)
        if self._reading_head:
            return None  # a head cut short: the transport closes
        self.ended = True
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._stop_timer()
        if self.splice is not None:
            self.splice.lost_from(self)
        elif self._reading_head:
            self._reading.discard(self)
            self.transport = None  # no handler holds this side: let go of the transport

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def splice_to(
        self,
        upstream: Upstream,
        budget: tunnels.Budget,
        *,
        answer: bytes,
        hello_timeout_s: float,
        idle_timeout_s: float,
        check: Callable[[str | None], None],
    ) -> asyncio.Future[tunnels.Relayed]:
        """Send ``answer`` (the ``200``), then join the client to ``upstream``: the future ends with
        the tunnel, or with the ClientHello's error (``check``'s, :class:`client_hello.NotClientHello`,
        ``TimeoutError`` or ``ConnectionError`` when none came)."""
        splice = Splice(self, upstream, budget, check, hello_timeout_s=hello_timeout_s, idle_timeout_s=idle_timeout_s)
        self.splice = upstream.splice = splice
        assert self.transport is not None
        if self.lost:
            splice.fail(ConnectionResetError("the client went"))
            return splice.done
        self.transport.write(answer)
        self.hand_over(self)
        return splice.done

    def streams(self, limit: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """The connection as streams from here on (plain HTTP), with the bytes read past the head."""
        assert self.transport is not None
        reader = asyncio.StreamReader(limit=limit, loop=self.loop)
        protocol = asyncio.StreamReaderProtocol(reader, loop=self.loop)
        protocol.connection_made(self.transport)
        self.transport.set_protocol(protocol)
        self.hand_over(protocol)
        return reader, asyncio.StreamWriter(self.transport, protocol, reader, self.loop)


class Upstream(_Side):
    """A tunnel's upstream connection."""

    __slots__ = ()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if self.splice is not None and self.splice.relaying:
            self.splice.from_upstream(data)
        else:
            self.hold(data)

    def eof_received(self) -> bool | None:
        if self.splice is not None and self.splice.relaying:
            return self.splice.eof_from(self)
        self.ended = True
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self.splice is not None:
            self.splice.lost_from(self)


class Splice:
    """A client and its upstream joined: first the ClientHello, then bytes both ways (see the module)."""

    __slots__ = (
        "_cut",
        "_down",
        "_due",
        "_eofs",
        "_finished",
        "_hello",
        "_hello_bytes",
        "_idle_timeout_s",
        "_timer",
        "_up",
        "check",
        "client",
        "done",
        "relaying",
        "upstream",
    )

    def __init__(
        self,
        client: Client,
        upstream: Upstream,
        budget: tunnels.Budget,
        check: Callable[[str | None], None],
        *,
        hello_timeout_s: float,
        idle_timeout_s: float,
    ) -> None:
        self.client, self.upstream, self.check = client, upstream, check
        self.done: asyncio.Future[tunnels.Relayed] = client.loop.create_future()
        self.relaying = False
        self._up, self._down = tunnels.Pump(budget), tunnels.Pump(budget)
        self._hello = b""
        self._hello_bytes = 0
        self._idle_timeout_s = idle_timeout_s
        # One timer for the tunnel's life: the ClientHello's deadline, then the idle check (see _tick).
        self._due = client.loop.time() + hello_timeout_s
        self._timer: asyncio.TimerHandle | None = client.loop.call_at(self._due, self._tick)
        self._eofs = 0
        self._cut: str | None = None
        self._finished = False

    def from_client(self, data: bytes) -> None:
        if self.relaying:
            self._move(self._up, data, self.upstream.transport)
            return
        self._hello += data
        try:
            found = client_hello.read(self._hello)
            if found is None:
                return  # more is on its way
            taken, name = found
            hello, rest = self._hello[:taken], self._hello[taken:]
            self.check(name)
        except Exception as exc:  # the handler judges it: check's refusal, or a broken ClientHello
            self.fail(exc)
            return
        self._relay(hello, rest)

    def _relay(self, hello: bytes, rest: bytes) -> None:
        upstream = self.upstream
        assert upstream.transport is not None
        self.relaying, self._hello, self._hello_bytes = True, b"", len(hello)  # not against the budget
        if upstream.lost:
            self._finish()
            return
        upstream.transport.write(hello)
        loop = self.client.loop
        if self._timer is not None and loop.time() + self._idle_timeout_s < self._due:  # an idle limit shorter
            self._timer.cancel()  # than what is left of the hello's deadline: check it first
            self._timer = loop.call_later(self._idle_timeout_s, self._tick)
        upstream.hand_over(upstream)
        if rest:
            self.from_client(rest)

    def from_upstream(self, data: bytes) -> None:
        self._move(self._down, data, self.client.transport)

    def _move(self, pump: tunnels.Pump, data: bytes, to: asyncio.Transport | None) -> None:
        try:
            pump.note(len(data))
        except tunnels.Spent:
            self.cut("byte budget spent")
            return
        if to is not None and not to.is_closing():
            to.write(data)

    def eof_from(self, side: _Side) -> bool:
        """A half-close: passed on to the other side; the tunnel ends when both sides sent theirs."""
        if not self.relaying:
            self.fail(ConnectionResetError("the client ended before its ClientHello"))
            return True
        self._eofs += 1
        if self._eofs == 2:
            self._finish()
            return True
        other = (self.upstream if side is self.client else self.client).transport
        if other is not None and not other.is_closing() and other.can_write_eof():
            with contextlib.suppress(OSError):
                other.write_eof()
        return True

    def lost_from(self, side: _Side) -> None:
        if not self.relaying and side is self.client:
            self.fail(ConnectionResetError("the client went before its ClientHello"))
        elif self.relaying or side is self.upstream:
            self._finish()

    def throttle(self, full: _Side, *, pause: bool) -> None:
        """``full``'s write buffer passed its high-water mark (``pause``) or drained: its peer's reading follows."""
        reader = (self.upstream if full is self.client else self.client).transport
        if reader is None or reader.is_closing():
            return
        if pause:
            reader.pause_reading()
        else:
            reader.resume_reading()

    def _tick(self) -> None:
        """The tunnel's timer: before the relay, the ClientHello is late; after it, nothing moved for
        ``idle_timeout_s`` cuts the tunnel, else the timer is set again for when it could have."""
        self._timer = None
        if not self.relaying:
            self.fail(TimeoutError("no ClientHello in time"))
            return
        idle = time.monotonic() - max(self._up.last, self._down.last)
        if idle >= self._idle_timeout_s:
            self.cut(f"idle for {self._idle_timeout_s:g} s")
        else:
            self._timer = self.client.loop.call_later(self._idle_timeout_s - idle, self._tick)

    def cut(self, reason: str | None = None) -> None:
        """End the tunnel now (``reason``: the limit that ended it)."""
        if reason is not None and self._cut is None:
            self._cut = reason
        self._finish()

    def fail(self, error: Exception) -> None:
        if not self.done.done():
            self.done.set_exception(error)
        self._finish()

    def _finish(self) -> None:
        if self._finished:
            return  # both sides' losses and the handler's close come after the end
        self._finished = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for transport in (self.client.transport, self.upstream.transport):
            if transport is not None:
                transport.close()
        if not self.done.done():
            self.done.set_result(tunnels.Relayed(self._up.moved + self._hello_bytes, self._down.moved, self._cut))
