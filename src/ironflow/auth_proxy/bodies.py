"""Request bodies read under one byte budget shared by every request of a replica.

A body is buffered whole (the model allowlist reads it, the upstream gets it with a
``Content-Length``), so without a bound a dozen 31 MiB POSTs to a slow upstream hold
more than a replica's memory limit. :class:`BodyBudget` is that bound: every chunk read
is reserved first; a request that would pass the budget is answered 503
(``overloaded_error``: retry) and its bytes are returned at once. A body is released
when its upstream request has been sent, not when its (possibly long) stream ends.

A body that delivers nothing for ``read_timeout_s`` is answered 408, so a client
trickling a body holds neither a buffer nor a task for long.

A body is held as it came, still in its ``Content-Encoding`` (the server never inflates
it): the limits count the bytes sent, and a compressed body names no model the allowlist
could read, so a token with a model allowlist has it refused.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Final

from aiohttp import streams as web_streams
from aiohttp import web

from ironflow.auth_proxy import policy

__all__ = ["Body", "BodyBudget", "read_body"]

_CHUNK: Final = 256 * 1024


class BodyBudget:
    """Bytes of request bodies held now, against a fixed total (one per app)."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.held = 0

    def __repr__(self) -> str:
        return f"BodyBudget(held={self.held}, total={self.total})"

    def take(self, count: int) -> bool:
        """Reserve ``count`` bytes; ``False`` (nothing reserved) when they do not fit."""
        if self.held + count > self.total:
            return False
        self.held += count
        return True

    def give_back(self, count: int) -> None:
        self.held -= count


@dataclass
class Body:
    """A buffered request body and its share of the budget; :meth:`release` once sent."""

    data: bytes
    _budget: BodyBudget | None = field(default=None, repr=False)
    _held: int = 0

    def release(self) -> None:
        """Return the bytes to the budget (idempotent) and drop this reference to them."""
        if self._budget is not None:
            self._budget.give_back(self._held)
            self._budget = None
            self._held = 0
        self.data = b""


async def read_body(
    request: web.Request, budget: BodyBudget, *, max_bytes: int, read_timeout_s: float
) -> Body | policy.Refusal:
    """Row 8: the whole body under the budget, or why not (413, 503, 408)."""
    if not request.body_exists:
        return Body(b"")
    declared = request.content_length
    if declared is not None and declared > max_bytes:
        return policy.BODY_TOO_LARGE
    content = request.content
    if content.is_eof():
        return _buffered(content, budget, max_bytes)
    return await _read_chunks(content, budget, max_bytes=max_bytes, read_timeout_s=read_timeout_s)


def _buffered(content: web_streams.StreamReader, budget: BodyBudget, max_bytes: int) -> Body | policy.Refusal:
    """The usual case: the whole body came with the headers, so take it in one piece
    (no read loop, no timer). It is already in memory, so it is counted now."""
    try:
        data = content.read_nowait()
    except (ConnectionError, ValueError, web.HTTPException):
        return policy.BODY_TOO_LARGE
    if len(data) > max_bytes:
        return policy.BODY_TOO_LARGE
    if not budget.take(len(data)):
        return policy.BODY_BUDGET_EXHAUSTED
    return Body(data, budget, len(data))


async def _read_chunks(
    content: web_streams.StreamReader, budget: BodyBudget, *, max_bytes: int, read_timeout_s: float
) -> Body | policy.Refusal:
    """A body still arriving: each chunk is reserved as it comes (a declared length
    reserves nothing, so headers alone cannot hold the budget), and the deadline moves
    on with every chunk: only a body *silent* for ``read_timeout_s`` gets 408."""
    loop = asyncio.get_running_loop()
    chunks: list[bytes] = []
    held = 0
    try:
        async with asyncio.timeout(read_timeout_s) as deadline:
            while chunk := await content.read(_CHUNK):
                if held + len(chunk) > max_bytes:
                    return policy.BODY_TOO_LARGE
                if not budget.take(len(chunk)):
                    return policy.BODY_BUDGET_EXHAUSTED
                held += len(chunk)
                chunks.append(chunk)
                deadline.reschedule(loop.time() + read_timeout_s)
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        body = Body(data, budget, held)
        held = 0  # now the Body's to release
        return body
    except TimeoutError:
        return policy.BODY_TIMEOUT
    except (ConnectionError, ValueError, web.HTTPException):
        return policy.BODY_TOO_LARGE
    finally:
        if held:
            budget.give_back(held)
