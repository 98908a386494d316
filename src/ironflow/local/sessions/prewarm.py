"""Keeping local sessions warm: the pool of started sandboxes that wait to be handed out (I/O).

:class:`WarmPool` starts sandboxes in the background up to its
:class:`~ironflow.sessions.pools.PoolPolicy` (its size, a bound on starts at once), tears down
and replaces a member that waited past its idle expiry or died, and hands each member out once
(:meth:`WarmPool.take`): it never takes one back. The decisions are
:func:`~ironflow.sessions.pools.refill`'s; this module only acts on them. It knows nothing of
what a member is: the session table gives it what starts one, what tears one down and what
tells a live one (:mod:`~ironflow.local.sessions.local_sessions`). Closed, it leaves nothing:
every start under way is cancelled (its sandbox torn down), every member torn down.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any, Generic, TypeVar

from ironflow.sessions import pools

__all__ = ["WarmPool", "binds_workspace", "warm_fits"]

log = logging.getLogger("ironflow.local")

_M = TypeVar("_M")


def binds_workspace(isolation: str) -> bool:
    """Whether a warm sandbox of ``isolation`` binds an empty workspace directory at start (pure).

    Under bubblewrap the bind is of the directory's inode: the host fills it at hand-out and the
    sandbox sees the files at once. gVisor's gofer caches what it has seen of a mount (a directory
    filled behind it may look empty inside), and a Docker container's mounts are the daemon's: their
    warm sandboxes bind none.
    """
    return isolation == "bwrap"


def warm_fits(*, workspace: str | None, agent: bool, egress: bool, isolation: str) -> str | None:
    """Why a local session with these opens cold, or None when a warm sandbox fits it (pure).

    ``workspace``: None, ``"copy"`` (a host directory's copy, a fork's or a snapshot's files) or
    ``"git"`` (a clone). A warm sandbox is started with the provider's isolation, limits and
    environment and, where :func:`binds_workspace`, an empty workspace directory bound at
    ``/workspace``, which a session's copy fills at hand-out. An agent's proxy relay and an egress
    relay are sockets bound when the sandbox starts: attaching them after would mean entering the
    sandbox's mount namespace, so such a session opens cold, as does a git workspace (its clone runs
    in a sandbox of its own, seconds before the session's). A session's ``env``, TTL, idle timeout,
    labels and run go in at hand-out and fit any warm sandbox.
    """
    if agent:
        return "an agent session's proxy relay is bound when the sandbox starts"
    if egress:
        return "an egress relay is bound when the sandbox starts"
    if workspace == "git":
        return "a git workspace is cloned before the session's sandbox starts"
    if workspace is not None and not binds_workspace(isolation):
        return f"a warm {isolation} sandbox binds no workspace"
    return None


class WarmPool(Generic[_M]):
    """Sandboxes started ahead of the requests that take them.

    Args:
        policy: size, starts at once, idle expiry.
        start: starts one member (raising, it has left nothing behind).
        discard: tears one down (never raises for a member already gone).
        alive: whether a member can still be handed out.
    """

    def __init__(
        self,
        policy: pools.PoolPolicy,
        *,
        start: Callable[[], Coroutine[Any, Any, _M]],
        discard: Callable[[_M], Coroutine[Any, Any, None]],
        alive: Callable[[_M], bool],
    ) -> None:
        self.policy = policy
        self._start, self._discard, self._alive = start, discard, alive
        self._members: list[tuple[float, _M]] = []  # (ready since, member), oldest first
        self._starting: set[asyncio.Task[None]] = set()
        self._discarding: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._changed = asyncio.Event()
        self._keeper: asyncio.Task[None] | None = None
        self._failed_at: float | None = None
        self._closed = False

    def begin(self) -> None:
        """Start filling (in the running loop; again: nothing)."""
        if self._keeper is None and not self._closed and self.policy.size:
            self._keeper = asyncio.create_task(self._keep(), name="ironflow-session-pool")

    def waiting(self) -> tuple[_M, ...]:
        """The members that wait now, the next one handed out first."""
        return tuple(member for _, member in self._members)

    def take(self) -> _M | None:
        """A warm member, now out of the pool for good, or None. Its replacement starts at
        :meth:`refill`, which the caller calls once it has handed the member out: a start forks
        this process, and that must not delay the hand-out."""
        self.begin()
        while self._members:
            _, member = self._members.pop(0)  # the oldest: the nearest to its expiry
            if self._alive(member):
                return member
            self._drop(member)
        return None

    def refill(self) -> None:
        """Start what is missing now (after a hand-out)."""
        self._wake.set()

    async def full(self) -> None:
        """Until the pool holds its size (a member that ends meanwhile is replaced)."""
        self.begin()
        while len(self._members) < self.policy.size and not self._closed:
            self._changed.clear()
            await self._changed.wait()

    async def _keep(self) -> None:
        """Apply :func:`pools.refill` until closed: drop what expired or died, start what is missing."""
        while True:
            for member in [m for _, m in self._members if not self._alive(m)]:
                self._members = [(since, m) for since, m in self._members if m is not member]
                self._drop(member)
            now = time.monotonic()
            ready = [since for since, _ in self._members]
            plan = pools.refill(self.policy, ready, starting=len(self._starting), now=now, failed_at=self._failed_at)
            for index in sorted(plan.expired, reverse=True):
                _, member = self._members.pop(index)
                log.debug("a warm sandbox waited %.0fs: replaced", now - ready[index])
                self._drop(member)
            for _ in range(plan.starts):
                task = asyncio.create_task(self._start_one())
                self._starting.add(task)
                task.add_done_callback(self._starting.discard)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(plan.wake_in):
                    await self._wake.wait()

    async def _start_one(self) -> None:
        try:
            member = await self._start()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # logged and retried after a pause: a pool never fails a request
            self._failed_at = time.monotonic()
            log.warning("could not pre-warm a sandbox session: %s", exc)
        else:
            if self._closed:
                await self._discard(member)
                return
            self._members.append((time.monotonic(), member))
            self._failed_at = None
            self._changed.set()
        finally:
            self._starting.discard(asyncio.current_task())
            self._wake.set()  # the keeper counts the starts under way: this one is not, now

    def _drop(self, member: _M) -> None:
        task = asyncio.create_task(self._discard(member))
        self._discarding.add(task)
        task.add_done_callback(self._discarding.discard)
        self._changed.set()
        self._wake.set()

    async def aclose(self) -> None:
        """Stop refilling, cancel the starts under way, tear down every member; nothing is left."""
        self._closed = True
        self._changed.set()
        tasks = [t for t in (self._keeper, *self._starting) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        members, self._members = [m for _, m in self._members], []
        await asyncio.gather(*(self._discard(m) for m in members), *self._discarding, return_exceptions=True)
