"""One way for tests to wait for a state they cannot be told about: poll until true.

Limits are generous on purpose (a loaded CI machine with a real kube-apiserver is slow);
a passing check returns at its first truthy poll, so the limit only costs time on failure.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["eventually"]


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
        described = what if isinstance(what, str) else what()
        raise AssertionError(f"timed out after {limit_s:g}s waiting for {described}") from None
