"""Contract: graceful deletion, finalizers, ownerReference cascades, pod phases, deadlines, Jobs."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from ironflow import errors
from ironflow.kube import api
from ironflow.testing.kube import KubeTestServer, PodScript
from ironflow.testing.polling import eventually


async def _gone(kube: Any, resource: api.Resource, name: str) -> bool:
    async def absent() -> bool:
        try:
            await kube.api.get(resource, kube.namespace, name)
        except errors.KubeNotFound:
            return True
        return False

    return bool(await eventually(absent, what=f"{resource.plural}/{name} to be gone"))


async def _when(
    kube: Any, resource: api.Resource, name: str, holds: Callable[[dict[str, Any]], object], what: str
) -> dict[str, Any]:
    """The object once ``holds`` is true of it; on timeout the failure shows its last status."""
    last: dict[str, Any] = {}

    async def matching() -> bool:
        nonlocal last
        last = await kube.api.get(resource, kube.namespace, name)
        return bool(holds(last))

    await eventually(matching, what=lambda: f"{what}; status: {last.get('status')}")
    return last


def _job(name: str, *, deadline: int | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "backoffLimit": 0,
        "template": {"spec": {"containers": [{"name": "c", "image": "busybox:1.36"}], "restartPolicy": "Never"}},
    }
    if deadline is not None:
        spec["activeDeadlineSeconds"] = deadline
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": spec}


def _owned_pod(make_pod: Any, name: str, owner: dict[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = make_pod(name)
    body["metadata"]["ownerReferences"] = [
        {
            "apiVersion": owner["apiVersion"],
            "kind": owner["kind"],
            "name": owner["metadata"]["name"],
            "uid": owner["metadata"]["uid"],
            "controller": True,
        }
    ]
    return body


async def test_finalizer_holds_a_deleted_object_until_removed(kube: Any) -> None:
    """Delete sets deletionTimestamp on an object with finalizers; clearing them removes it."""
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "held", "finalizers": ["test.io/hold"]}}
    await kube.api.create(api.CONFIGMAPS, kube.namespace, body)
    answer = await kube.api.delete(api.CONFIGMAPS, kube.namespace, "held")
    assert answer["metadata"]["deletionTimestamp"]
    still = await kube.api.get(api.CONFIGMAPS, kube.namespace, "held")
    assert still["metadata"]["deletionTimestamp"]
    await kube.api.patch(api.CONFIGMAPS, kube.namespace, "held", {"metadata": {"finalizers": None}})
    assert await _gone(kube, api.CONFIGMAPS, "held")


async def test_running_pod_is_deleted_gracefully() -> None:
    """A running pod deleted with a grace period stays Terminating until the kubelet stops it."""
    async with KubeTestServer(pod_termination_s=0.2) as server:
        server.create_namespace("grace")
        async with await api.KubeApi.connect(server.cluster_config()) as kube_api:
            body = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "slow"},
                "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
            }
            await kube_api.create(api.PODS, "grace", body)
            server.set_pod_phase("grace", "slow", "Running")
            answer = await kube_api.delete(api.PODS, "grace", "slow", grace_period_seconds=5)
            assert answer["metadata"]["deletionGracePeriodSeconds"] == 5
            assert (await kube_api.get(api.PODS, "grace", "slow"))["metadata"]["deletionTimestamp"]
            await asyncio.sleep(0.4)
            with pytest.raises(errors.KubeNotFound):
                await kube_api.get(api.PODS, "grace", "slow")


async def test_pending_pod_is_deleted_at_once(kube: Any, make_pod: Any) -> None:
    """An unscheduled pod needs no grace period: it is gone right after delete."""
    await kube.api.create(api.PODS, kube.namespace, make_pod("pending"))
    await kube.api.delete(api.PODS, kube.namespace, "pending", grace_period_seconds=30)
    assert await _gone(kube, api.PODS, "pending")


async def test_background_propagation_deletes_a_jobs_pods(kube: Any, make_pod: Any) -> None:
    """Deleting a Job with Background propagation garbage-collects its pods."""
    job = await kube.api.create(api.JOBS, kube.namespace, _job("cascade"))
    await kube.api.create(api.PODS, kube.namespace, _owned_pod(make_pod, "cascade-p1", job))
    await kube.api.delete(api.JOBS, kube.namespace, "cascade", propagation_policy="Background")
    assert await _gone(kube, api.PODS, "cascade-p1")


async def test_a_delete_under_a_uid_precondition_keeps_its_propagation_policy(kube: Any, make_pod: Any) -> None:
    """The API server reads a delete's options from its body or else its query, never both: a delete
    with a UID precondition (a body) still propagates in the background; another UID is refused."""
    job = await kube.api.create(api.JOBS, kube.namespace, _job("guarded"))
    await kube.api.create(api.PODS, kube.namespace, _owned_pod(make_pod, "guarded-p1", job))
    stranger = "00000000-0000-4000-8000-00000000dead"
    with pytest.raises(errors.KubeConflict, match="does not match the UID in record"):
        await kube.api.delete(api.JOBS, kube.namespace, "guarded", propagation_policy="Background", uid=stranger)
    assert (await kube.api.get(api.JOBS, kube.namespace, "guarded"))["metadata"]["uid"] == job["metadata"]["uid"]
    uid = job["metadata"]["uid"]
    await kube.api.delete(api.JOBS, kube.namespace, "guarded", propagation_policy="Background", uid=uid)
    assert await _gone(kube, api.PODS, "guarded-p1")


async def test_an_object_created_after_its_owner_was_deleted_is_collected(kube: Any) -> None:
    """A controller acting on a stale read makes a dependent of an owner already gone: the
    garbage collector deletes it all the same."""
    cm = {"apiVersion": "v1", "kind": "ConfigMap"}
    owner = await kube.api.create(api.CONFIGMAPS, kube.namespace, cm | {"metadata": {"name": "owner-gone"}})
    await kube.api.delete(api.CONFIGMAPS, kube.namespace, "owner-gone")
    assert await _gone(kube, api.CONFIGMAPS, "owner-gone")
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner-gone", "uid": owner["metadata"]["uid"]}
    body = cm | {"metadata": {"name": "late-dependent", "ownerReferences": [ref]}}
    await kube.api.create(api.CONFIGMAPS, kube.namespace, body)
    assert await _gone(kube, api.CONFIGMAPS, "late-dependent")


async def _collector_has_seen_pods(kube: Any, make_pod: Any) -> None:
    """Return once the garbage collector has read every pod created so far.

    It reads pods from one watch, in order: once it collects a pod made later with an owner that
    never existed, it knows the earlier ones. A dependent it has not read when its owner is
    deleted with orphan semantics is not orphaned: it is collected later as a late dependent.
    """
    probe = make_pod("collector-probe")
    probe["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "never-was", "uid": "00000000-0000-4000-8000-00000000dead"}
    ]
    await kube.api.create(api.PODS, kube.namespace, probe)
    assert await _gone(kube, api.PODS, "collector-probe")


async def test_job_delete_without_policy_orphans_its_pods(kube: Any, make_pod: Any) -> None:
    """batch/v1 Jobs orphan their pods by default: the pods stay, without ownerReferences."""
    job = await kube.api.create(api.JOBS, kube.namespace, _job("orphaner"))
    await kube.api.create(api.PODS, kube.namespace, _owned_pod(make_pod, "orphan-p1", job))
    await _collector_has_seen_pods(kube, make_pod)
    await kube.api.delete(api.JOBS, kube.namespace, "orphaner")
    assert await _gone(kube, api.JOBS, "orphaner")  # the orphan finalizer goes once the pods are orphaned
    pod = await kube.api.get(api.PODS, kube.namespace, "orphan-p1")
    assert not pod["metadata"].get("ownerReferences")


async def test_foreground_propagation_removes_dependents_first(kube: Any, make_pod: Any) -> None:
    """Foreground deletion removes the pods, then the Job."""
    job = await kube.api.create(api.JOBS, kube.namespace, _job("fg"))
    await kube.api.create(api.PODS, kube.namespace, _owned_pod(make_pod, "fg-p1", job))
    await kube.api.delete(api.JOBS, kube.namespace, "fg", propagation_policy="Foreground")
    assert await _gone(kube, api.PODS, "fg-p1")
    assert await _gone(kube, api.JOBS, "fg")


async def test_pod_phases_follow_the_script(kube: Any, make_pod: Any) -> None:
    """set_pod_phase moves a pod Pending -> Running -> Succeeded with container statuses."""
    await kube.api.create(api.PODS, kube.namespace, make_pod("phases"))
    await kube.control.set_pod_phase(kube.namespace, "phases", "Running")
    running = await kube.api.get(api.PODS, kube.namespace, "phases")
    assert running["status"]["phase"] == "Running"
    assert running["status"]["startTime"]
    await kube.control.set_pod_phase(kube.namespace, "phases", "Failed", exit_code=3)
    failed = await kube.api.get(api.PODS, kube.namespace, "phases")
    assert failed["status"]["phase"] == "Failed"
    assert failed["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 3


async def test_scripted_pods_run_and_succeed_on_their_own(kube: Any, make_pod: Any) -> None:
    """A pod script runs every matching new pod: Running with its log, then Succeeded."""
    await kube.control.script_pods(PodScript(name_prefix="auto-", run_for=0.05, log="done\n"))
    await kube.api.create(api.PODS, kube.namespace, make_pod("auto-1"))
    await kube.api.create(api.PODS, kube.namespace, make_pod("manual-1"))

    async def succeeded() -> bool:
        pod = await kube.api.get(api.PODS, kube.namespace, "auto-1")
        return bool(pod["status"]["phase"] == "Succeeded")

    await eventually(succeeded, what="pod auto-1 to succeed")
    assert await kube.api.read_log(kube.namespace, "auto-1") == "done\n"
    assert (await kube.api.get(api.PODS, kube.namespace, "manual-1"))["status"]["phase"] == "Pending"


async def test_active_deadline_fails_a_running_pod(kube: Any, make_pod: Any) -> None:
    """Past activeDeadlineSeconds a running pod is Failed with reason DeadlineExceeded, and an Event says so."""
    server = kube.need_server()
    server.script_pods(name_prefix="slow-", run_for=None)
    await kube.api.create(api.PODS, kube.namespace, make_pod("slow-1", active_deadline_seconds=1))
    pod = await _when(kube, api.PODS, "slow-1", lambda p: p["status"]["phase"] == "Failed", "pod slow-1 to fail")
    assert pod["status"]["reason"] == "DeadlineExceeded"
    events = await kube.api.list(api.EVENTS, kube.namespace, field_selector="involvedObject.name=slow-1")
    assert [e["reason"] for e in events.items] == ["DeadlineExceeded"]


async def test_run_job_creates_an_owned_pod_and_completes_the_job(kube: Any) -> None:
    """run_job plays the Job controller: an owned pod runs, and the Job becomes Complete."""
    server = kube.need_server()
    await kube.api.create(api.JOBS, kube.namespace, _job("scripted"))
    pod = server.run_job(kube.namespace, "scripted", run_for=0.02, log="job says hi\n")
    assert pod["metadata"]["ownerReferences"][0]["name"] == "scripted"
    assert pod["metadata"]["labels"]["job-name"] == "scripted"
    job = await _when(kube, api.JOBS, "scripted", lambda j: j["status"].get("succeeded"), "job scripted to succeed")
    assert job["status"]["succeeded"] == 1
    assert {c["type"] for c in job["status"]["conditions"]} >= {"Complete"}
    listed = await kube.api.list(api.PODS, kube.namespace, label_selector="job-name=scripted")
    assert len(listed.items) == 1


async def test_job_script_fails_the_job_past_its_backoff_limit(kube: Any) -> None:
    """A scripted Job whose pod fails (backoffLimit 0) gets a Failed condition."""
    server = kube.need_server()
    server.script_jobs(name_prefix="failing-", run_for=0.01, phase="Failed", exit_code=2)
    await kube.api.create(api.JOBS, kube.namespace, _job("failing-1"))
    job = await _when(kube, api.JOBS, "failing-1", lambda j: j["status"].get("conditions"), "job failing-1 to end")
    failed = [c for c in job["status"]["conditions"] if c["type"] == "Failed"]
    assert failed
    assert failed[0]["reason"] == "BackoffLimitExceeded"


async def test_job_active_deadline_fails_the_job_and_removes_its_pods(kube: Any) -> None:
    """Past a Job's activeDeadlineSeconds the Job fails with DeadlineExceeded and its pods go."""
    server = kube.need_server()
    server.script_jobs(name_prefix="late-", run_for=None)
    await kube.api.create(api.JOBS, kube.namespace, _job("late-1", deadline=1))
    job = await _when(kube, api.JOBS, "late-1", lambda j: j["status"].get("conditions"), "job late-1 to end")
    assert [c["reason"] for c in job["status"]["conditions"] if c["type"] == "Failed"] == ["DeadlineExceeded"]

    async def no_pods() -> bool:
        return not (await kube.api.list(api.PODS, kube.namespace, label_selector="job-name=late-1")).items

    await eventually(no_pods, what="the pods of job late-1 to go")


async def test_namespace_deletion_removes_its_objects(kube: Any, make_pod: Any) -> None:
    """Deleting a namespace deletes what it holds."""
    name = f"{kube.namespace}-tmp"
    await kube.api.create(api.NAMESPACES, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    await kube.api.create(api.PODS, name, make_pod("inside"))
    await kube.api.delete(api.NAMESPACES, None, name)

    async def emptied() -> bool:
        return not (await kube.api.list(api.PODS, name)).items

    # A real namespace controller takes seconds; the test server is immediate.
    await eventually(emptied, limit_s=30, interval_s=0.02, what=f"namespace {name} to be emptied")
