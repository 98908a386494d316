"""Per-role cost caps as pure values: calendar periods in UTC, the CLI's spec, the refusal, the sums."""

from __future__ import annotations

import calendar
import time

import pytest

from ironflow import errors, labels
from ironflow.engine import budgets, model
from ironflow.results import AgentResult
from ironflow.steps import AgentConfig


def at(text: str) -> float:
    """Epoch seconds of a UTC ``YYYY-MM-DDTHH:MM:SS``."""
    return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%S")))


@pytest.mark.parametrize(
    ("period", "now", "began"),
    [
        ("day", "2026-12-03T15:04:05", "2026-12-03T00:00:00"),
        ("week", "2026-12-03T15:04:05", "2026-11-30T00:00:00"),  # a Thursday: Monday began the week
        ("week", "2026-11-30T00:00:00", "2026-11-30T00:00:00"),
        ("week", "2027-01-02T23:59:59", "2026-12-28T00:00:00"),  # across the year
        ("month", "2026-12-31T23:59:59", "2026-12-01T00:00:00"),
        ("month", "2027-01-01T00:00:00", "2027-01-01T00:00:00"),
    ],
)
def test_a_period_begins_at_its_utc_calendar_start(period: budgets.Period, now: str, began: str) -> None:
    assert budgets.period_start(period, at(now)) == at(began)


def test_caps_parse_by_role_with_month_by_default() -> None:
    caps = budgets.parse_role_caps(["reviewer=50/month", "fixer=$5.5/day", "planner=0"])
    assert caps == {
        "reviewer": budgets.RoleCap("reviewer", 50.0, "month"),
        "fixer": budgets.RoleCap("fixer", 5.5, "day"),
        "planner": budgets.RoleCap("planner", 0.0, "month"),
    }


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("reviewer", "role cap 'reviewer' must look like ROLE=USD[/day|week|month]"),
        ("reviewer=-1", "role cap 'reviewer=-1' must look like"),
        ("reviewer=5/year", "role cap 'reviewer=5/year': period must be day, week or month"),
        ("bad role=5", "role cap: label 'ironflow.io/role' value 'bad role' is not valid"),
        ("reviewer=nan", "role cap 'reviewer=nan' must look like"),
    ],
)
def test_a_bad_cap_is_one_line_naming_it(spec: str, message: str) -> None:
    with pytest.raises(errors.ConfigError) as caught:
        budgets.parse_role_caps([spec])
    assert caught.value.message.startswith(message)


def test_a_role_given_twice_is_refused() -> None:
    with pytest.raises(errors.ConfigError, match="role 'reviewer' is given twice"):
        budgets.parse_role_caps(["reviewer=1", "reviewer=2/day"])


def test_a_step_is_refused_once_its_role_has_spent_the_cap_and_not_before() -> None:
    cap = budgets.RoleCap("reviewer", 1.0, "week")
    since = at("2026-11-30T00:00:00")
    assert budgets.refusal(cap, model.Usage(cost_usd=0.99, agent_steps=3), since) is None
    refused = budgets.refusal(cap, model.Usage(cost_usd=1.0, agent_steps=4), since)
    assert isinstance(refused, errors.RoleBudgetExceeded)
    assert isinstance(refused, errors.BudgetExceeded)
    assert not refused.retryable
    assert refused.message == "role 'reviewer' has spent $1 of its $1 cap this week (since 2026-11-30 UTC)"


def _step(
    position: int, role: str | None, cost: float | None, kind: model.StepKind = model.StepKind.AGENT
) -> model.StepRecord:
    step_labels = {labels.LABEL_ROLE: role} if role is not None else {}
    result = AgentResult(value="ok", duration_ms=1, cost_usd=cost) if kind is model.StepKind.AGENT else 1
    return model.StepRecord(
        run_id="r", position=position, id=f"s{position}", name=f"s{position}", kind=kind,
        status=model.StepStatus.SUCCEEDED, result=result, labels=step_labels, started_at=0.0,
    )  # fmt: skip


def test_usage_by_role_sums_agent_steps_of_each_role_in_first_seen_order() -> None:
    steps = [_step(0, "fixer", 0.5), _step(1, "reviewer", 0.25), _step(2, None, 9.0), _step(3, "fixer", 0.25),
             _step(4, "reviewer", None, model.StepKind.OP)]  # fmt: skip
    by_role = budgets.usage_by_role(steps)
    assert list(by_role) == ["fixer", "reviewer"]
    assert (by_role["fixer"].cost_usd, by_role["fixer"].agent_steps) == (0.75, 2)
    assert (by_role["reviewer"].cost_usd, by_role["reviewer"].agent_steps) == (0.25, 1)


@pytest.mark.parametrize(("role", "message"), [("", "role must not be empty"), ("a b", "is not valid")])
def test_an_agent_steps_role_is_a_label_value(role: str, message: str) -> None:
    with pytest.raises(errors.ConfigError, match=message):
        AgentConfig("x", role=role)
    assert AgentConfig("x", role="reviewer").role == "reviewer"
