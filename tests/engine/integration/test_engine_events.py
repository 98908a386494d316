"""What the worker, the runner and the account pool report, against a real SQLite store.

An observer here only records; the metrics and the log lines built on these events have
their own tests (``test_engine_monitoring.py``, ``unit/test_engine_metrics.py``, ``unit/test_engine_run_log.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from ironflow import errors
from ironflow.engine import accounts, events, model
from ironflow.engine.runner import Runner
from ironflow.engine.sqlite import SqliteStore
from ironflow.engine.worker import Worker
from ironflow.provider import LogSink
from ironflow.results import AgentResult
from ironflow.steps import AgentConfig
from ironflow.testing.engine import RecordingProvider
from ironflow.testing.polling import eventually

WORKFLOWS = Path(__file__).parent / "engine_workflows.py"


class Heard:
    """Keeps every event, in order."""

    def __init__(self) -> None:
        self.events: list[events.Event] = []

    def observe(self, event: events.Event) -> None:
        self.events.append(event)

    def of(self, *kinds: type[Any]) -> list[Any]:
        return [e for e in self.events if isinstance(e, kinds)]

    def steps(self) -> list[tuple[str, str, str]]:
        """(event, step, outcome) of each step event."""
        return [
            (type(e).__name__, e.step, e.outcome if isinstance(e, events.StepFinished) else "")
            for e in self.of(events.StepStarted, events.StepFinished)
        ]


class SpendingProvider(RecordingProvider):
    """Answers as the recording provider does, with the tokens and cost a real model reports."""

    async def run(self, config: AgentConfig, *, logs: LogSink | None = None) -> AgentResult:
        result = await super().run(config, logs=logs)
        return dataclasses.replace(result, model="claude-test", input_tokens=120, output_tokens=30, cost_usd=0.01)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    opened = SqliteStore(tmp_path / "engine.db")
    await opened.open()
    try:
        yield opened
    finally:
        await opened.close()


async def submit(store: SqliteStore, workflow: str, input: Any) -> model.RunRecord:
    run = model.RunRecord(id=model.new_id(), workflow=f"{WORKFLOWS}:{workflow}", input=input, backend="local")
    return await store.create_run(run)


def observed_worker(store: SqliteStore, provider: RecordingProvider, heard: Heard, **kwargs: Any) -> Worker:
    def runner_for(run: model.RunRecord) -> Runner:
        return Runner(store, provider, observers=[heard], requeue_delay=lambda attempt: 0.0)

    return Worker(store, runner_for, observers=[heard], **kwargs)


async def test_each_run_and_step_start_and_end_is_heard_in_order_with_its_scope(store: SqliteStore) -> None:
    heard = Heard()
    run = await submit(store, "linear", {"steps": ["a", "b"]})
    await observed_worker(store, SpendingProvider(), heard, lease_s=5).run(until_idle=True)
    scope = events.RunScope(run.id, run.workflow, "local", 1)
    usage = events.Usage("claude-test", 120, 30, 0.01)
    assert [type(e).__name__ for e in heard.events] == [
        "RunStarted", "StepStarted", "StepFinished", "StepStarted", "StepFinished", "RunFinished"
    ]  # fmt: skip
    first, done_a, _, done_b, finished = heard.events[0], heard.events[2], *heard.events[3:]
    assert first == events.RunStarted(scope)
    assert isinstance(done_a, events.StepFinished)
    assert isinstance(done_b, events.StepFinished)
    assert (done_a.run, done_a.step, done_a.kind, done_a.outcome) == (scope, "a", "agent", "succeeded")
    assert (done_a.tries, done_a.usage, done_a.error, done_b.step) == (1, usage, None, "b")
    assert isinstance(finished, events.RunFinished)
    assert (finished.run, finished.outcome) == (scope, events.Outcome.SUCCEEDED)


async def test_a_retried_step_ends_once_counting_its_tries_and_a_failed_one_names_its_error(
    store: SqliteStore,
) -> None:
    heard = Heard()
    provider = RecordingProvider(failures={"flaky": [errors.ProcessFailed(1, "flake")]})
    await submit(store, "flaky", {"retries": 1})
    worker = observed_worker(store, provider, heard, lease_s=5)
    await worker.run(until_idle=True)
    provider.failures["flaky"] = [errors.ProcessFailed(1, "again")]
    await submit(store, "flaky", {"retries": 0})
    await worker.run(until_idle=True)
    retried, failed = heard.of(events.StepFinished)
    assert (retried.outcome, retried.tries, retried.error) == (events.StepOutcome.SUCCEEDED, 2, None)
    assert (failed.outcome, failed.tries, failed.error) == (events.StepOutcome.FAILED, 1, "ProcessFailed")
    assert [e.outcome for e in heard.of(events.RunFinished)] == [events.Outcome.SUCCEEDED, events.Outcome.FAILED]


async def test_a_replayed_step_is_not_reported_again(store: SqliteStore) -> None:
    heard = Heard()
    provider = RecordingProvider(failures={"b": [errors.StepConfigError("no")]})
    run = await submit(store, "linear", {"steps": ["a", "b"]})
    worker = observed_worker(store, provider, heard, lease_s=5)
    await worker.run(until_idle=True)
    assert await store.retry_run(run.id) is not None
    heard.events.clear()
    await worker.run(until_idle=True)
    assert heard.steps() == [("StepStarted", "b", ""), ("StepFinished", "b", "succeeded")]
    assert heard.of(events.RunStarted)[0].run.attempt == 2


async def test_a_cancelled_run_reports_its_step_cancelled_after_lease_renewals(store: SqliteStore) -> None:
    heard = Heard()
    provider = RecordingProvider(step_delays={"a": 30.0})
    run = await submit(store, "linear", {"steps": ["a"]})
    worker = observed_worker(store, provider, heard, lease_s=0.3)
    task = asyncio.create_task(worker.run())
    try:
        await eventually(lambda: heard.of(events.LeaseRenewed))
        assert await store.cancel_run(run.id) is not None
        await eventually(lambda: heard.of(events.RunFinished))
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert heard.steps() == [("StepStarted", "a", ""), ("StepFinished", "a", "cancelled")]
    assert heard.of(events.RunFinished)[0].outcome is events.Outcome.CANCELLED
    assert heard.of(events.LeaseRenewed)[0].run.run_id == run.id
    assert heard.of(events.LeaseLost) == []


async def test_a_lost_lease_is_heard_and_the_run_is_abandoned(store: SqliteStore) -> None:
    heard = Heard()
    provider = RecordingProvider(step_delays={"a": 30.0})
    run = await submit(store, "linear", {"steps": ["a"]})
    worker = observed_worker(store, provider, heard, lease_s=0.3)
    task = asyncio.create_task(worker.run())
    try:
        await eventually(lambda: provider.pods)
        error = {"type": "Test", "message": "taken away", "retryable": True}
        assert await store.requeue_run(run.id, worker.id, error=error, delay_s=3600)  # no longer ours
        await eventually(lambda: heard.of(events.RunFinished))
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert [e.run.run_id for e in heard.of(events.LeaseLost)] == [run.id]
    assert heard.of(events.RunFinished)[0].outcome is events.Outcome.ABANDONED
    assert heard.steps()[-1] == ("StepFinished", "a", "cancelled")


async def test_a_stopping_worker_reports_its_run_abandoned(store: SqliteStore) -> None:
    heard = Heard()
    provider = RecordingProvider(step_delays={"a": 30.0})
    await submit(store, "linear", {"steps": ["a"]})
    stop = asyncio.Event()
    worker = observed_worker(store, provider, heard, lease_s=5)
    task = asyncio.create_task(worker.run(stop=stop))
    await eventually(lambda: provider.pods)
    assert worker.alive
    stop.set()
    await task
    assert not worker.alive
    assert heard.of(events.RunFinished)[0].outcome is events.Outcome.ABANDONED
    assert heard.steps()[-1] == ("StepFinished", "a", "cancelled")


def _clock(times: list[float]) -> Callable[[], float]:
    """Each call the next time, the last one from then on (the pool reads the clock as it pleases)."""
    values = itertools.chain(times, itertools.repeat(times[-1]))
    return lambda: next(values)


async def test_a_wait_for_a_provider_account_is_heard_when_it_starts_and_ends(store: SqliteStore) -> None:
    heard = Heard()
    window = model.RateWindow("main", "five_hour", model.WindowStatus.REJECTED, 1.0, resets_at=1_000.0)
    await store.record_rate_limits([window])
    main = accounts.ProviderAccount("main", accounts.CredentialRef(env="PATH"))
    clock = _clock([990.0, 990.0, 995.0, 1_001.0])  # started, rejected, rejected, reset
    pool = accounts.AccountPool(store, [main], max_wait_s=60, poll_s=0.01, clock=clock, observers=[heard])
    session = await pool.acquire("review")
    await pool.release(session)
    started, ended = heard.events
    assert isinstance(started, events.CapacityWaitStarted)
    assert (started.step, started.reason) == ("review", "main rejected until 1970-01-01T00:16:40Z")
    assert ended == events.CapacityWaitEnded("review", 11.0, acquired=True)


async def test_a_wait_that_gives_up_is_heard_ending_without_an_account(store: SqliteStore) -> None:
    heard = Heard()
    await store.record_rate_limits([model.RateWindow("main", "five_hour", model.WindowStatus.REJECTED, 1.0)])
    main = accounts.ProviderAccount("main", accounts.CredentialRef(env="PATH"))
    clock = _clock([990.0, 990.0, 1_000.0])  # a rejection without a reset time holds: 10 s, the whole wait
    pool = accounts.AccountPool(store, [main], max_wait_s=10, poll_s=0.01, clock=clock, observers=[heard])
    with pytest.raises(errors.RateLimited):
        await pool.acquire("review")
    assert heard.events == [
        events.CapacityWaitStarted("review", "main rejected until an unknown time"),
        events.CapacityWaitEnded("review", 10.0, acquired=False),
    ]


async def test_a_wait_cut_short_by_a_cancel_is_heard_ending_too(store: SqliteStore) -> None:
    """Else the metrics would count the step as waiting for ever."""
    heard = Heard()
    await store.record_rate_limits([model.RateWindow("main", "five_hour", model.WindowStatus.REJECTED, 1.0)])
    main = accounts.ProviderAccount("main", accounts.CredentialRef(env="PATH"))
    pool = accounts.AccountPool(store, [main], max_wait_s=600, poll_s=0.01, observers=[heard])
    waiting = asyncio.create_task(pool.acquire("review"))
    await eventually(lambda: heard.events)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    started, ended = heard.events
    assert isinstance(started, events.CapacityWaitStarted)
    assert isinstance(ended, events.CapacityWaitEnded)
    assert (ended.step, ended.acquired) == ("review", False)
