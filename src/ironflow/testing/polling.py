"""One way for tests to wait for a state they cannot be told about: poll until true.

Limits are generous on purpose (a loaded CI machine with a real kube-apiserver is slow);
a passing check returns at its first truthy poll, so the limit only costs time on failure.
``eventually_sync`` is the same contract for code that blocks (threads, ``subprocess``,
``KubeEnv.request``) outside an event loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["eventually", "eventually_sync"]


async def eventually(
    check: Callable[[], Any],
    *,
    limit_s: float = 15.0,
    interval_s: float = 0.01,
    what: str | Callable[[], str] = "the condition",
) -> Any:
    """Poll ``check`` (sync, or returning an awaitable) until it gives something truthy, and
    return that; after ``limit_s`` fail with an ``AssertionError`` naming ``what`` (or what it
    returns then, e.g. a process's stderr)."""
    try:
        async with asyncio.timeout(limit_s):
            while True:
                value = check()
                if isinstance(value, Awaitable):
                    value = await value
                if value:
                    return value
                await asyncio.sleep(interval_s)
    except TimeoutError:
        raise _timed_out(limit_s, what) from None


def eventually_sync(
    check: Callable[[], Any],
    *,
    limit_s: float = 15.0,
    interval_s: float = 0.01,
    what: str | Callable[[], str] = "the condition",
) -> Any:
    """``eventually`` for blocking code: poll the synchronous ``check`` until it gives something
    truthy, and return that; after ``limit_s`` fail with an ``AssertionError`` naming ``what``.
    A check in progress is not interrupted: the last one may end a little past the limit."""
    deadline = time.monotonic() + limit_s
    while True:
        value = check()
        if value:
            return value
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise _timed_out(limit_s, what)
        time.sleep(min(interval_s, remaining))


def _timed_out(limit_s: float, what: str | Callable[[], str]) -> AssertionError:
    described = what if isinstance(what, str) else what()
    return AssertionError(f"timed out after {limit_s:g}s waiting for {described}")
