"""The worker's log lines: one per run start and end, per step start and end, per capacity wait.

:class:`RunLog` is an :class:`~ironflow.engine.events.Observer` that turns events into
``logging`` records on the ``ironflow.engine.runs`` logger, their fields in
``extra={"fields": …}`` where :mod:`ironflow.log_lines` prints them, as text or as JSON. A
line names the run id, the workflow reference, the step, its kind, the backend, the
execution attempt, the outcome, the duration and the usage — never a run's input or output,
an answer or a credential. Lease renewals make no line (the metrics count them); the worker
logs a lost lease itself.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Final

from ironflow import results
from ironflow.engine import events

__all__ = ["LOGGER_NAME", "RunLog", "line"]

LOGGER_NAME: Final = "ironflow.engine.runs"

#: Step and run outcomes an operator should see among the routine lines.
_WORRYING: Final = frozenset({events.StepOutcome.FAILED, events.StepOutcome.TIMED_OUT, events.StepOutcome.RATE_LIMITED})


def _run_fields(run: events.RunScope) -> dict[str, Any]:
    return {"run_id": run.run_id, "workflow": run.workflow, "backend": run.backend, "attempt": run.attempt}


def _step_finished(event: events.StepFinished) -> tuple[int, str, dict[str, Any]]:
    fields = {
        **_run_fields(event.run),
        "step": event.step,
        "kind": str(event.kind),
        "outcome": str(event.outcome),
        "duration_s": round(event.duration_s, 3),
        "tries": event.tries,
        "error": event.error,
    }
    if event.usage is not None:  # model, input_tokens, output_tokens, cost_usd
        fields |= dataclasses.asdict(event.usage)
        fields["cost_usd"] = results.shown_usd(event.usage.cost_usd)
    level = logging.WARNING if event.outcome in _WORRYING else logging.INFO
    return level, "step finished", fields


def line(event: events.Event) -> tuple[int, str, dict[str, Any]] | None:
    """The level, message and fields of ``event``'s line, or None for an event without one (pure)."""
    match event:
        case events.RunStarted(run=run):
            return logging.INFO, "run started", _run_fields(run)
        case events.RunFinished(run=run, outcome=outcome, duration_s=took):
            level = logging.WARNING if outcome is events.Outcome.FAILED else logging.INFO
            return level, "run finished", {**_run_fields(run), "outcome": str(outcome), "duration_s": round(took, 3)}
        case events.StepStarted(run=run, step=step, kind=kind):
            return logging.INFO, "step started", {**_run_fields(run), "step": step, "kind": str(kind)}
        case events.StepFinished():
            return _step_finished(event)
        case events.CapacityWaitStarted(step=step, reason=reason):
            return logging.INFO, "step waits for a provider account", {"step": step, "reason": reason}
        case events.CapacityWaitEnded(step=step, waited_s=waited, acquired=acquired):
            fields = {"step": step, "waited_s": round(waited, 3), "acquired": acquired}
            return logging.INFO, "step waited for a provider account", fields
    return None


class RunLog:
    """Logs each event that has a line (see :func:`line`) on ``logger``."""

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self.logger = logger or logging.getLogger(LOGGER_NAME)

    def observe(self, event: events.Event) -> None:
        found = line(event)
        if found is not None and self.logger.isEnabledFor(found[0]):
            level, message, fields = found
            self.logger.log(level, message, extra={"fields": fields})
