"""A Temporal worker process for the crash tests: the local sandbox, the tests' offline model.

    python temporal_worker.py ADDRESS TASK_QUEUE MODEL_URL TEMP_DIR EVENTS

Runs the workflows of ``temporal_workflows.py`` and the ironflow activities until killed;
prints ``ready`` once it polls. Each release it makes is a JSON line in EVENTS (pid, kind,
step, sandboxes removed).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from ironflow.local.provider import LocalSandboxProvider, ProxyCredential
from ironflow.secrets import Secret
from ironflow.steps import StepScope
from ironflow.temporal import IronflowActivities, build_worker, load_workflows
from ironflow.temporal.worker import connect

KEY = "sk-ant-api03-temporal-crash-test-key-abcdef"
WORKFLOWS = Path(__file__).parent / "temporal_workflows.py"


async def main(address: str, queue: str, model_url: str, temp_dir: str, events: str) -> None:
    def on_release(kind: str, scope: StepScope | None, removed: int) -> None:
        line = {"pid": os.getpid(), "kind": kind, "step": scope.step if scope else None, "removed": removed}
        with open(events, "a") as out:
            out.write(json.dumps(line) + "\n")

    provider = LocalSandboxProvider(
        timeout=60,
        credential=ProxyCredential(Secret(KEY), "api_key", model_url),
        env={"CLAUDE_CODE_MAX_RETRIES": "0"},
        temp_dir=temp_dir,
    )
    client = await connect(address)
    worker = build_worker(
        client,
        task_queue=queue,
        provider=provider,
        workflows=load_workflows(str(WORKFLOWS)),
        activities=IronflowActivities(provider, on_release=on_release),
    )
    async with worker:
        print("ready", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:6]))
