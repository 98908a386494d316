"""Wait for a step's pod to end on the shared watch, reading or following its log.

Returns a :class:`PodOutcome` (phase, exit code, the kept log, timed out or not); never
creates or deletes anything (the runner does) and never polls: every wait goes through
the namespace's shared pod watch (:func:`~ironflow.k8s.pods.wait_for_pod`).

Fails fast: every state the watch shows is classified (:mod:`ironflow.kube.pod_problems`),
so a pod that will never start (a missing Secret, a bad image, no node) or that the node
stopped (evicted, OOM-killed, past its deadline) ends the wait at once with
:class:`~ironflow.errors.SandboxRefused` or :class:`~ironflow.errors.SandboxFailed`, naming
the pod, the reason, the cluster's message and the pod's recent events, instead of
looking like a slow agent until the timeout. A failing image pull is tolerated for the
grace (the kubelet retries it).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from ironflow import errors, tracing
from ironflow.k8s import pods, step_manifests
from ironflow.kube import api as kube
from ironflow.kube import object_events, pod_problems, pod_status
from ironflow.provider import LogSink

__all__ = [
    "LOG_CAP_BYTES",
    "PROGRESS",
    "PodOutcome",
    "Progress",
    "follow",
    "until_finished",
    "wait",
    "wait_for",
    "with_prefix",
]

_log = logging.getLogger(__name__)
#: Where a starting pod is, as it changes: the CLI shows these on its progress line.
PROGRESS = logging.getLogger("ironflow.progress")

#: Lines beyond this many bytes are still streamed to the sink but not kept for parsing.
LOG_CAP_BYTES: Final = 50 * 1024 * 1024
#: After the pod ended, the log stream may still hold lines: wait this long for each.
_DRAIN_LINE_S: Final = 2.0
#: The Warning event of a pod that cannot start can land just after the state that ended the
#: step: wait this long for one, so the error says what the kubelet or the scheduler said.
_WARNING_WAIT_S: Final = 1.0
#: Shortest wait between two looks at a pod (a grace that just ended is looked at once, not in a spin).
_MIN_WAIT_S: Final = 0.05


@dataclass(frozen=True)
class PodOutcome:
    """How a step's pod ended, as far as the runner needs to know."""

    phase: str = "Unknown"
    timed_out: bool = False
    logs: str = ""
    #: The agent container's exit code, when the kubelet recorded one.
    exit_code: int | None = None

    @classmethod
    def of(cls, pod: Mapping[str, Any] | None, logs: str) -> PodOutcome:
        code = pod_status.exit_code(pod, step_manifests.CONTAINER_NAME)
        return cls(phase=pod_status.phase(pod), logs=logs, exit_code=code)


_TIMED_OUT: Final = PodOutcome(phase="TimedOut", timed_out=True)


@dataclass
class Progress:
    """Where one pod was last reported to be, so that the waits of one step (until it starts,
    then until it ends) report each change once."""

    pod_name: str
    shown: str = ""

    def report(self, pod: Mapping[str, Any]) -> None:
        where = pod_status.progress(pod)
        if where != self.shown:
            self.shown = where
            PROGRESS.info("pod %s: %s", self.pod_name, where)


def with_prefix(exc: errors.KubernetesError, prefix: str) -> errors.KubernetesError:
    """The same error class, its message prefixed with what the runner was doing."""
    return type(exc)(f"{prefix}: {exc.message}", status=exc.status, reason=exc.reason)


async def wait_for(
    api: kube.KubeApi,
    namespace: str,
    pod_name: str,
    done: Callable[[Mapping[str, Any]], bool],
    timeout_s: float | None,
    grace: pod_problems.PullGrace,
    progress: Progress | None = None,
    *,
    uid: str | None = None,
) -> dict[str, Any] | None:
    """The pod once ``done`` holds (None after ``timeout_s``), unless the cluster says first that it
    will not get there: then the verdict's error, with the pod's recent events. ``uid``: only that
    pod of the name counts (:func:`~ironflow.k8s.pods.wait_for_pod`).

    A graced reason is looked at again when its grace ends, even if no event comes then.
    """
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    found: list[pod_problems.Verdict] = []
    regraced = False
    shown = progress or Progress(pod_name)

    def settled(pod: Mapping[str, Any]) -> bool:
        nonlocal regraced
        shown.report(pod)
        before = grace.expires_at()
        verdict = grace.fatal(pod, time.monotonic())
        if verdict is not None:
            found[:] = [verdict]
        regraced = grace.expires_at() not in (None, before)  # a grace began: wait again, until its end
        return verdict is not None or regraced or done(pod)

    while True:
        ends = [t for t in (deadline, grace.expires_at()) if t is not None]
        limit = max(_MIN_WAIT_S, min(ends) - time.monotonic()) if ends else None
        pod = await pods.wait_for_pod(api, namespace, pod_name, settled, limit, uid=uid)
        if found:
            verdict = found.pop()
            if verdict.reason == "Unschedulable" and await _node_coming(api, namespace, pod_name):
                grace.hold_scheduling(time.monotonic() + pod_problems.SCALE_UP_RECHECK_S)
                continue
            raise await _failure(api, namespace, pod_name, verdict)
        if pod is not None and not regraced:
            return pod
        if deadline is not None and time.monotonic() >= deadline:
            return None


async def _node_coming(api: kube.KubeApi, namespace: str, pod_name: str) -> bool:
    """Whether a node autoscaler says it is adding a node for the pod (then it is waited for)."""
    coming = pod_problems.scale_up_pending(await object_events.events_of(api, namespace, "Pod", pod_name))
    if coming:
        _log.info("pod %s/%s is unschedulable while a node is added for it: waiting", namespace, pod_name)
    return coming


async def _failure(
    api: kube.KubeApi, namespace: str, pod_name: str, verdict: pod_problems.Verdict
) -> errors.SandboxFailed | errors.SandboxRefused:
    """The error that ends the step, with what the cluster said about the pod."""
    # A pod the node stopped has said all it will; one that cannot start gets its Warning soon.
    wait_s = 0.0 if verdict.started else _WARNING_WAIT_S
    said = await object_events.describe_recent(api, namespace, "Pod", pod_name, await_warning_s=wait_s)
    _log.warning("pod %s/%s: %s: %s", namespace, pod_name, verdict.reason, verdict.message)
    return verdict.error(f"pod {pod_name}", said)


async def wait(
    api: kube.KubeApi,
    namespace: str,
    pod_name: str,
    timeout_s: float,
    *,
    image_pull_grace_s: float = pod_problems.DEFAULT_IMAGE_PULL_GRACE_S,
) -> PodOutcome:
    """Wait for Succeeded/Failed (bounded by the timeout, ended early by a fatal verdict), then read the log."""
    grace = pod_problems.PullGrace(image_pull_grace_s)
    try:
        pod = await until_finished(api, namespace, pod_name, timeout_s, grace)
    except errors.KubernetesError as exc:
        raise with_prefix(exc, "failed waiting for pod completion") from exc
    if pod is None:
        return _TIMED_OUT
    return PodOutcome.of(pod, await pods.read_log_quietly(api, namespace, pod_name))


async def until_finished(
    api: kube.KubeApi, namespace: str, pod_name: str, timeout_s: float, grace: pod_problems.PullGrace
) -> dict[str, Any] | None:
    """The pod once it has ended (None after ``timeout_s``), as :func:`wait_for` fails fast, in
    two spans: ``ironflow.pod.ready`` until it runs, ``ironflow.pod.run`` until it ends."""
    progress = Progress(pod_name)
    deadline = time.monotonic() + timeout_s
    pod = await _until_started(api, namespace, pod_name, timeout_s, grace, progress)
    if pod is None or pod_status.pod_finished(pod):
        return pod
    with tracing.span("ironflow.pod.run", pod=pod_name):
        left = max(0.0, deadline - time.monotonic())
        return await wait_for(api, namespace, pod_name, pod_status.pod_finished, left, grace, progress)


async def _until_started(
    api: kube.KubeApi,
    namespace: str,
    pod_name: str,
    timeout_s: float | None,
    grace: pod_problems.PullGrace,
    progress: Progress,
) -> dict[str, Any] | None:
    """The pod once it runs (or has ended), in the span ``ironflow.pod.ready`` with its node."""
    with tracing.span("ironflow.pod.ready", pod=pod_name) as span:
        pod = await wait_for(api, namespace, pod_name, pod_status.pod_started, timeout_s, grace, progress)
        if pod is not None:
            span.set(node=(pod.get("spec") or {}).get("nodeName"))
        return pod


async def follow(
    api: kube.KubeApi,
    namespace: str,
    pod_name: str,
    sink: LogSink,
    timeout_s: float,
    *,
    image_pull_grace_s: float = pod_problems.DEFAULT_IMAGE_PULL_GRACE_S,
) -> PodOutcome:
    """Follow the log to ``sink`` while the pod runs; the outcome holds the kept lines."""
    grace = pod_problems.PullGrace(image_pull_grace_s)
    progress = Progress(pod_name)
    try:
        pod = await _until_started(api, namespace, pod_name, timeout_s, grace, progress)
    except errors.KubernetesError as exc:
        raise with_prefix(exc, "failed waiting for pod to start") from exc
    if pod is None:
        return _TIMED_OUT
    if pod_status.pod_finished(pod):
        logs = await pods.read_log_quietly(api, namespace, pod_name)
        for line in logs.splitlines():
            sink.log("stdout", line)
        return PodOutcome.of(pod, logs)
    try:
        with tracing.span("ironflow.pod.run", pod=pod_name):
            return await _Follower(api, namespace, pod_name, sink, timeout_s, grace, progress).run()
    except errors.KubernetesError as exc:
        raise with_prefix(exc, "failed waiting for pod completion") from exc


class _Follower:
    """One running pod: a log pump and the end of the pod, raced against the timeout."""

    def __init__(
        self,
        api: kube.KubeApi,
        namespace: str,
        pod_name: str,
        sink: LogSink,
        timeout_s: float,
        grace: pod_problems.PullGrace,
        progress: Progress,
    ) -> None:
        self.api, self.namespace, self.pod_name, self.sink, self.timeout_s = api, namespace, pod_name, sink, timeout_s
        self.grace, self.progress = grace, progress
        self.kept: list[str] = []
        self.kept_bytes = 0
        self.count = 0

    async def _pump(self) -> None:
        async for line in self.api.follow_log(self.namespace, self.pod_name):
            self.sink.log("stdout", line)
            self.count += 1
            if self.kept_bytes + len(line) + 1 <= LOG_CAP_BYTES:
                self.kept.append(line)
                self.kept_bytes += len(line) + 1

    def _kept(self, pod: Mapping[str, Any] | None) -> PodOutcome:
        return PodOutcome.of(pod, "\n".join(self.kept))

    async def run(self) -> PodOutcome:
        pump = asyncio.ensure_future(self._pump())
        end = asyncio.ensure_future(
            wait_for(self.api, self.namespace, self.pod_name, pod_status.pod_finished, None, self.grace, self.progress)
        )
        try:
            done, _ = await asyncio.wait({pump, end}, timeout=self.timeout_s, return_when="FIRST_COMPLETED")
            if not done:
                return PodOutcome(phase="TimedOut", timed_out=True, logs="\n".join(self.kept))
            if end.done() and end.exception() is not None:
                end.result()  # the cluster stopped the pod (or the watch failed): at once, no draining
            if pump.done() and pump.exception() is not None and not end.done():
                return await self._read_at_end(pump, end)
            if not end.done():
                # The stream ended (the container exited): the phase follows within moments.
                try:
                    return self._kept(await asyncio.wait_for(end, timeout=self.timeout_s))
                except TimeoutError:
                    return PodOutcome(phase="TimedOut", timed_out=True, logs="\n".join(self.kept))
            await self._drain(pump)
            return self._kept(end.result())
        finally:
            for task in (pump, end):
                task.cancel()
            await asyncio.gather(pump, end, return_exceptions=True)

    async def _read_at_end(self, pump: asyncio.Future[None], end: asyncio.Future[Any]) -> PodOutcome:
        """The stream could not be opened or broke: wait for the end, then read in one go."""
        _log.warning("log stream of pod %s failed (%s); reading the log at the end", self.pod_name, pump.exception())
        try:
            pod = await asyncio.wait_for(end, timeout=self.timeout_s)
        except TimeoutError:
            return _TIMED_OUT
        logs = await pods.read_log_quietly(self.api, self.namespace, self.pod_name)
        for line in logs.splitlines()[self.count :]:
            self.sink.log("stdout", line)
        return PodOutcome.of(pod, logs)

    async def _drain(self, pump: asyncio.Future[None]) -> None:
        """The pod ended: take what is left of the stream, as long as lines keep coming."""
        while not pump.done():
            before = self.count
            await asyncio.wait({pump}, timeout=_DRAIN_LINE_S)
            if self.count == before:
                break
