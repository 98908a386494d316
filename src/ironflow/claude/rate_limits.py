"""Claude Code's ``rate_limit_event`` lines into rate-limit windows (pure, but for the recorder call).

The CLI prints one such line (stream-json) when a subscription account's limiter state
changes. The worker uses the windows to stop picking an account that is rejected.
Rules (§7.4):

=================  ==========================================================================
field              rule
=================  ==========================================================================
where              ``rate_limit_info`` object, else the event's top-level fields
status             ``allowed`` | ``allowed_warning`` | ``rejected``; anything else: skipped
window             ``rateLimitType`` / ``rate_limit_type``: ``seven_day_opus`` and
                   ``seven_day_sonnet`` become window ``seven_day`` scoped to that model;
                   other names kept as they are; missing: skipped
utilization        > 1 is a percentage (divided by 100); clamped to [0, 1]; missing: 1.0 when
                   rejected, else skipped
resets_at          ``resetsAt`` / ``resets_at``: RFC 3339 text, or a number (> 1e12: ms, else s)
=================  ==========================================================================

:func:`collect_rate_limits` keeps the last event per (window, model scope), in first-seen
order. :func:`record_rate_limits` pushes them to the step's account recorder, and does
nothing for a step without a Provider Account.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from ironflow import steps

__all__ = [
    "EVENT_TYPE",
    "STATUSES",
    "RateLimitWindow",
    "collect_rate_limits",
    "parse_rate_limit_event",
    "record_rate_limits",
]

EVENT_TYPE: Final = "rate_limit_event"
STATUSES: Final = frozenset({"allowed", "allowed_warning", "rejected"})
_MODEL_SCOPED: Final = {"seven_day_opus": ("seven_day", "opus"), "seven_day_sonnet": ("seven_day", "sonnet")}


@dataclass(frozen=True)
class RateLimitWindow:
    """One limiter window of an account as the CLI last reported it.

    >>> parse_rate_limit_event('{"type":"rate_limit_event","rate_limit_info":'
    ...     '{"status":"allowed","rateLimitType":"seven_day_opus","utilization":42}}')
    RateLimitWindow(window='seven_day', model_scope='opus', status='allowed', utilization=0.42, resets_at=None)
    """

    window: str
    model_scope: str | None
    status: str
    utilization: float
    resets_at: datetime | None = None

    @property
    def rejected(self) -> bool:
        return self.status == "rejected"


def _resets_at(value: Any) -> datetime | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        if not math.isfinite(value):
            return None
        seconds = value / 1000 if value > 1e12 else value
        try:
            return datetime.fromtimestamp(seconds, UTC)
        except (OverflowError, OSError, ValueError):
            return None
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00") if value.endswith("Z") else value)
        except ValueError:
            return None
        return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)
    return None


def _utilization(value: Any, status: str) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        fraction = value / 100 if value > 1 else float(value)
        return min(1.0, max(0.0, fraction))
    return 1.0 if status == "rejected" else None


def parse_rate_limit_event(event: Mapping[str, Any] | str) -> RateLimitWindow | None:
    """The window one ``rate_limit_event`` (a parsed object or a raw line) reports, or None.

    None for anything else: another event type, an unknown status, no window name, or a
    missing utilization on a window that is not rejected.
    """
    if isinstance(event, str):
        try:
            event = json.loads(event)
        except json.JSONDecodeError:
            return None
    if not isinstance(event, Mapping) or event.get("type") != EVENT_TYPE:
        return None
    info = event.get("rate_limit_info")
    fields: Mapping[str, Any] = info if isinstance(info, Mapping) else event
    status = fields.get("status")
    if status not in STATUSES:
        return None
    kind = fields.get("rateLimitType", fields.get("rate_limit_type"))
    if not isinstance(kind, str) or not kind:
        return None
    window, scope = _MODEL_SCOPED.get(kind, (kind, None))
    utilization = _utilization(fields.get("utilization"), status)
    if utilization is None:
        return None
    resets = _resets_at(fields.get("resetsAt", fields.get("resets_at")))
    return RateLimitWindow(window, scope, status, utilization, resets)


def collect_rate_limits(text: str) -> list[RateLimitWindow]:
    """Every window reported in a log, the last report per (window, model scope) winning."""
    latest: dict[tuple[str, str | None], RateLimitWindow] = {}
    for line in text.splitlines():
        if EVENT_TYPE not in line:  # cheap filter: most lines are assistant output
            continue
        window = parse_rate_limit_event(line.strip())
        if window is not None:
            latest[(window.window, window.model_scope)] = window
    return list(latest.values())


def record_rate_limits(config: steps.AgentConfig, logs: str) -> list[RateLimitWindow]:
    """Push the log's windows to the step's account recorder; returns what was found.

    Nothing is recorded for a step without an account (or whose account has no recorder),
    and the recorder is not called when the log reported no window.
    """
    account = config.account
    if account is None or account.recorder is None:
        return []
    windows = collect_rate_limits(logs)
    if windows:
        account.recorder.record(windows)
    return windows
