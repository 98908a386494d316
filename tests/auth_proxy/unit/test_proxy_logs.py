"""The proxy's JSON log lines: batched info lines, scrubbed framework records (the line: test_log_lines)."""

from __future__ import annotations

import logging
import os

from ironflow import log_lines
from ironflow.auth_proxy import logs


def _record(level: int, message: str, **fields: object) -> logging.LogRecord:
    record = logging.LogRecord("ironflow.auth_proxy", level, __file__, 1, message, (), None)
    record.fields = fields
    return record


def test_batching_handler_holds_info_lines_until_flushed_and_writes_warnings_at_once() -> None:
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    stream = open(write_end, "w", buffering=1 << 16, encoding="utf-8")  # noqa: SIM115
    handler = logs.BatchingHandler(stream)
    handler.setFormatter(log_lines.JsonFormatter())
    try:
        handler.emit(_record(logging.INFO, "relayed"))
        try:
            early = os.read(read_end, 65536)
        except BlockingIOError:
            early = b""
        assert early == b""
        handler.flush_now()
        assert b'"event":"relayed"' in os.read(read_end, 65536)
        handler.emit(_record(logging.WARNING, "method refused"))
        assert b'"event":"method refused"' in os.read(read_end, 65536)
    finally:
        stream.close()
        os.close(read_end)


def test_framework_records_lose_their_text_and_traceback() -> None:
    logs.scrub_framework_logs()
    record = logging.LogRecord(
        "aiohttp.server", logging.ERROR, __file__, 1, "Error handling %s", ("GET /?q=SECRET",), None
    )
    try:
        raise ValueError("GET /v1/x?token=SECRET")
    except ValueError:
        import sys

        record.exc_info = sys.exc_info()
    assert logging.getLogger("aiohttp.server").filter(record)
    text = logging.Formatter().format(record)
    assert "SECRET" not in text
    assert "framework error (ValueError)" in text
