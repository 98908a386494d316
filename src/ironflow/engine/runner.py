"""Execute one run: release, replay finished steps by position, run the rest, record all.

The sandbox contract this module keeps (ironflow-behaviour §2, §3.4, §7):

* ``provider.release_run(run_id)`` before every execution of a run, the first included;
  a failure puts the run back in the queue with backoff (the next attempt releases again);
* every agent step carries ``ironflow.io/run-id`` and ``ironflow.io/root-run-id`` (the
  UUIDs as they are) and ``ironflow.io/step`` (the sanitised name); retries reuse that
  scoped config so the provider's previous-attempt cleanup finds the earlier pod;
* a wave with two steps of one name is refused before anything is created;
* a finished step is never run again: its stored result is returned on replay, and a
  step whose name or kind differs from the stored one fails the run (``ReplayDivergence``);
* a cancelled run's in-flight steps are cancelled and the run is released.

Each step that runs (a replayed one does not) is reported to the runner's observers as it
starts and as it ends (:mod:`ironflow.engine.events`).

Each execution of a run is an ``ironflow.run`` span and each step that runs an ``ironflow.step``
span inside it (:mod:`ironflow.tracing`); an agent step without a ``trace_context`` gets its
step span's, so the sandbox, the proxy and the agent join the trace.

Each attempt of an agent step streams into its own :class:`~ironflow.engine.transcripts.StepTranscript`
(redacted, capped, stored with the step); the debug turns a stream-json run also returns are in
the transcript, so a stored result keeps them (redacted alike) only when the step asked ``verbose``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ironflow import errors, labels, tracing
from ironflow.engine import budgets, deadlines, events, loading, model, retry, transcripts
from ironflow.engine.accounts import AccountPool
from ironflow.engine.context import AgentStep, Context, OpStep, Step, SubWorkflowStep, Workflow
from ironflow.engine.store import Store
from ironflow.provider import ACCOUNT_KIND_CLAUDE_SUBSCRIPTION, NO_PROXY_FOR_ACCOUNTS, AgentProvider, LogSink
from ironflow.waves import duplicate_name, wave_duplicate_message

__all__ = [
    "Runner",
]

log = logging.getLogger("ironflow.engine")


class _ReleaseFailed(Exception):
    """``release_run`` failed somewhere in the run tree; the whole run is requeued."""

    def __init__(self, run_id: str, cause: BaseException) -> None:
        self.run_id = run_id
        self.cause = cause
        super().__init__(f"could not release run {run_id} before executing it: {cause}")


# --- pure parts --------------------------------------------------------------------------


def _describe(kind: model.StepKind, name: str) -> str:
    return f'{kind} step "{name}"'


def _check_replay(stored: model.StepRecord | None, position: int, step: Step) -> None:
    if stored is not None and (stored.name != step.name or stored.kind != step.kind):
        raise errors.ReplayDivergence(position, _describe(stored.kind, stored.name), _describe(step.kind, step.name))


# --- one execution -----------------------------------------------------------------------


class _Execution:
    """The state of one execution of one run (a sub-workflow gets its own)."""

    def __init__(self, runner: Runner, run: model.RunRecord, history: list[model.StepRecord]) -> None:
        self.runner = runner
        self.run = run
        self.history = {s.position: s for s in history}
        self.next_position = 0

    def _reserve(self, count: int) -> list[int]:
        start = self.next_position
        self.next_position += count
        return list(range(start, start + count))

    async def run_step(self, step: Step) -> Any:
        (position,) = self._reserve(1)
        stored = self.history.get(position)
        _check_replay(stored, position, step)
        return await self._execute(position, stored, step)

    async def run_wave(self, steps: Sequence[Step], *, fail_fast: bool) -> list[Any]:
        if not steps:
            return []
        repeated = duplicate_name([s.name for s in steps])
        if repeated is not None:
            raise errors.StepConfigError(wave_duplicate_message(repeated))
        positions = self._reserve(len(steps))
        stored = [self.history.get(p) for p in positions]
        for position, record, step in zip(positions, stored, steps, strict=True):
            _check_replay(record, position, step)
        tasks = [
            asyncio.create_task(self._execute(p, r, s), name=f"ironflow-step-{s.name}")
            for p, r, s in zip(positions, stored, steps, strict=True)
        ]
        try:
            if fail_fast:
                done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
                failed = next((t for t in tasks if t in done and not t.cancelled() and t.exception()), None)
                if failed is not None:
                    raise failed.exception()  # type: ignore[misc]  # the finally cancels the rest
            else:
                await asyncio.wait(tasks)
                for task in tasks:
                    if task.exception() is not None:
                        raise task.exception()  # type: ignore[misc]
            return [t.result() for t in tasks]
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _execute(self, position: int, stored: model.StepRecord | None, step: Step) -> Any:
        if stored is not None and stored.status is model.StepStatus.SUCCEEDED:
            return stored.result  # replayed: nothing runs, nothing is reported
        tries = _Tries()
        with tracing.span("ironflow.step", step=step.name, kind=step.kind.value, position=position) as span:
            try:
                return await self._observed(position, stored, step, tries)
            finally:
                span.set(attempts=tries.count)

    async def _observed(self, position: int, stored: model.StepRecord | None, step: Step, tries: _Tries) -> Any:
        observers = self.runner.observers
        if not observers:
            return await self._run_and_record(position, stored, step, tries)
        scope = events.RunScope.of(self.run)
        events.notify(observers, events.StepStarted(scope, step.name, step.kind))
        started = time.monotonic()
        result: Any = None
        failure: BaseException | None = None
        try:
            result = await self._run_and_record(position, stored, step, tries)
            return result
        except BaseException as exc:
            failure = exc
            raise
        finally:
            took = time.monotonic() - started
            events.notify(observers, events.step_finished(scope, step, took, tries.count, result, failure))

    async def _run_and_record(self, position: int, stored: model.StepRecord | None, step: Step, tries: _Tries) -> Any:
        store = self.runner.store
        record = model.StepRecord(
            run_id=self.run.id,
            position=position,
            name=step.name,
            kind=step.kind,
            id=stored.id if stored else model.new_id(),
            status=model.StepStatus.RUNNING,
            child_run_id=(stored.child_run_id if stored else None)
            or (model.new_id() if isinstance(step, SubWorkflowStep) else None),
            labels=self._labels(step.name, step.config.role) if isinstance(step, AgentStep) else None,
            attempts=stored.attempts if stored else 0,
            started_at=time.time(),
        )
        await store.save_step(record)
        try:
            if isinstance(step, AgentStep):
                result = await self._agent(step, record, tries)
            elif isinstance(step, OpStep):
                result = await self._op(step, tries)
            else:
                assert record.child_run_id is not None
                tries.count = 1
                result = await self._sub_workflow(step, record.child_run_id)
        except asyncio.CancelledError:
            raise
        except _ReleaseFailed:
            raise
        except Exception as exc:
            failed = _replace(
                record,
                status=model.StepStatus.FAILED,
                error=model.error_record(exc),
                attempts=record.attempts + tries.count,
            )
            await store.save_step(failed)
            raise
        done = _replace(
            record,
            status=model.StepStatus.SUCCEEDED,
            result=result,
            attempts=record.attempts + tries.count,
            finished_at=time.time(),
        )
        try:
            await store.save_step(done)
        except errors.UnstorableValue as exc:  # a result that cannot be stored fails the step, by name
            await store.save_step(_replace(record, status=model.StepStatus.FAILED, error=model.error_record(exc)))
            raise
        return result

    def _labels(self, name: str, role: str | None = None) -> dict[str, str]:
        scope = labels.scope_labels(run_id=self.run.id, step=name, root_run_id=self.run.root_run_id)
        return scope if role is None else {**scope, labels.LABEL_ROLE: role}

    async def _check_role_cap(self, role: str | None) -> None:
        """Refuse to start a step whose role has spent its cap this period (:mod:`ironflow.engine.budgets`)."""
        cap = self.runner.role_caps.get(role) if role is not None else None
        if cap is None:
            return
        since = budgets.period_start(cap.period, time.time())
        refused = budgets.refusal(cap, await self.runner.store.role_spend(cap.role, since), since)
        if refused is not None:
            raise refused

    async def _with_retries(
        self, name: str, policy: retry.RetryPolicy | None, tries: _Tries, attempt: Callable[[], Awaitable[Any]]
    ) -> Any:
        """Run ``attempt`` until it succeeds or the policy gives up; ``tries`` counts the attempts."""
        while True:
            tries.count += 1
            try:
                return await attempt()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if not retry.should_retry(policy, exc, tries.count - 1):
                    raise
                assert policy is not None
                log.info("step %s of run %s failed (%s); retrying", name, self.run.id, type(exc).__name__)
                await asyncio.sleep(policy.delay(tries.count - 1, random.random()))  # noqa: S311 - jitter, not a secret

    async def _agent(self, step: AgentStep, record: model.StepRecord, tries: _Tries) -> Any:
        runner = self.runner
        # One scoped config for every attempt: the same labels let the provider find the previous pod.
        config = step.config.scoped(self.run.id, step.name, root_run_id=self.run.root_run_id)
        if step.config.role is not None:  # the pods say their role too (cost by role on the cluster)
            config = config.replace(pod_labels={**config.pod_labels, labels.LABEL_ROLE: step.config.role})
        if config.trace_context is None:
            config = config.replace(trace_context=tracing.current_traceparent())
        use_accounts = runner.provider.account_kind() == ACCOUNT_KIND_CLAUDE_SUBSCRIPTION
        if runner.accounts is not None and not use_accounts:
            # Never run on the provider's own credential when the worker was given accounts for it.
            raise errors.StepConfigError(NO_PROXY_FOR_ACCOUNTS)

        async def attempt() -> Any:
            await self._check_role_cap(step.config.role)
            pool = runner.accounts if use_accounts else None
            lease = await pool.acquire(step.name) if pool is not None else None
            bounded = deadlines.bounded(config, deadlines.seconds_left(self.run))
            scoped = bounded.account_lease(lease) if lease is not None else bounded
            known: tuple[str, ...] = (lease.value.reveal(),) if lease is not None else ()  # revealed to be redacted
            known += tuple(value.reveal() for value in config.secret_values)  # secret untrusted blocks
            transcript = transcripts.StepTranscript(
                runner.store,
                run_id=self.run.id,
                position=record.position,
                step=step.name,
                attempt=record.attempts + tries.count,
                cap_bytes=runner.transcript_cap_bytes,
                secrets=known,
                forward=runner.sink,
            )
            try:
                async with transcript:
                    result = await runner.provider.run(scoped, logs=transcript)
            finally:
                if pool is not None and lease is not None:
                    await pool.release(lease)
            if not step.config.verbose:
                return dataclasses.replace(result, debug_messages=None)
            return transcripts.redacted_turns(result, known)

        return await self._with_retries(step.name, step.retry, tries, attempt)

    async def _op(self, step: OpStep, tries: _Tries) -> Any:
        operation: Any = step.operation
        if callable(getattr(operation, "label", None)):  # PodRun/JobRun: stamp the run's labels
            for key, value in self._labels(step.name).items():
                operation = operation.label(key, value)
        runnable = getattr(operation, "run", None)
        call = runnable if callable(runnable) else operation
        return await self._with_retries(step.name, step.retry, tries, call)

    async def _sub_workflow(self, step: SubWorkflowStep, child_id: str) -> Any:
        child = await self.runner.store.start_child_run(
            model.RunRecord(
                id=child_id,
                workflow=loading.workflow_ref(step.workflow),
                input=step.input,
                status=model.RunStatus.RUNNING,
                root_run_id=self.run.root_run_id,
                parent_run_id=self.run.id,
                backend=self.run.backend,
                deadline_at=self.run.deadline_at,
            )
        )
        return await self.runner._execute_child(child, step.workflow)


class _Stop(enum.Enum):
    """Why a run's body was stopped from outside, and what its in-flight steps record."""

    CANCEL = "the run was cancelled while this step ran"
    DEADLINE = "the run's deadline passed while this step ran"
    DEADLINE_BEFORE = "the run's deadline passed before this step could resume"

    @property
    def step_error(self) -> dict[str, Any]:
        kind = "Cancelled" if self is _Stop.CANCEL else "RunDeadlineExceeded"
        return {"type": kind, "message": self.value, "retryable": False}


@dataclasses.dataclass
class _Tries:
    """Attempts made by one step in this execution (kept when the last one raises)."""

    count: int = 0


def _replace(record: model.StepRecord, **changes: Any) -> model.StepRecord:
    return dataclasses.replace(record, **changes)


# --- the runner --------------------------------------------------------------------------


@dataclass
class Runner:
    """Executes runs against one provider and one store.

    ``sink`` also gets every line agent steps stream, unredacted (the store gets them redacted);
    ``transcript_cap_bytes`` is the most each attempt of a step stores.
    """

    store: Store
    provider: AgentProvider
    accounts: AccountPool | None = None
    sink: LogSink | None = None
    #: Seconds before a run whose release failed is due again, by execution attempt.
    requeue_delay: Callable[[int], float] = retry.requeue_delay
    #: Hear each step start and end (:mod:`ironflow.engine.events`); none: no event is built.
    observers: Sequence[events.Observer] = ()
    transcript_cap_bytes: int = transcripts.DEFAULT_CAP_BYTES
    #: The cost caps of roles, by role: a step of a capped role starts only while its role has not
    #: spent its cap this calendar period (:mod:`ironflow.engine.budgets`).
    role_caps: Mapping[str, budgets.RoleCap] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.transcript_cap_bytes < 0:
            raise errors.ConfigError(f"transcript_cap_bytes must be 0 or more, got {self.transcript_cap_bytes}")

    async def _release(self, run_id: str) -> None:
        try:
            await self.provider.release_run(run_id)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise _ReleaseFailed(run_id, exc) from exc

    async def _workflow_body(self, run: model.RunRecord, workflow: Workflow) -> Any:
        history = await self.store.steps(run.id)
        execution = _Execution(self, run, history)
        ctx = Context(
            run_id=run.id,
            root_run_id=run.root_run_id,
            parent_run_id=run.parent_run_id,
            provider=self.provider,
            executor=execution,
        )
        return await workflow(ctx, run.input)

    async def _execute_child(self, child: model.RunRecord, workflow: Workflow) -> Any:
        """A sub-workflow run, inline in its parent's execution; its failure is the parent step's."""
        try:
            with tracing.span("ironflow.run", run_id=child.id, workflow=child.workflow, backend=child.backend):
                await self._release(child.id)
                output = await self._workflow_body(child, workflow)
            await self.store.finish_run(child.id, None, status=model.RunStatus.SUCCEEDED, output=output)
            return output
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await asyncio.shield(self.store.finish_run(child.id, None, status=model.RunStatus.CANCELLED))
            raise
        except _ReleaseFailed as exc:
            await self.store.finish_run(
                child.id, None, status=model.RunStatus.FAILED, error=model.error_record(exc.cause)
            )
            raise
        except Exception as exc:
            await self.store.finish_run(child.id, None, status=model.RunStatus.FAILED, error=model.error_record(exc))
            raise

    async def execute(
        self, run: model.RunRecord, *, worker: str, cancel: asyncio.Event | None = None
    ) -> events.Outcome:
        """Execute a run claimed by ``worker`` to its end, or until ``cancel`` is set.

        Returns what happened; the store already holds the new state. A ``CancelledError``
        from outside (worker stopping, lease lost) leaves the run to its lease.
        """
        with tracing.span("ironflow.run", run_id=run.id, workflow=run.workflow, backend=run.backend) as span:
            outcome = await self._execute(run, worker, cancel)
            span.set(outcome=outcome.value)
            return outcome

    async def _execute(self, run: model.RunRecord, worker: str, cancel: asyncio.Event | None) -> events.Outcome:
        workflow: Workflow
        try:
            workflow = loading.load_workflow(run.workflow)
        except Exception as exc:
            await self.store.finish_run(run.id, worker, status=model.RunStatus.FAILED, error=model.error_record(exc))
            return events.Outcome.FAILED
        left = deadlines.seconds_left(run)
        if left is not None and left <= 0:  # resumed (or first claimed) after its deadline
            return await self._stop(run, worker, _Stop.DEADLINE_BEFORE)
        body = asyncio.create_task(self._top_level(run, workflow), name=f"ironflow-run-{run.id}")
        waiter = asyncio.create_task(cancel.wait()) if cancel is not None else None
        try:
            await asyncio.wait([body, *([waiter] if waiter else [])], timeout=left, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            body.cancel()
            await asyncio.gather(body, return_exceptions=True)
            raise
        finally:
            if waiter is not None:
                waiter.cancel()
                await asyncio.gather(waiter, return_exceptions=True)
        if not body.done():  # cancel requested, or the deadline came: stop the in-flight steps
            body.cancel()
            await asyncio.gather(body, return_exceptions=True)
            cancelled = cancel is not None and cancel.is_set()
            return await self._stop(run, worker, _Stop.CANCEL if cancelled else _Stop.DEADLINE)
        return await self._settle(run, worker, body)

    async def _stop(self, run: model.RunRecord, worker: str, why: _Stop) -> events.Outcome:
        """End a run whose body is stopped (or never started): release it, record its in-flight steps."""
        with contextlib.suppress(Exception):
            await self.provider.release_run(run.id)
        await self._mark_stopped(run.id, why.step_error)
        if why is _Stop.CANCEL:
            await self.store.finish_run(run.id, worker, status=model.RunStatus.CANCELLED)
            return events.Outcome.CANCELLED
        assert run.deadline_at is not None
        passed = errors.RunDeadlineExceeded(run.deadline_at, while_running=why is _Stop.DEADLINE)
        log.warning("run %s stopped: %s", run.id, passed.message)
        await self.store.finish_run(run.id, worker, status=model.RunStatus.FAILED, error=model.error_record(passed))
        return events.Outcome.FAILED

    async def _mark_stopped(self, run_id: str, error: Mapping[str, Any]) -> None:
        """Record the steps that were in flight (here and in sub-workflows) as failed with ``error``."""
        for step in await self.store.steps(run_id):
            if step.status is model.StepStatus.RUNNING:
                await self.store.save_step(
                    dataclasses.replace(step, status=model.StepStatus.FAILED, error=error, finished_at=time.time())
                )
                if step.child_run_id is not None:
                    await self._mark_stopped(step.child_run_id, error)

    async def _top_level(self, run: model.RunRecord, workflow: Workflow) -> Any:
        await self._release(run.id)
        return await self._workflow_body(run, workflow)

    async def _settle(self, run: model.RunRecord, worker: str, body: asyncio.Task[Any]) -> events.Outcome:
        if body.cancelled():  # a step cancelled its own run's task: leave the run to its lease
            return events.Outcome.ABANDONED
        exc = body.exception()
        if exc is None:
            try:
                await self.store.finish_run(run.id, worker, status=model.RunStatus.SUCCEEDED, output=body.result())
            except errors.UnstorableValue as bad_output:
                await self.store.finish_run(
                    run.id, worker, status=model.RunStatus.FAILED, error=model.error_record(bad_output)
                )
                return events.Outcome.FAILED
            return events.Outcome.SUCCEEDED
        if isinstance(exc, _ReleaseFailed):
            delay = self.requeue_delay(run.attempt)
            log.warning("run %s requeued in %.1fs: %s", run.id, delay, exc)
            error = model.error_record(errors.CleanupError(str(exc)))
            await self.store.requeue_run(run.id, worker, error=error, delay_s=delay)
            return events.Outcome.REQUEUED
        await self.store.finish_run(run.id, worker, status=model.RunStatus.FAILED, error=model.error_record(exc))
        return events.Outcome.FAILED
