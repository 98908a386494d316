"""ironflow errors become Temporal failures: retryable by the error's own flag, typed by its class, redacted."""

from __future__ import annotations

from datetime import timedelta

import pytest
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

from ironflow import errors
from ironflow.temporal import failures


@pytest.mark.parametrize(
    ("exc", "retried"),
    [
        (errors.ProcessFailed(1, "boom"), True),
        (errors.AgentTimeout(30.0), True),
        (errors.RateLimited("main rejected until 14:00"), True),
        (errors.CleanupError("the previous pod is still there"), True),
        (errors.KubernetesError("server error", status=503), True),
        (errors.KubernetesError("forbidden", status=403), False),
        (errors.ApiError(429, "rate_limit_error", "slow down"), True),
        (errors.ApiError(400, "invalid_request_error", "bad"), False),
        (errors.StepConfigError("two steps named lint"), False),
        (errors.PromptTooLarge(1_000_000, 250_000, 200_000), False),
        (errors.BudgetExceeded(2.0, 1.0), False),
        (ValueError("not ours"), False),
    ],
)
def test_an_error_is_retried_by_temporal_exactly_when_ironflow_would_retry_it(
    exc: BaseException, retried: bool
) -> None:
    failure = failures.application_error(exc)
    assert isinstance(failure, ApplicationError)
    assert failure.non_retryable is (not retried)
    assert failure.type == type(exc).__name__
    assert failure.next_retry_delay is None


def test_the_message_is_the_error_s_redacted_and_bounded() -> None:
    token = "sk-ant-api03-" + "x" * 40
    failure = failures.application_error(errors.ProcessFailed(1, f"auth failed with {token}" + "y" * 10_000))
    assert isinstance(failure, ApplicationError)
    assert token not in failure.message
    assert failure.message.startswith("claude process exited with code 1: auth failed with ")
    assert len(failure.message.encode()) <= failures.MESSAGE_LIMIT + 16


def test_a_step_s_known_secret_values_are_redacted_from_the_message_too() -> None:
    """A secret untrusted block the agent quoted in its error goes to the history redacted."""
    failure = failures.application_error(
        errors.ProcessFailed(1, "it said PRIVATE-BODY-1 and PRIVATE-BODY-1"), known=["PRIVATE-BODY-1"]
    )
    assert isinstance(failure, ApplicationError)
    assert failure.message == "claude process exited with code 1: it said [redacted] and [redacted]"


def test_a_rate_limited_step_waits_for_its_window_through_the_next_retry_delay() -> None:
    failure = failures.application_error(errors.RateLimited("main rejected"), retry_after_s=90.0)
    assert isinstance(failure, ApplicationError)
    assert (failure.non_retryable, failure.next_retry_delay) == (False, timedelta(seconds=90))


def test_temporal_s_own_failures_pass_unchanged() -> None:
    cancelled = CancelledError("cancelled")
    assert failures.application_error(cancelled) is cancelled


def activity_error(cause: BaseException) -> ActivityError:
    failed = ActivityError(
        "activity failed",
        scheduled_event_id=5,
        started_event_id=6,
        identity="worker",
        activity_type="ironflow.agent",
        activity_id="1",
        retry_state=None,
    )
    failed.__cause__ = cause
    return failed


def test_a_rate_limited_step_with_a_known_reset_hands_the_wait_to_the_workflow() -> None:
    failure = failures.application_error(errors.RateLimited("main rejected", retry_after_s=42.0))
    assert isinstance(failure, ApplicationError)
    assert (failure.type, failure.non_retryable, failure.details) == ("RateLimited", True, (42.0,))
    assert failures.rate_limit_wait(activity_error(failure)) == 42.0


@pytest.mark.parametrize(
    "cause",
    [
        failures.application_error(errors.RateLimited("no reset known")),
        failures.application_error(errors.ProcessFailed(1, "boom")),
        ApplicationError("42 but not ours", 42.0, type="ProcessFailed"),
    ],
)
def test_only_a_rate_limited_failure_with_its_wait_asks_the_workflow_to_wait(cause: BaseException) -> None:
    assert failures.rate_limit_wait(activity_error(cause)) is None
    assert failures.rate_limit_wait(cause) is None
