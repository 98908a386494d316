"""Running a rendered ``PodRun`` / ``JobRun`` manifest: create, wait on a watch, read the logs, delete (I/O).

:mod:`ironflow.k8s.commands.pod_runs` renders the object (pure) and its ``run()`` hands the manifest
here; this module never imports the values. Invariant: once the create request has left,
the object is deleted on every path (a failed command, a timeout, an API error, a
cancellation); a lost create answer counts as "maybe created". A command that fails is a
result with ``success=False``; only the API or the clock failing is an error.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ironflow import errors, labels, tracing
from ironflow.k8s import pod_wait, pods
from ironflow.kube import api as kube
from ironflow.kube import informer, pod_problems, pod_status

__all__ = ["PodRunOutput", "StdinFeed", "run_job", "run_pod"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PodRunOutput:
    """How the command ended: ``phase`` is ``Succeeded`` or ``Failed``; logs are best effort.

    ``exit_code`` is the container's, when the kubelet recorded one (None otherwise);
    ``reason`` the end reason the cluster gave with it (``Completed``, ``Error``,
    ``DeadlineExceeded``...; see :func:`ironflow.kube.pod_status.end_reason`).
    """

    success: bool
    logs: str
    phase: str
    exit_code: int | None = None
    reason: str | None = None


@dataclass(frozen=True)
class StdinFeed:
    """The exec that writes a PodRun's stdin into its pod, and the bytes (never shown)."""

    argv: tuple[str, ...]
    data: bytes = field(repr=False)


def _job_outcome(job: Mapping[str, Any]) -> str | None:
    """``Succeeded`` / ``Failed`` once the Job has a true Complete / Failed condition."""
    for cond in (job.get("status") or {}).get("conditions") or ():
        if cond.get("status") == "True" and cond.get("type") in ("Complete", "Failed"):
            return "Succeeded" if cond["type"] == "Complete" else "Failed"
    return None


def _job_ended(job: Mapping[str, Any]) -> bool:
    return _job_outcome(job) is not None


def _expiry_of(body: Mapping[str, Any]) -> str | None:
    return (body.get("metadata", {}).get("annotations") or {}).get(labels.ANNOTATION_EXPIRES_AT)


async def _create(api: kube.KubeApi, resource: kube.Resource, body: dict[str, Any]) -> dict[str, Any]:
    name, namespace = body["metadata"]["name"], body["metadata"]["namespace"]
    try:
        return await api.create(resource, namespace, body)
    except BaseException as exc:
        if pods.may_exist_after(exc):  # no answer, or no time to read it: remove it, then fail
            await pods.delete_quietly(
                api, resource, namespace, name, background=resource == kube.JOBS, expires_at=_expiry_of(body)
            )
        raise


async def _feed_stdin(
    api: kube.KubeApi, namespace: str, name: str, feed: StdinFeed, timeout_s: float, grace: pod_problems.PullGrace
) -> None:
    """Once the pod runs, write its stdin over ``pods/exec`` (returns when the command has it all,
    or has ended without reading it)."""
    timeout = f"pod '{name}' did not read its stdin within {timeout_s:g}s"
    deadline = time.monotonic() + timeout_s
    pod = await pod_wait.wait_for(api, namespace, name, pod_status.pod_started, timeout_s, grace)
    if pod is None:
        raise errors.OperationTimeout(timeout)
    if pod_status.pod_finished(pod):
        return  # it ended before reading: its end says why
    try:
        async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
            done = await api.exec(namespace, name, feed.argv, container=name, stdin=feed.data)
    except TimeoutError:
        raise errors.OperationTimeout(timeout) from None
    if done.exit_code != 0:  # e.g. the command exited unread: its own end is the result
        _log.debug("stdin writer in pod %s/%s exited %d", namespace, name, done.exit_code)


async def run_pod(
    api: kube.KubeApi,
    body: dict[str, Any],
    *,
    timeout_s: float,
    image_pull_grace_s: float = pod_problems.DEFAULT_IMAGE_PULL_GRACE_S,
    stdin: StdinFeed | None = None,
) -> PodRunOutput:
    """Create the pod ``body`` renders, wait for its end on the shared watch, read logs, delete it.

    A pod that cannot start or that the node stopped ends the wait at once with the cluster's
    reason (:func:`ironflow.k8s.pod_wait.wait_for`), as a step's pod does. ``stdin`` is written
    once the pod runs; the timeout bounds that and the run together.
    """
    name, namespace = body["metadata"]["name"], body["metadata"]["namespace"]
    with tracing.span("ironflow.sandbox", backend="k8s", namespace=namespace, pod=name) as span:
        with tracing.span("ironflow.pod.create", pod=name):
            await _create(api, kube.PODS, body)
        try:
            grace = pod_problems.PullGrace(image_pull_grace_s)
            deadline = time.monotonic() + timeout_s
            if stdin is not None:
                await _feed_stdin(api, namespace, name, stdin, timeout_s, grace)
            left = max(0.0, deadline - time.monotonic())
            pod = await pod_wait.until_finished(api, namespace, name, left, grace)
            if pod is None:
                raise errors.OperationTimeout(f"pod '{name}' did not finish within {timeout_s:g}s")
            phase = pod_status.phase(pod)
            logs = await pods.read_log_quietly(api, namespace, name)
            code = pod_status.exit_code(pod, name)  # the container is named as the pod
            reason = pod_status.end_reason(pod, name)
            span.set(phase=phase, exit_code=code)
            return PodRunOutput(success=phase == "Succeeded", logs=logs, phase=phase, exit_code=code, reason=reason)
        finally:
            await pods.delete_quietly(api, kube.PODS, namespace, name, expires_at=_expiry_of(body))


def _more_pods_than(seen: int, job: Mapping[str, Any]) -> bool:
    """Whether the Job controller has made more than ``seen`` pods, by its own counts."""
    status = job.get("status") or {}
    return sum(int(status.get(k) or 0) for k in ("active", "succeeded", "failed")) > seen


async def _pod_may_start(api: kube.KubeApi, namespace: str, pod: str, grace_s: float) -> None:
    """Return once ``pod`` runs, ends or goes; raise when it cannot start (a bad image, a missing
    Secret, no node). A pod the node stopped (OOMKilled, Evicted) is the Job's to retry."""
    try:
        await pod_wait.wait_for(api, namespace, pod, pod_status.pod_started, None, pod_problems.PullGrace(grace_s))
    except errors.SandboxFailed as exc:
        if not exc.started:
            raise
    except errors.KubeNotFound:
        pass


async def _job_pods_start(api: kube.KubeApi, namespace: str, name: str, uid: str | None, grace_s: float) -> None:
    """Watch each pod of the Job as the controller makes it; raise the first that cannot start.

    Never returns by itself: the Job's own end ends the run (the caller cancels this)."""
    jobs = informer.informer_for(api, namespace, kube.JOBS)
    watching: dict[str, asyncio.Task[None]] = {}
    try:
        while True:
            count = len(watching)
            grown = asyncio.ensure_future(jobs.wait_for(name, functools.partial(_more_pods_than, count), None, uid=uid))
            pending = {t for t in watching.values() if not t.done()}
            await asyncio.wait({grown, *pending}, return_when=asyncio.FIRST_COMPLETED)
            for task in pending:
                if task.done():
                    task.result()  # a pod that cannot start ends the run
            if not grown.done():
                grown.cancel()
                await asyncio.gather(grown, return_exceptions=True)
                continue
            grown.result()
            made = (await api.list(kube.PODS, namespace, label_selector=f"job-name={name}")).items
            for pod in made:
                pod_name = str(pod["metadata"]["name"])
                if pod_name not in watching:
                    watching[pod_name] = asyncio.ensure_future(_pod_may_start(api, namespace, pod_name, grace_s))
            if len(watching) == count:  # counted before the pod is listed: look again shortly
                await asyncio.sleep(0.1)
    finally:
        for task in watching.values():
            task.cancel()
        await asyncio.gather(*watching.values(), return_exceptions=True)


async def run_job(
    api: kube.KubeApi,
    body: dict[str, Any],
    *,
    timeout_s: float,
    image_pull_grace_s: float = pod_problems.DEFAULT_IMAGE_PULL_GRACE_S,
) -> PodRunOutput:
    """Create the Job, wait for Complete/Failed, read its newest pod's logs, delete the Job.

    A pod of the Job that cannot start ends the wait at once with the cluster's reason, as a
    ``PodRun``'s does; a pod the node stopped is left to the Job's ``backoffLimit``.
    """
    name, namespace = body["metadata"]["name"], body["metadata"]["namespace"]
    created = await _create(api, kube.JOBS, body)
    try:
        # The namespace's shared Job watch, as pods have theirs: no watch and no poll per Job.
        jobs = informer.informer_for(api, namespace, kube.JOBS)
        uid = created["metadata"].get("uid")
        ended = asyncio.ensure_future(jobs.wait_for(name, _job_ended, timeout_s, uid=uid))
        pods_start = asyncio.ensure_future(_job_pods_start(api, namespace, name, uid, image_pull_grace_s))
        try:
            await asyncio.wait({ended, pods_start}, return_when=asyncio.FIRST_COMPLETED)
            if pods_start.done() and not ended.done():
                pods_start.result()
            job = await ended
        finally:
            for task in (ended, pods_start):
                task.cancel()
            await asyncio.gather(ended, pods_start, return_exceptions=True)
        if job is None:
            raise errors.OperationTimeout(f"job '{name}' did not finish within {timeout_s:g}s")
        phase = _job_outcome(job) or "Unknown"
        logs, code, reason = "", None, None
        try:
            job_pods = (await api.list(kube.PODS, namespace, label_selector=f"job-name={name}")).items
        except errors.KubernetesError:
            job_pods = []
        if job_pods:
            # A Job retries in new pods: the newest says how it ended.
            last = max(job_pods, key=lambda pod: str(pod["metadata"].get("creationTimestamp") or ""))
            logs = await pods.read_log_quietly(api, namespace, str(last["metadata"]["name"]))
            code = pod_status.exit_code(last, name)
            reason = pod_status.end_reason(last, name)
        return PodRunOutput(success=phase == "Succeeded", logs=logs, phase=phase, exit_code=code, reason=reason)
    finally:
        await pods.delete_quietly(api, kube.JOBS, namespace, name, background=True, expires_at=_expiry_of(body))
