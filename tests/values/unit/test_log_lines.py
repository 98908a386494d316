"""One line per record, JSON or text, holding the message and the named fields only."""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import sys

from hypothesis import given
from hypothesis import strategies as st

from ironflow import log_lines


def _record(message: str, *args: object, level: int = logging.INFO, **fields: object) -> logging.LogRecord:
    record = logging.LogRecord("ironflow.test", level, __file__, 1, message, args, None)
    if fields:
        record.fields = fields
    return record


def test_json_line_holds_the_event_and_its_fields_only() -> None:
    line = json.loads(log_lines.JsonFormatter().format(_record("relayed", token="abcdef012345", status=200)))
    assert set(line) == {"ts", "level", "event", "token", "status"}
    assert (line["event"], line["level"], line["status"]) == ("relayed", "info", 200)


def test_a_record_without_fields_is_its_message_alone() -> None:
    line = json.loads(log_lines.JsonFormatter().format(_record("cannot reach the store: %s", "OSError")))
    assert (set(line), line["event"]) == ({"ts", "level", "event"}, "cannot reach the store: OSError")


def test_text_line_is_time_level_message_and_key_value_pairs() -> None:
    record = _record("step finished", level=logging.WARNING, step="review tests", kind="agent", tries=2, gone=None)
    record.created, record.msecs = 1_750_000_000.25, 250.0
    assert log_lines.TextFormatter().format(record) == (
        '2025-06-15T15:06:40.250Z warning step finished step="review tests" kind=agent tries=2'
    )


def test_text_values_with_quotes_or_equals_signs_are_quoted_and_stay_readable() -> None:
    text = log_lines.TextFormatter().format(_record("x", reason='a "b"', expr="k=v", empty=""))
    assert text.endswith(' x reason="a \\"b\\"" expr="k=v" empty=""')


def test_neither_line_breaks_on_a_multi_line_message_nor_shows_a_traceback() -> None:
    record = _record("run failed: %s", "first\nsecond")
    try:
        raise ValueError("SECRET in a traceback")
    except ValueError:
        record.exc_info = sys.exc_info()
    for formatter in (log_lines.JsonFormatter(), log_lines.TextFormatter()):
        text = formatter.format(record)
        assert "\n" not in text
        assert "SECRET" not in text
        assert "first\\nsecond" in text


_STANDARD = json.JSONEncoder(separators=(",", ":"), default=str).encode
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@given(_JSON)
def test_a_line_reads_back_as_the_standard_encoders_and_is_ascii(value: object) -> None:
    line = log_lines.encode(value)
    assert line.isascii()
    assert json.loads(line) == json.loads(_STANDARD(value))


@dataclasses.dataclass
class _Holder:
    token: str = "ifap_not-for-logs"

    def __str__(self) -> str:
        return "holder"


def test_what_json_has_no_type_for_is_its_str_exactly_as_the_standard_encoder_writes_it() -> None:
    value = {
        "held": _Holder(),
        "at": datetime.datetime(2025, 6, 1, 12, 0),
        "big": 2**70,
        1: "a key that is not a string",
        "accent": "é",
        "raw": b"\x00",
    }
    assert log_lines.encode(value) == _STANDARD(value)
    assert "ifap_" not in log_lines.encode({"held": _Holder()})
