"""Step retry policy and retryable classification (§7.2)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ironflow import errors
from ironflow.engine import retry


def test_delay_doubles_from_200ms_and_caps_at_30s() -> None:
    policy = retry.RetryPolicy(max_retries=5)
    assert [policy.delay(n) for n in range(4)] == [0.2, 0.4, 0.8, 1.6]
    assert policy.delay(50) == 30.0
    assert policy.delay(100_000) == 30.0


@settings(deadline=None)  # a shared 2-core machine: timing is not the property
@given(st.integers(min_value=0, max_value=10_000))
def test_delay_never_exceeds_the_maximum_and_never_shrinks(attempt: int) -> None:
    policy = retry.RetryPolicy(max_retries=3, initial_backoff_s=0.1, max_backoff_s=5.0, multiplier=3.0)
    assert 0.1 <= policy.delay(attempt) <= 5.0
    assert policy.delay(attempt) <= policy.delay(attempt + 1)


@pytest.mark.parametrize(
    "exc",
    [
        errors.ProcessFailed(1, "crash"),
        errors.AgentTimeout(30),
        errors.SchemaValidation("object", "text"),
        errors.RateLimited("rejected"),
        errors.HttpProviderError(0, "no response"),
        errors.HttpProviderError(503, "unavailable"),
        errors.ApiError(None, None, "no status"),
        errors.ApiError(429, "rate_limit", "slow down"),
        errors.ApiError(529, "overloaded", "overloaded"),
        errors.KubeUnavailable("api down", status=503),
        errors.CleanupError("pods still terminating"),
    ],
)
def test_retryable_errors_are_retried(exc: Exception) -> None:
    assert retry.is_retryable(exc)
    assert retry.RetryPolicy(max_retries=1).should_retry(exc, 0)


@pytest.mark.parametrize(
    "exc",
    [
        errors.PromptTooLarge(10, 5, 1),
        errors.BudgetExceeded(2.0, 1.0),
        errors.StepConfigError("bad step"),
        errors.ToolProfileUnsupported("no profiles here"),
        errors.ApiError(400, "invalid_request_error", "bad"),
        errors.ApiError(401, "authentication_error", "no"),
        errors.HttpProviderError(404, "not found"),
        errors.ConfigError("bad"),
        ValueError("not ours"),
    ],
)
def test_permanent_errors_are_not_retried(exc: Exception) -> None:
    assert not retry.is_retryable(exc)
    assert not retry.RetryPolicy(max_retries=3).should_retry(exc, 0)


def test_retries_stop_after_max_retries() -> None:
    policy = retry.RetryPolicy(max_retries=2)
    exc = errors.ProcessFailed(1, "crash")
    assert [policy.should_retry(exc, n) for n in range(4)] == [True, True, False, False]


def test_retry_on_retries_the_callers_own_exceptions_that_are_otherwise_never_retried() -> None:
    assert not retry.RetryPolicy(max_retries=2).should_retry(RuntimeError("flaky"), 0)
    policy = retry.RetryPolicy(max_retries=2, retry_on=(RuntimeError, errors.AgentTimeout))
    assert policy.should_retry(RuntimeError("flaky"), 0)
    assert not policy.should_retry(ValueError("not named"), 0)
    assert not policy.should_retry(errors.ProcessFailed(1, "crash"), 0)  # retryable, but not named
    assert not policy.should_retry(RuntimeError("flaky"), 2)


def test_retry_on_narrows_to_the_named_errors_and_never_widens() -> None:
    policy = retry.RetryPolicy(max_retries=3, retry_on=(errors.AgentTimeout, errors.ApiError))
    assert policy.should_retry(errors.AgentTimeout(30), 0)
    assert not policy.should_retry(errors.ProcessFailed(1, "crash"), 0)  # retryable, but not named
    assert policy.should_retry(errors.ApiError(429, "rate_limit", "slow down"), 0)
    assert not policy.should_retry(errors.ApiError(400, "invalid_request_error", "bad"), 0)  # named, not retryable
    assert not policy.should_retry(errors.AgentTimeout(30), 3)  # the attempts still count


@pytest.mark.parametrize(
    ("retry_on", "message"),
    [
        ((errors.StepConfigError,), "StepConfigError is never retried"),
        ((errors.PromptTooLarge,), "PromptTooLarge is never retried"),
        ((KeyboardInterrupt,), "is not an exception class"),
        (("AgentTimeout",), "is not an exception class"),
        ((), "non-empty tuple"),
        ([errors.AgentTimeout], "non-empty tuple"),
    ],
)
def test_retry_on_refuses_what_a_retry_cannot_fix(retry_on: object, message: str) -> None:
    with pytest.raises(errors.ConfigError, match=message):
        retry.RetryPolicy(max_retries=2, retry_on=retry_on)  # type: ignore[arg-type]


@settings(deadline=None)
@given(
    st.integers(min_value=0, max_value=60),
    st.floats(min_value=0.0, max_value=1.0),
    st.floats(min_value=0.0, max_value=1.0, exclude_max=True),
)
def test_jitter_takes_at_most_its_fraction_off_the_delay(attempt: int, jitter: float, u: float) -> None:
    full = retry.RetryPolicy(max_retries=3).delay(attempt)
    jittered = retry.RetryPolicy(max_retries=3, jitter=jitter).delay(attempt, u)
    assert full * (1.0 - jitter) - 1e-12 <= jittered <= full
    assert retry.RetryPolicy(max_retries=3, jitter=jitter).delay(attempt) == full  # u = 0: the full delay


@pytest.mark.parametrize("jitter", [-0.1, 1.5, float("nan")])
def test_jitter_outside_zero_to_one_is_refused(jitter: float) -> None:
    with pytest.raises(errors.ConfigError, match="jitter must be a fraction"):
        retry.RetryPolicy(max_retries=2, jitter=jitter)


def test_the_default_policy_still_retries_every_retryable_error_and_nothing_else() -> None:
    assert retry.DEFAULT_RETRY.retry_on is None
    assert retry.DEFAULT_RETRY.jitter == 0.0
    assert retry.DEFAULT_RETRY.should_retry(errors.ProcessFailed(1, "crash"), 0)
    assert not retry.DEFAULT_RETRY.should_retry(errors.BudgetExceeded(2.0, 1.0), 0)


def test_no_policy_means_no_retry() -> None:
    assert not retry.should_retry(None, errors.ProcessFailed(1, "crash"), 0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_retries": 0}, "max_retries must be at least 1, got 0; pass retry=None"),
        ({"initial_backoff_s": -1}, "backoff must satisfy"),
        ({"initial_backoff_s": 5, "max_backoff_s": 1}, "backoff must satisfy"),
        ({"multiplier": 0.5}, "multiplier must be at least 1.0"),
    ],
)
def test_a_policy_that_cannot_work_is_refused(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(errors.ConfigError, match=message):
        retry.RetryPolicy(**kwargs)  # type: ignore[arg-type]


def test_requeue_backoff_grows_from_one_second_to_a_minute() -> None:
    assert retry.requeue_delay(1) == 1.0
    assert retry.requeue_delay(2) == 2.0
    assert retry.requeue_delay(100) == 60.0
