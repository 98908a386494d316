"""Cost caps per role and calendar period (reference 5.0), as pure values and decisions.

An agent step may name its ``role`` (``AgentConfig(role="reviewer")``); the engine stores it
with the step (label ``ironflow.io/role``) and sums what every step of that role spent since the
period began (UTC calendar day, ISO week from Monday, or month). A worker given a cap for a role
refuses to start a step of that role once the sum has reached the cap: the step fails with
:class:`~ironflow.errors.RoleBudgetExceeded`, never retried in that period.

The check comes before each attempt starts; steps of one role that start at the same moment
may each pass it, so a cap can be overrun by what those steps spend (at most one step's cost per
step running at once): a cap bounds spending, it does not reserve it.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final, Literal, get_args

from ironflow import errors, labels
from ironflow.engine import model

__all__ = ["PERIODS", "Period", "RoleCap", "parse_role_caps", "period_start", "refusal", "usage_by_role"]

Period = Literal["day", "week", "month"]
PERIODS: Final[tuple[Period, ...]] = get_args(Period)
_CAP = re.compile(r"(?P<role>[^=]+)=\$?(?P<usd>[0-9]+(?:\.[0-9]+)?)(?:/(?P<period>[a-z]+))?")


@dataclass(frozen=True)
class RoleCap:
    """At most ``limit_usd`` spent by steps of ``role`` per calendar ``period`` (UTC)."""

    role: str
    limit_usd: float
    period: Period = "month"

    def __post_init__(self) -> None:
        problem = labels.label_value_problem(labels.LABEL_ROLE, self.role) if self.role else "a role must be named"
        if problem is not None:
            raise errors.ConfigError(f"role cap: {problem}")
        if not (math.isfinite(self.limit_usd) and self.limit_usd >= 0):
            raise errors.ConfigError(f"role cap for '{self.role}': the limit must be 0 or more dollars")
        if self.period not in PERIODS:
            raise errors.ConfigError(f"role cap for '{self.role}': period must be one of {', '.join(PERIODS)}")


def period_start(period: Period, now: float) -> float:
    """The epoch second the calendar ``period`` holding ``now`` began, in UTC.

    >>> period_start("month", 1764979200.0)  # 2025-12-06T00:00:00Z
    1764547200.0
    >>> period_start("week", 1764979200.0)  # a Saturday: the week began on Monday 1 December
    1764547200.0
    """
    day = dt.datetime.fromtimestamp(now, dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "week":
        day -= dt.timedelta(days=day.weekday())
    elif period == "month":
        day = day.replace(day=1)
    return day.timestamp()


def refusal(cap: RoleCap, spent: model.Usage, since: float) -> errors.RoleBudgetExceeded | None:
    """The failure of a step of ``cap.role`` when what the role ``spent`` since ``since`` reached the cap."""
    if spent.cost_usd < cap.limit_usd:
        return None
    return errors.RoleBudgetExceeded(cap.role, spent.cost_usd, cap.limit_usd, period=cap.period, since=since)


def parse_role_caps(specs: Iterable[str]) -> dict[str, RoleCap]:
    """``ROLE=USD[/PERIOD]`` each (``reviewer=50/month``, ``fixer=$5/day``; month when unsaid), by role.

    Raises:
        ConfigError: a spec of another form, a bad role or amount, or a role given twice.
    """
    caps: dict[str, RoleCap] = {}
    for spec in specs:
        match = _CAP.fullmatch(spec.strip())
        if match is None:
            shown = errors.truncate(spec, 80)
            raise errors.ConfigError(
                f"role cap '{shown}' must look like ROLE=USD[/day|week|month], e.g. reviewer=50/month"
            )
        period = next((p for p in PERIODS if p == (match["period"] or "month")), None)
        if period is None:
            raise errors.ConfigError(f"role cap '{errors.truncate(spec, 80)}': period must be day, week or month")
        cap = RoleCap(match["role"], float(match["usd"]), period)
        if cap.role in caps:
            raise errors.ConfigError(f"role cap: role '{cap.role}' is given twice")
        caps[cap.role] = cap
    return caps


def usage_by_role(steps: Sequence[model.StepRecord]) -> dict[str, model.Usage]:
    """What the agent steps that named a role spent, by role, in first-seen order (others are left out)."""
    out: dict[str, model.Usage] = {}
    for step in steps:
        role = (step.labels or {}).get(labels.LABEL_ROLE)
        if role is not None and step.kind is model.StepKind.AGENT:
            out[role] = out.get(role, model.Usage()) + model.Usage.of_step(step)
    return out
