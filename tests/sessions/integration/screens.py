"""A running command's output read as a terminal's screen: wait for a piece of it (a test helper)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from ironflow.sessions import Exit, Output
from ironflow.sessions.commands import CommandHandle

__all__ = ["WAIT_S", "Screen", "drive_the_repl"]

#: How long a test waits for the text it expects from the terminal.
WAIT_S = 15.0


class Screen:
    """A command's output as it comes, read on a task; :meth:`until` waits for a piece of it."""

    def __init__(self, handle: CommandHandle) -> None:
        self.text = ""
        self.end: Exit | None = None
        self._changed = asyncio.Event()
        self._task = asyncio.create_task(self._read(handle))

    async def _read(self, handle: CommandHandle) -> None:
        try:
            async for event in handle.events():
                if isinstance(event, Output):
                    self.text += event.text
                else:
                    self.end = event
                self._changed.set()
        finally:  # a stream that broke off wakes the waiter, which says so (never a silent wait)
            self._changed.set()

    async def until(self, wanted: str, *, after: int = 0) -> int:
        """Where ``wanted`` ends in the output past ``after``, once it came."""
        try:
            async with asyncio.timeout(WAIT_S):
                while (at := self.text.find(wanted, after)) < 0:
                    if self.end is not None:
                        raise AssertionError(f"ended ({self.end}) before {wanted!r}: {self.text!r}")
                    if self._task.done():
                        self._task.result()  # the stream's own error, if it broke off
                        raise AssertionError(f"the stream ended with no exit before {wanted!r}: {self.text!r}")
                    self._changed.clear()
                    await self._changed.wait()
        except TimeoutError:
            raise AssertionError(f"no {wanted!r} in {WAIT_S:g} s: {self.text!r}") from None
        return at + len(wanted)

    async def exit(self) -> Exit:
        async with asyncio.timeout(WAIT_S):
            await self._task
        assert isinstance(self.end, Exit), self.text
        return self.end


async def drive_the_repl(
    handle: CommandHandle,
    *,
    keys: CommandHandle | None = None,
    interrupt: Callable[[], Awaitable[object]] | None = None,
) -> None:
    """The ``python3 -q`` REPL ``handle`` runs in a 90x20 pty, typed into (through ``keys``, another
    handle of it, if given): ``1+1`` answers 2, a resize is seen from inside, an interrupt of a
    sleep (Ctrl-C unless ``interrupt`` says how) is a KeyboardInterrupt and the REPL lives on, and
    ``exit(5)`` is its exit."""
    keys = keys or handle
    screen = Screen(handle)
    at = await screen.until(">>> ")
    await keys.send_stdin("1+1\r")
    at = await screen.until("\r\n2\r\n>>> ", after=at)
    await keys.send_stdin("import os, time; os.get_terminal_size()\r")
    at = await screen.until("os.terminal_size(columns=90, lines=20)", after=at)
    await keys.resize(132, 43)
    await keys.send_stdin("os.get_terminal_size()\r")
    at = await screen.until("os.terminal_size(columns=132, lines=43)", after=at)
    await keys.send_stdin("time.sleep(60)\r")
    await asyncio.sleep(0.5)  # the line read, the sleep begun
    await (interrupt() if interrupt is not None else keys.send_stdin("\x03"))
    at = await screen.until("KeyboardInterrupt", after=at)
    await keys.send_stdin("6*7\r")
    await screen.until("\r\n42\r\n", after=at)
    await keys.send_stdin("exit(5)\r")
    assert await screen.exit() == Exit(5, False)
