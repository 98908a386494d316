"""What a pod's status says: its phase, whether it started or finished, a container's exit code (pure).

Every reader of pod status goes through here, so ``status: null`` (a pod the kubelet has
not seen yet) means the same thing everywhere: not started, no exit code.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

__all__ = ["end_reason", "exit_code", "phase", "pod_finished", "pod_ready", "pod_started", "progress"]

_TERMINAL: Final = frozenset({"Succeeded", "Failed"})


def phase(pod: Mapping[str, Any] | None) -> str:
    """The pod's phase, ``Unknown`` when absent."""
    return str(((pod or {}).get("status") or {}).get("phase") or "Unknown")


def exit_code(pod: Mapping[str, Any] | None, container: str) -> int | None:
    """The exit code the kubelet recorded for ``container`` once it terminated, else None."""
    for status in ((pod or {}).get("status") or {}).get("containerStatuses") or ():
        if status.get("name") == container:
            code = ((status.get("state") or {}).get("terminated") or {}).get("exitCode")
            return code if isinstance(code, int) and not isinstance(code, bool) else None
    return None


def end_reason(pod: Mapping[str, Any] | None, container: str) -> str | None:
    """Why the pod ended, as the cluster says: the pod's own reason (``DeadlineExceeded``,
    ``Evicted``) first, else ``container``'s terminated reason (``Completed``, ``Error``,
    ``OOMKilled``); None while neither is recorded.

    >>> end_reason({"status": {"containerStatuses": [{"name": "c", "state":
    ...     {"terminated": {"exitCode": 7, "reason": "Error"}}}]}}, "c")
    'Error'
    """
    status = (pod or {}).get("status") or {}
    if status.get("reason"):
        return str(status["reason"])
    for found in status.get("containerStatuses") or ():
        if found.get("name") == container:
            reason = ((found.get("state") or {}).get("terminated") or {}).get("reason")
            return str(reason) if reason else None
    return None


def pod_ready(pod: Mapping[str, Any] | None) -> bool:
    """True while the pod's ``Ready`` condition is true (its readiness probe passes)."""
    for cond in ((pod or {}).get("status") or {}).get("conditions") or ():
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def pod_finished(pod: Mapping[str, Any] | None) -> bool:
    """True once a pod is Succeeded or Failed (a predicate for :meth:`Informer.wait_for`).

    A pod without a status yet (absent or ``null``) has not finished.
    """
    return phase(pod) in _TERMINAL


def pod_started(pod: Mapping[str, Any] | None) -> bool:
    """True once a pod is Running or finished."""
    return phase(pod) in _TERMINAL | {"Running"}


def _scheduled_on(pod: Mapping[str, Any]) -> str | None:
    node = (pod.get("spec") or {}).get("nodeName")
    return str(node) if node else None


def progress(pod: Mapping[str, Any] | None) -> str:
    """Where a starting pod is, in a few words a person follows (the CLI's progress line).

    >>> progress({"spec": {"nodeName": "n1"}, "status": {"phase": "Pending",
    ...     "containerStatuses": [{"state": {"waiting": {"reason": "ContainerCreating"}}}]}})
    'scheduled on node n1: creating containers (pulling the image)'
    """
    status = (pod or {}).get("status") or {}
    current = phase(pod)
    node = _scheduled_on(pod or {})
    if current in _TERMINAL:
        return f"finished ({current})"
    if current == "Running":
        return f"running on node {node}" if node else "running"
    if node is None:
        return "waiting for a node"
    waiting = [
        str(((c.get("state") or {}).get("waiting") or {}).get("reason") or "")
        for c in (*(status.get("initContainerStatuses") or ()), *(status.get("containerStatuses") or ()))
    ]
    reasons = [w for w in waiting if w and w not in ("ContainerCreating", "PodInitializing")]
    if reasons:
        return f"scheduled on node {node}: {reasons[0]}"
    if any(waiting):
        return f"scheduled on node {node}: creating containers (pulling the image)"
    return f"scheduled on node {node}"
