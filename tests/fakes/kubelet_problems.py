"""What a kubelet (or the scheduler) writes for a pod that cannot start or was stopped (pure).

The statuses and events of the failure reasons a step must fail fast on, in the shapes the
kubelet v1.3x writes them: a waiting container (``ErrImagePull``, ``CreateContainerConfigError``,
...), a terminated one (``OOMKilled``), a pod the node stopped (``Evicted``,
``DeadlineExceeded``), and the scheduler's ``PodScheduled=False``. Used by the classifier's
unit tests and, through ``ClusterControl.report_problem``, by the runtime tests on every
backend.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["PROBLEMS", "Problem", "problem_events", "problem_status"]

IMAGE: Final = "ghcr.io/acme/claude-runner:2.1.332-1"


@dataclass(frozen=True)
class Problem:
    """One failure as a test shows it: the reason, the kubelet's message, and the expectation."""

    reason: str
    message: str
    retryable: bool
    #: Where the kubelet writes it: a waiting or terminated container, the pod, the scheduler.
    where: str


#: Every reason the runner fails fast on, with the message a real cluster writes.
PROBLEMS: Final = (
    Problem("CreateContainerConfigError", 'secret "claude-token" not found', False, "waiting"),
    Problem("CreateContainerConfigError", "couldn't find key token in Secret ironflow/claude-token", False, "waiting"),
    Problem(
        "InvalidImageName",
        'Failed to apply default image tag "ghcr.io/acme/Claude:latest": couldn\'t parse image name '
        '"ghcr.io/acme/Claude:latest": invalid reference format: repository name must be lowercase',
        False,
        "waiting",
    ),
    Problem(
        "CreateContainerError",
        "failed to generate container spec: failed to apply OCI options: no such file or directory",
        True,
        "waiting",
    ),
    Problem(
        "ErrImagePull",
        f'failed to pull and unpack image "{IMAGE}": failed to resolve reference "{IMAGE}": {IMAGE}: not found',
        False,
        "waiting",
    ),
    Problem("ImagePullBackOff", f'Back-off pulling image "{IMAGE}"', False, "waiting"),
    Problem("OOMKilled", "", True, "terminated"),
    Problem(
        "Evicted",
        "The node was low on resource: memory. Threshold quantity: 100Mi, available: 51200Ki. "
        "Container claude-code was using 3Gi, request is 0, has larger consumption of memory.",
        True,
        "pod",
    ),
    Problem("DeadlineExceeded", "Pod was active on the node longer than the specified deadline", True, "pod"),
    Problem(
        "Unschedulable",
        "0/3 nodes are available: 3 Insufficient memory. preemption: 0/3 nodes are available: 3 No preemption "
        "victims found for incoming pod.",
        True,
        "scheduler",
    ),
)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _cond(kind: str, status: bool, reason: str | None = None, message: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": kind, "status": "True" if status else "False", "lastTransitionTime": _now()}
    if reason:
        out["reason"] = reason
    if message:
        out["message"] = message
    return out


def _container(name: str, image: str, state: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "image": image,
        "imageID": "",
        "ready": False,
        "started": False,
        "restartCount": 0,
        "state": state,
    }


def problem_status(pod: dict[str, Any], reason: str, message: str) -> dict[str, Any]:
    """The pod status a kubelet (the scheduler for ``Unschedulable``) writes for ``reason``."""
    containers = [(c["name"], c.get("image", "")) for c in pod.get("spec", {}).get("containers", [])]
    if reason == "Unschedulable":
        return {"phase": "Pending", "conditions": [_cond("PodScheduled", False, reason, message)]}
    scheduled = [_cond("PodScheduled", True), _cond("Initialized", True)]
    base: dict[str, Any] = {"hostIP": "127.0.0.1", "podIP": "10.0.0.2", "startTime": _now()}
    if reason in ("OOMKilled", "Evicted", "DeadlineExceeded"):
        code, why = (137, "OOMKilled") if reason == "OOMKilled" else (137, "Error")
        terminated = {"exitCode": code, "reason": why, "startedAt": _now(), "finishedAt": _now()}
        status = {
            **base,
            "phase": "Failed",
            "conditions": [*scheduled, *(_cond(k, False, "PodFailed") for k in ("Ready", "ContainersReady"))],
            "containerStatuses": [_container(n, i, {"terminated": terminated}) for n, i in containers],
        }
        if reason != "OOMKilled":
            status["reason"], status["message"] = reason, message
        if reason == "Evicted":
            status["conditions"].append(_cond("DisruptionTarget", True, "TerminationByKubelet", message))
        return status
    not_ready = "containers with unready status: [" + " ".join(n for n, _ in containers) + "]"
    return {
        **base,
        "phase": "Pending",
        "conditions": [
            *scheduled,
            _cond("Ready", False, "ContainersNotReady", not_ready),
            _cond("ContainersReady", False, "ContainersNotReady", not_ready),
        ],
        "containerStatuses": [
            _container(n, i, {"waiting": {"reason": reason, "message": message}}) for n, i in containers
        ],
    }


def problem_events(reason: str, message: str) -> list[tuple[str, str, str]]:
    """The events (type, reason, message) the kubelet or the scheduler records with it."""
    if reason == "Unschedulable":
        return [("Warning", "FailedScheduling", message)]
    if reason in ("Evicted", "DeadlineExceeded"):
        return [("Warning", reason, message)]
    if reason in ("ErrImagePull", "ImagePullBackOff"):
        return [
            ("Normal", "Pulling", f'Pulling image "{IMAGE}"'),
            ("Warning", "Failed", f'Failed to pull image "{IMAGE}": {message}'),
            ("Warning", "Failed", f"Error: {reason}"),
        ]
    if reason == "OOMKilled":
        return []
    return [("Warning", "Failed", f"Error: {message}")]
