"""The pool's policy and its one decision: which warm sessions expire, how many start, when to look again."""

from __future__ import annotations

import doctest

import pytest

from ironflow import errors
from ironflow.sessions import pools
from ironflow.sessions.pools import PoolPolicy, Refill, refill


def test_the_docstring_examples_run() -> None:
    assert doctest.testmod(pools).failed == 0


def test_an_empty_pool_starts_no_more_than_its_starts_at_once() -> None:
    assert refill(PoolPolicy(5, max_starts=2), [], starting=0, now=0.0) == Refill((), 2, None)
    assert refill(PoolPolicy(5, max_starts=2), [], starting=1, now=0.0) == Refill((), 1, None)
    assert refill(PoolPolicy(5, max_starts=2), [], starting=2, now=0.0) == Refill((), 0, None)


def test_starts_under_way_count_toward_the_size() -> None:
    assert refill(PoolPolicy(2, max_starts=4), [0.0], starting=1, now=1.0).starts == 0
    assert refill(PoolPolicy(3, max_starts=4), [0.0], starting=1, now=1.0).starts == 1


def test_a_full_pool_wakes_at_its_first_expiry() -> None:
    plan = refill(PoolPolicy(2, idle_expiry=100), [10.0, 50.0], starting=0, now=60.0)
    assert plan == Refill((), 0, 50.0)


def test_expired_members_are_dropped_and_replaced() -> None:
    plan = refill(PoolPolicy(3, max_starts=3, idle_expiry=100), [0.0, 20.0, 90.0], starting=0, now=120.0)
    assert plan == Refill((0, 1), 2, 70.0)


def test_after_a_failed_start_nothing_starts_until_the_pause_is_over() -> None:
    policy = PoolPolicy(1, retry_after=5)
    assert refill(policy, [], starting=0, now=12.0, failed_at=10.0) == Refill((), 0, 3.0)
    assert refill(policy, [], starting=0, now=15.0, failed_at=10.0).starts == 1


@pytest.mark.parametrize(
    ("fields", "text"),
    [
        ({"size": -1}, "0 or more"),
        ({"size": 1, "max_starts": 0}, "at least one"),
        ({"size": 1, "idle_expiry": 0}, "idle expiry"),
        ({"size": 1, "workspaces": 2}, "workspaces are 0 to its size"),
        ({"size": 1, "workspaces": -1}, "workspaces are 0 to its size"),
    ],
)
def test_a_bad_policy_names_its_field(fields: dict[str, float], text: str) -> None:
    with pytest.raises(errors.ConfigError, match=text):
        PoolPolicy(**fields)  # type: ignore[arg-type]
