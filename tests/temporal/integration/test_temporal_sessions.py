"""A sandbox session as one Temporal step, on the real dev server and the local provider (real
bubblewrap): files go in, several commands run in the same sandbox, files come back, and the
session is closed after the step, a failed command ending the list."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client
from tests.temporal.integration.watching import WORKFLOWS

from ironflow.local.sandbox_provider import LocalSandboxProvider
from ironflow.sessions import PoolPolicy
from ironflow.temporal import IronflowActivities, build_worker, load_workflows
from ironflow.testing.temporal_server import TemporalDevServer

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.bwrap,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed"),
]


async def test_a_session_step_shares_one_sandbox_between_its_commands_and_is_closed(
    temporal_server: TemporalDevServer,
) -> None:
    client = await Client.connect(temporal_server.address)
    temp = Path(tempfile.mkdtemp(prefix="ift-"))  # short: the sessions' sockets live here
    try:
        provider = LocalSandboxProvider(temp_dir=str(temp))
        queue = f"session-{uuid.uuid4().hex[:8]}"
        workflows = load_workflows(str(WORKFLOWS))
        async with build_worker(client, task_queue=queue, provider=provider, workflows=workflows):
            out = await client.execute_workflow(
                "SessionStep",
                {
                    "files": {"in.txt": "hello\n"},
                    "commands": [["sh", "-c", "tr a-z A-Z < in.txt > out.txt"], ["cat", "out.txt"]],
                    "read": ["out.txt"],
                },
                id="session-1",
                task_queue=queue,
            )
            assert [c["stdout"] for c in out["commands"]] == ["", "HELLO\n"]  # the second saw the first's file
            assert out["files"] == {"out.txt": "HELLO\n"}
            failed = await client.execute_workflow(
                "SessionStep",
                {"commands": [["sh", "-c", "exit 3"], ["echo", "never"]]},
                id="session-2",
                task_queue=queue,
            )
            assert [c["exit_code"] for c in failed["commands"]] == [3]  # the failure ended the list
        assert [name for name in os.listdir(temp) if name.startswith("ifs-")] == []  # every session closed
    finally:
        shutil.rmtree(temp, ignore_errors=True)


async def test_session_steps_take_warm_sandboxes_and_none_sees_the_last_one_s_files(
    temporal_server: TemporalDevServer,
) -> None:
    """With the worker's sessions kept warm, each session step takes a sandbox from the pool, the
    pool refills, and a file one step wrote is not in the next step's sandbox."""
    client = await Client.connect(temporal_server.address)
    temp = Path(tempfile.mkdtemp(prefix="ift-"))
    try:
        provider = LocalSandboxProvider(temp_dir=str(temp))
        queue = f"session-{uuid.uuid4().hex[:8]}"
        workflows = load_workflows(str(WORKFLOWS))
        async with provider.sessions(pool=PoolPolicy(1)) as sessions:
            assert sessions.pool is not None
            acts = IronflowActivities(provider, sessions=sessions)
            async with build_worker(client, task_queue=queue, provider=provider, workflows=workflows, activities=acts):
                outs = []
                for number in (1, 2):
                    await sessions.pool.full()
                    warm = {m.proc.pid for m in sessions.pool.waiting()}
                    outs.append(
                        await client.execute_workflow(
                            "SessionStep",
                            {"commands": [["sh", "-c", "cat mine 2>/dev/null; echo $$ > mine; echo ok"]]},
                            id=f"pooled-session-{number}-{queue}",
                            task_queue=queue,
                        )
                    )
                    assert not warm & {m.proc.pid for m in sessions.pool.waiting()}, "the warm one was taken"
            assert [o["commands"][0]["stdout"] for o in outs] == ["ok\n", "ok\n"], "no file of the step before"
            assert sessions.held() == [], "each step closed its session"
        assert [name for name in os.listdir(temp) if name.startswith("ifs-")] == []  # the pool left nothing
    finally:
        shutil.rmtree(temp, ignore_errors=True)
