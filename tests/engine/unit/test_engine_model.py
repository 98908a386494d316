"""Run and step values: UUIDv7 ids, stored JSON forms, error records."""

from __future__ import annotations

import time
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ironflow import errors
from ironflow.engine import model
from ironflow.results import AgentResult, DebugMessage, ToolCall, ToolResult


def test_uuid7_has_version_7_and_the_rfc_variant() -> None:
    value = model.uuid7()
    assert value.version == 7
    assert value.variant == uuid.RFC_4122


def test_uuid7_carries_the_unix_milliseconds() -> None:
    before = time.time_ns() // 1_000_000
    value = model.uuid7()
    after = time.time_ns() // 1_000_000
    assert before <= value.int >> 80 <= after + 1


def test_uuid7_ids_sort_in_creation_order_within_one_millisecond() -> None:
    ids = [model.uuid7(now_ms=1_700_000_000_000) for _ in range(5000)]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)


def test_new_id_is_canonical_lowercase_hyphenated() -> None:
    value = model.new_id()
    assert value == str(uuid.UUID(value))
    assert value == value.lower()


def test_run_record_root_defaults_to_its_own_id() -> None:
    run = model.RunRecord(id="r1", workflow="m:f", input=None)
    assert run.root_run_id == "r1"
    assert run.status is model.RunStatus.PENDING
    assert not run.finished


def test_agent_result_round_trips_through_json() -> None:
    result = AgentResult(
        value={"verdict": "ok"},
        duration_ms=12,
        session_id="s-1",
        cost_usd=0.5,
        debug_messages=(
            DebugMessage(text="hi", tool_calls=(ToolCall("t1", "Read", {"path": "a"}),),
                         tool_results=(ToolResult("t1", "content"),)),
        ),
        ignored_settings=("runtime_class",),
    )  # fmt: skip
    assert model.from_json(model.to_json(result, what="x")) == result


def test_agent_results_nested_in_outputs_come_back_as_agent_results() -> None:
    result = AgentResult(value="text", duration_ms=1)
    back = model.from_json(model.to_json({"steps": [result, 3]}, what="x"))
    assert back == {"steps": [result, 3]}


@settings(deadline=None)  # a shared 2-core machine: timing is not the property
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(), lambda c: st.lists(c) | st.dictionaries(st.text(), c)
    )
)
def test_plain_json_values_round_trip_unchanged(value: object) -> None:
    assert model.from_json(model.to_json(value, what="x")) == value


def test_a_value_that_cannot_be_stored_is_refused_by_name() -> None:
    with pytest.raises(errors.UnstorableValue, match="the result of step 'plan' cannot be stored: object is not"):
        model.to_json(object(), what="the result of step 'plan'")


def test_error_record_keeps_type_message_and_retryable() -> None:
    record = model.error_record(errors.ProcessFailed(1, "boom"))
    assert record == {"type": "ProcessFailed", "message": "claude process exited with code 1: boom", "retryable": True}
    assert model.error_record(ValueError("bad"))["retryable"] is False


def test_rate_window_rejects_until_its_reset() -> None:
    window = model.RateWindow("a", "five_hour", model.WindowStatus.REJECTED, 1.0, resets_at=100.0)
    assert window.rejects(99.0)
    assert not window.rejects(100.0)
    assert model.RateWindow("a", "five_hour", model.WindowStatus.REJECTED).rejects(1e12)
    assert not model.RateWindow("a", "five_hour", model.WindowStatus.ALLOWED_WARNING, 0.9).rejects(0)
