"""Errors: three branches by what the caller can do, the retry classification of §7.2, secret-free texts."""

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


_BRANCHES = (errors.UsageError, errors.InfrastructureError, errors.AgentError)


@pytest.mark.parametrize(
    ("error", "branch", "retryable"),
    [
        (errors.ConfigError("bad builder value"), errors.UsageError, False),
        (errors.UnstorableValue("the result cannot be stored"), errors.UsageError, False),
        (errors.StepConfigError("refused"), errors.UsageError, False),
        (errors.ToolProfileUnsupported("no profiles here"), errors.UsageError, False),
        (errors.PromptTooLarge(10, 3, 2), errors.UsageError, False),
        (errors.MissingCredential("no credential"), errors.UsageError, False),
        (errors.KubeClientConfigError("no kubeconfig"), errors.UsageError, False),
        (errors.ReplayDivergence(0, "agent a", "agent b"), errors.UsageError, False),
        (errors.RunStateConflict("run r is pending; only failed runs can be retried"), errors.UsageError, False),
        (errors.ProcessFailed(1, "boom"), errors.AgentError, True),
        (errors.AgentTimeout(300), errors.AgentError, True),
        (errors.SchemaValidation("x", "y"), errors.AgentError, True),
        (errors.RateLimited("rejected window"), errors.AgentError, True),
        (errors.HttpProviderError(400, "bad request"), errors.AgentError, False),
        (errors.ApiError(529, "overloaded_error", "overloaded"), errors.AgentError, True),
        (errors.BudgetExceeded(1.0, 0.5), errors.AgentError, False),
        (errors.KubeUnavailable("down", status=503), errors.InfrastructureError, True),
        (errors.KubeForbidden("no", status=403), errors.InfrastructureError, False),
        (errors.KubeConflict("exists", status=409), errors.InfrastructureError, True),
        (errors.KubeNotFound("gone", status=404), errors.InfrastructureError, False),
        (errors.KubeGone("too old", status=410), errors.InfrastructureError, False),
        (errors.CleanupError("pods still terminating"), errors.InfrastructureError, True),
        (errors.SandboxError("bwrap failed"), errors.InfrastructureError, True),
        (errors.OperationTimeout("pod 'check' did not finish within 300s"), errors.InfrastructureError, True),
        (errors.AuthProxyError("unreachable"), errors.InfrastructureError, True),
        (errors.AuthProxyError("refused", status=403, retryable=False), errors.InfrastructureError, False),
        (errors.SandboxFailed("pod p", "Evicted", "low on memory", started=True), errors.InfrastructureError, True),
        (errors.SandboxRefused("pod p", "InvalidImageName", "bad name"), errors.UsageError, False),
    ],
)
def test_every_leaf_hangs_under_exactly_one_branch(
    error: errors.IronflowError, branch: type[errors.IronflowError], retryable: bool
) -> None:
    assert [b for b in _BRANCHES if isinstance(error, b)] == [branch]
    assert error.retryable is retryable


def test_every_public_error_class_has_a_branch() -> None:
    classes = [getattr(errors, n) for n in errors.__all__ if isinstance(getattr(errors, n), type)]
    leaves = [c for c in classes if c is not errors.IronflowError and c not in _BRANCHES]
    assert leaves, "no leaves found"
    assert [c.__name__ for c in leaves if sum(issubclass(c, b) for b in _BRANCHES) != 1] == []


def test_a_usage_error_is_never_retryable() -> None:
    usage = [getattr(errors, n) for n in errors.__all__ if isinstance(getattr(errors, n), type)]
    assert [c.__name__ for c in usage if issubclass(c, errors.UsageError) and c.retryable] == []


def test_messages_match_the_reference() -> None:
    assert str(errors.ProcessFailed(-1, "x")) == "claude process exited with code -1: x"
    assert str(errors.PromptTooLarge(800_004, 200_001, 200_000)) == (
        "prompt too large: 800004 chars (~200001 tokens) exceeds model limit of 200000 tokens"
    )
    assert str(errors.AgentTimeout(300)) == "agent timed out after 300s"


def test_sandbox_errors_name_the_object_the_reason_and_the_verdict() -> None:
    refused = errors.SandboxRefused("pod p", "CreateContainerConfigError", 'secret "t" not found', events="Warning x")
    assert str(refused) == (
        'pod p cannot start: CreateContainerConfigError: secret "t" not found (not retryable)'
        "\nrecent events:\nWarning x"
    )
    assert str(errors.SandboxFailed("pod p", "OOMKilled", "", started=True)) == (
        "pod p failed: OOMKilled: (no message) (retryable)"
    )
    long = errors.SandboxFailed("pod p", "Unschedulable", "x" * 10_000, events="y" * 10_000)
    assert len(long.message) < 4_200


def test_outside_text_is_truncated() -> None:
    err = errors.ProcessFailed(1, "x" * 60_000)
    assert err.stderr.endswith("...(truncated)")
    assert len(err.stderr.encode()) < 50_100


def test_a_timed_out_commands_output_is_bounded_and_the_message_says_so() -> None:
    whole = errors.CommandTimeout(2, output=b"started\n", stderr=b"warn")
    assert (str(whole), whole.output, whole.stderr) == ("command timed out after 2s", b"started\n", b"warn")
    cut = errors.CommandTimeout(2.5, output=b"x" * (errors.PARTIAL_OUTPUT_BYTES + 1))
    assert cut.output == b"x" * errors.PARTIAL_OUTPUT_BYTES
    assert str(cut).startswith("command timed out after 2.5s (output kept up to ")
    assert cut.retryable  # an AgentTimeout, retried as one


def test_secret_redacts_everywhere() -> None:
    value = "sk-ant-api03-" + "y" * 50
    secret = Secret(value)
    assert secret.reveal() == value
    exc = errors.AuthProxyError(f"failed with {secret}")
    assert not find_leaks([value], repr(secret), str(secret), f"{secret}", exc, [secret], {"k": secret})
    assert Secret(value) == secret
    assert len(secret.short_id()) == 12
