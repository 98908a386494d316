"""What only the real controllers do, on a real kube-apiserver: ``release_run`` and the reaper
delete a Job and the real garbage collector (kube-controller-manager) removes the Job's pod,
kwok keeping it Running. PodRun / JobRun themselves run on every backend in
test_k8s_runtime_ops.py. Skipped when the control-plane binaries are not built.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

from ironflow.k8s import reaper
from ironflow.k8s.commands.pod_runs import JobRun, PodRun
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.kube import api as k8s
from ironflow.labels import LABEL_RUN_ID
from ironflow.testing.kubeenv import EXIT_CODE_LABEL, RUN_FOR_LABEL, KubeEnv
from ironflow.testing.polling import eventually


@pytest.fixture
def ns(kube_env: KubeEnv) -> Iterator[str]:
    with kube_env.namespace(f"ops-{uuid.uuid4().hex[:8]}") as name:
        yield name


@pytest.fixture
async def api(kube_env: KubeEnv) -> AsyncIterator[k8s.KubeApi]:
    client = await k8s.KubeApi.connect(kube_env.cluster_config())
    try:
        yield client
    finally:
        await client.close()


async def eventually_empty(api: k8s.KubeApi, resource: k8s.Resource, ns: str, limit: float = 15.0) -> None:
    left: list[str] = []

    async def empty() -> bool:
        left[:] = [o["metadata"]["name"] for o in (await api.list(resource, ns)).items]
        return not left

    await eventually(empty, limit_s=limit, interval_s=0.2, what=lambda: f"no {resource.plural} in {ns}; left: {left}")


async def test_release_run_deletes_a_runs_job_and_the_gc_removes_its_pod(
    kube_env: KubeEnv, ns: str, api: k8s.KubeApi
) -> None:
    """A JobRun Job and a PodRun pod of one run: release_run deletes both (the Job with
    Background propagation, so the real garbage collector deletes the Job's pod)."""
    run = f"run-{uuid.uuid4().hex[:8]}"
    job = JobRun("held-job", "busybox", "sleep 1d").namespace(ns).label(LABEL_RUN_ID, run).label(EXIT_CODE_LABEL, "0")
    job = job.label(RUN_FOR_LABEL, "1h")  # the Job's pod stays Running until deleted
    await api.create(k8s.JOBS, ns, job.build_job())
    await api.create(
        k8s.PODS, ns, PodRun("held", "busybox", "sleep 1d").namespace(ns).label(LABEL_RUN_ID, run).build_pod()
    )
    selector = f"{LABEL_RUN_ID}={run}"

    async def both_pods() -> bool:  # the held pod and the Job controller's
        return len((await api.list(k8s.PODS, ns, label_selector=selector)).items) >= 2

    await eventually(both_pods, interval_s=0.2, what="the Job controller to make a pod")
    provider = K8sEphemeralProvider.sandboxed("busybox").namespace(ns).cluster(kube_env.cluster_config())
    async with provider:
        assert await provider.release_run(run) >= 1
    await eventually_empty(api, k8s.JOBS, ns)
    await eventually_empty(api, k8s.PODS, ns)


async def test_reaper_deletes_an_expired_job_and_the_gc_removes_its_pod(
    kube_env: KubeEnv, ns: str, api: k8s.KubeApi
) -> None:
    """An expired JobRun Job (its pod kept Running) is reaped; the real GC deletes the pod;
    a live Job stays."""
    old = JobRun("old-job", "busybox", "sleep 1d").namespace(ns).label(EXIT_CODE_LABEL, "0").label(RUN_FOR_LABEL, "1h")
    await api.create(k8s.JOBS, ns, old.build_job(now=int(time.time()) - 100_000))
    await api.create(k8s.JOBS, ns, JobRun("live-job", "busybox", "true").namespace(ns).build_job())

    async def old_job_has_a_pod() -> bool:
        return bool((await api.list(k8s.PODS, ns, label_selector="job-name=old-job")).items)

    async def old_job_pod_gone() -> bool:
        return not await old_job_has_a_pod()

    await eventually(old_job_has_a_pod, interval_s=0.2, what="the Job controller to make a pod")
    report = await reaper.reap_namespace(api, ns)
    assert report.jobs == ("old-job",)
    await eventually(old_job_pod_gone, interval_s=0.2, what="the garbage collector to remove the reaped Job's pod")
    assert [j["metadata"]["name"] for j in (await api.list(k8s.JOBS, ns)).items] == ["live-job"]
