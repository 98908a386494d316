"""Why a pod will not start or was stopped, in the cluster's words (pure).

A pod that never starts (a missing Secret, a bad image, no node for it) looks, from its
phase alone, like a slow agent: ``Pending`` until the step's timeout. :func:`classify`
reads what the kubelet and the scheduler wrote instead (waiting and terminated container
states, the ``PodScheduled`` condition, ``status.reason``) and returns a :class:`Verdict`:
the reason, the message, whether retrying the step can help, and whether a grace applies
(an image pull the kubelet retries may still succeed). :class:`PullGrace` holds that
grace over the events of one pod, and holds ``Unschedulable`` while a node autoscaler says
it is adding a node for the pod (:func:`scale_up_pending`); :func:`describe_events` puts a
pod's events into an error message, bounded.

Values in, a verdict out: no I/O, no clock (the caller passes the time).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from ironflow import errors

__all__ = [
    "DEFAULT_IMAGE_PULL_GRACE_S",
    "GRACED",
    "SCALE_UP_RECHECK_S",
    "PullGrace",
    "Verdict",
    "classify",
    "describe_events",
    "scale_up_pending",
]

#: How long ErrImagePull / ImagePullBackOff is tolerated before the step ends.
DEFAULT_IMAGE_PULL_GRACE_S: Final = 60.0
#: Waiting reasons the kubelet retries by itself: tolerated for the grace.
GRACED: Final = frozenset({"ErrImagePull", "ImagePullBackOff"})
#: Waiting reasons that end the step, and whether a retry of the step may help.
_WAITING: Final = {
    "ErrImagePull": False,
    "ImagePullBackOff": False,
    "InvalidImageName": False,
    "ErrImageNeverPull": False,
    "CreateContainerConfigError": False,
    "CreateContainerError": True,
}
#: Pod-level reasons (``status.reason``) of a pod the node stopped; all retryable.
_POD_REASONS: Final = frozenset({"Evicted", "DeadlineExceeded"})
#: A pull that failed on the registry's side (rate limit, 5xx, network) may work next time.
_TRANSIENT_PULL: Final = re.compile(
    r"toomanyrequests|too many requests|\b429\b|\b50[0234]\b|timeout|timed out|connection refused|"
    r"connection reset|no such host|i/o timeout|unavailable",
    re.IGNORECASE,
)
#: Autoscaler events saying a node is coming for the pod (cluster-autoscaler, Karpenter)...
_SCALING_UP: Final = frozenset({"TriggeredScaleUp", "Nominated"})
#: ...and saying none is (cluster-autoscaler: no node group fits, or all are at their maximum).
_NOT_SCALING_UP: Final = frozenset({"NotTriggerScaleUp", "FailedScaleUp"})
#: How long an Unschedulable pod is held after an autoscaler said a node is coming, before its
#: events are read again.
SCALE_UP_RECHECK_S: Final = 5.0
_EVENT_LINE_BYTES: Final = 300
_EVENTS_BYTES: Final = 1500


@dataclass(frozen=True)
class Verdict:
    """What the cluster says about a pod that will not run to its end."""

    reason: str
    message: str
    retryable: bool
    #: Tolerated for a grace: the image pull's (the kubelet retries the pull itself), or a claim's missing
    #: pool or template (the agent-sandbox controller retries those, ``agent_sandbox.claims``).
    grace: bool = False
    #: The pod ran and the node stopped it (OOMKilled, Evicted, DeadlineExceeded).
    started: bool = False

    def error(self, subject: str, events: str = "") -> errors.SandboxFailed | errors.SandboxRefused:
        """The error that ends the step: :class:`~ironflow.errors.SandboxFailed` when a retry may
        help, else :class:`~ironflow.errors.SandboxRefused`."""
        if self.retryable:
            return errors.SandboxFailed(subject, self.reason, self.message, started=self.started, events=events)
        return errors.SandboxRefused(subject, self.reason, self.message, events=events)


def _statuses(status: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    found: list[Mapping[str, Any]] = []
    for key in ("initContainerStatuses", "containerStatuses"):
        found += [s for s in status.get(key) or () if isinstance(s, Mapping)]
    return found


def _pod_level(status: Mapping[str, Any]) -> Verdict | None:
    reason = status.get("reason")
    if reason in _POD_REASONS:
        return Verdict(str(reason), str(status.get("message") or ""), retryable=True, started=True)
    return None


def _terminated(state: Mapping[str, Any], name: str) -> Verdict | None:
    terminated = state.get("terminated") or {}
    if terminated.get("reason") != "OOMKilled":
        return None
    code = terminated.get("exitCode")
    said = str(terminated.get("message") or "").strip()
    message = f"container {name} was killed for using more memory than its limit (exit code {code})"
    return Verdict("OOMKilled", f"{message}: {said}" if said else message, retryable=True, started=True)


def _waiting(state: Mapping[str, Any], name: str) -> Verdict | None:
    waiting = state.get("waiting") or {}
    reason = waiting.get("reason")
    if reason not in _WAITING:
        return None
    message = str(waiting.get("message") or "").strip() or f"container {name} is waiting"
    retryable = _WAITING[reason] or (reason in GRACED and bool(_TRANSIENT_PULL.search(message)))
    return Verdict(str(reason), message, retryable=retryable, grace=reason in GRACED)


#: The scheduler's words for a pod whose PersistentVolumeClaim is not bound yet: a moment, not a failure
#: (a claim made just before its pod, as a step's environment is); the step's own timeout bounds it.
_UNBOUND_CLAIMS: Final = "pod has unbound immediate PersistentVolumeClaims"


def _unschedulable(status: Mapping[str, Any]) -> Verdict | None:
    for cond in status.get("conditions") or ():
        if (
            isinstance(cond, Mapping)
            and cond.get("type") == "PodScheduled"
            and cond.get("status") == "False"
            and cond.get("reason") == "Unschedulable"
        ):
            message = str(cond.get("message") or "no node can run the pod")
            if _UNBOUND_CLAIMS in message:  # a claim the PV controller or a provisioner is binding: wait
                return None
            return Verdict("Unschedulable", message, retryable=True)
    return None


def classify(pod: Mapping[str, Any] | None) -> Verdict | None:
    """The reason ``pod`` will not run to its end, or None while nothing says so.

    A stopped pod (evicted, past its deadline, a container OOM-killed) comes first, then a
    container that cannot start (a reason without grace before one with), then the scheduler.

    >>> classify({"status": {"phase": "Pending", "containerStatuses": [{"name": "agent", "state":
    ...     {"waiting": {"reason": "CreateContainerConfigError", "message": 'secret "t" not found'}}}]}}).retryable
    False
    >>> classify({"status": {"phase": "Running"}}) is None
    True
    """
    status = (pod or {}).get("status") or {}
    if not isinstance(status, Mapping):
        return None
    verdict = _pod_level(status)
    if verdict is not None:
        return verdict
    graced: Verdict | None = None
    for container in _statuses(status):
        state = container.get("state") or {}
        name = str(container.get("name") or "?")
        found = _terminated(state, name) or _waiting(state, name)
        if found is not None and not found.grace:
            return found
        graced = graced or found
    return graced or _unschedulable(status)


class PullGrace:
    """The verdicts of one pod's successive states, with the image-pull grace held between them.

    A graced reason ends the step only once the pod has shown one for ``grace_s`` without a
    break; any other verdict ends it at once. The caller passes the (monotonic) time.
    """

    def __init__(self, grace_s: float) -> None:
        self.grace_s = grace_s
        self.since: float | None = None
        self.scheduling_held_until: float | None = None

    def fatal(self, pod: Mapping[str, Any] | None, now: float) -> Verdict | None:
        """The verdict that ends the step now, or None (nothing wrong yet, or within a grace)."""
        verdict = classify(pod)
        unschedulable = verdict is not None and verdict.reason == "Unschedulable"
        if self.scheduling_held_until is not None:
            if not unschedulable or now >= self.scheduling_held_until:
                self.scheduling_held_until = None  # scheduled, or time to read the events again
            else:
                return None
        if verdict is None or not verdict.grace:
            self.since = None
            return verdict
        if self.since is None:
            self.since = now
        return verdict if now - self.since >= self.grace_s else None

    def hold_scheduling(self, until: float) -> None:
        """Let ``Unschedulable`` pass until ``until`` (a node is being added for the pod)."""
        self.scheduling_held_until = until

    def expires_at(self) -> float | None:
        """When the running grace or hold ends (the caller looks again then), or None."""
        pull = None if self.since is None else self.since + self.grace_s
        ends = [t for t in (pull, self.scheduling_held_until) if t is not None]
        return min(ends) if ends else None


def _when(event: Mapping[str, Any]) -> str:
    series = event.get("series") or {}
    return str(
        series.get("lastObservedTime")
        or event.get("lastTimestamp")
        or event.get("eventTime")
        or (event.get("metadata") or {}).get("creationTimestamp")
        or ""
    )


def scale_up_pending(events: Iterable[Mapping[str, Any]]) -> bool:
    """Whether a node autoscaler's newest word on the pod is that a node is coming for it.

    On a cluster that adds nodes on demand, ``Unschedulable`` is how every pod waits for
    its node: cluster-autoscaler records ``TriggeredScaleUp`` (``NotTriggerScaleUp`` when
    no node group fits), Karpenter ``Nominated``.

    >>> scale_up_pending([{"reason": "FailedScheduling"}, {"reason": "TriggeredScaleUp"}])
    True
    >>> scale_up_pending([{"reason": "FailedScheduling"}])
    False
    """
    said = [e for e in events if e.get("reason") in _SCALING_UP | _NOT_SCALING_UP]
    return bool(said) and sorted(said, key=_when)[-1].get("reason") in _SCALING_UP


def describe_events(events: Iterable[Mapping[str, Any]], *, limit: int = 5) -> str:
    """The newest ``limit`` events as ``Warning Failed: <message>`` lines, oldest first, bounded.

    >>> describe_events([{"type": "Warning", "reason": "Failed", "message": "Error: ErrImagePull", "count": 3}])
    'Warning Failed: Error: ErrImagePull (x3)'
    """
    newest = sorted(events, key=_when)[-limit:] if limit > 0 else []
    lines = []
    for event in newest:
        count = event.get("count") or (event.get("series") or {}).get("count")
        times = f" (x{count})" if isinstance(count, int) and count > 1 else ""
        message = " ".join(str(event.get("message") or event.get("note") or "").split())
        head = f"{event.get('type') or 'Normal'} {event.get('reason') or '?'}"
        lines.append(errors.truncate(f"{head}: {message}{times}", _EVENT_LINE_BYTES))
    return errors.truncate("\n".join(lines), _EVENTS_BYTES)
