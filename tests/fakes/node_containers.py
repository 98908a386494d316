"""What runs on the real node, as containerd sees it: a deleted pod is gone only once no process of
its containers is left (containerd's tasks), not when the API stops listing it."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from ironflow.testing.polling import eventually
from ironflow.testing.realnode import RealNodeEnv

__all__ = ["gone_from_the_node", "running_container", "running_tasks", "tasks"]


def running_tasks(node: RealNodeEnv) -> set[str]:
    """The ids of the containers whose process runs on the node."""
    done = node.ctr("tasks", "list", "-q")
    assert done.returncode == 0, done.stderr
    return set(done.stdout.split())


async def tasks(node: RealNodeEnv) -> set[str]:
    """:func:`running_tasks` off the event loop."""
    return await asyncio.to_thread(running_tasks, node)


def running_container(pod: Mapping[str, Any]) -> str | None:
    """The id on the node of the pod's running container (its first), if one runs."""
    for status in (pod.get("status") or {}).get("containerStatuses") or ():
        if "running" in (status.get("state") or {}):
            return str(status["containerID"]).partition("://")[2]
    return None


async def gone_from_the_node(node: RealNodeEnv, containers: set[str], *, limit_s: float = 90) -> None:
    """Wait until no process of ``containers`` is left on the node (the kubelet killed them)."""
    left: set[str] = set()

    async def gone() -> bool:
        left.clear()
        left.update(containers & await tasks(node))
        return not left

    await eventually(gone, limit_s=limit_s, interval_s=0.5, what=lambda: f"no task left of {sorted(left)}")
