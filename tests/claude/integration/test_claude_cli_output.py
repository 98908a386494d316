"""The real Claude Code CLI against FakeAnthropic, its output read by our parser.

Each test runs the pinned CLI once (about half a second) with a temporary HOME and the
fake's URL, then checks what the parser makes of what the CLI printed, and what the CLI
sent to the fake. The argv is built by hand here (``claude.command`` builds it for real).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from ironflow import errors
from ironflow.claude import output, rate_limits
from ironflow.claude.cli import find_claude_cli
from ironflow.fake_model.server import ErrorTurn, FakeAnthropic, Script, TextTurn, ToolUseTurn, Usage
from ironflow.secrets import Secret
from ironflow.steps import AccountLease, AgentConfig
from ironflow.testing import assert_no_leaks

pytestmark = pytest.mark.claude_cli

API_KEY = "sk-ant-api03-integration-dummy-key-0000"


def _cli() -> str:
    try:
        return find_claude_cli()
    except errors.ConfigError as exc:
        pytest.skip(f"Claude Code CLI not installed: {exc}")


async def run_claude(
    fake: FakeAnthropic, home: Path, *args: str, prompt: str = "Say hello", oauth: bool = False
) -> tuple[int, str, str]:
    """Run the CLI like a sandbox would; returns (exit code, stdout, stderr)."""
    proc = await asyncio.create_subprocess_exec(
        _cli(),
        "-p",
        prompt,
        *args,
        env=fake.cli_env(home, api_key=API_KEY, oauth=oauth),
        cwd=home,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        stdout, stderr = await asyncio.wait_for(proc.communicate(), 60)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode is not None
    return proc.returncode, stdout.decode(), stderr.decode()


JSON = ("--output-format", "json", "--model", "sonnet")
STREAM = ("--output-format", "stream-json", "--verbose", "--model", "sonnet")


async def test_json_output_parses_into_text_model_and_usage(tmp_path: Path) -> None:
    async with FakeAnthropic(Script.of("Hello from the fake.", usage=Usage(123, 45))) as fake:
        code, out, err = await run_claude(fake, tmp_path, *JSON)
    assert code == 0, err
    result = output.parse_response(out, AgentConfig("Say hello"), wall_ms=1)
    assert result.value == "Hello from the fake."
    (request,) = fake.message_requests
    assert result.model == request.body["model"]
    assert result.input_tokens == 123
    assert result.output_tokens == 45
    assert result.cost_usd is not None
    assert result.cost_usd > 0
    assert request.query == {"beta": "true"}
    assert request.header("x-api-key") == API_KEY
    assert request.body["stream"] is True
    assert_no_leaks([API_KEY], out, err, repr(request), fake.requests)


async def test_stream_json_output_parses_with_a_debug_turn(tmp_path: Path) -> None:
    async with FakeAnthropic(Script.of("Streamed hello.")) as fake:
        code, out, err = await run_claude(fake, tmp_path, *STREAM)
    assert code == 0, err
    result = output.parse_output(out, AgentConfig("Say hello", verbose=True), wall_ms=1)
    assert result.value == "Streamed hello."
    assert result.model == fake.message_requests[0].body["model"]
    assert result.debug_messages is not None
    assert [d.text for d in result.debug_messages] == ["Streamed hello."]


async def test_tool_turn_runs_bash_and_sends_the_tool_result_back(tmp_path: Path) -> None:
    script = Script.of(ToolUseTurn("Bash", {"command": "echo marker-$((6*7))"}), "Saw marker-42.")
    async with FakeAnthropic(script) as fake:
        code, out, err = await run_claude(fake, tmp_path, *STREAM, "--allowedTools", "Bash", prompt="Run it")
    assert code == 0, err
    first, second = fake.message_requests
    assert first.tool_results() == []
    (tool_result,) = second.tool_results()
    assert "marker-42" in json.dumps(tool_result["content"])
    result = output.parse_stream_response(out, AgentConfig("Run it", verbose=True), wall_ms=1)
    assert result.value == "Saw marker-42."
    assert result.debug_messages is not None
    call_turn = result.debug_messages[0]
    assert call_turn.tool_calls[0].name == "Bash"
    assert call_turn.tool_results[0].tool_use_id == call_turn.tool_calls[0].id == tool_result["tool_use_id"]
    assert "marker-42" in json.dumps(call_turn.tool_results[0].content)
    # Its Bash tool's scratch went under the home, not into /tmp/claude-<uid>, where nothing removes it.
    assert list((tmp_path / ".claude-tmp").iterdir()), "the CLI wrote no scratch where cli_env points it"


@pytest.mark.parametrize(
    ("status", "kind", "retryable"),
    [(529, "overloaded_error", True), (500, "api_error", True)],
)
async def test_api_error_exits_nonzero_and_maps_to_api_error(
    tmp_path: Path, status: int, kind: str, retryable: bool
) -> None:
    async with FakeAnthropic(Script.of(ErrorTurn(status, kind, "injected"), default=None)) as fake:
        code, out, err = await run_claude(fake, tmp_path, *JSON)
    assert code != 0
    with pytest.raises(errors.ApiError) as caught:
        output.handle_nonzero_exit(code, out, err, AgentConfig("Say hello"), wall_ms=1)
    assert caught.value.status == status
    assert caught.value.retryable is retryable
    assert len(fake.message_requests) == 1  # CLAUDE_CODE_MAX_RETRIES=0: no retry


async def test_wrong_credential_gets_401_and_a_non_retryable_api_error(tmp_path: Path) -> None:
    async with FakeAnthropic(required_credential=Secret("some-other-key")) as fake:
        code, out, err = await run_claude(fake, tmp_path, *JSON)
    assert code != 0
    with pytest.raises(errors.ApiError) as caught:
        output.handle_nonzero_exit(code, out, err, AgentConfig("Say hello"), wall_ms=1)
    assert caught.value.status == 401
    assert not caught.value.retryable
    assert_no_leaks([API_KEY, "some-other-key"], str(caught.value), repr(caught.value))


async def test_budget_overrun_maps_to_budget_exceeded(tmp_path: Path) -> None:
    script = Script.of(TextTurn("Expensive.", usage=Usage(2_000_000, 2_000_000)))
    config = AgentConfig("Say hello", max_budget_usd=0.01)
    async with FakeAnthropic(script) as fake:
        code, out, err = await run_claude(fake, tmp_path, *JSON, "--max-budget-usd", "0.01")
    assert code != 0
    with pytest.raises(errors.BudgetExceeded) as caught:
        output.handle_nonzero_exit(code, out, err, config, wall_ms=1)
    assert caught.value.limit_usd == 0.01
    assert caught.value.spent_usd > 0.01


class _Recorder:
    def __init__(self) -> None:
        self.windows: list[Any] = []

    def record(self, windows: Iterable[Any]) -> None:
        self.windows.extend(windows)


async def test_subscription_rate_limit_headers_reach_the_account_recorder(tmp_path: Path) -> None:
    headers = {
        "anthropic-ratelimit-unified-status": "allowed_warning",
        "anthropic-ratelimit-unified-representative-claim": "five_hour",
        "anthropic-ratelimit-unified-5h-status": "allowed_warning",
        "anthropic-ratelimit-unified-5h-utilization": "0.87",
        "anthropic-ratelimit-unified-5h-reset": "1790000000",
        "anthropic-ratelimit-unified-5h-surpassed-threshold": "0.75",
    }
    recorder = _Recorder()
    config = AgentConfig("Say hello", verbose=True).account_lease(
        AccountLease("acct-1", "CLAUDE_CODE_OAUTH_TOKEN", Secret(API_KEY), recorder)
    )
    async with FakeAnthropic(Script.of(TextTurn("Hi.", headers=headers))) as fake:
        code, out, err = await run_claude(fake, tmp_path, *STREAM, oauth=True)
    assert code == 0, err
    assert fake.message_requests[0].header("authorization") == f"Bearer {API_KEY}"
    windows = rate_limits.record_rate_limits(config, out)
    assert [(w.window, w.status, w.utilization) for w in windows] == [("five_hour", "allowed_warning", 0.87)]
    assert recorder.windows == windows
    assert output.parse_output(out, config, wall_ms=1).value == "Hi."


async def test_structured_output_tool_call_becomes_the_structured_value(tmp_path: Path) -> None:
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
    config = AgentConfig("What is six times seven?", json_schema=schema)
    script = Script.of(ToolUseTurn("StructuredOutput", {"answer": 42}), "Done.")
    async with FakeAnthropic(script) as fake:
        code, out, err = await run_claude(fake, tmp_path, *JSON, "--json-schema", json.dumps(schema))
    assert code == 0, err
    result = output.parse_response(out, config, wall_ms=1)
    assert result.value == {"answer": 42}
    assert result.json() == {"answer": 42}


async def test_stream_json_api_error_carries_the_status(tmp_path: Path) -> None:
    async with FakeAnthropic(Script.of(ErrorTurn(529, "overloaded_error", "Overloaded"), default=None)) as fake:
        code, out, err = await run_claude(fake, tmp_path, *STREAM)
    assert code != 0
    with pytest.raises(errors.ApiError) as caught:
        output.handle_nonzero_exit(code, out, err, AgentConfig("Say hello", verbose=True), wall_ms=1)
    assert caught.value.status == 529
