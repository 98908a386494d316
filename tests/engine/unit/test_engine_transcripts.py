"""The pure parts of a step's transcript: how buffered lines become stored chunks, and the notes."""

from __future__ import annotations

import dataclasses
import doctest
import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ironflow import errors
from ironflow.engine import model, transcripts
from ironflow.results import AgentResult, DebugMessage, ToolCall, ToolResult
from ironflow.secrets import REDACTED

OUT = model.TranscriptStream.STDOUT
ERR = model.TranscriptStream.STDERR

#: A 900-character message cut to the note's 500 (its first 15 are "API error 500: ").
TRUNCATED_XS = "x" * 485 + "...(truncated)"
lines = st.lists(st.tuples(st.sampled_from([OUT, ERR]), st.text(alphabet="ab\u00e9", max_size=20), st.floats(0, 9)))


def test_consecutive_lines_of_one_stream_are_one_chunk_stamped_with_the_first_time() -> None:
    buffered = [(OUT, "a", 1.0), (OUT, "b", 2.0), (ERR, "c", 3.0), (OUT, "d", 4.0), (OUT, "e", 5.0)]
    assert transcripts.chunk_lines(buffered) == [(OUT, "a\nb", 1.0), (ERR, "c", 3.0), (OUT, "d\ne", 4.0)]


def test_a_chunk_stays_under_its_size_and_a_longer_line_is_a_chunk_of_its_own() -> None:
    buffered = [(OUT, "aaaa", 0.0), (OUT, "bbbb", 0.0), (OUT, "c" * 20, 0.0), (OUT, "d", 0.0)]
    assert [text for _, text, _ in transcripts.chunk_lines(buffered, max_bytes=10)] == ["aaaa\nbbbb", "c" * 20, "d"]


@given(buffered=lines, max_bytes=st.integers(1, 64))
def test_the_chunks_hold_every_line_in_order_and_nothing_else(
    buffered: list[tuple[model.TranscriptStream, str, float]], max_bytes: int
) -> None:
    chunks = transcripts.chunk_lines(buffered, max_bytes)
    again = [(stream, line) for stream, text, _ in chunks for line in text.split("\n")]
    assert again == [(stream, text) for stream, text, _ in buffered]
    for first, second in itertools.pairwise(chunks):
        if first[0] is second[0]:  # split only where the size says so
            assert len(first[1].encode()) + len(second[1].split("\n")[0].encode()) + 2 > max_bytes


@pytest.mark.parametrize(
    ("exc", "note"),
    [
        (None, None),
        (errors.ProcessFailed(2, "a\nb"), "attempt 3 failed: ProcessFailed: claude process exited with code 2: a"),
        (RuntimeError(""), "attempt 3 failed: RuntimeError"),
        (errors.ApiError(500, None, "x" * 900), f"attempt 3 failed: ApiError: API error 500: {TRUNCATED_XS}"),
    ],
)
def test_the_ending_note_names_the_error_by_its_first_line(exc: BaseException | None, note: str | None) -> None:
    assert transcripts.ending_note(3, exc) == note


def test_docstring_examples_hold() -> None:
    assert doctest.testmod(transcripts).failed == 0


def test_a_verbose_results_turns_are_redacted_and_its_answer_is_kept() -> None:
    key = "sk-ant-api03-" + "k" * 40
    turn = DebugMessage(
        text="running it",
        tool_calls=(ToolCall("t1", "Bash", {"command": f"echo {key}"}),),
        tool_results=(ToolResult("t1", [{"type": "text", "text": f"{key}\nand hunter22-password"}]),),
    )
    result = AgentResult(value=f"the answer mentions {key}", duration_ms=1, debug_messages=(turn,))
    redacted = transcripts.redacted_turns(result, ["hunter22-password"])
    assert redacted.value == result.value
    assert redacted.debug_messages == (
        DebugMessage(
            text="running it",
            tool_calls=(ToolCall("t1", "Bash", {"command": f"echo {REDACTED}"}),),
            tool_results=(ToolResult("t1", [{"type": "text", "text": f"{REDACTED}\nand {REDACTED}"}]),),
        ),
    )
    assert transcripts.redacted_turns(dataclasses.replace(result, debug_messages=None)).debug_messages is None
