"""The engine against real stores: every test runs on SQLite and on a real PostgreSQL server.

The provider is the recording one from ``ironflow.testing.engine``: it keeps pretend
pods with the labels each step was given, so the tests check the sandbox contract
(labels, release before every execution, duplicate names, retries, cancellation).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.engine.integration.conftest import fresh_database

from ironflow import errors, labels
from ironflow.engine import accounts, model
from ironflow.engine.events import Outcome
from ironflow.engine.postgres import PostgresStore
from ironflow.engine.runner import Runner
from ironflow.engine.store import Store
from ironflow.engine.worker import Worker
from ironflow.provider import ACCOUNT_KIND_CLAUDE_SUBSCRIPTION
from ironflow.testing import find_leaks
from ironflow.testing.engine import RecordingProvider
from ironflow.testing.polling import eventually

WORKFLOWS = Path(__file__).parent / "engine_workflows.py"
CHILD_STEP = labels.sanitize_label_value("child step")


def ref(name: str) -> str:
    return f"{WORKFLOWS}:{name}"


def runner_for(store: Store, provider: RecordingProvider, **kwargs: Any) -> Callable[[model.RunRecord], Runner]:
    return lambda run: Runner(store, provider, requeue_delay=lambda attempt: 0.0, **kwargs)


async def submit(store: Store, workflow: str, input: Any) -> str:
    run_id = model.new_id()
    await store.create_run(model.RunRecord(id=run_id, workflow=ref(workflow), input=input))
    return run_id


async def run_all(store: Store, provider: RecordingProvider, **kwargs: Any) -> Worker:
    worker = Worker(store, runner_for(store, provider, **kwargs), lease_s=5)
    await worker.run(until_idle=True)
    return worker


async def get(store: Store, run_id: str) -> model.RunRecord:
    run = await store.get_run(run_id)
    assert run is not None
    return run


def invoked_steps(provider: RecordingProvider) -> list[str]:
    return [e["step"] for e in provider.events if e["event"] == "invoke"]


# --- labels and release --------------------------------------------------------------------


async def test_every_agent_step_carries_run_root_and_sanitised_step_labels(store: Store) -> None:
    provider = RecordingProvider()
    run_id = await submit(store, "linear", {"steps": ["plan", "fix bug/42"]})
    await run_all(store, provider)
    run = await get(store, run_id)
    assert run.status is model.RunStatus.SUCCEEDED
    assert run.output == ["done plan", "done fix-bug-42-b8a85051"]
    assert [c.scope.labels if c.scope else None for c in provider.configs] == [
        {labels.LABEL_RUN_ID: run_id, labels.LABEL_ROOT_RUN_ID: run_id, labels.LABEL_STEP: "plan"},
        {labels.LABEL_RUN_ID: run_id, labels.LABEL_ROOT_RUN_ID: run_id, labels.LABEL_STEP: "fix-bug-42-b8a85051"},
    ]
    steps = await store.steps(run_id)
    assert [(s.position, s.name, s.status) for s in steps] == [
        (0, "plan", model.StepStatus.SUCCEEDED),
        (1, "fix bug/42", model.StepStatus.SUCCEEDED),
    ]
    assert steps[1].labels == {
        labels.LABEL_RUN_ID: run_id, labels.LABEL_ROOT_RUN_ID: run_id, labels.LABEL_STEP: "fix-bug-42-b8a85051"
    }  # fmt: skip
    assert uuid.UUID(steps[0].id).version == 7


async def test_release_run_comes_before_the_first_step(store: Store) -> None:
    provider = RecordingProvider()
    run_id = await submit(store, "linear", {"steps": ["a"]})
    await run_all(store, provider)
    assert [(e["event"], e.get("run") or e.get("step")) for e in provider.events] == [
        ("release", run_id),
        ("invoke", "a"),
        ("finished", "a"),
    ]


async def test_a_failed_release_requeues_the_run_and_the_next_attempt_releases_again(store: Store) -> None:
    provider = RecordingProvider(release_failures=1)
    run_id = await submit(store, "linear", {"steps": ["a"]})
    worker = await run_all(store, provider)
    assert [o for _, o in worker.outcomes] == [Outcome.REQUEUED, Outcome.SUCCEEDED]
    assert [e["event"] for e in provider.events] == ["release_failed", "release", "invoke", "finished"]
    run = await get(store, run_id)
    assert run.status is model.RunStatus.SUCCEEDED
    assert run.attempt == 2


async def test_a_requeued_run_waits_for_its_backoff(store: Store) -> None:
    provider = RecordingProvider(release_failures=1)
    run_id = await submit(store, "linear", {"steps": ["a"]})
    worker = Worker(store, lambda run: Runner(store, provider, requeue_delay=lambda attempt: 60.0))
    await worker.run(until_idle=True)
    run = await get(store, run_id)
    assert run.status is model.RunStatus.PENDING
    assert run.error is not None
    assert run.error["type"] == "CleanupError"
    assert "could not release run" in run.error["message"]
    assert run.available_at > run.updated_at + 50
    assert await store.claim_run("other", 5) is None


# --- durable replay -------------------------------------------------------------------------


async def test_a_retried_run_replays_finished_steps_without_invoking_them(store: Store) -> None:
    provider = RecordingProvider(failures={"b": [errors.BudgetExceeded(2, 1)]})
    run_id = await submit(store, "linear", {"steps": ["a", "b", "c"]})
    await run_all(store, provider)
    failed = await get(store, run_id)
    assert failed.status is model.RunStatus.FAILED
    assert failed.error == {"type": "BudgetExceeded", "message": "budget exceeded: spent $2 of $1", "retryable": False}
    assert invoked_steps(provider) == ["a", "b"]

    retried = await store.retry_run(run_id)
    assert retried is not None
    assert retried.status is model.RunStatus.PENDING
    await run_all(store, provider)
    done = await get(store, run_id)
    assert done.status is model.RunStatus.SUCCEEDED
    assert done.output == ["done a", "done b", "done c"]
    assert invoked_steps(provider) == ["a", "b", "b", "c"]  # "a" replayed from the store
    assert [e["event"] for e in provider.events].count("release") == 2  # one per execution


async def test_a_step_that_differs_at_its_position_fails_the_run_with_replay_divergence(store: Store) -> None:
    provider = RecordingProvider()
    run_id = await submit(store, "linear", {"steps": ["a", "b"]})
    await store.save_step(
        model.StepRecord(run_id, 0, "other", model.StepKind.AGENT, id=model.new_id(),
                         status=model.StepStatus.SUCCEEDED, result="old")
    )  # fmt: skip
    await run_all(store, provider)
    run = await get(store, run_id)
    assert run.status is model.RunStatus.FAILED
    assert run.error is not None
    assert run.error["type"] == "ReplayDivergence"
    assert run.error["message"].startswith(
        'replay diverged at step 0: the run recorded agent step "other" but the workflow now asks for agent step "a"'
    )
    assert invoked_steps(provider) == []


async def test_an_op_result_is_stored_and_replayed(store: Store) -> None:
    provider = RecordingProvider()
    run_id = await submit(store, "with_op", {"a": 2, "b": 3})
    await run_all(store, provider)
    run = await get(store, run_id)
    assert run.output == 5
    (step,) = await store.steps(run_id)
    assert (step.kind, step.result) == (model.StepKind.OP, 5)


async def test_a_return_value_that_cannot_be_stored_fails_the_run_saying_so(store: Store) -> None:
    run_id = await submit(store, "not_storable", None)
    await run_all(store, RecordingProvider())
    run = await get(store, run_id)
    assert run.status is model.RunStatus.FAILED
    assert run.error is not None
    assert run.error["message"].startswith("the workflow's return value cannot be stored")


async def test_a_missing_workflow_fails_the_run_naming_it(store: Store) -> None:
    run_id = model.new_id()
    await store.create_run(model.RunRecord(id=run_id, workflow=ref("nope"), input=None))
    await run_all(store, RecordingProvider())
    run = await get(store, run_id)
    assert run.status is model.RunStatus.FAILED
    assert run.error is not None
    assert run.error["message"] == f"workflow 'nope' not found in {str(WORKFLOWS)!r}"


# --- waves -----------------------------------------------------------------------------------


async def test_a_wave_with_two_steps_of_one_name_is_refused_before_anything_is_created(store: Store) -> None:
    provider = RecordingProvider()
    run_id = await submit(store, "wave", {"names": ["lint", "tests", "lint"]})
    await run_all(store, provider)
    run = await get(store, run_id)
    assert run.status is model.RunStatus.FAILED
    assert run.error == {
        "type": "StepConfigError",
        "message": 'parallel wave has two steps named "lint"; each step of a wave needs its own name',
        "retryable": False,
    }
    assert invoked_steps(provider) == ["before"]
    assert [s.name for s in await store.steps(run_id)] == ["before"]


async def test_wave_results_come_back_in_the_order_given(store: Store) -> None:
    provider = RecordingProvider(step_delays={"slow": 0.05})
    run_id = await submit(store, "wave", {"names": ["slow", "fast"]})
    await run_all(store, provider)
    assert (await get(store, run_id)).output == ["done slow", "done fast"]
    assert [s.position for s in await store.steps(run_id)] == [0, 1, 2]


async def test_fail_fast_cancels_the_rest_of_the_wave(store: Store) -> None:
    provider = RecordingProvider(step_delays={"slow": 5.0}, failures={"bad": [errors.BudgetExceeded(2, 1)]})
    run_id = await submit(store, "wave", {"names": ["slow", "bad"]})
    await run_all(store, provider)
    assert (await get(store, run_id)).status is model.RunStatus.FAILED
    assert ("cancelled", "slow") in [(e["event"], e["step"]) for e in provider.events if "step" in e]
    assert provider.pods == {}


async def test_without_fail_fast_every_step_of_the_wave_finishes_first(store: Store) -> None:
    provider = RecordingProvider(step_delays={"slow": 0.1}, failures={"bad": [errors.BudgetExceeded(2, 1)]})
    run_id = await submit(store, "wave", {"names": ["slow", "bad"], "fail_fast": False})
    await run_all(store, provider)
    run = await get(store, run_id)
    assert run.status is model.RunStatus.FAILED
    assert ("finished", "slow") in [(e["event"], e["step"]) for e in provider.events if "step" in e]
    statuses = {s.name: s.status for s in await store.steps(run_id)}
    assert statuses == {"before": "succeeded", "slow": "succeeded", "bad": "failed"}


# --- step retries ------------------------------------------------------------------------------


async def test_a_retryable_failure_is_retried_with_the_same_labels(store: Store) -> None:
    provider = RecordingProvider(failures={"flaky": [errors.ProcessFailed(1, "crash"), errors.AgentTimeout(5)]})
    run_id = await submit(store, "flaky", {"retries": 2})
    await run_all(store, provider)
    run = await get(store, run_id)
    assert run.status is model.RunStatus.SUCCEEDED
    assert invoked_steps(provider) == ["flaky"] * 3
    assert len({tuple(sorted(c.pod_labels.items())) for c in provider.configs}) == 1
    (step,) = await store.steps(run_id)
    assert step.attempts == 3


async def test_retries_stop_at_max_retries(store: Store) -> None:
    provider = RecordingProvider(failures={"flaky": [errors.ProcessFailed(1, "crash")] * 3})
    run_id = await submit(store, "flaky", {"retries": 1})
    await run_all(store, provider)
    assert (await get(store, run_id)).status is model.RunStatus.FAILED
    assert invoked_steps(provider) == ["flaky"] * 2
    (step,) = await store.steps(run_id)
    assert (step.status, step.attempts) == (model.StepStatus.FAILED, 2)


async def test_a_permanent_failure_is_not_retried(store: Store) -> None:
    provider = RecordingProvider(failures={"flaky": [errors.PromptTooLarge(10, 5, 1)]})
    run_id = await submit(store, "flaky", {"retries": 3})
    await run_all(store, provider)
    assert (await get(store, run_id)).status is model.RunStatus.FAILED
    assert invoked_steps(provider) == ["flaky"]


async def test_retry_on_retries_only_the_errors_it_names(store: Store) -> None:
    provider = RecordingProvider(failures={"flaky": [errors.AgentTimeout(5), errors.ProcessFailed(1, "crash")]})
    run_id = await submit(store, "flaky", {"retries": 3, "retry_on": ["AgentTimeout"]})
    await run_all(store, provider)
    assert (await get(store, run_id)).status is model.RunStatus.FAILED
    assert invoked_steps(provider) == ["flaky"] * 2  # the timeout retried, the crash not
    (step,) = await store.steps(run_id)
    assert (step.status, step.attempts) == (model.StepStatus.FAILED, 2)


@pytest.mark.parametrize(("named", "status", "output"), [(True, "succeeded", 3), (False, "failed", None)])
async def test_an_ops_own_exception_is_retried_only_when_retry_on_names_it(
    store: Store, named: bool, status: str, output: int | None
) -> None:
    run_id = await submit(store, "flaky_op", {"fails": 2, "retry_on_runtime_error": named})
    await run_all(store, RecordingProvider())
    run = await get(store, run_id)
    assert (run.status, run.output) == (status, output)  # the third call succeeds, when retried
    (step,) = await store.steps(run_id)
    assert step.attempts == (3 if named else 1)


# --- sub-workflows ------------------------------------------------------------------------------


async def test_sub_workflow_steps_carry_the_parents_root_run_id(store: Store) -> None:
    provider = RecordingProvider()
    run_id = await submit(store, "parent", {})
    await run_all(store, provider)
    run = await get(store, run_id)
    assert run.status is model.RunStatus.SUCCEEDED
    child_id = run.output["run_id"]
    assert child_id != run_id
    assert run.output == {"text": f"done {CHILD_STEP}", "run_id": child_id, "root": run_id, "parent": run_id}
    child_config = provider.configs[1]
    assert child_config.scope is not None
    assert child_config.scope.labels == {
        labels.LABEL_RUN_ID: child_id, labels.LABEL_ROOT_RUN_ID: run_id, labels.LABEL_STEP: CHILD_STEP
    }  # fmt: skip
    child = await get(store, child_id)
    assert (child.status, child.parent_run_id, child.root_run_id) == (model.RunStatus.SUCCEEDED, run_id, run_id)
    assert [r.id for r in await store.list_runs(root_run_id=run_id)] == [child_id, run_id]
    releases = [e["run"] for e in provider.events if e["event"] == "release"]
    assert releases == [run_id, child_id]  # a child run is released before its execution too


async def test_release_of_the_root_removes_the_in_flight_pods_of_a_sub_workflow(store: Store) -> None:
    provider = RecordingProvider(step_delays={CHILD_STEP: 30.0})
    run_id = await submit(store, "parent", {})
    worker = Worker(store, runner_for(store, provider), lease_s=1.0)
    task = asyncio.create_task(worker.run())
    try:
        await eventually(lambda: any(p.get(labels.LABEL_STEP) == CHILD_STEP for p in provider.pods.values()))
        (child_pod,) = provider.pods.values()
        assert child_pod[labels.LABEL_ROOT_RUN_ID] == run_id
        assert child_pod[labels.LABEL_RUN_ID] != run_id
        assert await provider.release_run(run_id) == 1
        assert provider.pods == {}
        await store.cancel_run(run_id)
        await eventually(lambda: bool(worker.outcomes))
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert worker.outcomes == [(run_id, Outcome.CANCELLED)]


async def test_sub_workflow_runs_are_never_claimed_by_a_worker(store: Store) -> None:
    parent_id = model.new_id()
    await store.create_run(
        model.RunRecord(id=parent_id, workflow=ref("parent"), input={}, status=model.RunStatus.RUNNING)
    )
    await store.start_child_run(
        model.RunRecord(id=model.new_id(), workflow=ref("child"), input={}, root_run_id=parent_id,
                        parent_run_id=parent_id)
    )  # fmt: skip
    assert await store.claim_run("w", 0.01) is None


# --- cancellation and leases -----------------------------------------------------------------


async def test_cancelling_a_running_run_cancels_its_steps_and_releases_it(store: Store) -> None:
    provider = RecordingProvider(step_delays={"a": 30.0})
    run_id = await submit(store, "linear", {"steps": ["a", "b"]})
    worker = Worker(store, runner_for(store, provider), lease_s=1.0)
    task = asyncio.create_task(worker.run())
    try:
        await eventually(lambda: bool(provider.pods))
        cancelling = await store.cancel_run(run_id)
        assert cancelling is not None
        assert cancelling.cancel_requested
        await eventually(lambda: bool(worker.outcomes))
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert (await get(store, run_id)).status is model.RunStatus.CANCELLED
    events = [(e["event"], e.get("step") or e.get("run")) for e in provider.events]
    assert events == [("release", run_id), ("invoke", "a"), ("cancelled", "a"), ("release", run_id)]
    (step,) = await store.steps(run_id)
    assert (step.name, step.status) == ("a", model.StepStatus.FAILED)
    assert step.error is not None
    assert step.error["type"] == "Cancelled"


async def test_a_stopping_worker_hands_its_run_back_and_the_next_one_resumes_it(store: Store) -> None:
    provider = RecordingProvider(step_delays={"b": 30.0})
    run_id = await submit(store, "linear", {"steps": ["a", "b"]})
    stop = asyncio.Event()
    worker = Worker(store, runner_for(store, provider), lease_s=30)
    task = asyncio.create_task(worker.run(stop=stop))
    await eventually(lambda: any(e["event"] == "invoke" and e["step"] == "b" for e in provider.events))
    stop.set()
    await task
    handed_back = await get(store, run_id)
    assert handed_back.status is model.RunStatus.PENDING  # due now, not after the 30 s lease
    assert handed_back.error is not None
    assert handed_back.error["type"] == "WorkerStopped"
    provider.step_delays.clear()
    await run_all(store, provider)
    assert (await get(store, run_id)).output == ["done a", "done b"]
    assert invoked_steps(provider) == ["a", "b", "b"]


async def test_cancelling_a_pending_run_means_it_never_runs(store: Store) -> None:
    provider = RecordingProvider()
    run_id = await submit(store, "linear", {"steps": ["a"]})
    cancelled = await store.cancel_run(run_id)
    assert cancelled is not None
    assert cancelled.status is model.RunStatus.CANCELLED
    await run_all(store, provider)
    assert provider.events == []
    assert await store.cancel_run("no-such-run") is None


async def test_an_expired_lease_lets_another_worker_take_the_run(store: Store) -> None:
    run_id = await submit(store, "linear", {"steps": ["a"]})
    first = await store.claim_run("dead-worker", 0.05)
    assert first is not None
    assert (first.worker, first.attempt) == ("dead-worker", 1)
    assert await store.claim_run("other", 5) is None  # the lease still holds
    await asyncio.sleep(0.1)
    second = await store.claim_run("other", 5)
    assert second is not None
    assert (second.id, second.worker, second.attempt) == (run_id, "other", 2)
    assert await store.renew_lease(run_id, "dead-worker", 5) is None
    assert not await store.finish_run(run_id, "dead-worker", status=model.RunStatus.SUCCEEDED, output=1)
    assert await store.finish_run(run_id, "other", status=model.RunStatus.SUCCEEDED, output=1)
    assert (await get(store, run_id)).output == 1


# --- provider accounts ----------------------------------------------------------------------------


async def test_steps_get_an_account_outside_rejected_windows_and_no_credential_is_stored(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IRONFLOW_TEST_TOKEN_A", "sk-ant-oat01-aaaaaaaaaaaaaaaa")
    monkeypatch.setenv("IRONFLOW_TEST_TOKEN_B", "sk-ant-oat01-bbbbbbbbbbbbbbbb")
    pool = accounts.AccountPool(
        store,
        [
            accounts.ProviderAccount("a", accounts.CredentialRef(env="IRONFLOW_TEST_TOKEN_A")),
            accounts.ProviderAccount("b", accounts.CredentialRef(env="IRONFLOW_TEST_TOKEN_B")),
        ],
    )
    await store.record_rate_limits(
        [model.RateWindow("a", "five_hour", model.WindowStatus.REJECTED, 1.0, resets_at=4e9)]
    )
    provider = RecordingProvider(account_kind=ACCOUNT_KIND_CLAUDE_SUBSCRIPTION)
    run_id = await submit(store, "linear", {"steps": ["x"]})
    await run_all(store, provider, accounts=pool)
    assert (await get(store, run_id)).status is model.RunStatus.SUCCEEDED
    (config,) = provider.configs
    assert config.account is not None
    assert config.account.account_id == "b"
    assert config.account.env_name == "CLAUDE_CODE_OAUTH_TOKEN"
    assert config.account.value.reveal() == "sk-ant-oat01-bbbbbbbbbbbbbbbb"
    # The recorder the step carried stores the windows the CLI reported.
    assert config.account.recorder is not None
    stored = [await get(store, run_id), *(await store.steps(run_id)), *(await store.rate_limits())]
    assert not find_leaks(["sk-ant-oat01-aaaaaaaaaaaaaaaa", "sk-ant-oat01-bbbbbbbbbbbbbbbb"], *map(repr, stored))


async def test_a_provider_without_the_auth_proxy_refuses_a_step_when_accounts_were_given(store: Store) -> None:
    pool = accounts.AccountPool(store, [accounts.ProviderAccount("a", accounts.CredentialRef(env="IRONFLOW_X"))])
    provider = RecordingProvider(account_kind=None)  # e.g. a pod provider without auth_proxy
    run_id = await submit(store, "linear", {"steps": ["x"]})
    await run_all(store, provider, accounts=pool)
    run = await get(store, run_id)
    assert run.status is model.RunStatus.FAILED
    assert run.error is not None
    assert run.error["type"] == "StepConfigError"
    assert "accounts need the auth proxy" in run.error["message"]
    assert invoked_steps(provider) == []  # never ran on the provider's own credential


async def test_windows_a_step_reported_are_recorded_for_its_account(store: Store) -> None:
    from ironflow.claude.rate_limits import collect_rate_limits

    pool = accounts.AccountPool(store, [accounts.ProviderAccount("a", accounts.CredentialRef(env="PATH"))])
    session = await pool.acquire("step")
    assert session.recorder is not None
    session.recorder.record(
        collect_rate_limits('{"type":"rate_limit_event","rate_limit_info":{"status":"allowed_warning",'
                            '"rateLimitType":"five_hour","utilization":80,"resetsAt":4000000000}}')
    )  # fmt: skip
    await pool.release(session)
    (window,) = await store.rate_limits()
    assert (window.account, window.window, window.status, window.utilization, window.resets_at) == (
        "a", "five_hour", model.WindowStatus.ALLOWED_WARNING, 0.8, 4e9
    )  # fmt: skip


async def test_a_window_without_recorded_at_is_stamped_with_the_recording_time_by_either_store(store: Store) -> None:
    before = time.time()
    await store.record_rate_limits(
        [
            model.RateWindow("a", "five_hour", model.WindowStatus.ALLOWED, 0.1),
            model.RateWindow("a", "seven_day", model.WindowStatus.ALLOWED, 0.2, recorded_at=5.0),
        ]
    )
    after = time.time()
    stamped, given = await store.rate_limits()
    assert before <= stamped.recorded_at <= after
    assert given.recorded_at == 5.0


async def test_every_account_rejected_fails_with_rate_limited_after_the_wait(store: Store) -> None:
    pool = accounts.AccountPool(
        store, [accounts.ProviderAccount("a", accounts.CredentialRef(env="PATH"))], max_wait_s=0.05, poll_s=0.01
    )
    await store.record_rate_limits(
        [model.RateWindow("a", "five_hour", model.WindowStatus.REJECTED, 1.0, resets_at=4e9)]
    )
    with pytest.raises(errors.RateLimited) as caught:
        await pool.acquire("review")
    assert caught.value.message.startswith(
        "step 'review' has no provider account to run on: a rejected until 2096-10-02T07:06:40Z; "
        "waited 0s of at most 0s"
    )
    assert caught.value.retryable


async def test_an_account_whose_env_variable_is_unset_is_refused_by_name(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("IRONFLOW_TEST_UNSET", raising=False)
    pool = accounts.AccountPool(
        store, [accounts.ProviderAccount("a", accounts.CredentialRef(env="IRONFLOW_TEST_UNSET"))]
    )
    with pytest.raises(
        errors.StepConfigError, match="provider account 'a': env variable IRONFLOW_TEST_UNSET is not set"
    ):
        await pool.acquire("x")


async def test_a_run_can_be_claimed_by_id_leaving_the_others_queued(store: Store) -> None:
    first = await submit(store, "linear", {"steps": []})
    second = await submit(store, "linear", {"steps": []})
    claimed = await store.claim_run("w", 5, run_id=second)
    assert claimed is not None
    assert claimed.id == second
    assert (await get(store, first)).status is model.RunStatus.PENDING


async def test_queued_runs_counts_pending_top_level_runs_due_or_in_backoff(store: Store) -> None:
    assert await store.queued_runs() == 0
    due = await submit(store, "linear", {"steps": []})
    await store.create_run(model.RunRecord(id=model.new_id(), workflow=ref("linear"), input={}, available_at=4e9))
    claimed = await submit(store, "linear", {"steps": []})
    assert await store.claim_run("w", 5, run_id=claimed) is not None
    finished = await submit(store, "linear", {"steps": []})
    assert await store.cancel_run(finished) is not None
    await store.start_child_run(
        model.RunRecord(id=model.new_id(), workflow=ref("child"), input={}, root_run_id=claimed, parent_run_id=claimed)
    )
    assert await store.queued_runs() == 2  # the due one and the one in backoff
    assert await store.claim_run("w", 5, run_id=due) is not None
    assert await store.queued_runs() == 1


@pytest.mark.postgres
async def test_stores_opening_together_apply_the_postgres_schema_once(postgres_dsn: str) -> None:
    dsn = await fresh_database(postgres_dsn)
    stores = [PostgresStore(dsn, max_size=2) for _ in range(3)]
    try:
        await asyncio.gather(*(s.open() for s in stores))
        rows = await stores[0].pool.fetch(
            "SELECT component, version, name FROM ironflow.schema_migrations WHERE component = 'engine'"
        )
        assert sorted(tuple(r) for r in rows) == [
            ("engine", 1, "engine"),
            ("engine", 2, "transcripts"),
            ("engine", 3, "run_deadline"),
        ]
    finally:
        await asyncio.gather(*(s.close() for s in stores))


def test_the_postgres_store_never_shows_its_url() -> None:
    store = PostgresStore("postgresql://user:hunter2-secret@db/ironflow")
    assert "hunter2" not in repr(store)


async def test_an_unreachable_postgres_store_fails_without_echoing_the_url() -> None:
    store = PostgresStore("postgresql://user:hunter2-secret@127.0.0.1:1/ironflow")
    with pytest.raises(errors.InfrastructureError) as caught:
        await store.open()
    assert "hunter2" not in str(caught.value)
    assert "cannot connect to the PostgreSQL store" in caught.value.message


async def test_a_retried_wave_runs_again_only_the_steps_that_did_not_finish(store: Store) -> None:
    provider = RecordingProvider(failures={"bad": [errors.BudgetExceeded(2, 1)]})
    run_id = await submit(store, "wave", {"names": ["good", "bad"], "fail_fast": False})
    await run_all(store, provider)
    assert (await get(store, run_id)).status is model.RunStatus.FAILED
    await store.retry_run(run_id)
    await run_all(store, provider)
    assert (await get(store, run_id)).output == ["done good", "done bad"]
    assert invoked_steps(provider) == ["before", "good", "bad", "bad"]


async def test_a_retried_sub_workflow_keeps_its_child_run_and_replays_the_parents_steps(store: Store) -> None:
    provider = RecordingProvider(failures={CHILD_STEP: [errors.BudgetExceeded(2, 1)]})
    run_id = await submit(store, "parent", {})
    await run_all(store, provider)
    assert (await get(store, run_id)).status is model.RunStatus.FAILED
    (_, failed_step) = await store.steps(run_id)
    assert failed_step.child_run_id is not None
    child = await get(store, failed_step.child_run_id)
    assert child.status is model.RunStatus.FAILED

    await store.retry_run(run_id)
    await run_all(store, provider)
    run = await get(store, run_id)
    assert run.status is model.RunStatus.SUCCEEDED
    assert run.output["run_id"] == failed_step.child_run_id  # the same child run, executed again
    assert (await get(store, failed_step.child_run_id)).attempt == 2
    assert invoked_steps(provider) == ["plan", CHILD_STEP, CHILD_STEP]


@pytest.mark.postgres
async def test_a_postgres_failure_is_a_retryable_infrastructure_error(postgres_dsn: str) -> None:
    store = PostgresStore(await fresh_database(postgres_dsn), max_size=2)
    await store.open()
    try:
        await store.pool.execute("DROP TABLE ironflow_steps")
        with pytest.raises(errors.InfrastructureError, match="the PostgreSQL store failed: UndefinedTableError") as e:
            await store.steps("r")
        assert e.value.retryable
    finally:
        await store.close()
