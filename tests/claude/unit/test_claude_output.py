"""Parsing Claude Code output (§1.9, §1.10), on output captured from the real CLI 2.1.332.

Fixtures come from ``scripts/capture-claude-fixtures.py``; hand-written objects cover the
branches the fake cannot make the CLI print (fences, malformed fields).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ironflow import errors
from ironflow.claude import output
from ironflow.claude.output import PartialUsage
from ironflow.results import AgentResult
from ironflow.steps import AgentConfig

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "claude"
CASES: dict[str, Any] = json.loads((FIXTURES / "cases.json").read_text())["cases"]
SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}

PLAIN = AgentConfig("Say hello")
VERBOSE = AgentConfig("Say hello", verbose=True)
WITH_SCHEMA = AgentConfig("What is the answer?", json_schema=SCHEMA)


def fixture(name: str) -> str:
    return (FIXTURES / f"{name}.out").read_text()


def result_obj(**fields: Any) -> str:
    return json.dumps({"type": "result", "subtype": "success", "is_error": False, **fields})


# --- json output ---------------------------------------------------------------------------


def test_json_text_output_becomes_a_result_with_usage_and_model() -> None:
    raw = json.loads(fixture("json_text"))
    result = output.parse_response(fixture("json_text"), PLAIN, wall_ms=999_999)
    assert result.value == "Hello from the fake model."
    assert result.text == "Hello from the fake model."
    assert result.session_id == raw["session_id"]
    assert result.cost_usd == raw["total_cost_usd"]
    assert result.input_tokens == 10
    assert result.output_tokens == 5
    assert result.cache_read_input_tokens == 0
    assert result.cache_creation_input_tokens == 0
    assert result.model == "claude-sonnet-5-5"
    assert result.duration_ms == raw["duration_ms"]
    assert result.debug_messages is None


def test_json_structured_output_is_the_value_with_a_schema() -> None:
    result = output.parse_response(fixture("json_structured"), WITH_SCHEMA, wall_ms=1)
    assert result.value == {"answer": "42"}
    assert result.json() == {"answer": "42"}
    assert result.text == ""


def test_api_error_529_becomes_retryable_api_error_with_status_and_code() -> None:
    assert CASES["json_api_error_529"]["exit_code"] == 1
    with pytest.raises(errors.ApiError) as caught:
        output.parse_response(fixture("json_api_error_529"), PLAIN, wall_ms=1)
    assert caught.value.status == 529
    assert caught.value.code == "overloaded_error"
    assert caught.value.retryable
    assert "529 Overloaded" in str(caught.value)


def test_budget_error_becomes_budget_exceeded_with_spent_and_limit() -> None:
    config = PLAIN.replace(max_budget_usd=0.01)
    with pytest.raises(errors.BudgetExceeded) as caught:
        output.parse_response(fixture("json_budget_exceeded"), config, wall_ms=1)
    assert caught.value.spent_usd == json.loads(fixture("json_budget_exceeded"))["total_cost_usd"]
    assert caught.value.spent_usd > 0.01
    assert caught.value.limit_usd == 0.01
    assert not caught.value.retryable


def test_budget_error_with_schema_and_no_value_is_budget_exceeded() -> None:
    config = WITH_SCHEMA.replace(max_budget_usd=0.01)
    with pytest.raises(errors.BudgetExceeded):
        output.parse_response(fixture("json_budget_exceeded"), config, wall_ms=1)


def test_max_turns_without_structured_output_hints_at_max_turns() -> None:
    with pytest.raises(errors.SchemaValidation) as caught:
        output.parse_response(fixture("json_max_turns"), WITH_SCHEMA, wall_ms=1)
    assert caught.value.expected == "structured_output field"
    assert caught.value.got == "null" + output.MAX_TURNS_HINT
    assert isinstance(caught.value.partial, PartialUsage)
    assert caught.value.partial.has_usage
    assert caught.value.raw_response.startswith("{")


def test_max_turns_without_schema_is_an_empty_text_value() -> None:
    result = output.parse_response(fixture("json_max_turns"), PLAIN, wall_ms=1)
    assert result.value == ""


def test_invalid_json_is_schema_validation_naming_claude_json_output() -> None:
    with pytest.raises(errors.SchemaValidation) as caught:
        output.parse_response("x" * 10_000, PLAIN, wall_ms=1)
    assert caught.value.expected == "ClaudeJsonOutput"
    assert caught.value.got.startswith("parse error: ")
    assert len(caught.value.raw_response.encode()) <= 4000 + len("...(truncated)")


def test_wrongly_typed_field_is_a_parse_error_naming_the_field() -> None:
    with pytest.raises(errors.SchemaValidation, match="total_cost_usd"):
        output.parse_response(result_obj(result="x", total_cost_usd="cheap"), PLAIN, wall_ms=1)


def test_missing_duration_falls_back_to_wall_clock() -> None:
    result = output.parse_response(result_obj(result="hi"), PLAIN, wall_ms=4321)
    assert result.duration_ms == 4321
    assert result.output_tokens is None
    assert result.model is None


def test_usage_without_output_tokens_counts_zero() -> None:
    result = output.parse_response(result_obj(result="hi", usage={"input_tokens": 3}), PLAIN, wall_ms=1)
    assert result.input_tokens == 3
    assert result.output_tokens == 0


def test_null_result_is_empty_text() -> None:
    assert output.parse_response(result_obj(result=None), PLAIN, wall_ms=1).value == ""


def test_model_is_the_first_model_usage_key_in_cli_order() -> None:
    text = result_obj(result="x", modelUsage={"claude-sonnet-5-5": {}, "claude-haiku-5-0": {}})
    assert output.parse_response(text, PLAIN, wall_ms=1).model == "claude-sonnet-5-5"


def test_is_error_without_error_subtype_and_without_message_names_missing_message() -> None:
    with pytest.raises(errors.ApiError) as caught:
        output.parse_response(result_obj(is_error=True, api_error_status=400), PLAIN, wall_ms=1)
    assert caught.value.status == 400
    assert not caught.value.retryable
    assert "(no message from the claude CLI)" in str(caught.value)


def test_api_error_code_field_wins_over_error_type() -> None:
    text = result_obj(is_error=True, api_error_status=429, api_error_code="rate_limit", api_error_type="other")
    with pytest.raises(errors.ApiError) as caught:
        output.parse_response(text, PLAIN, wall_ms=1)
    assert caught.value.code == "rate_limit"
    assert caught.value.retryable


@pytest.mark.parametrize(
    ("result_text", "expected"),
    [
        ('{"answer": "a"}', {"answer": "a"}),
        ('Here:\n```json\n{"answer": "b"}\n```\nbye', {"answer": "b"}),
        ('The value is {"answer": "c"} as asked.', {"answer": "c"}),
        ("[1, 2]", [1, 2]),
    ],
)
def test_schema_value_is_found_in_result_json_fence_or_braces(result_text: str, expected: Any) -> None:
    result = output.parse_response(result_obj(result=result_text), WITH_SCHEMA, wall_ms=1)
    assert result.value == expected


def test_structured_output_field_wins_over_result_text() -> None:
    text = result_obj(result='{"answer": "text"}', structured_output={"answer": "field"})
    assert output.parse_response(text, WITH_SCHEMA, wall_ms=1).value == {"answer": "field"}


def test_schema_without_any_json_is_schema_validation_got_null() -> None:
    with pytest.raises(errors.SchemaValidation) as caught:
        output.parse_response(result_obj(result="no json here", total_cost_usd=0.5), WITH_SCHEMA, wall_ms=1)
    assert caught.value.got == "null"
    assert isinstance(caught.value.partial, PartialUsage)
    assert caught.value.partial.cost_usd == 0.5


@given(st.text())
def test_parse_response_never_raises_anything_but_ironflow_errors(text: str) -> None:
    try:
        result = output.parse_response(text, PLAIN, wall_ms=1)
    except errors.IronflowError:
        return
    assert isinstance(result, AgentResult)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=12,
)
RESULT_KEYS = st.sampled_from(
    ["result", "usage", "total_cost_usd", "duration_ms", "is_error", "subtype", "modelUsage", "structured_output",
     "api_error_status", "api_error_code", "session_id"]
)  # fmt: skip
RESULT_OBJECTS = st.dictionaries(RESULT_KEYS, JSON_VALUES, max_size=6).map(lambda d: {"type": "result", **d})
LINE_OBJECTS = st.fixed_dictionaries(
    {"type": st.sampled_from(["assistant", "user", "system", "rate_limit_event", "result"])},
    optional={"message": JSON_VALUES | st.fixed_dictionaries({"content": JSON_VALUES}), "subtype": JSON_VALUES},
)


@given(RESULT_OBJECTS, st.booleans())
def test_any_result_object_gives_a_result_or_an_ironflow_error(obj: dict[str, Any], with_schema: bool) -> None:
    config = WITH_SCHEMA if with_schema else PLAIN
    try:
        result = output.parse_response(json.dumps(obj), config, wall_ms=1)
    except errors.IronflowError:
        return
    assert isinstance(result, AgentResult)


@given(st.lists(LINE_OBJECTS | RESULT_OBJECTS, max_size=8))
def test_any_stream_gives_a_result_or_an_ironflow_error(lines: list[dict[str, Any]]) -> None:
    try:
        result = output.parse_stream_response("\n".join(json.dumps(o) for o in lines), VERBOSE, wall_ms=1)
    except errors.IronflowError:
        return
    assert isinstance(result, AgentResult)


def test_non_finite_numbers_are_a_parse_error() -> None:
    with pytest.raises(errors.SchemaValidation, match="finite"):
        output.parse_response('{"type":"result","result":"x","total_cost_usd":1e400}', PLAIN, wall_ms=1)


# --- stream-json output ----------------------------------------------------------------------


def test_stream_text_output_takes_the_result_line_and_one_debug_turn() -> None:
    result = output.parse_stream_response(fixture("stream_text"), VERBOSE, wall_ms=1)
    assert result.value == "Hello from the fake model."
    assert result.model == "claude-sonnet-5-5"
    assert result.debug_messages is not None
    assert len(result.debug_messages) == 1
    assert result.debug_messages[0].text == "Hello from the fake model."
    assert result.debug_messages[0].tool_calls == ()


def test_stream_tool_turn_attaches_the_tool_result_to_the_call() -> None:
    result = output.parse_stream_response(fixture("stream_tool"), VERBOSE, wall_ms=1)
    assert result.value == "The tool said tool-says-hi."
    debug = result.debug_messages
    assert debug is not None
    assert len(debug) == 2
    first, second = debug
    assert first.text == "Running it."
    assert [(c.name, c.input) for c in first.tool_calls] == [("Bash", {"command": "echo tool-says-hi"})]
    assert len(first.tool_results) == 1
    assert first.tool_results[0].tool_use_id == first.tool_calls[0].id
    assert first.tool_results[0].content == "tool-says-hi"
    assert not first.tool_results[0].is_error
    assert second.text == "The tool said tool-says-hi."
    assert second.tool_results == ()


def test_stream_budget_error_carries_debug_turns() -> None:
    with pytest.raises(errors.BudgetExceeded) as caught:
        output.parse_stream_response(fixture("stream_budget_exceeded"), VERBOSE.replace(max_budget_usd=0.01), wall_ms=1)
    assert caught.value.debug_messages is not None


def test_stream_api_error_is_api_error() -> None:
    with pytest.raises(errors.ApiError) as caught:
        output.parse_stream_response(fixture("stream_api_error_529"), VERBOSE, wall_ms=1)
    assert caught.value.status == 529


def test_stream_without_result_line_is_schema_validation() -> None:
    truncated = "\n".join(line for line in fixture("stream_tool").splitlines() if '"type":"result"' not in line)
    with pytest.raises(errors.SchemaValidation) as caught:
        output.parse_stream_response(truncated, VERBOSE, wall_ms=1)
    assert caught.value.expected == "stream-json result line"
    assert caught.value.got == "no result line found in stream output"
    assert caught.value.debug_messages is not None
    assert len(caught.value.debug_messages) == 2


def test_stream_skips_invalid_lines_and_uses_the_last_result_line() -> None:
    text = "\n".join(
        [
            "not json at all",
            '{"type":"system","subtype":"init","model":"claude-opus-5-1"}',
            result_obj(result="first"),
            "{broken",
            result_obj(result="second"),
        ]
    )
    result = output.parse_stream_response(text, VERBOSE, wall_ms=1)
    assert result.value == "second"
    assert result.model == "claude-opus-5-1"


def test_stream_assistant_lines_merge_until_a_stop_reason() -> None:
    def assistant(content: list[dict[str, Any]], stop: str | None) -> str:
        message = {"content": content, "stop_reason": stop, "usage": {"input_tokens": 7, "output_tokens": 3}}
        return json.dumps({"type": "assistant", "message": message})

    text = "\n".join(
        [
            assistant([{"type": "thinking", "thinking": "hmm"}], None),
            assistant([{"type": "text", "text": "one"}], "end_turn"),
            assistant([{"type": "redacted_thinking", "data": "x"}, {"type": "text", "text": "two"}], None),
            result_obj(result="two"),
        ]
    )
    debug = output.parse_stream_response(text, VERBOSE, wall_ms=1).debug_messages
    assert debug is not None
    assert [(d.text, d.thinking, d.thinking_redacted, d.stop_reason) for d in debug] == [
        ("one", "hmm", False, "end_turn"),
        ("two", None, True, None),
    ]
    assert debug[0].input_tokens == 7
    assert debug[0].output_tokens == 3


def test_stream_tool_result_for_unknown_id_attaches_to_last_turn() -> None:
    text = "\n".join(
        [
            json.dumps({"type": "assistant", "message": {"content": [{"type": "text", "text": "a"}]}}),
            json.dumps(
                {
                    "type": "user",
                    "message": {"content": [{"type": "tool_result", "tool_use_id": "nope", "content": "r"}]},
                }
            ),
            result_obj(result="a"),
        ]
    )
    debug = output.parse_stream_response(text, VERBOSE, wall_ms=1).debug_messages
    assert debug is not None
    assert debug[-1].tool_results[0].tool_use_id == "nope"


def test_parse_output_follows_verbose() -> None:
    assert output.parse_output(fixture("stream_text"), VERBOSE, wall_ms=1).debug_messages is not None
    assert output.parse_output(fixture("json_text"), PLAIN, wall_ms=1).debug_messages is None


# --- non-zero exits (§1.9) ---------------------------------------------------------------------


def test_nonzero_exit_with_a_parseable_success_is_returned_as_success() -> None:
    result = output.handle_nonzero_exit(1, fixture("json_text"), "", PLAIN, wall_ms=1)
    assert result.value == "Hello from the fake model."


def test_nonzero_exit_with_api_error_raises_api_error() -> None:
    with pytest.raises(errors.ApiError):
        output.handle_nonzero_exit(1, fixture("json_api_error_529"), "", PLAIN, wall_ms=1)


def test_nonzero_exit_with_budget_error_raises_budget_exceeded() -> None:
    with pytest.raises(errors.BudgetExceeded):
        output.handle_nonzero_exit(1, fixture("json_budget_exceeded"), "", PLAIN, wall_ms=1)


def test_nonzero_exit_with_schema_failure_and_usage_raises_schema_validation() -> None:
    with pytest.raises(errors.SchemaValidation):
        output.handle_nonzero_exit(1, fixture("json_max_turns"), "", WITH_SCHEMA, wall_ms=1)


def test_nonzero_exit_with_garbage_is_process_failed_with_the_output() -> None:
    with pytest.raises(errors.ProcessFailed) as caught:
        output.handle_nonzero_exit(137, "", "Killed: out of memory", PLAIN, wall_ms=1)
    assert caught.value.exit_code == 137
    assert caught.value.stderr == "Killed: out of memory"
    assert caught.value.retryable


def test_nonzero_exit_without_output_says_no_output_captured() -> None:
    with pytest.raises(errors.ProcessFailed) as caught:
        output.handle_nonzero_exit(1, "  \n", "", PLAIN, wall_ms=1)
    assert caught.value.stderr == "(no output captured)"


def test_nonzero_exit_truncates_huge_output() -> None:
    with pytest.raises(errors.ProcessFailed) as caught:
        output.handle_nonzero_exit(1, "y" * 60_000, "", PLAIN, wall_ms=1)
    assert caught.value.stderr.endswith("...(truncated)")
    assert len(caught.value.stderr) == 50_000 + len("...(truncated)")


def test_nonzero_exit_stream_without_result_line_is_process_failed() -> None:
    text = fixture("stream_tool").splitlines()[0]
    with pytest.raises(errors.ProcessFailed):
        output.handle_nonzero_exit(1, text, "", VERBOSE, wall_ms=1)


def test_stream_thinking_blocks_land_in_the_turn_with_their_tool_call() -> None:
    result = output.parse_stream_response(fixture("stream_thinking_tool"), VERBOSE, wall_ms=1)
    debug = result.debug_messages
    assert debug is not None
    assert [(d.thinking, d.text) for d in debug] == [
        ("I should run echo.", None),
        ("The tool answered.", "It printed thought."),
    ]
    assert debug[0].tool_calls[0].name == "Bash"
    assert debug[0].tool_results[0].content == "thought"
    assert result.value == "It printed thought."
