"""Provider Account choice (pure): skip rejected windows, prefer low utilization, say how long to wait."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from ironflow import errors
from ironflow.claude.rate_limits import parse_rate_limit_event
from ironflow.engine import accounts, model

A = accounts.ProviderAccount("a", accounts.CredentialRef(env="TOKEN_A"))
B = accounts.ProviderAccount("b", accounts.CredentialRef(secret="claude", key="token"), kind="api_key")

REJECTED = model.WindowStatus.REJECTED
ALLOWED = model.WindowStatus.ALLOWED


def test_an_account_without_windows_is_chosen() -> None:
    assert accounts.choose_account([A, B], [], now=0).account == A


def test_an_account_in_a_rejected_window_is_skipped() -> None:
    windows = [model.RateWindow("a", "five_hour", REJECTED, 1.0, resets_at=500)]
    assert accounts.choose_account([A, B], windows, now=100).account == B


def test_a_rejected_window_past_its_reset_no_longer_blocks() -> None:
    windows = [model.RateWindow("a", "five_hour", REJECTED, 1.0, resets_at=500)]
    assert accounts.choose_account([A, B], windows, now=500).account == A


def test_the_least_used_account_is_preferred() -> None:
    windows = [model.RateWindow("a", "five_hour", ALLOWED, 0.9), model.RateWindow("b", "seven_day", ALLOWED, 0.2)]
    assert accounts.choose_account([A, B], windows, now=0).account == B


def test_steps_in_flight_break_a_utilization_tie() -> None:
    assert accounts.choose_account([A, B], [], now=0, in_use={"a": 2, "b": 1}).account == B


def test_all_rejected_waits_for_the_earliest_reset_and_names_the_accounts() -> None:
    windows = [
        model.RateWindow("a", "five_hour", REJECTED, 1.0, resets_at=900),
        model.RateWindow("b", "seven_day", REJECTED, 1.0, resets_at=600),
        model.RateWindow("b", "five_hour", REJECTED, 1.0, resets_at=700),
    ]
    choice = accounts.choose_account([A, B], windows, now=100)
    assert choice.account is None
    assert choice.wait_until == 700  # b is free once both of its windows reset
    assert choice.reason == "a rejected until 1970-01-01T00:15:00Z; b rejected until 1970-01-01T00:11:40Z"


def test_no_accounts_is_a_config_error() -> None:
    with pytest.raises(errors.ConfigError, match="no provider accounts configured"):
        accounts.choose_account([], [], now=0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "exactly one of env=NAME or secret=NAME"),
        ({"env": "X", "secret": "s", "key": "k"}, "exactly one of env=NAME or secret=NAME"),
        ({"secret": "s"}, "credential from Secret 's' needs key=KEY"),
    ],
)
def test_a_credential_reference_needs_one_source(kwargs: dict[str, str], message: str) -> None:
    with pytest.raises(errors.ConfigError, match=message):
        accounts.CredentialRef(**kwargs)


def test_account_kind_picks_the_env_name_the_cli_reads() -> None:
    assert A.env_name == "CLAUDE_CODE_OAUTH_TOKEN"
    assert B.env_name == "ANTHROPIC_API_KEY"


def test_a_cli_rate_limit_event_becomes_a_stored_window() -> None:
    parsed = parse_rate_limit_event(
        '{"type":"rate_limit_event","rate_limit_info":{"status":"rejected","rateLimitType":"seven_day_opus",'
        '"resetsAt":"2030-01-01T00:00:00Z"}}'
    )
    window = accounts.window_from_claude("a", parsed, now=5.0)
    assert window == model.RateWindow(
        "a", "seven_day", REJECTED, 1.0, scope="opus",
        resets_at=datetime(2030, 1, 1, tzinfo=UTC).timestamp(), recorded_at=5.0,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("main=env:CLAUDE_TOKEN", accounts.ProviderAccount("main", accounts.CredentialRef(env="CLAUDE_TOKEN"))),
        (
            "ci=secret:claude/token,kind=api_key",
            accounts.ProviderAccount("ci", accounts.CredentialRef(secret="claude", key="token"), kind="api_key"),
        ),
        (
            "ci=secret:agents/claude/token",
            accounts.ProviderAccount("ci", accounts.CredentialRef(secret="claude", key="token", namespace="agents")),
        ),
    ],
)
def test_an_account_is_read_from_its_command_line_form(spec: str, expected: accounts.ProviderAccount) -> None:
    assert accounts.parse_account(spec) == expected


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("main", "account 'main' must look like NAME=env:VAR or NAME=secret:"),
        ("main=CLAUDE_TOKEN", "account 'main=CLAUDE_TOKEN' must look like"),
        ("main=file:/tmp/x", "the source must be env: or secret:, got 'file'"),
        ("main=secret:token", "a Secret reference is [NAMESPACE/]SECRET/KEY"),
        ("main=env:X,kind=password", "unknown option 'kind=password'"),
    ],
)
def test_a_malformed_account_is_refused_with_the_accepted_forms(spec: str, message: str) -> None:
    with pytest.raises(errors.ConfigError) as caught:
        accounts.parse_account(spec)
    assert message in caught.value.message
