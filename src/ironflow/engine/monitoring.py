"""The worker's HTTP face: ``/metrics`` (Prometheus text) and ``/healthz``, on the worker's own event loop.

:func:`serve` is an async context manager: the server listens when its block starts (port 0:
a free one, on the returned :class:`Serving`) and is gone when the block ends, so it lives as
long as the worker it watches and leaves no thread behind. ``/healthz`` answers 200 ``ok``
while the worker's loop takes runs and the store answers a count of queued runs within
``store_check_s``; otherwise 503 and one line saying which (:func:`health`). Each scrape of
``/metrics`` first reads that count into ``ironflow_runs_queued`` (a failed read keeps the last
value; ``/healthz`` says why). The pages name no secret, but listen on loopback unless told.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Final

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from ironflow import errors
from ironflow.engine.metrics import DEFAULT_HOST, WorkerMetrics
from ironflow.engine.store import Store
from ironflow.engine.worker import Worker

__all__ = ["DEFAULT_HOST", "STORE_CHECK_S", "Serving", "create_app", "health", "serve"]

#: How long ``/healthz`` waits for the store before calling it unreachable.
STORE_CHECK_S: Final = 2.0


def health(*, alive: bool, store_problem: str | None) -> tuple[int, str]:
    """The status and one-line body of ``/healthz`` (pure)."""
    if not alive:
        return 503, "worker loop is not running"
    if store_problem is not None:
        return 503, f"store unreachable: {store_problem}"
    return 200, "ok"


class _Pages:
    """The two handlers, over one worker, its store and its metrics."""

    def __init__(self, worker: Worker, store: Store, metrics: WorkerMetrics, store_check_s: float) -> None:
        self.worker = worker
        self.store = store
        self.metrics = metrics
        self.store_check_s = store_check_s

    async def _read_queue(self) -> str | None:
        """Set the queue gauge from the store; what went wrong (one line), or None."""
        try:
            async with asyncio.timeout(self.store_check_s):
                queued = await self.store.queued_runs()
        except TimeoutError:
            return f"no answer within {self.store_check_s:g}s"
        except errors.IronflowError as exc:
            return " ".join(exc.message.split())
        except OSError as exc:
            return type(exc).__name__
        self.metrics.runs_queued.set(queued)
        return None

    async def metrics_page(self, request: web.Request) -> web.Response:
        await self._read_queue()
        return web.Response(body=self.metrics.render(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(self, request: web.Request) -> web.Response:
        alive = self.worker.alive
        status, text = health(alive=alive, store_problem=await self._read_queue() if alive else None)
        return web.Response(status=status, text=text)


def create_app(
    worker: Worker, store: Store, metrics: WorkerMetrics, *, store_check_s: float = STORE_CHECK_S
) -> web.Application:
    """``/metrics`` and ``/healthz`` for ``worker``; every other path is 404."""
    pages = _Pages(worker, store, metrics, store_check_s)
    app = web.Application()
    app.router.add_get("/metrics", pages.metrics_page, allow_head=False)
    app.router.add_get("/healthz", pages.healthz, allow_head=False)
    return app


@dataclass(frozen=True)
class Serving:
    """Where the pages are served (the bound port, when 0 was asked for)."""

    host: str
    port: int

    @property
    def url(self) -> str:
        shown = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{shown}:{self.port}"


@contextlib.asynccontextmanager
async def serve(
    app: web.Application, *, host: str = DEFAULT_HOST, port: int, what: str = "metrics"
) -> AsyncIterator[Serving]:
    """Serve ``app`` on ``host:port`` for the block; ``what`` names it in the bind error (the UI uses it too).

    Raises:
        ConfigError: the address cannot be bound (in use, or not an address of this machine).
    """
    app_runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
    await app_runner.setup()
    try:
        try:
            await web.TCPSite(app_runner, host, port).start()
        except OSError as exc:
            # asyncio rewords a bind error around its errno; a lookup error (gaierror) has its own text.
            why = os.strerror(exc.errno) if exc.errno and exc.errno > 0 else exc.strerror or str(exc)
            raise errors.ConfigError(
                f"cannot serve {what} on {host}:{port}: {why}; choose another port or address"
            ) from None
        yield Serving(host, int(app_runner.addresses[0][1]))
    finally:
        await app_runner.cleanup()
