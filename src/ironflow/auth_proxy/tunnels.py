"""Bytes between an egress client and its upstream, within the token's limits.

A tunnel (:mod:`splices`, on protocol callbacks) or a plain-HTTP exchange (:func:`relay`, on
streams) moves bytes until it ends or breaks a limit: nothing moved in either direction for
``idle_timeout_s`` (:class:`Watchdog`), or the token's byte budget is spent (the tunnel is cut,
the next one refused). :class:`TokenBudgets` holds each token's open tunnels and bytes in this
process (with ``--workers N``, per worker).

Throughput: reads of up to 256 KiB, and a write waits for ``drain`` only while the transport's
buffer is above its high-water mark (``drain`` returns at once otherwise); the idle watchdog
looks at a timestamp, so no timer is re-armed per chunk.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

__all__ = [
    "READ_BYTES",
    "Budget",
    "Pump",
    "Relayed",
    "Spent",
    "TokenBudgets",
    "Watchdog",
    "copy_chunked",
    "copy_exactly",
    "relay",
]

READ_BYTES: Final = 256 * 1024
_PRUNE_AT: Final = 4096


class Spent(Exception):
    """The token's byte budget ran out in the middle of a tunnel."""


@dataclass
class Budget:
    """One token's usage in this process."""

    expires_at: int
    max_bytes: int | None
    open: int = 0
    bytes: int = 0

    def spend(self, count: int) -> None:
        self.bytes += count
        if self.max_bytes is not None and self.bytes > self.max_bytes:
            raise Spent

    @property
    def spent(self) -> bool:
        return self.max_bytes is not None and self.bytes >= self.max_bytes


class TokenBudgets:
    """Open tunnels and bytes per token id; expired tokens are forgotten."""

    def __init__(self, *, max_tunnels: int, max_bytes: int | None) -> None:
        self.max_tunnels = max_tunnels
        self.max_bytes = max_bytes
        self._budgets: dict[str, Budget] = {}

    def acquire(self, grant_id: str, expires_at: int) -> Budget | str:
        """The token's budget with one more tunnel open, or why not (the 429's reason)."""
        if len(self._budgets) >= _PRUNE_AT:
            now = int(time.time())
            for stale in [key for key, b in self._budgets.items() if b.expires_at <= now and not b.open]:
                del self._budgets[stale]
        budget = self._budgets.get(grant_id)
        if budget is None:
            budget = self._budgets[grant_id] = Budget(expires_at, self.max_bytes)
        if budget.open >= self.max_tunnels:
            return f"{self.max_tunnels} tunnels already open for this token"
        if budget.spent:
            return f"the token's {self.max_bytes} bytes are spent"
        budget.open += 1
        return budget

    def release(self, budget: Budget) -> None:
        budget.open -= 1


@dataclass
class Relayed:
    """Bytes moved each way, and why the relay ended when a limit ended it."""

    sent: int = 0
    received: int = 0
    cut: str | None = None


async def _write(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(data)
    transport = writer.transport
    if transport.get_write_buffer_size() > transport.get_write_buffer_limits()[1]:
        await writer.drain()


class Pump:
    """One direction of a relay; ``moved`` counts its bytes, ``last`` when it last moved any."""

    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self.moved = 0
        self.last = time.monotonic()

    def note(self, count: int) -> None:
        self.moved += count
        self.last = time.monotonic()
        self.budget.spend(count)

    async def copy(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Until EOF, then pass the half-close on."""
        while data := await reader.read(READ_BYTES):
            self.note(len(data))
            await _write(writer, data)
        if writer.can_write_eof():
            with contextlib.suppress(OSError):
                writer.write_eof()


async def copy_exactly(pump: Pump, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, count: int) -> None:
    """``count`` bytes of a request body (its Content-Length), no more."""
    while count > 0:
        data = await reader.read(min(count, READ_BYTES))
        if not data:
            raise asyncio.IncompleteReadError(b"", count)
        count -= len(data)
        pump.note(len(data))
        await _write(writer, data)


async def copy_chunked(pump: Pump, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A chunked request body through its last chunk and trailers, no further (a second request
    on the connection is never relayed); a bad chunk size raises ``ValueError``."""
    while True:
        line = await reader.readuntil(b"\r\n")
        size_text = line[:-2].split(b";", 1)[0].strip()
        if not size_text or len(size_text) > 16 or not all(c in b"0123456789abcdefABCDEF" for c in size_text):
            raise ValueError("bad chunk size")
        pump.note(len(line))
        await _write(writer, line)
        size = int(size_text, 16)
        if size == 0:
            while (trailer := await reader.readuntil(b"\r\n")) != b"\r\n":
                await _write(writer, trailer)
            await _write(writer, b"\r\n")
            return
        await copy_exactly(pump, reader, writer, size)
        if await reader.readexactly(2) != b"\r\n":
            raise ValueError("bad chunk end")
        await _write(writer, b"\r\n")


class Watchdog:
    """Cuts a relay whose pumps moved nothing for ``idle_timeout_s``: one timer re-armed only when
    it fires (a timestamp per chunk, no timer per chunk)."""

    def __init__(self, pumps: tuple[Pump, Pump], idle_timeout_s: float, cut: Callable[[str], None]) -> None:
        self._pumps, self._idle, self._cut = pumps, idle_timeout_s, cut
        self._timer = asyncio.get_running_loop().call_later(idle_timeout_s, self._check)

    def _check(self) -> None:
        idle = time.monotonic() - max(p.last for p in self._pumps)
        if idle >= self._idle:
            self._cut(f"idle for {self._idle:g} s")
        else:
            self._timer = asyncio.get_running_loop().call_later(self._idle - idle, self._check)

    def stop(self) -> None:
        self._timer.cancel()


async def relay(
    client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    budget: Budget,
    *,
    idle_timeout_s: float,
    body: int | bool,
) -> Relayed:
    """Relay a plain-HTTP exchange until the upstream's answer ends, or a limit cuts it: ``body``
    is the request body's length, ``True`` a chunked one, ``False`` none. Neither writer is
    closed here."""
    up, down = Pump(budget), Pump(budget)
    outcome = Relayed()
    if body is True:
        upload = copy_chunked(up, client[0], upstream[1])
    else:
        upload = copy_exactly(up, client[0], upstream[1], int(body))
    loop = asyncio.get_running_loop()
    tasks = (loop.create_task(upload), loop.create_task(down.copy(upstream[0], client[1])))

    def cut(reason: str | None = None) -> None:
        if reason is not None and outcome.cut is None:
            outcome.cut = reason
        for task in tasks:
            task.cancel()

    def ended(task: asyncio.Task[None]) -> None:
        error = None if task.cancelled() else task.exception()
        if isinstance(error, Spent):
            cut("byte budget spent")
        elif error is not None or task is tasks[1]:
            cut()  # a broken direction, or the end of a forwarded answer

    for task in tasks:
        task.add_done_callback(ended)
    watchdog = Watchdog((up, down), idle_timeout_s, cut)
    try:
        await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        watchdog.stop()
        cut()
    outcome.sent, outcome.received = up.moved, down.moved
    return outcome
