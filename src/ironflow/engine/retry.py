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
    """``max_retries`` further attempts after the first; delay(n) = min(initial × multiplier^n, max).

    >>> RetryPolicy(3).delay(0), RetryPolicy(3).delay(2), RetryPolicy(3).delay(20)
    (0.2, 0.8, 30.0)
    """

    max_retries: int = 1
    initial_backoff_s: float = 0.2
    max_backoff_s: float = 30.0
    multiplier: float = 2.0

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

    def delay(self, attempt: int) -> float:
        """Seconds to wait before retry number ``attempt`` (0 for the first retry)."""
        try:
            value = self.initial_backoff_s * self.multiplier**attempt
        except OverflowError:
            return self.max_backoff_s
        return min(value, self.max_backoff_s)

    def should_retry(self, exc: BaseException, retries_done: int) -> bool:
        """Whether to run the step again after ``exc``, ``retries_done`` retries in."""
        return retries_done < self.max_retries and is_retryable(exc)


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
