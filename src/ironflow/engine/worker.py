"""A worker: take runs from the store, hold their leases, execute them, stop cleanly.

Each run it takes is executed by a :class:`~ironflow.engine.runner.Runner` while a
renewal task extends its lease every third of the lease. When a renewal finds the run
cancelled, the execution is asked to stop (in-flight steps cancelled, run released);
when it finds the lease gone (another worker took the run after we stalled), the
execution is dropped without writing anything. A worker killed outright simply stops
renewing: its runs' leases expire and another worker takes them, releasing the run
before creating anything.

Each run's start and end, and each lease renewal and loss, go to the worker's observers
(:mod:`ironflow.engine.events`); ``alive`` says whether its loop is taking runs (``/healthz``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ironflow import errors
from ironflow.engine import events, model
from ironflow.engine.events import Outcome
from ironflow.engine.store import DEFAULT_LEASE_S, Store

if TYPE_CHECKING:
    # Named for the type only: the runner (accounts, providers' protocol) is the factory's to
    # import, and `runs list` / `ps`, which parse worker ids here, never load it.
    from ironflow.engine.runner import Runner

__all__ = ["RunnerFactory", "Worker", "worker_id", "worker_process"]

log = logging.getLogger("ironflow.engine.worker")

#: Builds the runner for a run (its backend picks the provider).
RunnerFactory = Callable[[model.RunRecord], "Runner"]


def worker_id() -> str:
    """``host:pid:random`` — unique per process, readable in ``runs show``."""
    return f"{socket.gethostname()}:{os.getpid()}:{model.new_id()[-6:]}"


def worker_process(worker: str) -> tuple[str, int] | None:
    """The host and pid a :func:`worker_id` names, or None for an id of another form.

    >>> worker_process("box:4242:a1b2c3"), worker_process("my-worker")
    (('box', 4242), None)
    """
    parts = worker.rsplit(":", 2)
    if len(parts) != 3 or not parts[0] or not parts[1].isdigit():
        return None
    return parts[0], int(parts[1])


@dataclass
class Worker:
    """Executes up to ``concurrency`` runs at a time."""

    store: Store
    runner_for: RunnerFactory
    concurrency: int = 1
    lease_s: float = DEFAULT_LEASE_S
    poll_s: float = 0.5
    id: str = field(default_factory=worker_id)
    #: Hear each run start and end and each lease renewal and loss; none: no event is built.
    observers: Sequence[events.Observer] = ()

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise errors.ConfigError(f"concurrency must be at least 1, got {self.concurrency}")
        if not self.lease_s > 0:
            raise errors.ConfigError(f"lease must be positive, got {self.lease_s}s")
        self.outcomes: list[tuple[str, Outcome]] = []
        #: True while :meth:`run` takes runs (its loop has not stopped or crashed).
        self.alive = False

    async def _renew(self, run: model.RunRecord, cancel: asyncio.Event, lost: asyncio.Event) -> None:
        scope = events.RunScope.of(run) if self.observers else None
        while True:
            await asyncio.sleep(self.lease_s / 3)
            try:
                current = await self.store.renew_lease(run.id, self.id, self.lease_s)
            except Exception as exc:  # a store hiccup: try again before the lease runs out
                log.warning("could not renew the lease of run %s: %s", run.id, exc)
                continue
            if current is None:
                if scope is not None:
                    events.notify(self.observers, events.LeaseLost(scope))
                lost.set()
                return
            if scope is not None:
                events.notify(self.observers, events.LeaseRenewed(scope))
            if current.cancel_requested:
                cancel.set()

    async def execute(self, run: model.RunRecord) -> Outcome:
        """Execute one claimed run under lease renewal."""
        if not self.observers:
            return await self._execute(run)
        scope = events.RunScope.of(run)
        events.notify(self.observers, events.RunStarted(scope))
        started, outcome = time.monotonic(), Outcome.ABANDONED  # stopped from outside: the lease decides
        try:
            outcome = await self._execute(run)
            return outcome
        finally:
            events.notify(self.observers, events.RunFinished(scope, outcome, time.monotonic() - started))

    async def _execute(self, run: model.RunRecord) -> Outcome:
        cancel, lost = asyncio.Event(), asyncio.Event()
        renewer = asyncio.create_task(self._renew(run, cancel, lost))
        if run.cancel_requested:
            cancel.set()
        work = asyncio.create_task(self.runner_for(run).execute(run, worker=self.id, cancel=cancel))
        lost_wait = asyncio.create_task(lost.wait())
        try:
            try:
                await asyncio.wait([work, lost_wait], return_when=asyncio.FIRST_COMPLETED)
            except asyncio.CancelledError:  # the worker is stopping: hand the run back at once
                work.cancel()
                await asyncio.gather(work, return_exceptions=True)
                with contextlib.suppress(Exception):
                    await asyncio.shield(self._hand_back(run))
                raise
            if not work.done():  # lease lost: another worker owns the run now
                log.warning("lost the lease of run %s; leaving it to the worker that took it", run.id)
                work.cancel()
                await asyncio.gather(work, return_exceptions=True)
                return Outcome.ABANDONED
            return work.result()
        finally:
            for task in (renewer, lost_wait, work):
                task.cancel()
            await asyncio.gather(renewer, lost_wait, work, return_exceptions=True)

    async def _hand_back(self, run: model.RunRecord) -> None:
        error = {"type": "WorkerStopped", "message": f"worker {self.id} stopped during the run", "retryable": True}
        await self.store.requeue_run(run.id, self.id, error=error, delay_s=0.0)

    async def run_once(self) -> bool:
        """Claim and execute one run; False when none was due."""
        run = await self.store.claim_run(self.id, self.lease_s)
        if run is None:
            return False
        return await self._execute_and_record(run)

    async def run(self, *, stop: asyncio.Event | None = None, until_idle: bool = False) -> None:
        """Take runs until ``stop`` is set (or, with ``until_idle``, until nothing is due).

        Runs in flight when stopping are cancelled (their steps' sandboxes go with them)
        and put back in the queue at once; the next worker releases and resumes them.
        """
        stop = stop or asyncio.Event()
        running: set[asyncio.Task[bool]] = set()
        stop_wait = asyncio.create_task(stop.wait())
        self.alive = True
        try:
            while not stop.is_set():
                while len(running) < self.concurrency:
                    try:
                        run = await self.store.claim_run(self.id, self.lease_s)
                    except errors.IronflowError as exc:  # the store is away: try again after a poll
                        log.warning("cannot take runs from the store: %s", exc)
                        run = None
                    except OSError as exc:
                        log.warning("cannot reach the store: %s", type(exc).__name__)
                        run = None
                    if run is None:
                        break
                    running.add(asyncio.create_task(self._execute_and_record(run)))
                if until_idle and not running:
                    return
                waiting: set[asyncio.Task[object]] = {stop_wait, *running}
                if len(running) < self.concurrency:
                    await asyncio.wait(waiting, timeout=self.poll_s, return_when=asyncio.FIRST_COMPLETED)
                else:
                    await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                for task in running:
                    if task.done() and not task.cancelled() and task.exception() is not None:
                        log.error("a run's execution failed in the worker: %s", task.exception())
                running = {t for t in running if not t.done()}
        finally:
            self.alive = False
            stop_wait.cancel()
            for task in running:
                task.cancel()
            with contextlib.suppress(Exception):
                await asyncio.gather(stop_wait, *running, return_exceptions=True)

    async def _execute_and_record(self, run: model.RunRecord) -> bool:
        self.outcomes.append((run.id, await self.execute(run)))
        return True
