"""What a worker reports as it goes: run, step, lease and capacity events, and who hears them.

The worker, the runner and the account pool hand these values to the observers they were
given — none by default, and then no event is even built. An event carries ids, names,
outcomes, durations and token counts — never a run's input or output, a step's answer or a
credential — and an observer that raises is logged and skipped: watching a run never
changes how it ends.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from ironflow import errors
from ironflow.engine import context, model
from ironflow.results import AgentResult

__all__ = [
    "DEFAULT_BACKEND",
    "CapacityWaitEnded",
    "CapacityWaitStarted",
    "Event",
    "LeaseLost",
    "LeaseRenewed",
    "Observer",
    "Outcome",
    "RunFinished",
    "RunScope",
    "RunStarted",
    "StepFinished",
    "StepOutcome",
    "StepStarted",
    "Usage",
    "notify",
    "step_finished",
    "step_outcome",
]

log = logging.getLogger("ironflow.engine.events")

#: The backend named for a run stored without one (a library user's runner picks the provider).
DEFAULT_BACKEND: Final = "default"


class Outcome(enum.StrEnum):
    """How one execution of a run ended."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    REQUEUED = "requeued"  # release failed: the run is pending again, due after a backoff
    ABANDONED = "abandoned"  # lease lost or worker stopping: another worker takes the run


class StepOutcome(enum.StrEnum):
    """How one execution of a step ended, from what it raised (:func:`step_outcome`)."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    RATE_LIMITED = "rate_limited"
    CANCELLED = "cancelled"  # its run was cancelled, or the worker stopped or lost the lease


def step_outcome(exc: BaseException | None) -> StepOutcome:
    """The outcome a step's ending shows: nothing raised, a cancel, a timeout, no account, or a failure."""
    if exc is None:
        return StepOutcome.SUCCEEDED
    if isinstance(exc, asyncio.CancelledError):
        return StepOutcome.CANCELLED
    if isinstance(exc, errors.AgentTimeout | errors.OperationTimeout | TimeoutError):
        return StepOutcome.TIMED_OUT
    if isinstance(exc, errors.RateLimited):
        return StepOutcome.RATE_LIMITED
    return StepOutcome.FAILED


@dataclass(frozen=True)
class RunScope:
    """The run an event is about; of its fields only ``backend`` is bounded enough for a metric label."""

    run_id: str
    workflow: str
    backend: str
    attempt: int

    @classmethod
    def of(cls, run: model.RunRecord) -> RunScope:
        return cls(run.id, run.workflow, run.backend or DEFAULT_BACKEND, run.attempt)


@dataclass(frozen=True)
class Usage:
    """What an agent step spent: tokens each way and dollars, by the model that answered."""

    model: str
    input_tokens: int
    output_tokens: int
    cost_usd: float

    @classmethod
    def of(cls, result: AgentResult) -> Usage:
        return cls(
            result.model or "unknown", result.input_tokens or 0, result.output_tokens or 0, result.cost_usd or 0.0
        )


@dataclass(frozen=True)
class RunStarted:
    run: RunScope


@dataclass(frozen=True)
class RunFinished:
    run: RunScope
    outcome: Outcome
    duration_s: float


@dataclass(frozen=True)
class StepStarted:
    run: RunScope
    step: str
    kind: model.StepKind


@dataclass(frozen=True)
class StepFinished:
    """A step ran to an end in this execution; ``tries`` counts its attempts here, retries included.

    ``error`` is the type of what it raised (its message is in the store, ``ironflow runs show``).
    """

    run: RunScope
    step: str
    kind: model.StepKind
    outcome: StepOutcome
    duration_s: float
    tries: int
    usage: Usage | None = None
    error: str | None = None


@dataclass(frozen=True)
class LeaseRenewed:
    run: RunScope


@dataclass(frozen=True)
class LeaseLost:
    run: RunScope


@dataclass(frozen=True)
class CapacityWaitStarted:
    """Every provider account is in a rejected window: ``step`` waits for one (``reason`` names them)."""

    step: str
    reason: str


@dataclass(frozen=True)
class CapacityWaitEnded:
    """The wait is over: an account was free again (``acquired``), or the step gave up."""

    step: str
    waited_s: float
    acquired: bool


Event = (
    RunStarted
    | RunFinished
    | StepStarted
    | StepFinished
    | LeaseRenewed
    | LeaseLost
    | CapacityWaitStarted
    | CapacityWaitEnded
)


def step_finished(
    run: RunScope, step: context.Step, took_s: float, tries: int, result: Any, failure: BaseException | None
) -> StepFinished:
    """How a step that returned ``result``, or raised ``failure``, is reported (pure)."""
    return StepFinished(
        run,
        step.name,
        step.kind,
        step_outcome(failure),
        took_s,
        tries,
        usage=Usage.of(result) if isinstance(result, AgentResult) else None,
        error=type(failure).__name__ if failure is not None else None,
    )


class Observer(Protocol):
    """Hears every event; takes what it needs and ignores the rest. Called on the event loop: never block."""

    def observe(self, event: Event) -> None: ...


def notify(observers: Sequence[Observer], event: Event) -> None:
    """Hand ``event`` to each observer; one that raises is logged and the others still hear it."""
    for observer in observers:
        try:
            observer.observe(event)
        except Exception as exc:
            name, what = type(observer).__name__, type(event).__name__
            log.warning("observer %s failed on %s: %s: %s", name, what, type(exc).__name__, exc)
