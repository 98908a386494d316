"""The worker's log lines: one per run and step start and end, the fields named, the level by outcome."""

from __future__ import annotations

import json
import logging

import pytest

from ironflow import log_lines
from ironflow.engine import events, model
from ironflow.engine.run_log import LOGGER_NAME, RunLog, line

RUN = events.RunScope("0190c0de-0000-7000-8000-000000000001", "flows.py:review", "local", 2)
RUN_FIELDS = {"run_id": RUN.run_id, "workflow": "flows.py:review", "backend": "local", "attempt": 2}


def test_a_run_start_and_end_name_the_run_its_attempt_outcome_and_duration() -> None:
    assert line(events.RunStarted(RUN)) == (logging.INFO, "run started", RUN_FIELDS)
    ended = line(events.RunFinished(RUN, events.Outcome.SUCCEEDED, 1.23456))
    assert ended == (logging.INFO, "run finished", {**RUN_FIELDS, "outcome": "succeeded", "duration_s": 1.235})
    assert line(events.RunFinished(RUN, events.Outcome.FAILED, 1.0)) == (
        logging.WARNING, "run finished", {**RUN_FIELDS, "outcome": "failed", "duration_s": 1.0}
    )  # fmt: skip


def test_a_step_start_and_end_name_the_step_kind_tries_error_and_usage() -> None:
    started = line(events.StepStarted(RUN, "plan", model.StepKind.AGENT))
    assert started == (logging.INFO, "step started", {**RUN_FIELDS, "step": "plan", "kind": "agent"})
    usage = events.Usage("claude-sonnet", 100, 20, 0.05)
    ok = events.StepFinished(RUN, "plan", model.StepKind.AGENT, events.StepOutcome.SUCCEEDED, 2.0, 1, usage)
    assert line(ok) == (
        logging.INFO,
        "step finished",
        {**RUN_FIELDS, "step": "plan", "kind": "agent", "outcome": "succeeded", "duration_s": 2.0, "tries": 1,
         "error": None, "model": "claude-sonnet", "input_tokens": 100, "output_tokens": 20, "cost_usd": 0.05},
    )  # fmt: skip


def test_a_step_s_cost_is_logged_to_six_significant_digits() -> None:
    """Issue 31: a cost as the CLI reports it (``7.000000000000001e-05``) was logged with its float noise."""
    usage = events.Usage("claude-sonnet", 10, 5, 7.000000000000001e-05)
    found = line(events.StepFinished(RUN, "plan", model.StepKind.AGENT, events.StepOutcome.SUCCEEDED, 2.0, 1, usage))
    assert found is not None
    assert found[2]["cost_usd"] == 7e-05
    record = logging.LogRecord(LOGGER_NAME, found[0], __file__, 1, found[1], None, None)
    record.fields = found[2]
    assert " cost_usd=7e-05 " in log_lines.TextFormatter().format(record) + " "


@pytest.mark.parametrize(
    ("outcome", "level"),
    [
        (events.StepOutcome.FAILED, logging.WARNING),
        (events.StepOutcome.TIMED_OUT, logging.WARNING),
        (events.StepOutcome.RATE_LIMITED, logging.WARNING),
        (events.StepOutcome.CANCELLED, logging.INFO),
    ],
)
def test_a_step_that_did_not_succeed_is_a_warning_unless_it_was_cancelled(
    outcome: events.StepOutcome, level: int
) -> None:
    found = line(events.StepFinished(RUN, "add", model.StepKind.OP, outcome, 0.1, 1, error="X"))
    assert found is not None
    assert found[0] == level


def test_capacity_waits_have_lines_and_lease_events_none() -> None:
    started = line(events.CapacityWaitStarted("plan", "main rejected until 2026-01-01T00:00:00Z"))
    assert started == (
        logging.INFO, "step waits for a provider account",
        {"step": "plan", "reason": "main rejected until 2026-01-01T00:00:00Z"},
    )  # fmt: skip
    ended = line(events.CapacityWaitEnded("plan", 12.0, acquired=False))
    assert ended == (logging.INFO, "step waited for a provider account", {"step": "plan", "waited_s": 12.0,
                                                                          "acquired": False})  # fmt: skip
    assert line(events.LeaseRenewed(RUN)) is None
    assert line(events.LeaseLost(RUN)) is None


def test_run_log_writes_one_json_line_per_event_through_the_shared_formatter(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger=LOGGER_NAME):
        RunLog().observe(events.StepStarted(RUN, "plan", model.StepKind.AGENT))
        RunLog().observe(events.LeaseRenewed(RUN))
    (record,) = caplog.records
    parsed = json.loads(log_lines.JsonFormatter().format(record))
    assert parsed == {"ts": parsed["ts"], "level": "info", "event": "step started", **RUN_FIELDS, "step": "plan",
                      "kind": "agent"}  # fmt: skip
