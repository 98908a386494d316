"""Workflows the engine tests run; loaded by path, like ``ironflow run FILE.py:workflow`` does."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from ironflow import errors
from ironflow.engine import AgentStep, Context, RetryPolicy
from ironflow.prompts import Prompt
from ironflow.secrets import Secret
from ironflow.steps import AgentConfig
from ironflow.testing.polling import eventually


def _config(input: dict[str, Any], name: str, prompt: str) -> AgentConfig:
    """``prompt`` with the pod labels ``input["pod_labels"][name]`` asks for (a real cluster's
    fake kubelet reads how long the pod runs and how it ends from labels) and the role
    ``input["roles"][name]``."""
    config = AgentConfig(prompt, role=input.get("roles", {}).get(name))
    return config.with_pod_labels(dict(input.get("pod_labels", {}).get(name, {})))


async def linear(ctx: Context, input: dict[str, Any]) -> list[str]:
    """One agent step per name, in order."""
    return [(await ctx.agent(name, _config(input, name, f"do {name}"))).text for name in input["steps"]]


async def wave(ctx: Context, input: dict[str, Any]) -> list[str]:
    """A first step, then one parallel wave of the given names."""
    await ctx.agent("before", _config(input, "before", "first"))
    results = await ctx.parallel(
        [AgentStep(name, _config(input, name, f"do {name}")) for name in input["names"]],
        fail_fast=input.get("fail_fast", True),
    )
    return [r.text for r in results]


async def child(ctx: Context, input: dict[str, Any]) -> dict[str, Any]:
    result = await ctx.agent("child step", _config(input, "child step", "inside"))
    return {"text": result.text, "run_id": ctx.run_id, "root": ctx.root_run_id, "parent": ctx.parent_run_id}


async def parent(ctx: Context, input: dict[str, Any]) -> dict[str, Any]:
    """An agent step, then a sub-workflow."""
    await ctx.agent("plan", _config(input, "plan", "plan"))
    child_input = {"from": ctx.run_id, "pod_labels": input.get("pod_labels", {})}
    return dict(await ctx.sub_workflow("child", child, child_input))


async def flaky(ctx: Context, input: dict[str, Any]) -> str:
    """One step with the given number of retries, of the errors named in ``retry_on`` when given."""
    retry_on = tuple(getattr(errors, name) for name in input["retry_on"]) if input.get("retry_on") else None
    retry = (
        RetryPolicy(max_retries=input["retries"], initial_backoff_s=0.01, retry_on=retry_on, jitter=0.5)
        if input["retries"]
        else None
    )
    return (await ctx.agent("flaky", AgentConfig("try"), retry=retry)).text


async def with_op(ctx: Context, input: dict[str, Any]) -> Any:
    async def add() -> int:
        await asyncio.sleep(0)
        return int(input["a"]) + int(input["b"])

    return await ctx.op("add", add)


async def flaky_op(ctx: Context, input: dict[str, Any]) -> Any:
    """An op whose function raises RuntimeError ``input["fails"]`` times, retried as ``input`` says."""
    calls = []

    async def sometimes() -> int:
        calls.append(1)
        if len(calls) <= input["fails"]:
            raise RuntimeError(f"flaky call {len(calls)}")
        return len(calls)

    retry_on = (RuntimeError,) if input.get("retry_on_runtime_error") else None
    return await ctx.op("flaky", sometimes, retry=RetryPolicy(max_retries=3, initial_backoff_s=0.01, retry_on=retry_on))


async def not_storable(ctx: Context, input: Any) -> Any:
    return object()


async def gated(ctx: Context, input: dict[str, Any]) -> str:
    """One op step that runs until the file ``input["gate"]`` exists (the test makes it when it is ready)."""

    async def wait_for_the_gate() -> str:
        await eventually(Path(input["gate"]).exists, limit_s=60, what="the test to open the gate")
        return "opened"

    return str(await ctx.op("wait for the gate", wait_for_the_gate))


async def shell(ctx: Context, input: Any) -> str:
    """One agent step that may use Bash (the offline model's script says what it runs)."""
    return (await ctx.agent("shell", AgentConfig("run the command", allowed_tools=("Bash",)))).text


async def secret_block(ctx: Context, input: dict[str, Any]) -> str:
    """One step whose prompt holds ``input["body"]`` as a secret untrusted block."""
    prompt = Prompt("Summarise the issue.").untrusted("issue", Secret(input["body"]))
    return (await ctx.agent("summary", prompt.config())).text
