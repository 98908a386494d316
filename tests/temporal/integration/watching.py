"""What the Temporal tests watch and start: sandbox processes, a workflow's history, worker processes.

Also the path of the tests' workflows.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

WORKFLOWS = Path(__file__).parent / "temporal_workflows.py"


# --- processes ------------------------------------------------------------------------------


@contextlib.contextmanager
def worker_process(argv: list[str], stderr: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``temporal_worker.py`` (argv) once it printed ``ready``; killed at the end."""
    with stderr.open("ab") as err, subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err) as proc:
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline() == b"ready\n", stderr.read_text()
            yield proc
        finally:
            proc.kill()


# --- history --------------------------------------------------------------------------------


async def scheduled(client: Client, workflow_id: str) -> Counter[str]:
    """The activities a workflow's history scheduled, by type."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    return Counter(
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    )


async def activity_events(client: Client, workflow_id: str) -> Counter[str]:
    """The activity events of a workflow's history, by event type."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    return Counter(EventType.Name(e.event_type) for e in history.events if "ACTIVITY" in EventType.Name(e.event_type))


async def started_attempts(client: Client, workflow_id: str) -> list[tuple[str, int]]:
    """(step name or activity type, attempt of its last start) for each activity, from the history."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    names: dict[int, str] = {}
    out: list[tuple[str, int]] = []
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            summary = event.user_metadata.summary.data.decode().strip('"') if event.user_metadata.summary.data else ""
            names[event.event_id] = summary or event.activity_task_scheduled_event_attributes.activity_type.name
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            started = event.activity_task_started_event_attributes
            out.append((names[started.scheduled_event_id], started.attempt))
    return out
