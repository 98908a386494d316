"""The requests of a cluster backend's held sessions: resume on a request, pause when idle (I/O: watchers).

A cluster session pauses by letting its pod go (agent-sandbox's ``operatingMode``,
:mod:`ironflow.agent_sandbox.claim_pauses`; a Kubernetes session's workspace kept in the snapshot
store, :mod:`ironflow.k8s.sessions.pauses`); how is the backend's, given here as its ``suspend``
and ``resume``. What is the same is kept here: every request to a held session (a handle's, or
one a server forwards) goes through :meth:`Suspends.active`, which resumes a paused session
first and counts it busy until the request's answer is done; a session opened with
``idle_suspend`` is watched, and with no request for that long and none under way it is paused.
A pause and a resume of one session never overlap: each runs under the session's lock here
(:meth:`Suspends.pause`, :meth:`Suspends.resume`), and the backend says what it did with
:meth:`Suspends.mark`. A session not held here is not followed: its requests pass through.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from dataclasses import dataclass, field
from typing import Final

from ironflow import errors
from ironflow.sessions.values import SessionInfo

__all__ = ["Step", "Suspends"]

log = logging.getLogger("ironflow.k8s")

#: How often an idle watcher looks at its session at most.
_CHECK_S: Final = 1.0

#: The backend's pause or resume of one session, run under its lock here (twice: no error).
Step = Callable[[str], Awaitable[SessionInfo]]


@dataclass(eq=False)
class _Activity:
    """One held session's requests as seen here, and its idle watcher."""

    idle_suspend: float | None
    last: float = field(default_factory=time.monotonic)
    busy: int = 0
    paused: bool = False
    watcher: asyncio.Task[None] | None = None


class Suspends:
    """The requests and idle watchers of the sessions one backend holds here.

    Args:
        held: the ids of the sessions held here now (a watcher ends once its session is not).
        pause: the backend's pause of one session (:data:`Step`).
        resume: the backend's resume of one.
    """

    def __init__(self, held: Callable[[], Collection[str]], pause: Step, resume: Step) -> None:
        self._held, self._pause, self._resume = held, pause, resume
        self._records: dict[str, _Activity] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def track(self, session_id: str, idle_suspend: float | None) -> None:
        """Follow a held session's requests; with ``idle_suspend``, pause it once idle that long."""
        held = self._held()
        for gone, old in builtins.list(self._records.items()):  # ended by their TTL; a watcher ends its own
            if gone not in held and old.watcher is None:
                self._records.pop(gone)
                self._locks.pop(gone, None)
        record = self._records[session_id] = _Activity(idle_suspend)
        if idle_suspend is not None:
            record.watcher = asyncio.create_task(self._watch(session_id, record, idle_suspend))

    async def forget(self, session_id: str) -> None:
        """Stop following a session (it is closed or let go)."""
        record = self._records.pop(session_id, None)
        self._locks.pop(session_id, None)
        if record is not None and record.watcher is not None:
            record.watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await record.watcher

    async def aclose(self) -> None:
        for session_id in builtins.list(self._records):
            await self.forget(session_id)

    def _lock(self, session_id: str) -> asyncio.Lock:
        return self._locks.setdefault(session_id, asyncio.Lock())

    async def pause(self, session_id: str) -> SessionInfo:
        """The backend's pause, under the session's lock."""
        async with self._lock(session_id):
            return await self._pause(session_id)

    async def resume(self, session_id: str) -> SessionInfo:
        """The backend's resume, under the session's lock."""
        async with self._lock(session_id):
            return await self._resume(session_id)

    async def _pause_if_idle(self, session_id: str, record: _Activity, limit: float) -> bool:
        """Pause the session if it is still idle once the lock is taken (a request may have come)."""
        async with self._lock(session_id):
            if not self._idle(record, limit):
                return False
            await self._pause(session_id)
            return True

    def mark(self, session_id: str, *, paused: bool) -> None:
        """Record a pause (from now a request waits for the lock, then resumes) or a resume."""
        if (record := self._records.get(session_id)) is not None:
            record.paused = paused
            if not paused:
                record.last = time.monotonic()

    @contextlib.asynccontextmanager
    async def active(self, session_id: str) -> AsyncIterator[None]:
        """A request under way: a paused session resumed first, kept from idle suspend until the block ends."""
        record = self._records.get(session_id)
        if record is None:  # not held here: the backend's connect resumes one found paused
            yield
            return
        record.busy += 1  # before the resume: an idle pause under way sees it, and this resume follows it
        record.last = time.monotonic()
        try:
            if record.paused:
                await self.resume(session_id)
            yield
        finally:
            record.busy -= 1
            record.last = time.monotonic()

    def _idle(self, record: _Activity, limit: float) -> bool:
        return not record.paused and not record.busy and time.monotonic() - record.last >= limit

    async def _watch(self, session_id: str, record: _Activity, limit: float) -> None:
        """Pause the session each time it sits idle past ``limit``, until it is no longer held here."""
        while session_id in self._held():
            if self._idle(record, limit):
                try:
                    if await self._pause_if_idle(session_id, record, limit):
                        log.info("sandbox session %s suspended after %.0fs idle", session_id, limit)
                except errors.IronflowError as exc:  # a failed suspend leaves it running: said, not fatal
                    log.warning("sandbox session %s: idle suspend failed: %s", session_id, exc.message)
            since = time.monotonic() - record.last
            await asyncio.sleep(_CHECK_S if record.paused else max(0.05, min(limit - since, _CHECK_S)))
        if self._records.get(session_id) is record:  # ended by its TTL, not closed here
            del self._records[session_id]
            self._locks.pop(session_id, None)
