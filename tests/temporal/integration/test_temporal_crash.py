"""A Temporal worker SIGKILLed during a step: another worker finishes the run on the real dev server.

Two worker processes on the local sandbox (real bubblewrap, the real Claude Code CLI, the
offline model served by this test). The first is killed while step "slow" (a plain command in
its sandbox) runs; its sandbox dies with it (bubblewrap ``--die-with-parent``, its own pid
namespace). The activity's heartbeat times out, Temporal retries it on the second worker,
which releases the previous attempt first and runs only "slow" (attempt 2) and "four": the
history shows every other step started once, and nothing of the dead worker is left.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import Client, WorkflowHandle
from tests.fakes.local_sandbox import LOCAL_SANDBOX
from tests.temporal.integration.watching import started_attempts, worker_process

from ironflow.fake_model.server import FakeAnthropic, Script
from ironflow.testing.polling import eventually
from ironflow.testing.processes import alive, descendants
from ironflow.testing.temporal_server import TemporalDevServer

#: How soon the killed worker's attempt is given up. At 2 s, under load (a CPU hog, load 7), the
#: live worker's own attempt of "slow" missed a heartbeat once and ran a third time.
HEARTBEAT_S = 5
pytestmark = [*LOCAL_SANDBOX, pytest.mark.timeout(240)]

HERE = Path(__file__).parent
WORKER = HERE / "temporal_worker.py"
KEY = "sk-ant-api03-temporal-crash-test-key-abcdef"


@pytest.fixture
def temp() -> Iterator[str]:
    """A short parent for the run temp dirs (a unix socket path holds at most 107 bytes)."""
    made = tempfile.mkdtemp(prefix="ifl-tc-")
    yield made
    shutil.rmtree(made, ignore_errors=True)


async def started_command(handle: WorkflowHandle[Any, Any]) -> bool:
    description = await handle.describe()
    return any(
        p.activity_type.name == "ironflow.command" and p.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
        for p in description.raw_description.pending_activities
    )


async def test_a_killed_worker_s_step_is_run_again_once_by_the_next_worker_and_nothing_is_left(
    temporal_server: TemporalDevServer, tmp_path: Path, temp: str
) -> None:
    queue = f"crash-{uuid.uuid4().hex[:8]}"
    events = tmp_path / "events.jsonl"
    events.touch()
    stderr = tmp_path / "workers.err"
    steps = [
        {"name": "one", "prompt": "say one"},
        {"name": "two", "prompt": "say two"},
        {"name": "slow", "argv": ["sh", "-c", "sleep 4; echo slow done"]},
        {"name": "four", "prompt": "say four"},
    ]
    async with FakeAnthropic(Script.of(default="done"), required_credential=KEY) as fake:
        argv = [sys.executable, str(WORKER), temporal_server.address, queue, str(events), "local", fake.url, temp]
        client = await Client.connect(temporal_server.address)
        with worker_process(argv, stderr) as first:
            handle = await client.start_workflow(
                "Linear", {"steps": steps, "heartbeat_s": HEARTBEAT_S}, id="crash-1", task_queue=queue
            )
            await eventually(lambda: started_command(handle), limit_s=90, interval_s=0.1, what="step slow to start")
            sandbox = await eventually(
                lambda: alive(descendants(first.pid)), limit_s=20, what="the slow step's sandbox processes"
            )
            os.kill(first.pid, signal.SIGKILL)
            first.wait(timeout=5)
        # The dead attempt's sandbox goes with its worker, before any other attempt can start.
        await eventually(lambda: not alive(sandbox), limit_s=10, what=lambda: f"sandbox {alive(sandbox)} to go")
        with worker_process(argv, stderr) as second:
            output = await handle.result()
            second_pid = second.pid
    assert output == ["done", "done", "slow done", "done"]
    assert await started_attempts(client, "crash-1") == [
        ("ironflow.release_run", 1),
        ("one", 1),
        ("two", 1),
        ("slow", 2),  # re-run once, by the second worker
        ("four", 1),
    ]
    released = [json.loads(line) for line in events.read_text().splitlines()]
    assert released[0] == {"pid": first.pid, "kind": "run", "step": None, "removed": 0}
    assert released[1:] == [{"pid": second_pid, "kind": "step", "step": "slow", "removed": 0}]
    assert alive(sandbox) == set()
    assert os.listdir(temp) == []  # the dead worker's run dirs were swept by the next provider
