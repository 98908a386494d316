"""examples/temporal/review.py end to end on a real Temporal dev server: ``ironflow temporal-worker``
runs its workflows and steps on the local sandbox with the real Claude Code CLI, offline."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.client import Client
from tests.fakes.local_sandbox import LOCAL_SANDBOX
from tests.temporal.integration.watching import scheduled

from ironflow.testing.polling import eventually
from ironflow.testing.temporal_server import TemporalDevServer

pytestmark = [*LOCAL_SANDBOX, pytest.mark.timeout(240)]

ROOT = Path(__file__).parents[3]
EXAMPLE = ROOT / "examples" / "temporal" / "review.py"
IRONFLOW = [sys.executable, "-c", "from ironflow.cli.app import main; main()"]
REPLY = "Looks good to me. (offline fake model)"


@contextlib.contextmanager
def cli_worker(
    argv: list[str], stderr: Path, *, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """``ironflow temporal-worker`` with its stderr in a file; SIGTERMed at the end."""
    with stderr.open("wb") as err, subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, env=env) as proc:
        try:
            yield proc
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)


async def test_the_review_example_runs_end_to_end_on_the_dev_server_through_the_cli_worker(
    temporal_server: TemporalDevServer, tmp_path: Path
) -> None:
    queue = f"review-{uuid.uuid4().hex[:8]}"
    stderr = tmp_path / "worker.err"
    argv = [
        *IRONFLOW, "temporal-worker", "--task-queue", queue, "--address", temporal_server.address,
        "--workflows", str(EXAMPLE), "--fake-model",
    ]  # fmt: skip
    client = await Client.connect(temporal_server.address)
    with cli_worker(argv, stderr) as worker:
        await eventually(lambda: b"task queue " in stderr.read_bytes(), limit_s=30, what=stderr.read_text)
        output = await client.execute_workflow("Review", {"change": "add retries"}, id="review-1", task_queue=queue)
    assert worker.returncode == 0, stderr.read_text()
    assert output == {"change": "add retries", "plan": REPLY, "summary": REPLY, "run": "review-1"}
    # One release per workflow run, then one activity per step: the wave's three and the child's one.
    assert await scheduled(client, "review-1") == {"ironflow.release_run": 1, "ironflow.agent": 4}
    assert await scheduled(client, "review-1.summarise") == {"ironflow.release_run": 1, "ironflow.agent": 1}
    child = await client.get_workflow_handle("review-1.summarise").describe()
    assert child.parent_id == "review-1"
    assert (await client.get_workflow_handle("review-1.summarise").result()) == {
        "summary": REPLY,
        "summary_run": "review-1.summarise",
    }
