"""Objects bound to their worker pod (ironflow.kube.owners through ``KubeApi.create``), the garbage
collector taking them with it, and the boot sweep (``reaper.sweep_earlier_life``), on the test
server and a real kube-apiserver with its garbage collector. The real node shows the same in
tests/k8s/real_node/test_real_node_owners.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from tests.fakes.kubecase import KubeCase

from ironflow import errors, labels
from ironflow.k8s import reaper
from ironflow.k8s.commands.pod_runs import JobRun, PodRun
from ironflow.kube import api as k8s
from ironflow.kube import owners
from ironflow.kube.owners import WorkerOwner
from ironflow.testing.kube import KubeTestServer
from ironflow.testing.polling import eventually


def plain_pod(name: str) -> dict[str, Any]:
    """A pod no ironflow label marks: the stand-in worker pod, or a pod someone else made."""
    spec = {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def prompt_cm(name: str) -> dict[str, Any]:
    meta = {"name": name, "labels": {labels.LABEL_MANAGED_BY: "ironflow", labels.LABEL_COMPONENT: "prompt-data"}}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"prompt": "hi"}}


@pytest.fixture
async def worker(kube: KubeCase) -> AsyncIterator[WorkerOwner]:
    """A real pod in the case's namespace standing in for the worker pod; the client bound to it."""
    created = await kube.api.create(k8s.PODS, kube.namespace, plain_pod("worker"))
    owner = WorkerOwner("worker", created["metadata"]["uid"], kube.namespace)
    kube.api.owner = owner
    yield owner
    kube.api.owner = None


async def meta_of(api: k8s.KubeApi, resource: k8s.Resource, ns: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = (await api.get(resource, ns, name))["metadata"]
    return found


async def gone(api: k8s.KubeApi, resource: k8s.Resource, ns: str, name: str) -> bool:
    try:
        await api.get(resource, ns, name)
    except errors.KubeNotFound:
        return True
    return False


async def test_what_the_worker_creates_in_its_namespace_is_owned_by_its_pod(
    kube: KubeCase, worker: WorkerOwner
) -> None:
    api, ns = kube.api, kube.namespace
    await api.create(k8s.PODS, ns, PodRun("step", "busybox", "true").namespace(ns).build_pod())
    await api.create(k8s.CONFIGMAPS, ns, prompt_cm("prompt"))
    await api.create(k8s.JOBS, ns, JobRun("job", "busybox", "true").namespace(ns).build_job())
    await api.create(k8s.PODS, ns, plain_pod("theirs"))
    for resource, name in ((k8s.PODS, "step"), (k8s.CONFIGMAPS, "prompt"), (k8s.JOBS, "job")):
        meta = await meta_of(api, resource, ns, name)
        assert meta["ownerReferences"] == [worker.reference()], name
        assert meta["labels"][labels.LABEL_WORKER_UID] == worker.uid
    theirs = await meta_of(api, k8s.PODS, ns, "theirs")
    assert "ownerReferences" not in theirs
    assert labels.LABEL_WORKER_UID not in (theirs.get("labels") or {})


async def test_deleting_the_worker_pod_takes_what_it_owns(kube: KubeCase, worker: WorkerOwner) -> None:
    api, ns = kube.api, kube.namespace
    await api.create(k8s.PODS, ns, PodRun("step", "busybox", "true").namespace(ns).build_pod())
    await api.create(k8s.CONFIGMAPS, ns, prompt_cm("prompt"))
    await api.create(k8s.PODS, ns, plain_pod("theirs"))
    await api.delete(k8s.PODS, ns, "worker", grace_period_seconds=0)

    async def dependents_gone() -> bool:
        return await gone(api, k8s.PODS, ns, "step") and await gone(api, k8s.CONFIGMAPS, ns, "prompt")

    await eventually(dependents_gone, limit_s=60, interval_s=0.2, what="the worker pod's dependents deleted")
    assert not await gone(api, k8s.PODS, ns, "theirs")


async def test_in_another_namespace_only_the_label_never_an_owner(kube: KubeCase) -> None:
    """Kubernetes has no cross-namespace owners: such a reference would get the object deleted at once."""
    api, ns = kube.api, kube.namespace
    api.owner = WorkerOwner("worker", "0b6e5c1a-2f4d-4e8a-9c3b-1d2e3f4a5b6c", "ironflow-elsewhere")
    try:
        await api.create(k8s.PODS, ns, PodRun("step", "busybox", "true").namespace(ns).build_pod())
    finally:
        api.owner = None
    meta = await meta_of(api, k8s.PODS, ns, "step")
    assert "ownerReferences" not in meta
    assert meta["labels"][labels.LABEL_WORKER_UID] == "0b6e5c1a-2f4d-4e8a-9c3b-1d2e3f4a5b6c"


async def test_the_boot_sweep_deletes_its_earlier_lifes_objects_only(kube: KubeCase) -> None:
    api, ns = kube.api, kube.namespace
    me = WorkerOwner("worker", "11111111-1111-4111-8111-111111111111", "ironflow")
    other = WorkerOwner("worker-2", "22222222-2222-4222-8222-222222222222", "ironflow")
    api.owner = me
    try:
        await api.create(k8s.PODS, ns, PodRun("mine", "busybox", "true").namespace(ns).build_pod())
        await api.create(k8s.CONFIGMAPS, ns, prompt_cm("mine-prompt"))
        await api.create(k8s.JOBS, ns, JobRun("mine-job", "busybox", "true").namespace(ns).build_job())
        api.owner = other
        await api.create(k8s.PODS, ns, PodRun("another-worker", "busybox", "true").namespace(ns).build_pod())
    finally:
        api.owner = None
    await api.create(k8s.PODS, ns, PodRun("outside", "busybox", "true").namespace(ns).build_pod())  # no uid

    report = await reaper.sweep_earlier_life(api, ns, me.uid)

    assert dict(report.deleted) == {"jobs": 1, "pods": 1, "configmaps": 1, "persistentvolumeclaims": 0}
    assert (
        report.line()
        == f"swept 3 objects of an earlier life in {ns}: 1 jobs, 1 pods, 1 configmaps, 0 persistentvolumeclaims"
    )

    async def mine_gone() -> bool:
        return await gone(api, k8s.PODS, ns, "mine") and await gone(api, k8s.JOBS, ns, "mine-job")

    await eventually(mine_gone, limit_s=60, interval_s=0.2, what="the earlier life's pod and Job deleted")
    assert await gone(api, k8s.CONFIGMAPS, ns, "mine-prompt")
    for kept in ("another-worker", "outside"):
        assert not await gone(api, k8s.PODS, ns, kept)


async def test_connect_reads_the_worker_pod_from_the_env(monkeypatch: pytest.MonkeyPatch) -> None:
    async with KubeTestServer() as server:
        monkeypatch.delenv(owners.ENV_NAME, raising=False)
        async with await k8s.KubeApi.connect(server.cluster_config()) as outside:
            assert outside.owner is None
        monkeypatch.setenv(owners.ENV_NAME, "worker")
        with pytest.raises(errors.ConfigError, match="IRONFLOW_WORKER_POD_UID, IRONFLOW_WORKER_POD_NAMESPACE unset"):
            await k8s.KubeApi.connect(server.cluster_config())
        monkeypatch.setenv(owners.ENV_UID, "u1")
        monkeypatch.setenv(owners.ENV_NAMESPACE, "ironflow")
        async with await k8s.KubeApi.connect(server.cluster_config()) as inside:
            assert inside.owner == WorkerOwner("worker", "u1", "ironflow")


async def test_the_boot_sweep_skips_a_kind_its_role_may_not_list(kube: KubeCase, server: KubeTestServer) -> None:
    """The default Role has no PVC verbs without environments: the sweep does the rest."""
    api, ns = kube.api, kube.namespace
    me = WorkerOwner("worker", "11111111-1111-4111-8111-111111111111", "ironflow")
    api.owner = me
    try:
        await api.create(k8s.PODS, ns, PodRun("mine", "busybox", "true").namespace(ns).build_pod())
    finally:
        api.owner = None
    server.deny("persistentvolumeclaims", "list")

    report = await reaper.sweep_earlier_life(api, ns, me.uid)

    assert dict(report.deleted) == {"jobs": 0, "pods": 1, "configmaps": 0}
