"""The events an error quotes: a Warning that lands just after the state that ended a step is
still in the message, and the wait for it is bounded (both backends)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from ironflow.kube import api, object_events


def _event(name: str, pod: str, namespace: str, kind: str, message: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name},
        "involvedObject": {"kind": "Pod", "name": pod, "namespace": namespace, "apiVersion": "v1"},
        "type": kind,
        "reason": "Failed" if kind == "Warning" else "Scheduled",
        "message": message,
    }


async def test_a_warning_that_lands_after_the_list_is_waited_for(kube: Any) -> None:
    ns = kube.namespace
    await kube.api.create(api.EVENTS, ns, _event("p1.a", "p1", ns, "Normal", "Successfully assigned"))

    async def late_warning() -> None:
        await asyncio.sleep(0.3)
        await kube.api.create(api.EVENTS, ns, _event("p1.b", "p1", ns, "Warning", "Error: the container cannot start"))

    started = time.monotonic()
    writer = asyncio.create_task(late_warning())
    said = await object_events.describe_recent(kube.api, ns, "Pod", "p1", await_warning_s=20)
    await writer
    assert "Warning Failed: Error: the container cannot start" in said
    assert "Normal Scheduled: Successfully assigned" in said
    assert time.monotonic() - started < 10, "the wait did not end when the Warning came"


async def test_with_no_warning_the_events_come_after_the_bound(kube: Any) -> None:
    ns = kube.namespace
    await kube.api.create(api.EVENTS, ns, _event("p2.a", "p2", ns, "Normal", "Pulled"))
    await kube.api.create(api.EVENTS, ns, _event("other.a", "other", ns, "Warning", "not this pod"))
    started = time.monotonic()
    said = await object_events.describe_recent(kube.api, ns, "Pod", "p2", await_warning_s=0.5)
    assert said == "Normal Scheduled: Pulled"
    assert time.monotonic() - started >= 0.5
    assert await object_events.describe_recent(kube.api, ns, "Pod", "p2") == said  # no wait asked: one list
