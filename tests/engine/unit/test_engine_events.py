"""Events' pure parts: a step's outcome from what it raised, usage from its result, fan-out to observers."""

from __future__ import annotations

import asyncio
import logging

import pytest

from ironflow import errors
from ironflow.engine import events, model
from ironflow.engine.context import OpStep
from ironflow.results import AgentResult

SCOPE = events.RunScope("run-1", "flows.py:review", "local", 1)


async def _nothing() -> None:
    return None


@pytest.mark.parametrize(
    ("raised", "outcome"),
    [
        (None, events.StepOutcome.SUCCEEDED),
        (asyncio.CancelledError(), events.StepOutcome.CANCELLED),
        (errors.AgentTimeout(30), events.StepOutcome.TIMED_OUT),
        (errors.OperationTimeout("pod 'check' did not finish within 300s"), events.StepOutcome.TIMED_OUT),
        (TimeoutError(), events.StepOutcome.TIMED_OUT),
        (errors.RateLimited("no account"), events.StepOutcome.RATE_LIMITED),
        (errors.ProcessFailed(1, "boom"), events.StepOutcome.FAILED),
        (ValueError("x"), events.StepOutcome.FAILED),
    ],
)
def test_a_steps_outcome_follows_what_it_raised(raised: BaseException | None, outcome: events.StepOutcome) -> None:
    assert events.step_outcome(raised) is outcome


def test_a_run_stored_without_a_backend_is_reported_on_the_default_one() -> None:
    run = model.RunRecord(id="r", workflow="w.py:f", input=None, attempt=2)
    assert events.RunScope.of(run) == events.RunScope("r", "w.py:f", events.DEFAULT_BACKEND, 2)


def test_an_agent_results_usage_is_reported_and_missing_numbers_count_as_zero() -> None:
    full = AgentResult("ok", 5, cost_usd=0.25, input_tokens=100, output_tokens=20, model="claude-sonnet-4-5")
    assert events.Usage.of(full) == events.Usage("claude-sonnet-4-5", 100, 20, 0.25)
    assert events.Usage.of(AgentResult("ok", 5)) == events.Usage("unknown", 0, 0, 0.0)


def test_a_finished_step_names_its_error_type_and_carries_usage_only_for_an_agent_result() -> None:
    step = OpStep("add", _nothing)
    failed = events.step_finished(SCOPE, step, 0.5, 2, None, errors.ProcessFailed(1, "boom"))
    assert (failed.outcome, failed.error, failed.tries, failed.usage) == ("failed", "ProcessFailed", 2, None)
    done = events.step_finished(SCOPE, step, 0.5, 1, AgentResult("ok", 1, model="m"), None)
    assert (done.outcome, done.error, done.usage) == ("succeeded", None, events.Usage("m", 0, 0, 0.0))
    assert events.step_finished(SCOPE, step, 0.5, 1, {"a": 1}, None).usage is None


class _Heard:
    def __init__(self) -> None:
        self.events: list[events.Event] = []

    def observe(self, event: events.Event) -> None:
        self.events.append(event)


class _Broken:
    def observe(self, event: events.Event) -> None:
        raise RuntimeError("observer bug")


def test_an_observer_that_raises_is_logged_and_the_others_still_hear(caplog: pytest.LogCaptureFixture) -> None:
    before, after = _Heard(), _Heard()
    event = events.RunStarted(SCOPE)
    with caplog.at_level(logging.WARNING, logger="ironflow.engine.events"):
        events.notify([before, _Broken(), after], event)
    assert before.events == after.events == [event]
    assert caplog.messages == ["observer _Broken failed on RunStarted: RuntimeError: observer bug"]
