"""The claude argument list and the ``sh -c`` command: order, quoting, stdin, refusals."""

from __future__ import annotations

import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ironflow import AgentConfig, errors
from ironflow.claude import command
from ironflow.steps import PermissionMode


def test_minimal_args_are_prompt_format_and_model() -> None:
    assert command.build_args(AgentConfig("hi"), allow_bypass=False) == [
        "-p",
        "hi",
        "--output-format",
        "json",
        "--model",
        "sonnet",
    ]


def test_full_args_follow_the_reference_order() -> None:
    cfg = AgentConfig(
        "hi",
        system_prompt="sys",
        append_system_prompt="more",
        model="opus",
        allowed_tools=("Read", "Bash(git:*)"),
        disallowed_tools=("Write",),
        max_turns=3,
        max_budget_usd=2.5,
        mcp_config="/etc/mcp.json",
        strict_mcp_config=True,
        bare=True,
        permission_mode=PermissionMode.DONT_ASK,
        resume_session_id="abc",
        verbose=True,
    )
    assert command.build_args(cfg, allow_bypass=False) == [
        "-p",
        "hi",
        "--output-format",
        "stream-json",
        "--verbose",
        "--system-prompt",
        "sys",
        "--append-system-prompt",
        "more",
        "--model",
        "opus",
        "--allowedTools",
        "Read,Bash(git:*)",
        "--disallowedTools",
        "Write",
        "--max-turns",
        "3",
        "--max-budget-usd",
        "2.5",
        "--mcp-config",
        "/etc/mcp.json",
        "--strict-mcp-config",
        "--bare",
        "--permission-mode",
        "dontAsk",
        "--resume",
        "abc",
    ]


def test_json_schema_is_passed_as_compact_json() -> None:
    cfg = AgentConfig("hi", json_schema={"type": "object", "properties": {"n": {"type": "integer"}}})
    args = command.build_args(cfg, allow_bypass=False)
    assert args[args.index("--json-schema") + 1] == '{"type":"object","properties":{"n":{"type":"integer"}}}'


def test_session_id_is_ignored_when_resuming() -> None:
    args = command.build_args(AgentConfig("hi", session_id="new", resume_session_id="old"), allow_bypass=False)
    assert "--session-id" not in args
    assert args[-2:] == ["--resume", "old"]
    assert command.build_args(AgentConfig("hi", session_id="new"), allow_bypass=False)[-2:] == ["--session-id", "new"]


def test_auto_permission_mode() -> None:
    args = command.build_args(AgentConfig("hi", permission_mode=PermissionMode.AUTO), allow_bypass=False)
    assert args[-2:] == ["--permission-mode", "auto"]


def test_bypass_permissions_needs_the_worker_opt_in() -> None:
    cfg = AgentConfig("hi", permission_mode=PermissionMode.BYPASS_PERMISSIONS)
    with pytest.raises(errors.StepConfigError) as info:
        command.build_args(cfg, allow_bypass=False)
    assert info.value.message == "BypassPermissions requires IRONFLOW_ALLOW_BYPASS=1 environment variable"
    assert command.build_args(cfg, allow_bypass=True)[-1] == "--dangerously-skip-permissions"


def test_tool_profile_is_unsupported_and_not_retryable() -> None:
    with pytest.raises(errors.ToolProfileUnsupported) as info:
        command.build_args(AgentConfig("hi", tool_profile="readonly"), allow_bypass=True)
    assert "tool profile 'readonly'" in info.value.message
    assert info.value.retryable is False


@pytest.mark.parametrize(
    ("value", "text"), [(2.5, "2.5"), (1.0, "1"), (0.1, "0.1"), (10.0, "10"), (1e20, "100000000000000000000")]
)
def test_budget_is_formatted_like_rust_f64_display(value: float, text: str) -> None:
    assert command.format_f64(value) == text


def test_prompt_of_exactly_the_threshold_stays_in_argv() -> None:
    at = AgentConfig("a" * command.PROMPT_STDIN_THRESHOLD)
    over = AgentConfig("a" * (command.PROMPT_STDIN_THRESHOLD + 1))
    assert not command.prompt_via_stdin(at)
    assert command.build_args(at, allow_bypass=False)[0] == "-p"
    assert command.prompt_via_stdin(over)
    assert "-p" not in command.build_args(over, allow_bypass=False)


def test_threshold_counts_utf8_bytes() -> None:
    assert command.prompt_via_stdin(AgentConfig("é" * 50_001))


def test_prompt_too_large_counts_all_prompts() -> None:
    command.validate_prompt_size(AgentConfig("a" * 800_000))
    with pytest.raises(errors.PromptTooLarge) as info:
        command.validate_prompt_size(AgentConfig("a" * 800_000, system_prompt="b" * 4))
    assert info.value.message == "prompt too large: 800004 chars (~200001 tokens) exceeds model limit of 200000 tokens"
    assert info.value.retryable is False


def test_one_million_context_models_get_the_larger_limit() -> None:
    command.validate_prompt_size(AgentConfig("a" * 900_000, model="sonnet[1m]"))
    with pytest.raises(errors.PromptTooLarge, match="limit of 1000000 tokens"):
        command.validate_prompt_size(AgentConfig("a" * 4_000_004, model="sonnet[1m]"))


def test_shell_command_small_prompt_with_working_dir_and_prefix() -> None:
    script = command.agent_shell_command(
        ["-p", "it's"], claude_path="/bin/claude", working_dir="/work dir", prefix="export A=1; "
    )
    assert script == "export A=1; cd '/work dir' && '/bin/claude' '-p' 'it'\\''s'"


def test_shell_command_large_prompt_reads_the_prompt_file() -> None:
    script = command.agent_shell_command(
        ["--model", "sonnet"], claude_path="claude", working_dir=None, prompt_file=command.prompt_file_path()
    )
    assert script == "cat '/mnt/ironflow-prompt/prompt' | 'claude' '--model' 'sonnet'"


def test_trace_prefix_exports_traceparent() -> None:
    tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    assert command.trace_prefix(tp) == f"export TRACEPARENT='{tp}'; "
    assert command.trace_prefix(None) == ""


@settings(max_examples=40, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00"), max_size=40))
def test_shell_quote_round_trips_through_a_real_sh(value: str) -> None:
    """Whatever the text, ``sh`` hands the quoted word back unchanged: nothing is interpreted."""
    out = subprocess.run(
        ["sh", "-c", f"printf '%s' {command.shell_quote(value)}"], capture_output=True, timeout=5, check=True
    )
    assert out.stdout.decode("utf-8", errors="surrogateescape") == value
