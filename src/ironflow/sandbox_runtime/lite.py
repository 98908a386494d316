"""The few standard-library pieces the session runtime needs, on C modules only.

``threading``, ``contextlib``, ``json``, ``socket`` and ``signal`` import 19 to 26 modules each
(``functools``, ``collections``, ``enum``, ``re``...). Under gVisor every import costs about 3 ms
(its syscalls and page faults), and the runtime's imports were most of a session's open there
(150-190 ms of it), and 20 ms of a cold open on the host. What the runtime uses of them is
small: a thread started, a condition, ``suppress``, JSON in and out (``_json``, which ``json``
itself runs on). Standard library only, nothing of ironflow, like its siblings.
"""

from __future__ import annotations

import _json
import _thread

TYPE_CHECKING = False  # not typing's: its import is a slice of every session's cold start
if TYPE_CHECKING:
    from collections.abc import Callable
    from types import TracebackType
    from typing import Any

__all__ = ["Condition", "dumps", "loads", "start_thread", "suppress"]

_WHITESPACE = " \t\n\r"


def _unserializable(value: object) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


# json.dumps' defaults, without its circular check: the runtime dumps only what it built.
_encode = _json.make_encoder(None, _unserializable, _json.encode_basestring_ascii, None, ": ", ", ", False, False, True)


class _Scanning:
    """The options ``_json.make_scanner`` reads (``json.JSONDecoder``'s defaults)."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = float  # NaN, Infinity, -Infinity, as json.loads reads them


_scan = _json.make_scanner(_Scanning())  # type: ignore[arg-type]  # it reads the options of any object


def dumps(doc: Any) -> bytes:
    """``json.dumps(doc).encode()``."""
    return "".join(_encode(doc, 0)).encode()


def loads(data: bytes | str) -> Any:
    """``json.loads(data)``: ValueError for anything but one JSON document, whitespace around it."""
    text = data.decode() if isinstance(data, bytes) else data  # UnicodeDecodeError is a ValueError
    start = len(text) - len(text.lstrip(_WHITESPACE))
    try:
        doc, end = _scan(text, start)
    except StopIteration as stop:  # no value where one must begin
        raise ValueError(f"Expecting value: char {stop.value}") from None
    if text[end:].strip(_WHITESPACE):
        raise ValueError(f"Extra data: char {end}")
    return doc


def start_thread(target: Callable[..., Any], *args: Any) -> None:
    """``target(*args)`` in a new thread, dying with the process (``threading``'s daemon)."""
    _thread.start_new_thread(target, args)


class Condition:
    """``threading.Condition``'s ``with``, ``wait`` and ``notify_all``, on ``_thread``'s locks."""

    def __init__(self) -> None:
        self._lock = _thread.allocate_lock()
        self._waiters: list[Any] = []

    def __enter__(self) -> None:
        self._lock.acquire()

    def __exit__(self, *_exc: object) -> None:
        self._lock.release()

    def wait(self, timeout: float | None) -> None:
        """Release the lock until :meth:`notify_all` or ``timeout`` seconds, then hold it again."""
        waiter = _thread.allocate_lock()
        waiter.acquire()
        self._waiters.append(waiter)
        self._lock.release()
        try:
            waiter.acquire(True, -1 if timeout is None else max(0.0, timeout))
        finally:
            self._lock.acquire()
            if waiter in self._waiters:  # timed out: no notify took it
                self._waiters.remove(waiter)

    def notify_all(self) -> None:
        """Wake every waiter (call with the lock held)."""
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            waiter.release()


class suppress:
    """``contextlib.suppress``."""

    def __init__(self, *exceptions: type[BaseException]) -> None:
        self._exceptions = exceptions

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, _value: BaseException | None, _tb: TracebackType | None
    ) -> bool:
        return kind is not None and issubclass(kind, self._exceptions)
