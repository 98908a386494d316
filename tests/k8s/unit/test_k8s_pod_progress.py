"""A starting pod's progress line, from its status alone (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from ironflow.kube.pod_status import progress


def pod(phase: str | None, node: str | None = None, *waiting: str) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase} if phase else {}
    if waiting:
        status["containerStatuses"] = [{"state": {"waiting": {"reason": w}}} for w in waiting]
    return {"spec": {"nodeName": node} if node else {}, "status": status}


@pytest.mark.parametrize(
    ("shown", "line"),
    [
        (None, "waiting for a node"),
        (pod(None), "waiting for a node"),
        (pod("Pending"), "waiting for a node"),
        (pod("Pending", "n1"), "scheduled on node n1"),
        (pod("Pending", "n1", "ContainerCreating"), "scheduled on node n1: creating containers (pulling the image)"),
        (pod("Pending", "n1", "ErrImagePull"), "scheduled on node n1: ErrImagePull"),
        (pod("Running", "n1"), "running on node n1"),
        (pod("Succeeded", "n1"), "finished (Succeeded)"),
        (pod("Failed"), "finished (Failed)"),
    ],
)
def test_progress_says_where_the_pod_is(shown: dict[str, Any] | None, line: str) -> None:
    assert progress(shown) == line
