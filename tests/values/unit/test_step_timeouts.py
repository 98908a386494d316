"""A step's own timeout: validated on the config, the smaller bound holds, the failure names it."""

from __future__ import annotations

import math

import pytest

from ironflow import AgentConfig, errors, step_timeouts


def test_the_step_bound_holds_when_shorter_than_the_providers() -> None:
    assert step_timeouts.effective(3, 120) == step_timeouts.StepBound(3.0, "step")


def test_the_provider_bound_holds_when_the_step_has_none_or_a_longer_one() -> None:
    assert step_timeouts.effective(None, 120) == step_timeouts.StepBound(120.0, "provider")
    assert step_timeouts.effective(600, 120) == step_timeouts.StepBound(120.0, "provider")


def test_the_step_wins_a_tie_because_the_caller_set_it_for_this_step() -> None:
    assert step_timeouts.effective(60, 60).source == "step"


@pytest.mark.parametrize(("bound", "whose"), [("step", "the step's timeout"), ("provider", "the provider's timeout")])
def test_a_timeout_names_which_bound_fired(bound: str, whose: str) -> None:
    exc = step_timeouts.effective(3 if bound == "step" else None, 120 if bound == "step" else 5).timed_out()
    assert isinstance(exc, errors.AgentTimeout)
    assert exc.bound == bound
    assert whose in str(exc)
    assert exc.retryable


def test_an_unnamed_timeout_keeps_its_message() -> None:
    assert str(errors.AgentTimeout(300)) == "agent timed out after 300s"
    assert errors.AgentTimeout(300).bound is None
    assert errors.CommandTimeout(5).bound is None


def test_the_config_carries_a_timeout_through_its_builder_and_dict() -> None:
    base = AgentConfig("hi")
    bounded = base.with_timeout(3)
    assert base.timeout is None
    assert bounded.timeout == 3.0
    assert bounded.to_dict() == {"prompt": "hi", "timeout": 3.0}
    assert AgentConfig.from_dict(bounded.to_dict()) == bounded
    assert "timeout" not in base.to_dict()


@pytest.mark.parametrize("bad", [0, -1, math.inf, -math.inf, math.nan])
def test_a_timeout_no_clock_reaches_is_one_line(bad: float) -> None:
    with pytest.raises(errors.ConfigError, match="timeout must be a positive finite number of seconds") as caught:
        AgentConfig("hi").with_timeout(bad)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("bad", ["3s", True, [3]])
def test_a_step_file_timeout_of_the_wrong_type_is_named(bad: object) -> None:
    with pytest.raises(errors.ConfigError, match="step setting 'timeout' must be a number"):
        AgentConfig.from_dict({"prompt": "hi", "timeout": bad})


def test_the_examples_in_the_docstrings_hold() -> None:
    import doctest

    assert doctest.testmod(step_timeouts).failed == 0
