"""Running a ``PodRun`` or a ``JobRun``: create, wait on a watch, read the logs, delete (I/O).

The values and their pure rendering live in :mod:`ironflow.k8s.ops`; this is what their
``run()`` does. Invariant: once the create request has left, the object is deleted on
every path (a failed command, a timeout, an API error, a cancellation); a lost create
answer counts as "maybe created".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ironflow import errors, labels
from ironflow.k8s import pods
from ironflow.k8s.ops import JobRun, PodRun, PodRunOutput
from ironflow.kube import api as kube
from ironflow.kube import informer, pod_status

__all__ = ["run_job", "run_pod"]


def _job_outcome(job: Mapping[str, Any]) -> str | None:
    """``Succeeded`` / ``Failed`` once the Job has a true Complete / Failed condition."""
    for cond in (job.get("status") or {}).get("conditions") or ():
        if cond.get("status") == "True" and cond.get("type") in ("Complete", "Failed"):
            return "Succeeded" if cond["type"] == "Complete" else "Failed"
    return None


async def _create(api: kube.KubeApi, resource: kube.Resource, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    name = body["metadata"]["name"]
    try:
        return await api.create(resource, namespace, body)
    except BaseException as exc:
        if pods.may_exist_after(exc):  # no answer, or no time to read it: remove it, then fail
            await pods.delete_quietly(
                api, resource, namespace, name, background=resource == kube.JOBS, expires_at=_expiry_of(body)
            )
        raise


def _expiry_of(body: Mapping[str, Any]) -> str | None:
    return (body.get("metadata", {}).get("annotations") or {}).get(labels.ANNOTATION_EXPIRES_AT)


async def run_pod(run: PodRun, api: kube.KubeApi) -> PodRunOutput:
    s = run.settings
    body = run.build_pod()
    await _create(api, kube.PODS, s.namespace, body)
    try:
        pod = await pods.wait_for_pod(api, s.namespace, run.name, pod_status.pod_finished, s.timeout_s)
        if pod is None:
            raise errors.OperationTimeout(f"pod '{run.name}' did not finish within {s.timeout_s:g}s")
        phase = pod_status.phase(pod)
        logs = await pods.read_log_quietly(api, s.namespace, run.name)
        code = pod_status.exit_code(pod, run.name)
        return PodRunOutput(success=phase == "Succeeded", logs=logs, phase=phase, exit_code=code)
    finally:
        await pods.delete_quietly(api, kube.PODS, s.namespace, run.name, expires_at=_expiry_of(body))


def _job_ended(job: Mapping[str, Any]) -> bool:
    return _job_outcome(job) is not None


async def run_job(run: JobRun, api: kube.KubeApi) -> PodRunOutput:
    s = run.settings
    body = run.build_job()
    created = await _create(api, kube.JOBS, s.namespace, body)
    try:
        # The namespace's shared Job watch, as pods have theirs: no watch and no poll per Job.
        jobs = informer.informer_for(api, s.namespace, kube.JOBS)
        job = await jobs.wait_for(run.name, _job_ended, s.timeout_s, uid=created["metadata"].get("uid"))
        if job is None:
            raise errors.OperationTimeout(f"job '{run.name}' did not finish within {s.timeout_s:g}s")
        phase = _job_outcome(job) or "Unknown"
        logs, code = "", None
        try:
            job_pods = (await api.list(kube.PODS, s.namespace, label_selector=f"job-name={run.name}")).items
        except errors.KubernetesError:
            job_pods = []
        if job_pods:
            # A Job retries in new pods: the newest says how it ended.
            last = max(job_pods, key=lambda pod: str(pod["metadata"].get("creationTimestamp") or ""))
            logs = await pods.read_log_quietly(api, s.namespace, str(last["metadata"]["name"]))
            code = pod_status.exit_code(last, run.name)
        return PodRunOutput(success=phase == "Succeeded", logs=logs, phase=phase, exit_code=code)
    finally:
        await pods.delete_quietly(api, kube.JOBS, s.namespace, run.name, background=True, expires_at=_expiry_of(body))
