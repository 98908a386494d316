"""Log records as one line each: an event name and its named fields, as a JSON object or as text.

A caller names its fields in ``extra={"fields": {...}}`` (the auth proxy's ``logs.event``, the
engine's ``run_log``); a formatter prints the message and those fields and nothing else — no
traceback, no stack — so a line shows only what its caller chose to name, and a message with a
newline in it still takes one line. The auth proxy and the worker share these two formatters.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

__all__ = ["JsonFormatter", "TextFormatter", "encode", "fields_of"]

#: One encoder for every line: ``json.dumps`` with options builds a new one per call.
_encode: Final = json.JSONEncoder(separators=(",", ":"), default=str).encode


@functools.cache
def _orjson_dumps() -> Callable[[Any], bytes] | None:
    """orjson's encoder (the proxy extra's: a line in a sixth of the standard library's work), loaded
    at the first line rather than at every command's start; None without it. What JSON has no type
    for goes to ``default=str`` as in the standard encoder (a dataclass is never walked into: a
    secret's holder prints as its ``str``)."""
    try:
        import orjson
    except ImportError:  # pragma: no cover - the same lines, encoded more slowly
        return None
    options = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
    return functools.partial(orjson.dumps, default=str, option=options)


def encode(value: Any) -> str:
    """``value`` as compact ASCII JSON, anything JSON has no type for as its ``str``: orjson's
    bytes when it can encode them as ASCII, else the standard library's (``\\u`` escapes, a
    non-string key, an integer beyond 64 bits)."""
    dumps = _orjson_dumps()
    if dumps is not None:
        try:
            data = dumps(value)
        except TypeError:
            return _encode(value)
        if data.isascii():
            return data.decode()
    return _encode(value)


def fields_of(record: logging.LogRecord) -> Mapping[str, Any]:
    """The named fields a record carries (none when it was logged without them)."""
    fields = getattr(record, "fields", None)
    return fields if isinstance(fields, dict) else {}


class JsonFormatter(logging.Formatter):
    """``{"ts", "level", "event", ...fields}`` on one line."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "event": record.getMessage(),
        }
        line.update(fields_of(record))
        return encode(line)


def _text_value(value: Any) -> str:
    """A field's value as ``key=value`` shows it: bare when plain, a JSON string when it has spaces or quotes."""
    text = value if isinstance(value, str) else _encode(value)  # Python's spelling of a float (7e-05)
    if text and not any(c.isspace() or c in '"=\\' for c in text):
        return text
    return _encode(text)


class TextFormatter(logging.Formatter):
    """``2025-06-01T12:00:00.123Z info step finished run_id=… step=plan outcome=succeeded``, for people."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"
        message = record.getMessage().replace("\r", "\\r").replace("\n", "\\n")
        pairs = "".join(f" {key}={_text_value(value)}" for key, value in fields_of(record).items() if value is not None)
        return f"{stamp} {record.levelname.lower()} {message}{pairs}"
