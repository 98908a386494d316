"""Step retry policy and retryable classification (§7.2), and the run requeue backoff (pure).

Rule table (a failure is retried only when the policy has attempts left), by branch of
:mod:`ironflow.errors`:

| error                                              | retried |
|----------------------------------------------------|---------|
| AgentError: ProcessFailed, AgentTimeout            | yes     |
| AgentError: SchemaValidation, RateLimited          | yes     |
| AgentError: HttpProviderError status 0 or >= 500   | yes     |
| AgentError: ApiError no status, 429 or >= 500      | yes     |
| AgentError: BudgetExceeded, ApiError other 4xx     | no      |
| InfrastructureError: Kubernetes 0/409/429/5xx,     | yes     |
|   CleanupError, SandboxError, OperationTimeout,    |         |
|   SandboxFailed (unschedulable, evicted, OOM, ...) |         |
| InfrastructureError: Kubernetes other 4xx          | no      |
| AuthProxyError: no answer, 429 or >= 500           | yes     |
| AuthProxyError: other answers                      | no      |
| UsageError: ConfigError, StepConfigError,          | no      |
|   ToolProfileUnsupported, PromptTooLarge,          |         |
|   MissingCredential, KubeClientConfigError,        |         |
|   UnstorableValue, ReplayDivergence,               |         |
|   SandboxRefused (missing Secret, bad image, ...)  |         |
| anything that is not an IronflowError              | no      |

Each error carries ``retryable``; this module reads it rather than keeping a second list,
so a new error class decides for itself. A retry reuses the step's scoped config (same
pod labels), so the provider's previous-attempt cleanup finds the earlier pod.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from ironflow import errors

__all__ = [
    "DEFAULT_RETRY",
    "RetryPolicy",
    "is_retryable",
    "requeue_delay",
    "should_retry",
]


@dataclass(frozen=True)
class RetryPolicy:
    """``max_retries`` further attempts after the first; delay(n) = min(initial × multiplier^n, max),
    less up to ``jitter`` of it at random, so steps that failed together do not retry together.

    ``retry_on`` names what is retried instead of every retryable ironflow error: your own
    exception classes (a ``RuntimeError`` from an op's function is otherwise never retried), and
    ironflow error classes to narrow to (``errors.AgentTimeout``). An ironflow error is retried only
    when it is retryable, whatever is named (an ``ApiError`` 400 stays permanent), and a
    :class:`~ironflow.errors.UsageError` class (a bad config, a prompt too large: the same again
    fails the same way) is refused.

    >>> RetryPolicy(3).delay(0), RetryPolicy(3).delay(2), RetryPolicy(3).delay(20)
    (0.2, 0.8, 30.0)
    >>> round(RetryPolicy(3, jitter=0.5).delay(1, u=0.5), 6)
    0.3
    """

    max_retries: int = 1
    initial_backoff_s: float = 0.2
    max_backoff_s: float = 30.0
    multiplier: float = 2.0
    retry_on: tuple[type[Exception], ...] | None = None
    jitter: float = 0.0

    def __post_init__(self) -> None:
        if self.max_retries < 1:
            raise errors.ConfigError(
                f"max_retries must be at least 1, got {self.max_retries}; pass retry=None for no retries"
            )
        if not self.initial_backoff_s >= 0 or not self.max_backoff_s >= self.initial_backoff_s:
            raise errors.ConfigError(
                "backoff must satisfy 0 <= initial_backoff_s <= max_backoff_s, "
                f"got {self.initial_backoff_s} and {self.max_backoff_s}"
            )
        if not self.multiplier >= 1.0:
            raise errors.ConfigError(f"multiplier must be at least 1.0, got {self.multiplier}")
        if not 0.0 <= self.jitter <= 1.0:
            raise errors.ConfigError(f"jitter must be a fraction from 0.0 to 1.0, got {self.jitter}")
        if self.retry_on is not None:
            _check_retry_on(self.retry_on)

    def delay(self, attempt: int, u: float = 0.0) -> float:
        """Seconds to wait before retry number ``attempt`` (0 for the first retry); ``u`` is the
        caller's uniform draw in [0, 1) that picks the jitter (0: the full delay)."""
        try:
            value = self.initial_backoff_s * self.multiplier**attempt
        except OverflowError:
            value = self.max_backoff_s
        return min(value, self.max_backoff_s) * (1.0 - self.jitter * u)

    def should_retry(self, exc: BaseException, retries_done: int) -> bool:
        """Whether to run the step again after ``exc``, ``retries_done`` retries in."""
        if retries_done >= self.max_retries:
            return False
        if self.retry_on is None:
            return is_retryable(exc)
        if not isinstance(exc, self.retry_on):
            return False
        return is_retryable(exc) if isinstance(exc, errors.IronflowError) else True


def _check_retry_on(classes: object) -> None:
    """``retry_on`` is a tuple of exception classes that a retry can fix.

    Raises:
        ConfigError: naming the entry at fault.
    """
    if not isinstance(classes, tuple) or not classes:
        raise errors.ConfigError("retry_on must be a non-empty tuple of exception classes, e.g. (RuntimeError,)")
    for cls in classes:
        if not isinstance(cls, type) or not issubclass(cls, Exception):
            raise errors.ConfigError(f"retry_on: {cls!r} is not an exception class")
        if issubclass(cls, errors.UsageError):
            raise errors.ConfigError(
                f"retry_on: {cls.__name__} is never retried: the same step fails the same way again"
            )


def should_retry(policy: RetryPolicy | None, exc: BaseException, retries_done: int) -> bool:
    """:meth:`RetryPolicy.should_retry`, with ``None`` meaning never."""
    return policy is not None and policy.should_retry(exc, retries_done)


#: One retry after 200 ms: the reference's defaults. Steps without a policy are not retried.
DEFAULT_RETRY: Final = RetryPolicy()

#: How a run put back in the queue (failed release, lost lease) backs off.
_REQUEUE: Final = RetryPolicy(max_retries=1_000_000, initial_backoff_s=1.0, max_backoff_s=60.0)


def is_retryable(exc: BaseException) -> bool:
    """True when running the same step again may succeed (see the table above)."""
    return isinstance(exc, errors.IronflowError) and bool(exc.retryable)


def requeue_delay(attempt: int) -> float:
    """Seconds before a requeued run may be taken again, after its ``attempt``-th execution."""
    return _REQUEUE.delay(max(attempt - 1, 0))
