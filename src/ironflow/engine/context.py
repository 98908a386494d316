"""The ``ctx`` a workflow receives, and the step values it runs.

A workflow is plain async Python::

    async def review(ctx: Context, input: dict) -> dict:
        plan = await ctx.agent("plan", AgentConfig("Plan the review of " + input["repo"]))
        checks = await ctx.parallel([AgentStep("lint", lint), AgentStep("tests", tests)])
        summary = await ctx.sub_workflow("summarise", summarise, {"plan": plan.text})
        return {"summary": summary}

Steps are identified by their position in the run and their name: a run executed again
replays finished steps in the same order, so a workflow must ask for the same steps in
the same order (no branching on the clock or on randomness; branch on step results).
This module holds no engine logic: ``Context`` hands each step to the runner.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ironflow.engine import model
from ironflow.engine.retry import RetryPolicy
from ironflow.provider import AgentProvider
from ironflow.results import AgentResult
from ironflow.steps import AgentConfig

__all__ = [
    "AgentStep",
    "Context",
    "OpStep",
    "Operation",
    "Step",
    "StepExecutor",
    "SubWorkflowStep",
    "Workflow",
]

#: ``async def workflow(ctx, input) -> JSON-serialisable value``
Workflow = Callable[["Context", Any], Awaitable[Any]]


class _Runnable(Protocol):
    def run(self) -> Awaitable[Any]: ...


#: An async callable taking no argument, or an object with ``async run()`` (PodRun, JobRun).
Operation = Callable[[], Awaitable[Any]] | _Runnable


@dataclass(frozen=True)
class AgentStep:
    """An agent step: ``config`` runs on the run's provider, labelled with the run and step."""

    name: str
    config: AgentConfig
    retry: RetryPolicy | None = None

    @property
    def kind(self) -> model.StepKind:
        return model.StepKind.AGENT


@dataclass(frozen=True)
class OpStep:
    """A plain operation; its result must be JSON-serialisable (it is stored)."""

    name: str
    operation: Operation
    retry: RetryPolicy | None = None

    @property
    def kind(self) -> model.StepKind:
        return model.StepKind.OP


@dataclass(frozen=True)
class SubWorkflowStep:
    """A child run with its own run id and the parent's root run id."""

    name: str
    workflow: Workflow
    input: Any = None

    @property
    def kind(self) -> model.StepKind:
        return model.StepKind.SUB_WORKFLOW


Step = AgentStep | OpStep | SubWorkflowStep


class StepExecutor(Protocol):
    """What the runner offers a context: run one step, or a wave of them."""

    async def run_step(self, step: Step) -> Any: ...

    async def run_wave(self, steps: Sequence[Step], *, fail_fast: bool) -> list[Any]: ...


class Context:
    """Handed to a workflow: its run's ids, its provider, and the step methods."""

    def __init__(
        self,
        *,
        run_id: str,
        root_run_id: str,
        parent_run_id: str | None,
        provider: AgentProvider,
        executor: StepExecutor,
    ) -> None:
        self.run_id = run_id
        self.root_run_id = root_run_id
        self.parent_run_id = parent_run_id
        self.provider = provider
        self._executor = executor

    def __repr__(self) -> str:
        return f"Context(run_id={self.run_id!r}, root_run_id={self.root_run_id!r})"

    async def agent(self, name: str, config: AgentConfig, *, retry: RetryPolicy | None = None) -> AgentResult:
        """Run an agent step (or replay its stored result)."""
        result: AgentResult = await self._executor.run_step(AgentStep(name, config, retry))
        return result

    async def op(self, name: str, operation: Operation, *, retry: RetryPolicy | None = None) -> Any:
        """Run an operation (an async callable, or an object with ``async run()``)."""
        return await self._executor.run_step(OpStep(name, operation, retry))

    async def sub_workflow(self, name: str, workflow: Workflow, input: Any = None) -> Any:
        """Run ``workflow`` as a child run and return its output."""
        return await self._executor.run_step(SubWorkflowStep(name, workflow, input))

    async def parallel(self, steps: Sequence[Step], *, fail_fast: bool = True) -> list[Any]:
        """Run a wave of steps concurrently; results in the order given.

        Two steps of one name are refused before anything starts (their pods would share
        the step label and delete each other). With ``fail_fast`` the first failure
        cancels the others; without it every step finishes, then the first failure is raised.
        """
        return await self._executor.run_wave(steps, fail_fast=fail_fast)
