"""rate_limit_event parsing (§7.4): the reference's ``rate_limit_event.rs`` cases, plus the
events the real CLI 2.1.332 printed for a subscription token (captured fixture)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ironflow.claude.rate_limits import (
    RateLimitWindow,
    collect_rate_limits,
    parse_rate_limit_event,
    record_rate_limits,
)
from ironflow.secrets import Secret
from ironflow.steps import AccountLease, AgentConfig

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "claude"


def event(info: dict[str, Any] | None = None, **top: Any) -> str:
    body: dict[str, Any] = {"type": "rate_limit_event", **top}
    if info is not None:
        body["rate_limit_info"] = info
    return json.dumps(body)


class ListRecorder:
    def __init__(self) -> None:
        self.calls: list[list[RateLimitWindow]] = []

    def record(self, windows: Iterable[Any]) -> None:
        self.calls.append(list(windows))


def test_rate_limit_event_parses_five_hour_window() -> None:
    window = parse_rate_limit_event(
        event({"status": "allowed", "rateLimitType": "five_hour", "utilization": 0.25, "resetsAt": 1_790_000_000})
    )
    assert window == RateLimitWindow("five_hour", None, "allowed", 0.25, datetime.fromtimestamp(1_790_000_000, UTC))


def test_rate_limit_event_maps_seven_day_opus_to_model_scope() -> None:
    opus = parse_rate_limit_event(event({"status": "allowed", "rateLimitType": "seven_day_opus", "utilization": 0.5}))
    sonnet = parse_rate_limit_event(
        event({"status": "allowed", "rateLimitType": "seven_day_sonnet", "utilization": 0.5})
    )
    assert opus is not None
    assert (opus.window, opus.model_scope) == ("seven_day", "opus")
    assert sonnet is not None
    assert (sonnet.window, sonnet.model_scope) == ("seven_day", "sonnet")


def test_rate_limit_event_rejected_status_without_utilization() -> None:
    rejected = parse_rate_limit_event(event({"status": "rejected", "rateLimitType": "seven_day"}))
    assert rejected is not None
    assert rejected.utilization == 1.0
    assert rejected.rejected
    assert parse_rate_limit_event(event({"status": "allowed", "rateLimitType": "seven_day"})) is None


def test_rate_limit_event_percent_utilization_is_normalized() -> None:
    def util(value: float) -> float | None:
        info = {"status": "allowed", "rateLimitType": "five_hour", "utilization": value}
        window = parse_rate_limit_event(event(info))
        return None if window is None else window.utilization

    assert util(85) == 0.85
    assert util(250) == 1.0
    assert util(-0.5) == 0.0
    assert util(1) == 1.0


def test_rate_limit_event_iso_resets_at() -> None:
    window = parse_rate_limit_event(
        event({"status": "rejected", "rateLimitType": "five_hour", "resetsAt": "2026-11-29T13:00:00Z"})
    )
    assert window is not None
    assert window.resets_at == datetime(2026, 11, 29, 13, 0, tzinfo=UTC)


def test_rate_limit_event_millisecond_resets_at() -> None:
    window = parse_rate_limit_event(
        event({"status": "rejected", "rateLimitType": "five_hour", "resetsAt": 1_790_000_000_123})
    )
    assert window is not None
    assert window.resets_at == datetime.fromtimestamp(1_790_000_000.123, UTC)


def test_rate_limit_event_unknown_status_is_skipped() -> None:
    info = {"status": "throttled", "rateLimitType": "five_hour", "utilization": 1}
    assert parse_rate_limit_event(event(info)) is None


def test_rate_limit_event_non_matching_type_returns_none() -> None:
    assert parse_rate_limit_event(json.dumps({"type": "assistant", "status": "rejected"})) is None
    assert parse_rate_limit_event("not json") is None
    assert parse_rate_limit_event({"type": "result"}) is None


def test_rate_limit_event_top_level_fields_are_accepted() -> None:
    window = parse_rate_limit_event(
        event(status="allowed_warning", rate_limit_type="seven_day", utilization=0.9, resets_at=1_790_000_000)
    )
    assert window is not None
    assert (window.window, window.status, window.utilization) == ("seven_day", "allowed_warning", 0.9)
    assert window.resets_at == datetime.fromtimestamp(1_790_000_000, UTC)


def test_rate_limit_event_other_window_names_are_kept() -> None:
    window = parse_rate_limit_event(event({"status": "allowed", "rateLimitType": "overage", "utilization": 0.1}))
    assert window is not None
    assert (window.window, window.model_scope) == ("overage", None)


def test_rate_limit_event_collect_keeps_last_per_window() -> None:
    text = "\n".join(
        [
            event({"status": "allowed", "rateLimitType": "five_hour", "utilization": 0.1}),
            '{"type":"assistant","message":{"content":[]}}',
            event({"status": "allowed", "rateLimitType": "seven_day_opus", "utilization": 0.2}),
            event({"status": "rejected", "rateLimitType": "five_hour"}),
            event({"status": "allowed", "rateLimitType": "seven_day_sonnet", "utilization": 0.3}),
        ]
    )
    windows = collect_rate_limits(text)
    assert [(w.window, w.model_scope, w.status, w.utilization) for w in windows] == [
        ("five_hour", None, "rejected", 1.0),
        ("seven_day", "opus", "allowed", 0.2),
        ("seven_day", "sonnet", "allowed", 0.3),
    ]


def test_rate_limit_event_recorded_only_with_account_session() -> None:
    logs = event({"status": "rejected", "rateLimitType": "five_hour"})
    recorder = ListRecorder()
    without = AgentConfig("hi")
    assert record_rate_limits(without, logs) == []
    with_account = without.account_lease(
        AccountLease("acct-1", "CLAUDE_CODE_OAUTH_TOKEN", Secret("sk-ant-oat01-x"), recorder)
    )
    recorded = record_rate_limits(with_account, logs)
    assert len(recorded) == 1
    assert recorder.calls == [recorded]


def test_recorder_not_called_when_logs_hold_no_event() -> None:
    recorder = ListRecorder()
    config = AgentConfig("hi").account_lease(AccountLease("a", "ANTHROPIC_API_KEY", Secret("k"), recorder))
    assert record_rate_limits(config, '{"type":"result"}') == []
    assert recorder.calls == []


def test_real_cli_events_give_the_last_five_hour_warning() -> None:
    windows = collect_rate_limits((FIXTURES / "stream_rate_limits.out").read_text())
    assert windows == [
        RateLimitWindow("five_hour", None, "allowed_warning", 0.91, datetime.fromtimestamp(1_790_000_000, UTC))
    ]


@given(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(["allowed", "allowed_warning", "rejected"]))
def test_utilization_is_always_within_zero_and_one(value: float, status: str) -> None:
    window = parse_rate_limit_event(event({"status": status, "rateLimitType": "five_hour", "utilization": value}))
    if window is not None:
        assert 0.0 <= window.utilization <= 1.0


def test_docstring_examples_run() -> None:
    import doctest

    from ironflow.claude import rate_limits

    outcome = doctest.testmod(rate_limits)
    assert outcome.attempted >= 1
    assert outcome.failed == 0
