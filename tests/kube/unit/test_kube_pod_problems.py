"""The pod classifier over the statuses a kubelet and the scheduler write, and the image-pull grace (pure)."""

from __future__ import annotations

import doctest
from typing import Any

import pytest
from tests.fakes.kubelet_problems import PROBLEMS, Problem, problem_status

from ironflow import errors
from ironflow.kube import pod_problems
from ironflow.kube.pod_problems import PullGrace, classify, describe_events

POD: dict[str, Any] = {
    "metadata": {"name": "claude-code-1a2b-3c4d"},
    "spec": {"containers": [{"name": "claude-code", "image": "ghcr.io/acme/claude-runner:2.1.332-1"}]},
}


def shown(reason: str, message: str = "") -> dict[str, Any]:
    return {**POD, "status": problem_status(POD, reason, message)}


def test_doctests() -> None:
    assert doctest.testmod(pod_problems).failed == 0


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: f"{p.reason}-{len(p.message)}")
def test_every_reason_is_classified_with_the_clusters_message(problem: Problem) -> None:
    verdict = classify(shown(problem.reason, problem.message))
    assert verdict is not None
    assert verdict.reason == problem.reason
    assert problem.message in verdict.message
    assert verdict.retryable is problem.retryable
    assert verdict.grace is (problem.reason in ("ErrImagePull", "ImagePullBackOff"))
    assert verdict.started is (problem.reason in ("OOMKilled", "Evicted", "DeadlineExceeded"))


@pytest.mark.parametrize(
    "status",
    [
        None,
        {},
        {"phase": "Pending"},
        {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]},
        {
            "phase": "Pending",
            "containerStatuses": [{"name": "c", "state": {"waiting": {"reason": "ContainerCreating"}}}],
        },
        {"phase": "Pending", "containerStatuses": [{"name": "c", "state": {"waiting": {"reason": "PodInitializing"}}}]},
        {"phase": "Running", "containerStatuses": [{"name": "c", "state": {"running": {}}}]},
        {
            "phase": "Failed",
            "containerStatuses": [{"name": "c", "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}],
        },
        {"phase": "Succeeded"},
    ],
)
def test_a_pod_on_its_way_or_ended_by_its_agent_has_no_verdict(status: dict[str, Any] | None) -> None:
    assert classify({**POD, "status": status}) is None


def test_the_missing_secret_and_key_are_named() -> None:
    verdict = classify(shown("CreateContainerConfigError", "couldn't find key token in Secret ironflow/claude-token"))
    assert verdict is not None
    error = verdict.error("pod p")
    assert isinstance(error, errors.SandboxRefused)
    assert error.message == (
        "pod p cannot start: CreateContainerConfigError: couldn't find key token in Secret ironflow/claude-token "
        "(not retryable)"
    )


def test_a_registry_that_is_down_or_rate_limits_makes_a_pull_retryable() -> None:
    said = 'failed to pull image "x": 429 Too Many Requests - Server message: toomanyrequests: rate limit'
    verdict = classify(shown("ErrImagePull", said))
    assert verdict is not None
    assert verdict.retryable
    assert isinstance(verdict.error("pod p"), errors.SandboxFailed)


def test_an_init_container_that_cannot_start_counts() -> None:
    status = {
        "phase": "Pending",
        "initContainerStatuses": [
            {"name": "inputs", "state": {"waiting": {"reason": "ErrImagePull", "message": "pull denied"}}}
        ],
        "containerStatuses": [{"name": "claude-code", "state": {"waiting": {"reason": "PodInitializing"}}}],
    }
    verdict = classify({**POD, "status": status})
    assert verdict is not None
    assert verdict.reason == "ErrImagePull"


def test_a_reason_without_grace_wins_over_a_graced_one() -> None:
    status = {
        "phase": "Pending",
        "containerStatuses": [
            {"name": "a", "state": {"waiting": {"reason": "ImagePullBackOff", "message": "back-off"}}},
            {"name": "b", "state": {"waiting": {"reason": "CreateContainerConfigError", "message": 'secret "s"'}}},
        ],
    }
    verdict = classify({**POD, "status": status})
    assert verdict is not None
    assert verdict.reason == "CreateContainerConfigError"


def test_the_grace_tolerates_a_failing_pull_until_it_ends() -> None:
    grace = PullGrace(60)
    assert grace.fatal(shown("ErrImagePull", "not found"), now=100.0) is None
    assert grace.expires_at() == 160.0
    assert grace.fatal(shown("ImagePullBackOff", "back-off"), now=130.0) is None  # the kubelet alternates: one grace
    verdict = grace.fatal(shown("ImagePullBackOff", "back-off"), now=160.0)
    assert verdict is not None
    assert verdict.reason == "ImagePullBackOff"


def test_the_grace_starts_again_after_the_pull_worked() -> None:
    grace = PullGrace(60)
    assert grace.fatal(shown("ErrImagePull", "x"), now=0.0) is None
    assert grace.fatal({**POD, "status": {"phase": "Pending"}}, now=50.0) is None
    assert grace.expires_at() is None
    assert grace.fatal(shown("ErrImagePull", "x"), now=70.0) is None  # a new grace from 70
    assert grace.fatal(shown("ErrImagePull", "x"), now=129.0) is None
    assert grace.fatal(shown("ErrImagePull", "x"), now=130.0) is not None


def test_no_grace_ends_at_the_first_failed_pull_and_other_reasons_never_wait() -> None:
    assert PullGrace(0).fatal(shown("ErrImagePull", "x"), now=5.0) is not None
    assert PullGrace(3600).fatal(shown("InvalidImageName", "bad"), now=0.0) is not None


def test_events_are_newest_last_and_bounded() -> None:
    events = [
        {
            "type": "Warning",
            "reason": "Failed",
            "message": f"m{i} " + "x" * 1000,
            "lastTimestamp": f"2026-01-01T00:00:{i:02d}Z",
        }
        for i in range(10)
    ]
    text = describe_events(reversed(events))
    lines = text.splitlines()
    assert len(lines) <= 5
    assert lines[-1].startswith("Warning Failed: m9 ")
    assert len(text.encode()) <= 1500 + len("...(truncated)")
    assert describe_events([]) == ""


UNSCHEDULABLE = next(p for p in PROBLEMS if p.reason == "Unschedulable")


def _event(reason: str, at: str) -> dict[str, Any]:
    return {"reason": reason, "lastTimestamp": at}


def test_a_node_is_coming_when_the_autoscalers_newest_word_says_so() -> None:
    assert pod_problems.scale_up_pending([_event("FailedScheduling", "t1"), _event("TriggeredScaleUp", "t2")])
    assert pod_problems.scale_up_pending([_event("Nominated", "t1")])  # Karpenter
    assert not pod_problems.scale_up_pending([_event("TriggeredScaleUp", "t1"), _event("NotTriggerScaleUp", "t2")])
    assert not pod_problems.scale_up_pending([_event("FailedScheduling", "t1")])
    assert not pod_problems.scale_up_pending([])


def test_unschedulable_is_held_while_a_node_is_coming_then_looked_at_again() -> None:
    pod = {"status": problem_status({"spec": {"containers": []}}, UNSCHEDULABLE.reason, UNSCHEDULABLE.message)}
    grace = PullGrace(60)
    first = grace.fatal(pod, 0.0)
    assert first is not None
    assert first.reason == "Unschedulable"
    grace.hold_scheduling(5.0)
    assert grace.fatal(pod, 4.9) is None
    assert grace.expires_at() == 5.0  # the waiter wakes then
    again = grace.fatal(pod, 5.0)
    assert again is not None
    assert again.reason == "Unschedulable"
    assert grace.expires_at() is None  # the hold is over: no wake-up left scheduled


def test_a_hold_ends_once_the_pod_is_scheduled() -> None:
    grace = PullGrace(60)
    grace.hold_scheduling(5.0)
    assert grace.fatal({"status": {"phase": "Running"}}, 1.0) is None
    assert grace.expires_at() is None


def test_a_pod_waiting_for_its_claim_to_bind_is_no_failure() -> None:
    """A step's environment claim is made just before its pod: until the PV controller (or a
    provisioner) binds it the scheduler says Unschedulable, which failed the step under load."""
    waiting = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    unbound = "0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims. not found"
    pod = {"status": {"phase": "Pending", "conditions": [{**waiting, "message": unbound}]}}
    assert classify(pod) is None
    full = {"status": {"phase": "Pending", "conditions": [{**waiting, "message": "0/1 nodes: Insufficient cpu."}]}}
    found = classify(full)
    assert found is not None
    assert found.reason == "Unschedulable"
