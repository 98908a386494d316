"""The warm pool's bookkeeping with members that are plain objects: it fills to its size within
its starts at once, hands each member out once, skips a dead one, retries a failed start after a
pause, and closing it cancels the starts under way and discards every member."""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field

import pytest

from ironflow.local.sessions import prewarm
from ironflow.sessions.pools import PoolPolicy


@dataclass
class Member:
    number: int
    alive: bool = True


@dataclass
class Sandboxes:
    """What the pool starts and discards, counted; a start waits on ``gate`` while it is closed."""

    gate: asyncio.Event = field(default_factory=asyncio.Event)
    numbers: itertools.count[int] = field(default_factory=itertools.count)
    running: int = 0
    most_at_once: int = 0
    discarded: list[int] = field(default_factory=list)
    failures: int = 0

    async def start(self) -> Member:
        self.running += 1
        self.most_at_once = max(self.most_at_once, self.running)
        try:
            await self.gate.wait()
            if self.failures:
                self.failures -= 1
                raise OSError("bwrap: no")
            return Member(next(self.numbers))
        finally:
            self.running -= 1

    async def discard(self, member: Member) -> None:
        self.discarded.append(member.number)


def _pool(sandboxes: Sandboxes, policy: PoolPolicy) -> prewarm.WarmPool[Member]:
    return prewarm.WarmPool(policy, start=sandboxes.start, discard=sandboxes.discard, alive=lambda m: m.alive)


async def test_it_fills_within_its_starts_at_once_and_hands_each_member_out_once() -> None:
    sandboxes = Sandboxes()
    pool = _pool(sandboxes, PoolPolicy(3, max_starts=2))
    pool.begin()
    for _ in range(5):
        await asyncio.sleep(0)
    assert sandboxes.running == 2
    sandboxes.gate.set()
    await asyncio.wait_for(pool.full(), 5)
    assert sandboxes.most_at_once == 2
    handed = [pool.take(), pool.take()]
    assert all(m is not None for m in handed)
    assert len({id(m) for m in handed}) == 2
    for _ in range(5):
        await asyncio.sleep(0)
    assert sandboxes.running == 0, "no start until the hand-out is done"
    pool.refill()
    await asyncio.wait_for(pool.full(), 5)
    assert not {id(m) for m in pool.waiting()} & {id(m) for m in handed}, "never taken back"
    waiting = sorted(m.number for m in pool.waiting())
    await pool.aclose()
    assert sorted(sandboxes.discarded) == waiting, "closing discards what waits, never what was handed out"


async def test_a_dead_member_is_skipped_and_discarded() -> None:
    sandboxes = Sandboxes()
    sandboxes.gate.set()
    pool = _pool(sandboxes, PoolPolicy(2))
    await asyncio.wait_for(pool.full(), 5)
    dead, live = pool.waiting()
    dead.alive = False
    assert pool.take() is live
    await asyncio.sleep(0)
    assert dead.number in sandboxes.discarded
    await pool.aclose()


async def test_a_failed_start_is_retried_after_the_pause() -> None:
    sandboxes = Sandboxes(failures=1)
    sandboxes.gate.set()
    pool = _pool(sandboxes, PoolPolicy(1, retry_after=0.01))
    await asyncio.wait_for(pool.full(), 5)
    assert len(pool.waiting()) == 1
    await pool.aclose()


async def test_closing_cancels_the_starts_and_discards_every_member() -> None:
    sandboxes = Sandboxes()
    sandboxes.gate.set()
    pool = _pool(sandboxes, PoolPolicy(2, max_starts=1))
    await asyncio.wait_for(pool.full(), 5)
    members = [m.number for m in pool.waiting()]
    sandboxes.gate.clear()
    assert pool.take() is not None
    pool.refill()
    for _ in range(5):
        await asyncio.sleep(0)
    assert sandboxes.running == 1, "a replacement is on its way"
    await pool.aclose()
    assert sandboxes.running == 0, "cancelled"
    assert sorted(sandboxes.discarded) == members[1:]
    assert pool.waiting() == ()
    assert pool.take() is None


@pytest.mark.parametrize(
    ("workspace", "agent", "egress", "isolation", "text"),
    [
        ("copy", False, False, "bwrap", None),
        ("git", False, False, "bwrap", "git workspace is cloned"),
        ("copy", False, False, "gvisor", "warm gvisor sandbox binds no workspace"),
        ("copy", False, False, "docker", "warm docker sandbox binds no workspace"),
        (None, False, False, "gvisor", None),
        (None, True, False, "bwrap", "agent"),
        ("copy", False, True, "bwrap", "egress"),
        (None, False, False, "bwrap", None),
    ],
)
def test_what_a_warm_sandbox_fits(
    workspace: str | None, agent: bool, egress: bool, isolation: str, text: str | None
) -> None:
    why = prewarm.warm_fits(workspace=workspace, agent=agent, egress=egress, isolation=isolation)
    assert why is None if text is None else text in (why or "")


def test_only_a_bubblewrap_warm_sandbox_binds_a_workspace() -> None:
    assert prewarm.binds_workspace("bwrap")
    assert not prewarm.binds_workspace("gvisor")
    assert not prewarm.binds_workspace("docker")
