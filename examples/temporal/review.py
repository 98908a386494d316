"""The code-review workflow of examples/workflows/review.py, on Temporal.

Plan, a parallel wave of reviewers, a summarising child workflow: each agent step is an
ironflow activity running in its own single-use sandbox, labelled with the run (the workflow
id), the root run (the root workflow's id) and the step. Offline, on the local sandbox:

    temporal server start-dev --headless                     # or any Temporal server
    ironflow temporal-worker --task-queue review --workflows examples/temporal/review.py --fake-model
    temporal workflow start --task-queue review --type Review --workflow-id review-1 \
        --input '{"change": "add retries"}'
    temporal workflow result --workflow-id review-1

A step retried by Temporal releases its previous attempt first; a workflow cancelled deletes
its running sandboxes; a worker killed mid-step leaves its step to the next worker.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy

import ironflow.temporal as ift
from ironflow.steps import AgentConfig

REVIEWERS = ("correctness", "security", "tests")


@workflow.defn(name="Summarise")
class Summarise:
    """A child workflow: its steps carry the parent's id as root run id, so releasing the root removes them."""

    @workflow.run
    async def run(self, input: dict[str, Any]) -> dict[str, Any]:
        notes = "\n".join(f"- {aspect}: {text}" for aspect, text in input["reviews"].items())
        async with ift.run() as ctx:
            summary = await ctx.agent("summary", AgentConfig(f"Summarise these review notes in two lines:\n{notes}"))
            return {"summary": summary.text, "summary_run": ctx.run_id}


@workflow.defn(name="Review")
class Review:
    """Review ``input["change"]``."""

    @workflow.run
    async def run(self, input: dict[str, Any]) -> dict[str, Any]:
        change = input.get("change", "the latest change")
        async with ift.run() as ctx:
            plan = await ctx.agent(
                "plan",
                AgentConfig(f"List what to check when reviewing: {change}"),
                retry=RetryPolicy(initial_interval=timedelta(milliseconds=200), maximum_attempts=3),
            )
            reviews = await ctx.parallel(
                [
                    ift.AgentStep(f"review {aspect}", AgentConfig(f"Review {change} for {aspect}. Plan:\n{plan.text}"))
                    for aspect in REVIEWERS
                ]
            )
            summary = await ctx.sub_workflow(
                "summarise",
                Summarise.run,
                {"reviews": {a: r.text for a, r in zip(REVIEWERS, reviews, strict=True)}},
            )
            return {"change": change, "plan": plan.text, "summary": summary["summary"], "run": ctx.run_id}
