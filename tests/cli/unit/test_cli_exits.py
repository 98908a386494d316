"""One exit-code table for every command: the error's branch decides, and the failure is one line."""

from __future__ import annotations

import pytest

from ironflow import errors
from ironflow.cli import exits


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (errors.ConfigError("x"), 2),
        (errors.StepConfigError("x"), 2),
        (errors.PromptTooLarge(1, 1, 1), 2),
        (errors.MissingCredential("no credential"), 2),
        (errors.KubeClientConfigError("no kubeconfig"), 2),
        (errors.UnstorableValue("the result cannot be stored"), 2),
        (errors.SandboxError("x"), 3),
        (errors.AuthProxyError("down"), 3),
        (errors.AuthProxyError("refused", status=403, retryable=False), 3),
        (errors.KubeForbidden("no", status=403), 3),
        (errors.ProcessFailed(1, "x"), 1),
        (errors.AgentTimeout(1), 1),
        (errors.ApiError(500, None, "x"), 1),
        (ValueError("not ours"), 1),
    ],
)
def test_exit_codes_tell_bad_input_from_failed_step_from_infrastructure(exc: Exception, code: int) -> None:
    assert exits.exit_code_for(exc) == code


def test_fail_prints_one_error_line_and_exits_with_the_code(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        exits.fail("setting 'x' is wrong", 3)
    assert info.value.code == 3
    assert capsys.readouterr().err == "error: setting 'x' is wrong\n"


def test_fail_ends_the_line_once_when_the_message_ends_with_a_newline(capsys: pytest.CaptureFixture[str]) -> None:
    """A failed agent's message carries its stderr, newline included."""
    with pytest.raises(SystemExit):
        exits.fail("claude process exited with code 3: boom\n", 1)
    assert capsys.readouterr().err == "error: claude process exited with code 3: boom\n"


def test_fail_for_joins_a_wrapped_infrastructure_message_into_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        exits.fail_for(errors.KubeUnavailable("the API server\n  is down", status=503))
    assert info.value.code == 3
    assert capsys.readouterr().err == "error: the API server is down\n"
