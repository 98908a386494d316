"""The workflow side: ironflow steps inside a Temporal workflow, with the engine's contract.

Use it in a ``@workflow.run`` method::

    async with ironflow.temporal.run() as ctx:          # releases the run first
        plan = await ctx.agent("plan", AgentConfig("Plan the review"))
        lint, tests = await ctx.parallel([AgentStep("lint", ...), AgentStep("tests", ...)])
        summary = await ctx.sub_workflow("summarise", Summarise.run, {...})

* ``run()`` releases the run (``release_run(workflow id)``) before the first step of every
  workflow run, the first included: a workflow retried, reset or continued as new starts
  with nothing of its earlier runs left. On a cancel it releases the run again, after the
  in-flight steps' activities have been cancelled and their sandboxes removed.
* Each step is one activity (Temporal records its result; a finished step is never run
  again); its attempts are Temporal's activity retries, its sandbox labelled with the run
  (workflow id), the root run (root workflow id) and the step name.
* A wave with two steps of one name is refused before anything starts (two sandboxes with
  one step label would delete each other), with the engine's words: the workflow fails with a
  non-retryable ``ApplicationError`` of type ``StepConfigError``.
* A step's errors reach the workflow as ``ActivityError`` whose cause is an
  ``ApplicationError`` typed by the ironflow error. A step whose every Provider Account is
  rate-limited waits for the earliest reset on a Temporal timer (up to ``max_capacity_wait``
  in all) and runs again, instead of failing.

Workflow code must be deterministic (Temporal's rule, the engine's too): branch on step
results, never on the clock or randomness.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Final

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, CancelledError, ChildWorkflowError

from ironflow import errors, results
from ironflow.results import AgentResult
from ironflow.steps import AgentConfig
from ironflow.temporal import failures, requests, sealing
from ironflow.waves import wave_duplicate_message

__all__ = [
    "DEFAULT_RETRY",
    "AgentStep",
    "CommandStep",
    "RunContext",
    "StepOptions",
    "run",
    "wave_duplicate_message",
]

#: Three attempts, 200 ms then 400 ms apart (the engine's backoff); non-retryable errors stop at one.
DEFAULT_RETRY: Final = RetryPolicy(
    initial_interval=timedelta(milliseconds=200),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=3,
)
_RELEASE_HEARTBEAT: Final = timedelta(seconds=30)
#: The release of a run retries until it succeeds (the engine requeues a run whose release failed).
_RELEASE_RETRY: Final = RetryPolicy(
    initial_interval=timedelta(seconds=1), backoff_coefficient=2.0, maximum_interval=timedelta(seconds=60)
)


@dataclass(frozen=True)
class StepOptions:
    """How long a step may take and how soon a dead worker is noticed (the heartbeat timeout)."""

    timeout: timedelta = timedelta(minutes=15)
    heartbeat_timeout: timedelta = timedelta(seconds=10)
    #: How long, in all, a step waits (on Temporal timers) for a rate-limited account's window.
    max_capacity_wait: timedelta = timedelta(minutes=5)
    retry: RetryPolicy = field(default_factory=lambda: DEFAULT_RETRY)


@dataclass(frozen=True)
class AgentStep:
    """An agent step of a wave."""

    name: str
    config: AgentConfig
    retry: RetryPolicy | None = None


@dataclass(frozen=True)
class CommandStep:
    """A plain command of a wave (its result is ``{"exit_code", "stdout", "stderr", "duration"}``)."""

    name: str
    argv: Sequence[str]
    retry: RetryPolicy | None = None


class RunContext:
    """One workflow run's view of ironflow: its ids and its steps (activities by name)."""

    def __init__(self, options: StepOptions) -> None:
        info = workflow.info()
        self.options = options
        #: The run id of the step labels: the workflow id.
        self.run_id: str = info.workflow_id
        self.root_run_id: str = info.root.workflow_id if info.root is not None else info.workflow_id
        self.parent_run_id: str | None = info.parent.workflow_id if info.parent is not None else None

    async def release(self) -> int:
        """Remove everything of this run (and of the runs whose root it is); retried until it succeeds."""
        removed = await workflow.execute_activity(
            requests.ACTIVITY_RELEASE_RUN,
            requests.ReleaseRequest(self.run_id),
            result_type=int,
            start_to_close_timeout=self.options.timeout,
            # Often a worker's first activity: it pays the provider's client start (kubeconfig,
            # TLS) on the event loop, which a short step heartbeat timeout mistook for a dead worker.
            heartbeat_timeout=max(self.options.heartbeat_timeout, _RELEASE_HEARTBEAT),
            retry_policy=_RELEASE_RETRY,
        )
        return int(removed)

    def _activity_options(self, retry: RetryPolicy | None) -> dict[str, Any]:
        return {
            "start_to_close_timeout": self.options.timeout,
            "heartbeat_timeout": self.options.heartbeat_timeout,
            "retry_policy": retry or self.options.retry,
            # A cancelled step is awaited until its sandbox is gone and its token revoked.
            "cancellation_type": workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
        }

    async def agent(self, name: str, config: AgentConfig, *, retry: RetryPolicy | None = None) -> AgentResult:
        """Run ``config`` as step ``name`` on the worker's provider; returns its ``AgentResult``."""
        request = requests.AgentRequest.of(name, config, root_workflow_id=self.root_run_id)
        if request.needs_sealing() and not _sealed_here(request):  # fails the workflow once, before any history
            raise failures.application_error(errors.StepConfigError(requests.UNSEALED_REFUSED.format(step=name)))
        waited = 0.0
        while True:
            try:
                raw = await workflow.execute_activity(
                    requests.ACTIVITY_AGENT, request, result_type=dict, summary=name, **self._activity_options(retry)
                )
                break
            except ActivityError as exc:
                wait = failures.rate_limit_wait(exc)
                if wait is None or waited + wait > self.options.max_capacity_wait.total_seconds():
                    raise
                await workflow.sleep(wait)  # a Temporal timer: no worker holds the step meanwhile
                waited += wait
        result = results.result_from_dict(raw)
        assert isinstance(result, AgentResult)
        return result

    async def command(self, name: str, argv: Sequence[str], *, retry: RetryPolicy | None = None) -> dict[str, Any]:
        """Run a plain command as step ``name`` in a sandbox without network."""
        request = requests.CommandRequest(name, list(argv), root_workflow_id=self.root_run_id)
        raw = await workflow.execute_activity(
            requests.ACTIVITY_COMMAND, request, result_type=dict, summary=name, **self._activity_options(retry)
        )
        return dict(raw)

    async def session(
        self,
        name: str,
        commands: Sequence[Sequence[str]],
        *,
        files: Mapping[str, str] | None = None,
        read: Sequence[str] = (),
        timeout_s: float | None = None,
        keep_going: bool = False,
        retry: RetryPolicy | None = None,
    ) -> dict[str, Any]:
        """Step ``name``: one sandbox session on the worker's provider: ``files`` written, ``commands``
        run in order in the same sandbox (the first failure ends them unless ``keep_going``), the
        ``read`` files returned, the session closed. Returns ``{"commands": [results], "files": {…}}``."""
        request = requests.SessionRequest(
            name,
            [list(argv) for argv in commands],
            dict(files or {}),
            list(read),
            timeout_s,
            keep_going,
            root_workflow_id=self.root_run_id,
        )
        raw = await workflow.execute_activity(
            requests.ACTIVITY_SESSION, request, result_type=dict, summary=name, **self._activity_options(retry)
        )
        return dict(raw)

    async def parallel(self, steps: Sequence[AgentStep | CommandStep], *, fail_fast: bool = True) -> list[Any]:
        """Run a wave at once; results in the order given. ``fail_fast``: the first failure
        cancels the rest (their sandboxes are removed) and is raised.

        Raises:
            ApplicationError: type ``StepConfigError``, non-retryable: two steps of the wave share
                a name (nothing is started). It fails the workflow; a plain exception would fail
                only the workflow task, which Temporal retries for ever.
        """
        seen: set[str] = set()
        for step in steps:
            if step.name in seen:
                raise failures.application_error(errors.StepConfigError(wave_duplicate_message(step.name)))
            seen.add(step.name)
        tasks = [asyncio.ensure_future(self._one(step)) for step in steps]
        try:
            if fail_fast:
                return list(await asyncio.gather(*tasks))
            done = await asyncio.gather(*tasks, return_exceptions=True)
            failed = next((d for d in done if isinstance(d, BaseException)), None)
            if failed is not None:
                raise failed
            return list(done)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _one(self, step: AgentStep | CommandStep) -> Any:
        if isinstance(step, AgentStep):
            return await self.agent(step.name, step.config, retry=step.retry)
        return await self.command(step.name, step.argv, retry=step.retry)

    async def sub_workflow(self, name: str, run_method: Any, input: Any) -> Any:
        """Run a child workflow (own run id ``<run id>.<name>``, this run's root); returns its output."""
        return await workflow.execute_child_workflow(run_method, input, id=f"{self.run_id}.{name}")


@contextlib.asynccontextmanager
async def run(options: StepOptions | None = None) -> AsyncIterator[RunContext]:
    """This workflow run's :class:`RunContext`: released before the block, and again after a cancel."""
    ctx = RunContext(options or StepOptions())
    await ctx.release()
    try:
        yield ctx
    except BaseException as exc:
        if _is_cancel(exc):
            await ctx.release()  # the in-flight steps were cancelled and awaited; sweep what is left
        raise


def _sealed_here(request: requests.AgentRequest) -> bool:
    """True when this worker's payload converter marks the request for sealing (the data converter
    of :mod:`ironflow.temporal.sealing`): the one converter that writes a ``Secret`` at all."""
    try:
        payload = workflow.payload_converter().to_payload(request)
    except (TypeError, ValueError, RuntimeError):  # Temporal's default converter cannot write a Secret
        return False
    return sealing.holds_secret(payload)


def _is_cancel(exc: BaseException) -> bool:
    """A cancelled workflow: the task's own cancel, or a step that ended because it was cancelled
    (an activity or child awaited to its end reports the cancel as its failure's cause)."""
    if isinstance(exc, asyncio.CancelledError):
        return True
    return isinstance(exc, ActivityError | ChildWorkflowError) and isinstance(exc.cause, CancelledError)
