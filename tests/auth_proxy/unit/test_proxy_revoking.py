"""auth_proxy.revoking: every token issued in the block is revoked when it ends, however it ends."""

from __future__ import annotations

import asyncio

import pytest
from tests.fakes.proxy_tokens import MemoryIssuer

from ironflow import egress, errors
from ironflow.auth_proxy import revoking
from ironflow.steps import AgentConfig
from ironflow.testing.polling import eventually


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


class Lines:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def log(self, stream: str, line: str) -> None:
        self.lines.append((stream, line))


POLICY = egress.policy_from_options(["pypi.org"])


async def test_an_egress_tokens_decisions_reach_its_sink_as_ironflow_lines_before_its_revoke() -> None:
    issuer, sink = MemoryIssuer(), Lines()
    issuer.notes["tok-000000000002"] = ["egress allowed pypi.org:443 (CONNECT): allowed by allow pypi.org"]
    async with revoking.held(issuer) as held:
        await held.step_token(AgentConfig("hi"), "run", "step", 2**31)
        await held.egress_token(POLICY, "run", "step", 2**31, notes=sink)
        await held.egress_token(POLICY, "run", "quiet", 2**31)  # no sink: its notes are not read
        assert sink.lines == []  # not before the block ends
    assert sink.lines == [("ironflow", "egress allowed pypi.org:443 (CONNECT): allowed by allow pypi.org")]
    assert issuer.notes_read == [("tok-000000000002", True)]  # read while the token was live
    assert issuer.live == set()


async def test_a_cancelled_step_reads_no_notes_and_revokes_every_token() -> None:
    issuer, sink = MemoryIssuer(), Lines()
    entered = asyncio.Event()

    async def step() -> None:
        async with revoking.held(issuer) as held:
            await held.egress_token(POLICY, "run", "step", 2**31, notes=sink)
            entered.set()
            await asyncio.Event().wait()

    task = asyncio.create_task(step())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert (issuer.notes_read, sink.lines, issuer.live) == ([], [], set())


async def test_a_hung_notes_read_is_given_up_and_the_token_still_revoked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(revoking, "EGRESS_NOTES_WAIT_S", 0.05)
    issuer, sink = MemoryIssuer(slow_notes=asyncio.Event()), Lines()
    async with revoking.held(issuer) as held:
        await held.egress_token(POLICY, "run", "step", 2**31, notes=sink)
    assert (len(issuer.notes_read), sink.lines, issuer.live) == (1, [], set())


async def test_a_cancel_while_the_notes_are_read_still_revokes_and_goes_on() -> None:
    issuer, sink = MemoryIssuer(slow_notes=asyncio.Event()), Lines()

    async def step() -> None:
        async with revoking.held(issuer) as held:
            await held.egress_token(POLICY, "run", "step", 2**31, notes=sink)

    task = asyncio.create_task(step())
    await eventually(lambda: issuer.notes_read)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert (sink.lines, issuer.live) == ([], set())


async def test_a_refused_issue_leaves_nothing_to_revoke_and_is_raised() -> None:
    with pytest.raises(errors.AuthProxyError, match="503"):
        async with revoking.held(
            MemoryIssuer(refuse=errors.AuthProxyError("auth proxy admin API answered 503: down", status=503))
        ) as held:
            await held.step_token(AgentConfig("hi"), "run", "step", 2**31)


async def test_issuing_without_an_issuer_is_one_line_naming_the_fix() -> None:
    with pytest.raises(errors.ConfigError, match="admin client"):
        async with revoking.held(None) as held:
            await held.step_token(AgentConfig("hi"), "run", "step", 2**31)
