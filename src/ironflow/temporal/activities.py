"""The activities a Temporal worker runs for ironflow: an agent step, a plain command, a run's release.

Each keeps the sandbox contract of the built-in engine on Temporal's terms:

* the step's ``StepScope`` comes from the activity's workflow id and the step's name
  (:mod:`ironflow.temporal.requests`), the same for every attempt, so every attempt's sandbox
  carries the same run, root-run and step labels and the reaper and ``release_run`` find it;
* before every attempt after the first (Temporal's activity retry), the previous attempt's
  objects are released: a provider with ``release_step(scope)`` is asked to; the Kubernetes
  and agent-sandbox providers delete the previous attempt's pod or claim by those labels
  inside ``run`` before they create one. A release that fails fails the attempt, retryably
  (``CleanupError``), so the next attempt releases again before creating anything;
* while the sandbox runs, the activity heartbeats (every third of its heartbeat timeout), so
  Temporal sees a dead worker within that timeout and delivers a cancel to a live one;
* a cancel (the workflow cancelled it, or its heartbeat timed out) cancels ``provider.run``,
  which deletes the pod or kills the sandbox and revokes its proxy token before it returns;
* errors leave as ``ApplicationError`` typed by the ironflow error (:mod:`ironflow.temporal.failures`),
  results as JSON values (an ``AgentResult`` as :func:`ironflow.results.result_to_dict`).

Never imported by workflow code: a workflow calls these by name (``ironflow.agent`` …).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any, Final, Protocol

from temporalio import activity

from ironflow import errors, results
from ironflow.provider import ACCOUNT_KIND_CLAUDE_SUBSCRIPTION, NO_PROXY_FOR_ACCOUNTS, AgentProvider, sessions_of
from ironflow.results import AgentResult
from ironflow.sessions.backend import SessionBackend
from ironflow.sessions.values import OpenOptions
from ironflow.steps import AccountLease, AgentConfig, StepScope
from ironflow.temporal import failures, requests

__all__ = ["DEFAULT_HEARTBEAT_S", "AccountSource", "IronflowActivities"]

log = logging.getLogger("ironflow.temporal")

#: How often an activity without a heartbeat timeout heartbeats (a cancel is delivered on one).
DEFAULT_HEARTBEAT_S: Final = 5.0


@contextlib.asynccontextmanager
async def _heartbeating() -> AsyncIterator[None]:
    """Heartbeat every third of the activity's heartbeat timeout until the block ends."""
    timeout = activity.info().heartbeat_timeout
    every = timeout.total_seconds() / 3 if timeout else DEFAULT_HEARTBEAT_S

    async def beat() -> None:
        while True:  # not at once: a step that ends within a third of the timeout costs no heartbeat call
            await asyncio.sleep(every)
            activity.heartbeat()

    task = asyncio.create_task(beat(), name="ironflow-heartbeat")
    try:
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def _as_failure(work: Callable[[], Awaitable[Any]], *, known: Iterable[str] = ()) -> Any:
    """Run ``work``; an error leaves as the ``ApplicationError`` Temporal's retry policy reads,
    ``known`` values redacted from its message (it goes to the history)."""
    try:
        return await work()
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        failure = failures.application_error(exc, known=known)
        if failure is exc:  # Temporal's own failure, as it is
            raise
        # Not chained: Temporal would record the cause's own message, unredacted, in the history.
        raise failure from None


class AccountSource(Protocol):
    """Where an agent step's Provider Account comes from: the engine's ``AccountPool`` over a
    PostgreSQL store shares accounts and rate-limit windows across workers. ``acquire`` raises
    ``RateLimited`` (with ``retry_after_s``) when every account is rejected."""

    async def acquire(self, step: str) -> AccountLease: ...

    async def release(self, lease: AccountLease) -> None: ...


class IronflowActivities:
    """The ironflow activities over one provider; register :meth:`all` with a Temporal worker.

    ``accounts`` attaches a Provider Account to each agent step when the provider takes one
    (``account_kind()`` is ``claude_subscription``). ``on_release`` hears each release this
    worker makes (a run's, or a step's previous attempt), for logs and tests; it must not raise.
    ``sessions`` are the session steps' for the worker's life (the provider's, with a pool of warm
    sandboxes: ``provider.sessions(pool=...)``), closed by whoever made them; without, each step
    opens the provider's sessions and closes them after it.
    """

    def __init__(
        self,
        provider: AgentProvider,
        *,
        accounts: AccountSource | None = None,
        on_release: Callable[[str, StepScope | None, int], None] | None = None,
        sessions: SessionBackend | None = None,
    ) -> None:
        self.provider = provider
        self.accounts = accounts
        self.on_release = on_release
        self.sessions = sessions

    def all(self) -> list[Callable[..., Any]]:
        """The activity callables, for ``Worker(activities=...)``."""
        return [self.agent, self.command, self.session, self.release_run]

    async def _release_previous_attempt(self, scope: StepScope, attempt: int) -> None:
        release_step = getattr(self.provider, "release_step", None)
        try:
            removed = int(await release_step(scope)) if callable(release_step) else 0
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise errors.CleanupError(
                f"could not release the previous attempt of step {scope.step} of run {scope.run_id}: {exc}"
            ) from exc
        how = f"released ({removed} removed)" if callable(release_step) else "left to the provider's run (by labels)"
        log.info("attempt %d of step %s of run %s: previous attempt %s", attempt, scope.step, scope.run_id, how)
        if self.on_release is not None:
            self.on_release("step", scope, removed)

    async def _run_with_account(self, config: AgentConfig) -> AgentResult:
        pool = self.accounts
        if pool is not None and self.provider.account_kind() != ACCOUNT_KIND_CLAUDE_SUBSCRIPTION:
            raise errors.StepConfigError(NO_PROXY_FOR_ACCOUNTS)
        if pool is None:
            return await self.provider.run(config)
        assert config.scope is not None
        lease = await pool.acquire(config.scope.step)  # RateLimited: the workflow waits on a timer
        try:
            return await self.provider.run(config.account_lease(lease))
        finally:
            await pool.release(lease)

    @activity.defn(name=requests.ACTIVITY_AGENT)
    async def agent(self, request: requests.AgentRequest) -> dict[str, Any]:
        """Run one agent step on the provider; returns the ``AgentResult`` as a dict."""
        info = activity.info()

        async def work() -> dict[str, Any]:
            config = request.agent_config(info.workflow_id)
            assert config.scope is not None
            async with _heartbeating():
                if info.attempt > 1:
                    await self._release_previous_attempt(config.scope, info.attempt)
                result = await self._run_with_account(config)
            return results.result_to_dict(dataclasses.replace(result, debug_messages=None))

        known = [value.reveal() for value in request.secret_values]  # secret untrusted blocks, as the engine
        return await _as_failure(work, known=known)  # type: ignore[no-any-return]

    @activity.defn(name=requests.ACTIVITY_COMMAND)
    async def command(self, request: requests.CommandRequest) -> dict[str, Any]:
        """Run a plain command in a sandbox without network (a provider with ``run_command``)."""
        info = activity.info()

        async def work() -> dict[str, Any]:
            scope = requests.step_scope(
                workflow_id=info.workflow_id, root_workflow_id=request.root_workflow_id, step=request.step
            )
            run_command = getattr(self.provider, "run_command", None)
            if not callable(run_command):
                raise errors.StepConfigError(
                    f"command step {request.step!r}: {type(self.provider).__name__} runs no plain commands "
                    "(the local provider does)"
                )
            async with _heartbeating():
                if info.attempt > 1:
                    await self._release_previous_attempt(scope, info.attempt)
                done = await run_command(
                    list(request.argv), env=dict(request.env), timeout_s=request.timeout_s, run_id=scope.run_id
                )
            return {
                "exit_code": done.exit_code,
                "stdout": done.stdout,
                "stderr": done.stderr,
                "duration": done.duration,
            }

        return await _as_failure(work)  # type: ignore[no-any-return]

    @activity.defn(name=requests.ACTIVITY_SESSION)
    async def session(self, request: requests.SessionRequest) -> dict[str, Any]:
        """Open a sandbox session on the provider's backend under the run's labels, write, run and
        read in it, and close it; a cancelled or failed step closes it too."""
        info = activity.info()

        async def work() -> dict[str, Any]:
            scope = requests.step_scope(
                workflow_id=info.workflow_id, root_workflow_id=request.root_workflow_id, step=request.step
            )
            try:
                sessions = self.sessions or sessions_of(self.provider)
            except errors.StepConfigError as exc:
                raise errors.StepConfigError(f"session step {request.step!r}: {exc.message}") from None
            try:
                async with _heartbeating():
                    if info.attempt > 1:
                        await self._release_previous_attempt(scope, info.attempt)
                    async with await sessions.open(OpenOptions(run_id=scope.run_id)) as sandbox:
                        for path, text in request.files.items():
                            await sandbox.files.write(path, text)
                        ran: list[dict[str, Any]] = []
                        for argv in request.commands:
                            done = await sandbox.commands.run(argv, timeout=request.timeout_s)
                            ran.append(dataclasses.asdict(done))
                            if (done.exit_code != 0 or done.timed_out) and not request.keep_going:
                                break
                        read = {p: (await sandbox.files.read(p)).decode(errors="replace") for p in request.read}
            finally:
                if sessions is not self.sessions:
                    await sessions.aclose()  # whatever happened, no session of this step stays open
            return {"commands": ran, "files": read}

        return await _as_failure(work)  # type: ignore[no-any-return]

    @activity.defn(name=requests.ACTIVITY_RELEASE_RUN)
    async def release_run(self, request: requests.ReleaseRequest) -> int:
        """Remove everything of a run (and of the runs whose root it is); a failure is retryable."""

        async def work() -> int:
            async with _heartbeating():
                try:
                    removed = await self.provider.release_run(request.run_id)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    raise errors.CleanupError(f"could not release run {request.run_id}: {exc}") from exc
            log.info("run %s released: %d sandboxes removed", request.run_id, removed)
            if self.on_release is not None:
                self.on_release("run", None, removed)
            return removed

        return await _as_failure(work)  # type: ignore[no-any-return]
