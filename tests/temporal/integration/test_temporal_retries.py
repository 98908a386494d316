"""A step's attempts on the real Temporal dev server: Temporal retries what ironflow calls
retryable, each attempt after the first releases the previous one first, a release that fails
fails the attempt retryably, and a non-retryable error fails the workflow after one attempt."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ActivityError, ApplicationError
from tests.temporal.integration.watching import WORKFLOWS, scheduled

from ironflow import errors
from ironflow.provider import ProviderBase
from ironflow.results import AgentResult
from ironflow.steps import AgentConfig, StepScope
from ironflow.temporal import build_worker, load_workflows
from ironflow.testing.temporal_server import TemporalDevServer

pytestmark = pytest.mark.timeout(120)


class ScriptedProvider(ProviderBase):
    """Each ``run`` raises the next error of ``failures`` (then answers); ``release_step`` raises the
    next of ``release_failures``. Every call is recorded in order."""

    def __init__(self, failures: Sequence[Exception] = (), release_failures: Sequence[Exception] = ()) -> None:
        self.failures = list(failures)
        self.release_failures = list(release_failures)
        self.calls: list[tuple[str, str]] = []

    async def run(self, config: AgentConfig, *, logs: object = None) -> AgentResult:
        assert config.scope is not None
        self.calls.append(("run", config.scope.step))
        if self.failures:
            raise self.failures.pop(0)
        return AgentResult(value="answered", duration_ms=1)

    async def release_step(self, scope: StepScope) -> int:
        self.calls.append(("release_step", scope.step))
        if self.release_failures:
            raise self.release_failures.pop(0)
        return 1

    async def release_run(self, run_id: str) -> int:
        self.calls.append(("release_run", run_id))
        return 0

    def account_kind(self) -> str | None:
        return None


async def run_one_step(
    server: TemporalDevServer, provider: ScriptedProvider, workflow_id: str, **step: Any
) -> list[str]:
    client = await Client.connect(server.address)
    queue = f"retry-{uuid.uuid4().hex[:8]}"
    steps = [{"name": "plan", "prompt": "plan it", **step}]
    async with build_worker(client, task_queue=queue, provider=provider, workflows=load_workflows(str(WORKFLOWS))):
        output: list[str] = await client.execute_workflow("Linear", {"steps": steps}, id=workflow_id, task_queue=queue)
        return output


async def test_a_retryable_failure_is_retried_after_the_previous_attempt_is_released(
    temporal_server: TemporalDevServer,
) -> None:
    provider = ScriptedProvider(failures=[errors.ProcessFailed(1, "crashed"), errors.AgentTimeout(5.0)])
    assert await run_one_step(temporal_server, provider, "retry-1") == ["answered"]
    assert provider.calls == [
        ("release_run", "retry-1"),
        ("run", "plan"),
        ("release_step", "plan"),
        ("run", "plan"),
        ("release_step", "plan"),
        ("run", "plan"),
    ]


async def test_a_release_that_fails_fails_the_attempt_retryably_and_the_next_one_releases_again(
    temporal_server: TemporalDevServer,
) -> None:
    provider = ScriptedProvider(
        failures=[errors.ProcessFailed(1, "crashed")], release_failures=[errors.KubernetesError("etcd", status=503)]
    )
    assert await run_one_step(temporal_server, provider, "retry-2") == ["answered"]
    assert provider.calls == [
        ("release_run", "retry-2"),
        ("run", "plan"),
        ("release_step", "plan"),  # fails: the attempt fails as CleanupError, retryable
        ("release_step", "plan"),
        ("run", "plan"),
    ]


@pytest.mark.parametrize(
    "error",
    [errors.BudgetExceeded(2.0, 1.0), errors.StepConfigError("no such tool profile"), ValueError("not ours")],
)
async def test_a_non_retryable_error_fails_the_workflow_after_one_attempt_typed_by_its_class(
    temporal_server: TemporalDevServer, error: Exception
) -> None:
    provider = ScriptedProvider(failures=[error])
    with pytest.raises(WorkflowFailureError) as failed:
        await run_one_step(temporal_server, provider, f"retry-{type(error).__name__}")
    activity_error = failed.value.cause
    assert isinstance(activity_error, ActivityError)
    cause = activity_error.cause
    assert isinstance(cause, ApplicationError)
    assert (cause.type, cause.non_retryable, cause.message) == (type(error).__name__, True, str(error))
    assert [c for c in provider.calls if c[0] != "release_run"] == [("run", "plan")]


async def test_an_untrusted_block_reaches_the_activity_and_a_secret_one_unsealed_fails_the_workflow(
    temporal_server: TemporalDevServer,
) -> None:
    """A worker without the sealing converter would put a secret block in the history in clear: the
    workflow fails once, before the step's activity is scheduled (issue 33; sealed, it runs:
    test_temporal_sealing.py)."""
    provider = ScriptedProvider()
    assert await run_one_step(temporal_server, provider, "untrusted-1", untrusted="public body") == ["answered"]
    with pytest.raises(WorkflowFailureError) as failed:
        await run_one_step(temporal_server, provider, "untrusted-2", untrusted="PRIVATE-BODY-0451", secret=True)
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError)
    assert (cause.type, cause.non_retryable) == ("StepConfigError", True)
    assert "history in clear" in cause.message
    assert "sealed_data_converter" in cause.message
    assert [c for c in provider.calls if c[0] == "run"] == [("run", "plan")]  # only the public one ran
    client = await Client.connect(temporal_server.address)
    assert await scheduled(client, "untrusted-2") == {"ironflow.release_run": 1}  # no agent activity's input
