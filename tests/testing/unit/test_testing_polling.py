"""``eventually`` and ``eventually_sync``: the one way tests poll until a state holds."""

from __future__ import annotations

import pytest

from ironflow.testing.polling import eventually, eventually_sync


async def test_eventually_returns_the_first_truthy_value_of_a_sync_check() -> None:
    polls = iter([0, [], "ready", "later"])
    assert await eventually(lambda: next(polls)) == "ready"


async def test_eventually_awaits_a_check_that_returns_an_awaitable() -> None:
    polls = iter([None, {"phase": "Running"}])

    async def check() -> dict[str, str] | None:
        return next(polls)

    assert await eventually(check) == {"phase": "Running"}


async def test_eventually_fails_naming_what_it_waited_for() -> None:
    with pytest.raises(AssertionError, match=r"^timed out after 0\.05s waiting for the pod to run$"):
        await eventually(lambda: False, limit_s=0.05, what="the pod to run")


async def test_eventually_describes_the_state_at_the_timeout_when_what_is_callable() -> None:
    seen: list[int] = []

    def check() -> bool:
        seen.append(len(seen))
        return False

    with pytest.raises(AssertionError) as caught:
        await eventually(check, limit_s=0.05, what=lambda: f"nothing; polled {len(seen)} times")
    assert str(caught.value).endswith(f"polled {len(seen)} times")
    assert len(seen) > 1


def test_eventually_sync_returns_the_first_truthy_value() -> None:
    polls = iter([0, "", 7, 8])
    assert eventually_sync(lambda: next(polls)) == 7


def test_eventually_sync_fails_naming_what_it_waited_for_after_a_last_poll() -> None:
    seen: list[int] = []

    def check() -> bool:
        seen.append(1)
        return False

    with pytest.raises(AssertionError, match=r"^timed out after 0\.05s waiting for every component to die$"):
        eventually_sync(check, limit_s=0.05, interval_s=0.01, what="every component to die")
    assert len(seen) > 1
