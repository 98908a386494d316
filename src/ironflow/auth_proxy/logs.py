"""JSON log lines for the proxy: one object per event, only the fields §6.10 allows.

Callers pass an event name and a few named fields (short token id, run id, step,
method, path without query, status, reason); nothing else reaches a line, so a token,
a credential, a header value or a query string cannot slip in through a format string.
The line's shape is :class:`ironflow.log_lines.JsonFormatter`'s (the worker's lines share it).
"""

from __future__ import annotations

import atexit
import logging
import sys
import time
from typing import Any, Final, TextIO

from ironflow import log_lines

__all__ = [
    "LOGGER_NAME",
    "BatchingHandler",
    "configure",
    "event",
    "flush",
    "logger",
    "scrub_framework_logs",
]

LOGGER_NAME: Final = "ironflow.auth_proxy"
logger: Final = logging.getLogger(LOGGER_NAME)
_LEVELS: Final = {
    "trace": logging.DEBUG,
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "off": logging.CRITICAL + 10,
}


#: Set by ``configure(batched=True)`` in the proxy's own process: info lines go into the batched
#: stream as the same JSON, without a LogRecord (one per relayed request).
_direct: TextIO | None = None
#: Those info lines as values until the next :func:`flush` (or warning) encodes them, in order:
#: encoding a batch at once costs a relayed request less than a line each.
_pending: list[dict[str, Any]] = []


def event(message: str, level: int = logging.INFO, **fields: Any) -> None:
    """Log one event with named fields (never a token, a value or a query string)."""
    if not logger.isEnabledFor(level):
        return
    if _direct is not None and level == logging.INFO:
        _pending.append({"ts": round(time.time(), 3), "level": "info", "event": message, **fields})
        return
    logger.log(level, message, extra={"fields": fields})


def _write_pending() -> None:
    """The pending info lines into the batched stream (before any line logged after them)."""
    if _pending and _direct is not None:
        lines = _pending[:]
        _pending.clear()
        _direct.write("".join(log_lines.encode(line) + "\n" for line in lines))


#: aiohttp's own loggers print the raw request line (query string included) of a bad request.
_FRAMEWORK_LOGGERS: Final = ("aiohttp.server", "aiohttp.web", "aiohttp.access", "aiohttp.client", "aiohttp.internal")


class _Scrub(logging.Filter):
    """Keep a framework record's level and logger, drop its text, arguments and traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        kind = record.exc_info[0].__name__ if record.exc_info and record.exc_info[0] else ""
        record.msg = "framework error" + (f" ({kind})" if kind else "")
        record.args = ()
        record.exc_info = None
        record.exc_text = None
        record.stack_info = None
        return True


_SCRUB: Final = _Scrub()


def scrub_framework_logs() -> None:
    """Make aiohttp's records carry no request line, header or traceback text (idempotent)."""
    for name in _FRAMEWORK_LOGGERS:
        framework = logging.getLogger(name)
        if _SCRUB not in framework.filters:
            framework.addFilter(_SCRUB)


class BatchingHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes each line into the stream's buffer; :func:`flush` (called a few times a second
    by the server, and at exit) pushes them out: one write per batch, not per request.
    Warnings and errors are flushed at once."""

    def flush(self) -> None:
        pass

    def flush_now(self) -> None:
        with self.lock or _NO_LOCK:
            _write_pending()
            super().flush()

    def emit(self, record: logging.LogRecord) -> None:
        _write_pending()
        super().emit(record)
        if record.levelno >= logging.WARNING:
            self.flush_now()


class _NoLock:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NO_LOCK: Final = _NoLock()


def flush() -> None:
    """Push buffered log lines out (see :class:`BatchingHandler`)."""
    for handler in logger.handlers:
        if isinstance(handler, BatchingHandler):
            handler.flush_now()


def configure(level: str = "info", *, batched: bool = False) -> None:
    """JSON lines on stderr at ``level`` (``RUST_LOG``-style: its first word, e.g. ``info``).

    ``batched`` buffers info lines until :func:`flush`; the server process flushes every 0.2 s.
    """
    _write_pending()  # into the stream they were logged for
    name = level.split(",")[0].split("=")[-1].strip().lower() or "info"
    stream = sys.stderr
    if batched:
        stream = open(sys.stderr.fileno(), "w", buffering=1 << 16, closefd=False, encoding="utf-8")  # noqa: SIM115
        atexit.register(stream.close)  # flushes what is left; stderr itself stays open
        atexit.register(_write_pending)  # first: atexit runs last in, first out
    global _direct
    _direct = stream if batched else None
    handler: logging.StreamHandler = (BatchingHandler if batched else logging.StreamHandler)(stream)  # type: ignore[type-arg]
    handler.setFormatter(log_lines.JsonFormatter())
    logger.handlers[:] = [handler]
    logger.setLevel(_LEVELS.get(name, logging.INFO))
    logger.propagate = False
    # The proxy's own process logs one line per relayed request: skip what no line shows
    # (caller lookup walks the stack; thread and process names cost a call each).
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    scrub_framework_logs()
    for name in _FRAMEWORK_LOGGERS:
        logging.getLogger(name).handlers[:] = [handler]
        logging.getLogger(name).propagate = False
    logging.Formatter.converter = time.gmtime
