"""Waves and child workflows on the real Temporal dev server: a wave's steps run under the run's
scope, two steps of one name fail the workflow before any step starts (two sandboxes with one
step label would delete each other), and a child workflow's steps carry the root's id."""

from __future__ import annotations

import uuid

import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError
from tests.temporal.integration.watching import WORKFLOWS, scheduled

from ironflow.provider import ProviderBase
from ironflow.results import AgentResult
from ironflow.steps import AgentConfig
from ironflow.temporal import build_worker, load_workflows
from ironflow.testing.temporal_server import TemporalDevServer

pytestmark = pytest.mark.timeout(120)


class EchoProvider(ProviderBase):
    """Answers each step with its prompt and records the scope it ran under."""

    def __init__(self) -> None:
        self.scopes: list[tuple[str, str, str | None]] = []

    async def run(self, config: AgentConfig, *, logs: object = None) -> AgentResult:
        assert config.scope is not None
        self.scopes.append((config.scope.run_id, config.scope.step, config.scope.root_run_id))
        return AgentResult(value=config.prompt, duration_ms=1)

    async def release_run(self, run_id: str) -> int:
        return 0

    def account_kind(self) -> str | None:
        return None


async def test_a_wave_runs_each_step_once_under_the_run_s_scope(temporal_server: TemporalDevServer) -> None:
    client = await Client.connect(temporal_server.address)
    provider = EchoProvider()
    queue = f"wave-{uuid.uuid4().hex[:8]}"
    async with build_worker(client, task_queue=queue, provider=provider, workflows=load_workflows(str(WORKFLOWS))):
        output = await client.execute_workflow("Wave", {"names": ["lint", "tests"]}, id="wave-1", task_queue=queue)
    assert output == ["do lint", "do tests"]
    assert sorted(provider.scopes) == [("wave-1", "lint", "wave-1"), ("wave-1", "tests", "wave-1")]


async def test_two_steps_of_one_name_fail_the_workflow_before_any_step_starts(
    temporal_server: TemporalDevServer,
) -> None:
    client = await Client.connect(temporal_server.address)
    provider = EchoProvider()
    queue = f"wave-{uuid.uuid4().hex[:8]}"
    async with build_worker(client, task_queue=queue, provider=provider, workflows=load_workflows(str(WORKFLOWS))):
        with pytest.raises(WorkflowFailureError) as failed:
            await client.execute_workflow("Wave", {"names": ["lint", "lint"]}, id="wave-2", task_queue=queue)
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError)
    assert (cause.type, cause.non_retryable) == ("StepConfigError", True)
    assert cause.message == 'parallel wave has two steps named "lint"; each step of a wave needs its own name'
    assert provider.scopes == []
    assert await scheduled(client, "wave-2") == {"ironflow.release_run": 1}


async def test_a_child_workflow_s_steps_carry_its_own_run_id_and_the_root_s(temporal_server: TemporalDevServer) -> None:
    """So releasing the root (``release_run(root)``) removes the child's sandboxes too."""
    client = await Client.connect(temporal_server.address)
    provider = EchoProvider()
    queue = f"wave-{uuid.uuid4().hex[:8]}"
    async with build_worker(client, task_queue=queue, provider=provider, workflows=load_workflows(str(WORKFLOWS))):
        output = await client.execute_workflow("Parent", {}, id="parent-1", task_queue=queue)
    assert output == {"text": "inside", "run": "parent-1.child", "root": "parent-1", "parent": "parent-1"}
    assert provider.scopes == [("parent-1", "plan", "parent-1"), ("parent-1.child", "child step", "parent-1")]
