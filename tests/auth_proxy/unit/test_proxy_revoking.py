"""auth_proxy.revoking: every token issued in the block is revoked when it ends, however it ends."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ironflow import egress, errors
from ironflow.auth_proxy import revoking
from ironflow.secrets import Secret
from ironflow.steps import AgentConfig


class MemoryIssuer:
    """Issues numbered tokens; ``slow_revoke`` gives a second cancel time to land mid-revoke."""

    def __init__(self, *, fail: bool = False, slow_revoke: asyncio.Event | None = None) -> None:
        self.fail, self.slow_revoke = fail, slow_revoke
        self.live: set[str] = set()
        self.revoking = asyncio.Event()

    async def issue(
        self,
        run_id: str,
        step: str,
        expires_at: int,
        *,
        credential: Any = None,
        trace_context: str | None = None,
        egress: Any = None,
    ) -> tuple[str, Secret]:
        if self.fail:
            raise errors.AuthProxyError("auth proxy admin API answered 503: down", status=503)
        token_id = f"tok-{len(self.live) + 1}"
        self.live.add(token_id)
        return token_id, Secret(f"ifap_{token_id}")

    async def revoke(self, token_id: str) -> bool:
        self.revoking.set()
        if self.slow_revoke is not None:
            await self.slow_revoke.wait()
        self.live.discard(token_id)
        return True

    async def revoke_run(self, run_id: str) -> int:
        return 0


async def test_every_token_of_the_block_is_revoked_when_it_ends() -> None:
    issuer = MemoryIssuer()
    async with revoking.held(issuer) as held:
        await held.step_token(AgentConfig("hi"), "run", "step", 2**31)
        await held.step_token(AgentConfig("hi"), "run", "other", 2**31)
        await held.egress_token(egress.policy_from_options(["pypi.org"]), "run", "step", 2**31)
        assert len(issuer.live) == 3
    assert issuer.live == set()


async def test_a_failing_block_still_revokes_and_its_error_goes_on() -> None:
    issuer = MemoryIssuer()

    async def failing_step() -> None:
        async with revoking.held(issuer) as held:
            await held.step_token(AgentConfig("hi"), "run", "step", 2**31)
            raise errors.ProcessFailed(1, "boom")

    with pytest.raises(errors.ProcessFailed):
        await failing_step()
    assert issuer.live == set()


async def test_a_second_cancel_during_the_revokes_waits_for_them_then_goes_on() -> None:
    release = asyncio.Event()
    issuer = MemoryIssuer(slow_revoke=release)

    async def step() -> None:
        async with revoking.held(issuer) as held:
            await held.step_token(AgentConfig("hi"), "run", "a", 2**31)
            await held.step_token(AgentConfig("hi"), "run", "b", 2**31)
            await asyncio.Event().wait()

    task = asyncio.create_task(step())
    await asyncio.sleep(0)
    task.cancel()
    await issuer.revoking.wait()
    task.cancel()  # again, while the first revoke is under way
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert issuer.live == set()  # both, not only the one under way


async def test_a_refused_issue_leaves_nothing_to_revoke_and_is_raised() -> None:
    with pytest.raises(errors.AuthProxyError, match="503"):
        async with revoking.held(MemoryIssuer(fail=True)) as held:
            await held.step_token(AgentConfig("hi"), "run", "step", 2**31)


async def test_issuing_without_an_issuer_is_one_line_naming_the_fix() -> None:
    with pytest.raises(errors.ConfigError, match="admin client"):
        async with revoking.held(None) as held:
            await held.step_token(AgentConfig("hi"), "run", "step", 2**31)
