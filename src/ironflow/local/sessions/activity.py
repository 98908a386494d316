"""A local session's requests, seen from the host: resume on a request, pause when idle, its deadline (I/O).

Every request to a session (through a handle of :class:`~ironflow.sessions.client.RuntimeClient`,
or forwarded by ``sandbox serve``) goes through :meth:`SessionActivity.active`: a paused session is
resumed first, so a request never waits on frozen processes, and the block counts as busy until
the request's answer (a command's whole stream) is done. With ``idle_suspend``, a session with no
request for that long and none under way is paused (:mod:`~ironflow.local.sessions.freezer`); the
next request resumes it. The deadline is the session's TTL, moved by ``extend``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from ironflow.local.sessions.freezer import Freezer

__all__ = ["SessionActivity"]

log = logging.getLogger("ironflow.local")


@dataclass(eq=False)
class SessionActivity:
    """The host's record of one session's requests, its freezer and its deadline."""

    session_id: str
    freezer: Freezer
    idle_suspend: float | None = None
    #: The snapshot the session was opened from (a snapshot in use is not removed).
    base_snapshot: str | None = None
    last: float = field(default_factory=time.monotonic)
    busy: int = 0
    #: The ``asyncio.timeout`` of the session's watcher: ``extend`` reschedules it.
    deadline: asyncio.Timeout | None = None
    watcher: asyncio.Task[None] | None = None

    def extend(self, ttl: float) -> None:
        """The deadline now ``ttl`` seconds from now."""
        try:
            assert self.deadline is not None  # set at open
            self.deadline.reschedule(asyncio.get_running_loop().time() + ttl)
        except RuntimeError:  # its watcher has not begun: it begins with this one
            self.deadline = asyncio.timeout(ttl)

    @contextlib.asynccontextmanager
    async def active(self) -> AsyncIterator[None]:
        """A request under way: the session resumed for it, and kept from idle suspend until its end."""
        self.busy += 1  # counted before the resume: an idle pause under way sees it and the resume follows it
        self.last = time.monotonic()
        try:
            await self.freezer.resume()
            yield
        finally:
            self.busy -= 1
            self.last = time.monotonic()

    def _idle(self) -> bool:
        return self.idle_suspend is not None and not self.busy and time.monotonic() - self.last >= self.idle_suspend

    def start(self, *, idle_end: float | None = None, kill: Callable[[], Awaitable[None]] | None = None) -> None:
        """Begin watching for idleness (with ``idle_suspend``). ``idle_end``: with it, the host ends
        the session (``kill``) after that long without a request, paused or not; the runtime's own
        idle timeout would count a pause as idle and end the session the moment it resumes."""
        if self.idle_suspend is not None:
            self.watcher = asyncio.create_task(self._watch(self.idle_suspend, idle_end, kill))

    async def _watch(self, idle: float, idle_end: float | None, kill: Callable[[], Awaitable[None]] | None) -> None:
        while True:
            since = time.monotonic() - self.last
            if idle_end is not None and kill is not None and not self.busy and since >= idle_end:
                log.info("sandbox session %s ended after %.0fs idle", self.session_id, idle_end)
                await kill()  # its watcher then tears it down
                return
            if not self.freezer.paused:
                try:
                    if await self.freezer.pause(when=self._idle):
                        log.info("sandbox session %s suspended after %.0fs idle", self.session_id, idle)
                except Exception as exc:  # a failed freeze leaves the session running: said, not fatal
                    log.warning("sandbox session %s: idle suspend failed: %s", self.session_id, exc)
            until = [1.0] if self.freezer.paused else [idle - since, 1.0]
            if idle_end is not None:
                until.append(idle_end - since)
            await asyncio.sleep(max(0.05, min(until)))

    async def end(self, kill: Callable[[], Awaitable[None]]) -> None:
        """The session's end: no more idle watch; a paused one is killed (SIGKILL reaches frozen
        and stopped tasks) and only then let go, so nothing of it runs again."""
        if self.watcher is not None:
            self.watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.watcher
        if self.freezer.paused:
            await kill()
            await self.freezer.resume()
