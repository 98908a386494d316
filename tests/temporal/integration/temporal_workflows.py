"""Workflows the Temporal tests run: a line of steps, each an agent step or a plain command."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow

import ironflow.temporal as ift
from ironflow.prompts import Prompt
from ironflow.secrets import Secret
from ironflow.steps import AgentConfig


@workflow.defn(name="Linear")
class Linear:
    """``input["steps"]``: ``{"name", "prompt"[, "pod_labels"]}`` (agent; kwok reads how its pod runs
        from the labels), ``{"name", "prompt", "untrusted"[, "secret"]}`` (agent, with an untrusted block;
    secret when ``"secret"`` is set, and ``"untrusted"`` may come as a ``Secret`` through a sealing client)
        or ``{"name", "argv"}`` (command), in order; returns each step's text (an agent's answer, a
        command's stdout)."""

    @workflow.run
    async def run(self, input: dict[str, Any]) -> list[str]:
        options = ift.StepOptions(heartbeat_timeout=timedelta(seconds=input.get("heartbeat_s", 10)))
        out: list[str] = []
        async with ift.run(options) as ctx:
            for step in input["steps"]:
                if "argv" in step:
                    out.append((await ctx.command(step["name"], step["argv"]))["stdout"].strip())
                elif "untrusted" in step:  # a step whose prompt holds an untrusted block, "secret" or not
                    text = Secret(step["untrusted"]) if step.get("secret") else step["untrusted"]
                    out.append(
                        (await ctx.agent(step["name"], Prompt(step["prompt"]).untrusted("issue", text).config())).text
                    )
                else:
                    config = AgentConfig(step["prompt"]).with_pod_labels(dict(step.get("pod_labels", {})))
                    out.append((await ctx.agent(step["name"], config)).text)
        return out


@workflow.defn(name="Wave")
class Wave:
    """One parallel wave of agent steps named ``input["names"]``."""

    @workflow.run
    async def run(self, input: dict[str, Any]) -> list[str]:
        async with ift.run() as ctx:
            results = await ctx.parallel([ift.AgentStep(n, AgentConfig(f"do {n}")) for n in input["names"]])
        return [r.text for r in results]


@workflow.defn(name="Child")
class Child:
    """One agent step inside a child workflow; returns its ids as it sees them."""

    @workflow.run
    async def run(self, input: dict[str, Any]) -> dict[str, Any]:
        async with ift.run() as ctx:
            answer = await ctx.agent("child step", AgentConfig("inside"))
            return {"text": answer.text, "run": ctx.run_id, "root": ctx.root_run_id, "parent": ctx.parent_run_id}


@workflow.defn(name="Parent")
class Parent:
    """An agent step, then a child workflow."""

    @workflow.run
    async def run(self, input: dict[str, Any]) -> dict[str, Any]:
        async with ift.run() as ctx:
            await ctx.agent("plan", AgentConfig("plan"))
            return dict(await ctx.sub_workflow("child", Child.run, {}))


@workflow.defn(name="SessionStep")
class SessionStep:
    """One session step: ``input["files"]`` written, ``input["commands"]`` run in one sandbox,
    ``input["read"]`` read back."""

    @workflow.run
    async def run(self, input: dict[str, Any]) -> dict[str, Any]:
        async with ift.run() as ctx:
            return await ctx.session("build", input["commands"], files=input.get("files"), read=input.get("read", ()))
