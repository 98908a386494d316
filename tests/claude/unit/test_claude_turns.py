"""``claude.turns``: the real CLI's stream-json lines (recorded fixtures) condensed one line at a
time, long texts cut, and anything else shown as it is or skipped, never an error."""

from __future__ import annotations

import doctest
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ironflow.claude import turns

FIXTURES = Path(__file__).parents[2] / "fixtures" / "claude"


def condensed(name: str) -> list[str]:
    return [said for line in (FIXTURES / name).read_text().splitlines() for said in turns.describe(line)]


def test_a_tool_run_reads_as_its_turns() -> None:
    assert condensed("stream_thinking_tool.out") == [
        "session started (model claude-sonnet-5-5)",
        "thinking: I should run echo.",
        '→ Bash command="echo thought"',
        "  ← thought",
        "thinking: The tool answered.",
        "assistant: It printed thought.",
        "result (2 turns, 0.3s, $0.0001): It printed thought.",
    ]


def test_an_api_error_reads_as_an_error_result_and_rate_limit_events_are_skipped() -> None:
    last = condensed("stream_api_error_529.out")[-1]
    assert last.startswith("result (error) (1 turn, 0.1s, $0.0000): API Error: 529")
    assert not any("rate_limit" in said for said in condensed("stream_rate_limits.out"))


def test_a_failed_tool_result_is_marked_and_cut_short() -> None:
    line = json.dumps({"type": "user", "message": {"content": [
        {"type": "tool_result", "is_error": True, "content": [{"type": "text", "text": "no\nsuch   file " * 100}]}
    ]}})  # fmt: skip
    (said,) = turns.describe(line)
    assert said.startswith("  ✗ no such file no such file")
    assert len(said) == len("  ✗ ") + turns.RESULT_CHARS
    assert said.endswith("…")


@pytest.mark.parametrize("line", ["plain stderr text", "{not json", "[1, 2]", '"a string"', ""])
def test_a_line_that_is_not_a_stream_json_object_is_shown_as_it_is(line: str) -> None:
    assert turns.describe(line) == [line]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(), lambda c: st.lists(c) | st.dictionaries(st.text(), c)
)


@given(json_values)
def test_any_json_value_is_described_without_an_error(value: object) -> None:
    for kind in ("assistant", "user", "result", "system"):
        for said in turns.describe(json.dumps({"type": kind, "message": value, "result": value, "num_turns": value})):
            assert isinstance(said, str)


def test_docstring_examples_hold() -> None:
    assert doctest.testmod(turns).failed == 0
