"""The FakeAnthropic script: YAML schema, defaults, and errors that name the bad entry."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ironflow import errors
from ironflow.fake_model.script import ErrorTurn, Script, TextTurn, ToolUseTurn, Usage

FULL_YAML = """
usage: {input_tokens: 100, output_tokens: 20}
default: {text: "fallback", stop_reason: max_tokens}
turns:
  - "plain text"
  - text: Let me look.
    tool_use: {name: Bash, input: {command: ls}, id: toolu_fixed}
    delay_s: 0.5
  - error: {status: 529, type: overloaded_error, message: Overloaded}
    headers: {retry-after: "3"}
  - text: costly
    usage: {output_tokens: 1000000}
"""


def test_yaml_script_loads_every_turn_kind(tmp_path: Path) -> None:
    path = tmp_path / "script.yaml"
    path.write_text(FULL_YAML)
    script = Script.from_yaml(path)
    assert script.usage == Usage(100, 20)
    assert script.default == TextTurn("fallback", stop_reason="max_tokens")
    assert script.turns == (
        TextTurn("plain text"),
        ToolUseTurn("Bash", {"command": "ls"}, text="Let me look.", id="toolu_fixed", delay_s=0.5),
        ErrorTurn(529, "overloaded_error", "Overloaded", headers={"retry-after": "3"}),
        TextTurn("costly", usage=Usage(output_tokens=1_000_000)),
    )


def test_empty_script_answers_ok_forever() -> None:
    assert Script.from_dict(None) == Script()
    assert Script().default == TextTurn("OK")


def test_a_bare_list_is_the_turns() -> None:
    assert Script.from_dict(["a", "b"]).turns == (TextTurn("a"), TextTurn("b"))


def test_default_null_means_no_default() -> None:
    assert Script.from_dict({"default": None}).default is None


def test_script_of_accepts_strings_and_turns() -> None:
    script = Script.of("a", ErrorTurn(500), default=None)
    assert script.turns == (TextTurn("a"), ErrorTurn(500))
    assert script.default is None


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"turn": []}, "top level: unknown key 'turn'"),
        ({"turns": "hello"}, "turns: must be a list"),
        ({"turns": [{"txt": "a"}]}, "turns[0]: unknown turn key 'txt'"),
        ({"turns": [{}]}, "turns[0]: a turn needs one of text, tool_use, error"),
        ({"turns": [{"error": {"type": "x"}}]}, "turns[0]: error needs an integer status"),
        ({"turns": ["a", {"error": {"status": 200}}]}, "turns[1]: error status must be 400-599"),
        ({"turns": [{"error": {"status": 500}, "text": "x"}]}, "cannot also have text"),
        ({"turns": [{"tool_use": {"input": {}}}]}, "tool_use needs a name"),
        ({"turns": [{"tool_use": {"name": "Bash", "input": "ls"}}]}, "tool_use.input must be a mapping"),
        ({"turns": [{"text": "a", "delay_s": -1}]}, "delay_s must be a non-negative number"),
        ({"turns": [{"text": "a", "usage": {"output_tokens": -5}}]}, "usage.output_tokens must be a non-negative"),
        ({"usage": {"tokens": 5}}, "usage: unknown usage key 'tokens'"),
        ({"default": 5}, "default: a turn is a text or a mapping"),
        (42, "top level: expected a mapping"),
    ],
)
def test_bad_script_entries_are_refused_by_name(data: Any, message: str) -> None:
    with pytest.raises(errors.ConfigError, match="fake-anthropic script") as caught:
        Script.from_dict(data)
    assert message in str(caught.value)


def test_missing_script_file_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(errors.ConfigError, match=r"cannot read fake-anthropic script .*missing\.yaml"):
        Script.from_yaml(tmp_path / "missing.yaml")


def test_invalid_yaml_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("turns: [unclosed")
    with pytest.raises(errors.ConfigError, match=r"bad\.yaml is not valid YAML"):
        Script.from_yaml(path)


def test_the_documented_example_script_loads() -> None:
    example = Path(__file__).resolve().parents[3] / "examples" / "fake-anthropic" / "tool-turn.yaml"
    script = Script.from_yaml(example)
    assert isinstance(script.turns[0], ToolUseTurn)
    assert script.turns[0].name == "Bash"
    assert isinstance(script.turns[2], ErrorTurn)
    assert script.default == TextTurn("OK")
