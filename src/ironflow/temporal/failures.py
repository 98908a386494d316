"""ironflow's errors on Temporal's terms: which failures Temporal retries, and how they are named (pure).

An activity that raises lets Temporal's retry policy decide. An ironflow error carries
``retryable`` (the same table as :mod:`ironflow.engine.retry`); this module turns it into an
``ApplicationError`` with the error's class as its ``type`` and ``non_retryable`` set for the
ones a new attempt cannot fix, so a ``StepConfigError`` fails the step at once and a
``ProcessFailed`` goes round the policy. A ``RateLimited`` that knows when its earliest window
resets carries that wait as its detail, non-retryable: the workflow waits on a Temporal timer
and runs the step afresh (:func:`rate_limit_wait`), so waiting spends no attempt. Anything
that is not an ironflow error is not retried either (the engine's rule), except Temporal's own
failures, which pass as they are.

The message is redacted and truncated as the engine stores it: no credential reaches the
workflow history.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import Final

from temporalio.exceptions import ActivityError, ApplicationError, FailureError

from ironflow import errors, secrets

__all__ = ["MESSAGE_LIMIT", "application_error", "is_retryable", "rate_limit_wait"]

#: The most of an error's message a workflow history keeps.
MESSAGE_LIMIT: Final = 4000


def is_retryable(exc: BaseException) -> bool:
    """True when running the same step again may succeed (the error says so itself)."""
    return isinstance(exc, errors.IronflowError) and bool(exc.retryable)


def application_error(
    exc: BaseException, *, retry_after_s: float | None = None, known: Iterable[str] = ()
) -> BaseException:
    """The failure an activity raises for ``exc``: an ``ApplicationError`` typed by the error's
    class, non-retryable unless the error is retryable; ``retry_after_s`` overrides the policy's
    next delay (a rate-limited step waits for its window); ``known`` values (a step's secret blocks)
    are redacted from the message as credential shapes are. Temporal's own failures pass as they are.

    >>> failure = application_error(errors.StepConfigError("two steps named lint"))
    >>> failure.type, failure.non_retryable, failure.message
    ('StepConfigError', True, 'two steps named lint')
    >>> application_error(errors.ProcessFailed(1, "boom")).non_retryable
    False
    """
    if isinstance(exc, FailureError):
        return exc
    message = errors.truncate(secrets.redact(str(exc) or type(exc).__name__, known), MESSAGE_LIMIT)
    wait = getattr(exc, "retry_after_s", None) if isinstance(exc, errors.RateLimited) else None
    if wait is not None:  # the workflow waits for the window on a timer, then runs the step afresh
        return ApplicationError(message, float(wait), type=type(exc).__name__, non_retryable=True)
    delay = timedelta(seconds=retry_after_s) if retry_after_s is not None else None
    retryable = is_retryable(exc)
    return ApplicationError(message, type=type(exc).__name__, non_retryable=not retryable, next_retry_delay=delay)


def rate_limit_wait(exc: BaseException) -> float | None:
    """Seconds a step's failure asks the workflow to wait before running it again: a
    ``RateLimited`` whose earliest window reset is known; None for any other failure.

    """
    cause = exc.cause if isinstance(exc, ActivityError) else None
    if not isinstance(cause, ApplicationError) or cause.type != "RateLimited" or not cause.details:
        return None
    wait = cause.details[0]
    return float(wait) if isinstance(wait, int | float) else None
