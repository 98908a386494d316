"""A running command's output read as a terminal's screen: wait for a piece of it (a test helper)."""

from __future__ import annotations

import asyncio

from ironflow.sessions import Exit, Output
from ironflow.sessions.commands import CommandHandle

__all__ = ["WAIT_S", "Screen"]

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
        async for event in handle.events():
            if isinstance(event, Output):
                self.text += event.text
            else:
                self.end = event
            self._changed.set()

    async def until(self, wanted: str, *, after: int = 0) -> int:
        """Where ``wanted`` ends in the output past ``after``, once it came."""
        async with asyncio.timeout(WAIT_S):
            while (at := self.text.find(wanted, after)) < 0:
                if self.end is not None:
                    raise AssertionError(f"ended ({self.end}) before {wanted!r}: {self.text!r}")
                self._changed.clear()
                await self._changed.wait()
        return at + len(wanted)

    async def exit(self) -> Exit:
        async with asyncio.timeout(WAIT_S):
            await self._task
        assert isinstance(self.end, Exit), self.text
        return self.end
