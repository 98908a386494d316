"""Errors: the retry classification of §7.2 and secret-free texts."""

from __future__ import annotations

import pytest

from ironflow import errors
from ironflow.secrets import Secret, find_leaks


@pytest.mark.parametrize(
    ("error", "retryable"),
    [
        (errors.ProcessFailed(1, "boom"), True),
        (errors.AgentTimeout(300), True),
        (errors.SchemaValidation("x", "y"), True),
        (errors.RateLimited("rejected window"), True),
        (errors.HttpProviderError(0, "no answer"), True),
        (errors.HttpProviderError(502, "bad gateway"), True),
        (errors.HttpProviderError(400, "bad request"), False),
        (errors.ApiError(None, None, "?"), True),
        (errors.ApiError(429, "rate_limit_error", "slow down"), True),
        (errors.ApiError(529, "overloaded_error", "overloaded"), True),
        (errors.ApiError(400, "invalid_request_error", "bad"), False),
        (errors.ApiError(401, "authentication_error", "bad key"), False),
        (errors.PromptTooLarge(10, 3, 2), False),
        (errors.BudgetExceeded(1.0, 0.5), False),
        (errors.ToolProfileUnsupported("no profiles here"), False),
        (errors.StepConfigError("refused"), False),
        (errors.ConfigError("bad builder value"), False),
        (errors.CleanupError("pods still terminating"), True),
        (errors.KubeUnavailable("down", status=503), True),
    ],
)
def test_retryable_classification(error: errors.IronflowError, retryable: bool) -> None:
    assert error.retryable is retryable


def test_messages_match_the_reference() -> None:
    assert str(errors.ProcessFailed(-1, "x")) == "claude process exited with code -1: x"
    assert str(errors.PromptTooLarge(800_004, 200_001, 200_000)) == (
        "prompt too large: 800004 chars (~200001 tokens) exceeds model limit of 200000 tokens"
    )
    assert str(errors.AgentTimeout(300)) == "agent timed out after 300s"


def test_outside_text_is_truncated() -> None:
    err = errors.ProcessFailed(1, "x" * 60_000)
    assert err.stderr.endswith("...(truncated)")
    assert len(err.stderr.encode()) < 50_100


def test_secret_redacts_everywhere() -> None:
    value = "sk-ant-api03-" + "y" * 50
    secret = Secret(value)
    assert secret.reveal() == value
    exc = errors.AuthProxyError(f"failed with {secret}")
    assert not find_leaks([value], repr(secret), str(secret), f"{secret}", exc, [secret], {"k": secret})
    assert Secret(value) == secret
    assert len(secret.short_id()) == 12
