"""A code-review workflow: plan, a parallel wave of reviewers, a summarising sub-workflow.

Runs offline (no key) on the local sandbox with the offline model server:

    ironflow run examples/workflows/review.py:review --input '{"change": "add retries"}' --wait --fake-model

Or queue it and let a worker take it:

    ironflow run examples/workflows/review.py:review --input '{"change": "add retries"}'
    ironflow worker --fake-model            # Ctrl-C when done
    ironflow runs list

Every agent step runs in its own single-use sandbox, labelled with the run, the root run
and the step; a run executed again (a crash, ``ironflow runs retry``) replays the steps
that finished and runs the rest.
"""

from __future__ import annotations

from typing import Any

from ironflow.engine import AgentStep, Context, RetryPolicy
from ironflow.steps import AgentConfig

REVIEWERS = ("correctness", "security", "tests")


async def summarise(ctx: Context, input: dict[str, Any]) -> dict[str, Any]:
    """A sub-workflow: its steps carry the parent's root run id, so releasing the root removes them."""
    notes = "\n".join(f"- {aspect}: {text}" for aspect, text in input["reviews"].items())
    summary = await ctx.agent("summary", AgentConfig(f"Summarise these review notes in two lines:\n{notes}"))
    return {"summary": summary.text, "summary_run": ctx.run_id}


async def review(ctx: Context, input: dict[str, Any]) -> dict[str, Any]:
    """Review ``input["change"]``."""
    change = input.get("change", "the latest change")
    plan = await ctx.agent("plan", AgentConfig(f"List what to check when reviewing: {change}"), retry=RetryPolicy(2))
    reviews = await ctx.parallel(
        [
            AgentStep(f"review {aspect}", AgentConfig(f"Review {change} for {aspect}. Plan:\n{plan.text}"))
            for aspect in REVIEWERS
        ],
        fail_fast=True,
    )
    summary = await ctx.sub_workflow(
        "summarise", summarise, {"reviews": {a: r.text for a, r in zip(REVIEWERS, reviews, strict=True)}}
    )
    return {"change": change, "plan": plan.text, "summary": summary["summary"], "run": ctx.run_id}
