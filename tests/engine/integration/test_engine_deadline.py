"""A run's absolute deadline (reference engine 4.0), on SQLite and on a real PostgreSQL server.

The deadline is stored with the run, so it holds across resumes: a run claimed after it passed
fails before any step runs; a run still going when it comes is stopped like a cancel (in-flight
steps recorded, the run released) and fails naming the deadline; agent steps never get a bound
past it, so a pod's own deadline holds when the worker is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from tests.engine.integration.test_engine_runs import get, invoked_steps, ref, run_all, runner_for

from ironflow.engine import model
from ironflow.engine.events import Outcome
from ironflow.engine.store import Store
from ironflow.engine.worker import Worker
from ironflow.testing.engine import RecordingProvider
from ironflow.testing.polling import eventually


async def submit_with_deadline(store: Store, workflow: str, input: object, deadline_at: float) -> str:
    run_id = model.new_id()
    await store.create_run(model.RunRecord(id=run_id, workflow=ref(workflow), input=input, deadline_at=deadline_at))
    return run_id


async def test_the_deadline_is_stored_with_the_run_and_given_to_its_sub_workflows(store: Store) -> None:
    deadline_at = time.time() + 600
    run_id = await submit_with_deadline(store, "parent", {}, deadline_at)
    assert (await get(store, run_id)).deadline_at == deadline_at
    await run_all(store, RecordingProvider())
    (child,) = [r for r in await store.list_runs(root_run_id=run_id) if r.id != run_id]
    assert (await get(store, run_id)).status is model.RunStatus.SUCCEEDED
    assert child.deadline_at == deadline_at


async def test_a_run_without_a_deadline_stores_none(store: Store) -> None:
    run_id = model.new_id()
    await store.create_run(model.RunRecord(id=run_id, workflow=ref("linear"), input={"steps": ["a"]}))
    assert (await get(store, run_id)).deadline_at is None


async def test_a_run_going_at_its_deadline_is_stopped_released_and_failed_naming_it(store: Store) -> None:
    provider = RecordingProvider(step_delays={"b": 30.0})
    run_id = await submit_with_deadline(store, "linear", {"steps": ["a", "b", "c"]}, time.time() + 1.0)
    worker = Worker(store, runner_for(store, provider), lease_s=5)
    task = asyncio.create_task(worker.run())
    try:
        await eventually(lambda: bool(worker.outcomes))
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert worker.outcomes == [(run_id, Outcome.FAILED)]
    run = await get(store, run_id)
    assert run.status is model.RunStatus.FAILED
    assert run.error is not None
    assert (run.error["type"], run.error["retryable"]) == ("RunDeadlineExceeded", False)
    assert "passed its deadline" in run.error["message"]
    assert "while it ran" in run.error["message"]
    events = [(e["event"], e.get("step") or e.get("run")) for e in provider.events]
    assert events[-2:] == [("cancelled", "b"), ("release", run_id)]  # stopped, then released
    assert "c" not in invoked_steps(provider)
    a, b = await store.steps(run_id)
    assert (a.status, b.status) == (model.StepStatus.SUCCEEDED, model.StepStatus.FAILED)
    assert b.error is not None
    assert b.error["type"] == "RunDeadlineExceeded"


async def test_a_run_resumed_after_its_deadline_fails_before_any_step_runs(store: Store) -> None:
    run_id = await submit_with_deadline(store, "linear", {"steps": ["a"]}, time.time() - 1)
    provider = RecordingProvider()
    worker = await run_all(store, provider)
    assert worker.outcomes == [(run_id, Outcome.FAILED)]
    run = await get(store, run_id)
    assert run.error is not None
    assert run.error["type"] == "RunDeadlineExceeded"
    assert "before it could resume" in run.error["message"]
    assert invoked_steps(provider) == []
    assert [e["event"] for e in provider.events] == ["release"]  # a previous attempt's pods still go


async def test_an_agent_step_is_never_bounded_past_the_runs_deadline(store: Store) -> None:
    provider = RecordingProvider()
    await submit_with_deadline(store, "linear", {"steps": ["a"]}, time.time() + 100)
    await run_all(store, provider)
    (config,) = provider.configs
    assert config.timeout is not None
    assert 100 < config.timeout <= 105  # the run's time left plus the margin: the worker's deadline fires first
