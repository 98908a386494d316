"""The warm pool's demand decision: bursts raise it at once, idleness lowers it a step per cooldown."""

from __future__ import annotations

import pytest
from tests.fakes.sandbox_cli import run_sandbox

from ironflow import errors
from ironflow.agent_sandbox import pool_scaler
from ironflow.agent_sandbox.demand import Decision, DemandPolicy, PoolReading, decide

POLICY = DemandPolicy(min_replicas=1, max_replicas=20, spare=1, ready_s=30, window_s=60, cooldown_s=300)
NOW = 10_000.0


def _decide(replicas: int, ready: int, arrivals: tuple[float, ...] = (), *, last: float | None = None) -> Decision:
    return decide(POLICY, PoolReading(replicas, ready, arrivals, last), now=NOW)


def test_a_burst_raises_the_pool_to_the_claims_expected_while_a_member_starts_plus_spare() -> None:
    """12 claims in the last minute, 30 s to get ready: 6 in flight, +1 spare = 7, at once."""
    burst = tuple(NOW - i for i in range(12))
    decision = _decide(1, 1, burst, last=NOW - 1)  # a change a second ago: a raise never waits
    assert decision.replicas == 7
    assert decision.per_minute == 12.0
    assert decision.reason == "up to 7: 12.0 claims/min x 30s ready time = 6 in flight + 1 spare"
    assert decision.changes(PoolReading(1, 1))


def test_a_steady_rate_holds_the_pool_where_it_is() -> None:
    """4 claims a minute x 30 s = 2 in flight + 1 spare: a pool of 3 holds, whatever its cooldown."""
    steady = tuple(NOW - 15 * i for i in range(4))
    decision = _decide(3, 3, steady, last=NOW - 10_000)
    assert decision.replicas == 3
    assert decision.reason.startswith("hold 3: 4.0 claims/min need 3")
    assert not decision.changes(PoolReading(3, 3))


def test_claims_older_than_the_window_are_no_demand() -> None:
    old = tuple(NOW - 61 - i for i in range(50))
    assert _decide(1, 1, old).per_minute == 0.0
    assert _decide(1, 1, old).replicas == 1


def test_an_idle_pool_steps_down_one_member_per_cooldown_never_below_min() -> None:
    assert _decide(5, 5, last=NOW - 299).replicas == 5  # cooldown not passed
    assert "cooldown 1s left" in _decide(5, 5, last=NOW - 299).reason
    down = _decide(5, 5, last=NOW - 300)
    assert down.replicas == 4
    assert down.reason == "down to 4: 0.0 claims/min need 1 (cooldown 300s passed)"
    assert _decide(1, 1, last=NOW - 10_000).replicas == 1  # min holds
    assert _decide(2, 2, last=None).replicas == 1  # no change known: the cooldown is long over


def test_a_step_down_never_goes_below_what_the_demand_needs() -> None:
    policy = DemandPolicy(min_replicas=1, max_replicas=20, spare=1, ready_s=30, window_s=60, step_down=5)
    steady = tuple(NOW - 15 * i for i in range(4))  # needs 3
    assert decide(policy, PoolReading(7, 7, steady, NOW - 10_000), now=NOW).replicas == 3


def test_ready_members_short_of_the_need_are_never_scaled_away() -> None:
    decision = _decide(5, 0, last=NOW - 10_000)
    assert decision.replicas == 5
    assert decision.reason == "hold 5: 0 ready, short of 1 (0.0 claims/min)"
    assert _decide(5, 1, last=NOW - 10_000).replicas == 4  # one ready covers the need of one


def test_spare_short_raises_even_without_claims() -> None:
    policy = DemandPolicy(min_replicas=0, max_replicas=5, spare=2)
    assert decide(policy, PoolReading(1, 1), now=NOW).replicas == 2
    idle = DemandPolicy(min_replicas=0, max_replicas=5, spare=0)
    assert decide(idle, PoolReading(1, 1), now=NOW).replicas == 0  # min 0, no spare: the pool may empty


def test_bounds_cap_the_raise_and_pull_a_pool_outside_them_back_in() -> None:
    flood = tuple(NOW for _ in range(500))
    capped = _decide(3, 3, flood)
    assert capped.replicas == 20
    assert capped.reason.startswith("up to 20 (max): 500.0 claims/min")
    assert _decide(25, 25).replicas == 20  # above max: down at once, no cooldown
    assert _decide(25, 25).reason == "down to 20: above max"
    assert _decide(0, 0, last=NOW).reason == "up to 1: below min 1"


def test_an_api_server_clock_ahead_counts_its_claims_as_now() -> None:
    """Arrivals from the future (a server clock ahead) are claims of this instant, not ignored."""
    ahead = tuple(NOW + 120 + i for i in range(6))
    assert _decide(1, 1, ahead).per_minute == 6.0
    assert _decide(1, 1, ahead).replicas == 4


def test_a_clock_stepped_back_keeps_the_cooldown_running() -> None:
    """A last change "in the future" (our clock went back) is not a passed cooldown."""
    decision = _decide(5, 5, last=NOW + 50)
    assert decision.replicas == 5
    assert "cooldown 300s left" in decision.reason


def test_listed_claims_are_placed_by_their_age_on_the_wall_clock() -> None:
    claim = {"metadata": {"creationTimestamp": "1970-01-01T00:01:40Z"}}  # created at wall 100
    assert pool_scaler.arrival(claim, mono_now=50.0, wall_now=130.0) == 20.0  # 30 s old
    assert pool_scaler.arrival(claim, mono_now=50.0, wall_now=40.0) == 50.0  # server ahead: now
    assert pool_scaler.arrival({"metadata": {}}, mono_now=50.0, wall_now=40.0) == 50.0


def test_a_claims_pool_is_its_warm_pool_ref() -> None:
    assert pool_scaler.claims_pool({"spec": {"warmPoolRef": {"name": "p"}}}) == "p"
    assert pool_scaler.claims_pool({"spec": {}}) is None


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        (DemandPolicy(min_replicas=3, max_replicas=2), "min 3 is above max 2"),
        (DemandPolicy(min_replicas=-1, max_replicas=2), "min -1 is below 0"),
        (DemandPolicy(min_replicas=1, max_replicas=2, spare=-1), "spare -1 is below 0"),
        (DemandPolicy(min_replicas=1, max_replicas=2, window_s=0), "window 0s must be more than 0 seconds"),
        (DemandPolicy(min_replicas=1, max_replicas=2, step_down=0), "step down 0 must be at least 1"),
    ],
)
def test_settings_that_cannot_scale_are_refused_with_one_line(policy: DemandPolicy, message: str) -> None:
    with pytest.raises(errors.ConfigError) as info:
        policy.validate()
    assert str(info.value) == f"invalid pool scaler: {message}"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--min", "3", "--max", "2"), "invalid pool scaler: min 3 is above max 2"),
        (("--cooldown", "soon"), "--cooldown: "),
        (("--spare", "-1"), "invalid pool scaler: spare -1 is below 0"),
        (("-n", "Bad_NS"), "Bad_NS"),
    ],
)
def test_pool_scaler_refuses_bad_input_with_one_line_and_exit_2(args: tuple[str, ...], message: str) -> None:
    code, out, err = run_sandbox("pool-scaler", "--pool", "p", *args)
    assert code == 2
    assert out == ""
    assert message in err
    assert len(err.strip().splitlines()) == 1


def test_pool_scaler_refuses_a_bad_pool_name() -> None:
    code, _, err = run_sandbox("pool-scaler", "--pool", "No/Pool")
    assert code == 2
    assert "invalid pool name 'No/Pool'" in err
