"""The orphan reaper against the Kubernetes API test server (the reference's ``tests/k8s/reaper.rs``)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from tests.fakes.kubecase import KubeCase

from ironflow import errors, labels
from ironflow.agent_sandbox import claims, schemas
from ironflow.agent_sandbox import step_render as sandbox_steps
from ironflow.agent_sandbox.claim_provider import AgentSandboxProvider
from ironflow.k8s import reaper
from ironflow.k8s.commands.pod_runs import JobRun, PodRun
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.k8s.sessions import session_volumes
from ironflow.k8s.settings import SessionVolume
from ironflow.kube import api as k8s
from ironflow.steps import AgentConfig
from ironflow.testing.kube import KubeTestServer
from ironflow.testing.polling import eventually

PAST = 1_000  # a "now" long ago: objects built then expired long ago
FUTURE_NOW = None  # built now: expire in the future


@pytest.fixture
def api(kube: KubeCase) -> k8s.KubeApi:
    return kube.api


@pytest.fixture
def ns(kube: KubeCase) -> str:
    return kube.namespace


def runner_pod(name: str, *, expires_at: int | None, component: str = labels.COMPONENT_CLAUDE_RUNNER) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "labels": {labels.LABEL_MANAGED_BY: labels.MANAGED_BY_VALUE, labels.LABEL_COMPONENT: component},
    }
    if expires_at is not None:
        meta["annotations"] = {labels.ANNOTATION_EXPIRES_AT: str(expires_at)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]},
    }


def prompt_cm(name: str, *, expires_at: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "labels": {labels.LABEL_MANAGED_BY: "ironflow", labels.LABEL_COMPONENT: labels.COMPONENT_PROMPT_DATA},
            "annotations": {labels.ANNOTATION_EXPIRES_AT: str(expires_at)},
        },
        "data": {"prompt": "x"},
    }


def env_claim(name: str, *, expires_at: int, foreign: bool = False) -> dict[str, Any]:
    component = "something-else" if foreign else labels.COMPONENT_ENVIRONMENT
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": name,
            "labels": {labels.LABEL_MANAGED_BY: "ironflow", labels.LABEL_COMPONENT: component},
            "annotations": {labels.ANNOTATION_EXPIRES_AT: str(expires_at)},
        },
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }


def names(server: KubeTestServer, resource: k8s.Resource, ns: str) -> list[str]:
    return sorted(o["metadata"]["name"] for o in server.objects(resource, ns))


async def test_k8s_reaper_selects_ironflow_pods_of_any_component(
    server: KubeTestServer, api: k8s.KubeApi, ns: str
) -> None:
    """A PodRun pod past its expiry is reaped like an agent pod; foreign pods are never touched."""
    await api.create(k8s.PODS, ns, PodRun("check", "rust:1.94", "cargo test").namespace(ns).build_pod(now=PAST))
    await api.create(k8s.PODS, ns, runner_pod("agent-old", expires_at=PAST))
    foreign = runner_pod("not-ours", expires_at=PAST)
    foreign["metadata"]["labels"] = {"app": "other"}
    await api.create(k8s.PODS, ns, foreign)
    report = await reaper.reap_namespace(api, ns)
    assert report.pods_deleted == 2
    assert sorted(report.pods) == ["agent-old", "check"]
    assert names(server, k8s.PODS, ns) == ["not-ours"]


async def test_k8s_reaper_leaves_an_object_made_again_under_the_name_it_listed(api: k8s.KubeApi, ns: str) -> None:
    """The reaper judges what it listed: a pod deleted and made again under its name since (a resumed
    session's) is another object, and stays; a delete by name alone took it (kwok's bug, stop 46)."""
    await api.create(k8s.PODS, ns, runner_pod("reused", expires_at=PAST))
    listed = (await api.list_all(k8s.PODS, ns, label_selector=labels.MANAGED_SELECTOR)).items
    await api.delete(k8s.PODS, ns, "reused", grace_period_seconds=0)
    made = await api.create(k8s.PODS, ns, runner_pod("reused", expires_at=int(time.time()) + 3600))

    assert await reaper.delete_each(api, k8s.PODS, ns, listed, background=False, what="pod") == []
    assert (await api.get(k8s.PODS, ns, "reused"))["metadata"]["uid"] == made["metadata"]["uid"]
    with pytest.raises(errors.KubeConflict, match="does not match the UID in record"):
        await api.delete(k8s.PODS, ns, "reused", uid=listed[0]["metadata"]["uid"])
    assert await reaper.delete_each(api, k8s.PODS, ns, [made], background=False, what="pod") == ["reused"]


async def test_k8s_reaper_deletes_orphans_and_keeps_live_objects(
    server: KubeTestServer, api: k8s.KubeApi, ns: str
) -> None:
    """Expired and deadline-killed objects go; live ones, unannotated ones and Job pods stay."""
    now = int(time.time())
    await api.create(k8s.PODS, ns, runner_pod("expired", expires_at=now - 10))
    await api.create(k8s.PODS, ns, runner_pod("live", expires_at=now + 3600))
    await api.create(k8s.PODS, ns, runner_pod("no-annotation", expires_at=None))
    await api.create(k8s.PODS, ns, runner_pod("killed", expires_at=now + 3600))
    server.set_pod_phase(ns, "killed", "Failed", reason="DeadlineExceeded")
    await api.create(k8s.CONFIGMAPS, ns, prompt_cm("old-prompt", expires_at=now - 10))
    await api.create(k8s.CONFIGMAPS, ns, prompt_cm("live-prompt", expires_at=now + 3600))
    await api.create(k8s.JOBS, ns, JobRun("old-job", "busybox", "true").namespace(ns).build_job(now=PAST))
    await api.create(k8s.JOBS, ns, JobRun("live-job", "busybox", "true").namespace(ns).build_job())
    job_pod = server.run_job(ns, "live-job", run_for=None)

    report = await reaper.reap_namespace(api, ns)

    assert (report.pods_deleted, report.jobs_deleted, report.configmaps_deleted) == (2, 1, 1)
    assert sorted(report.pods) == ["expired", "killed"]
    assert report.jobs == ("old-job",)
    assert report.configmaps == ("old-prompt",)
    assert names(server, k8s.PODS, ns) == sorted(["live", "no-annotation", job_pod["metadata"]["name"]])
    assert names(server, k8s.CONFIGMAPS, ns) == ["live-prompt"]
    assert names(server, k8s.JOBS, ns) == ["live-job"]


async def test_k8s_reaper_dry_run_deletes_nothing(server: KubeTestServer, api: k8s.KubeApi, ns: str) -> None:
    await api.create(k8s.PODS, ns, runner_pod("expired", expires_at=PAST))
    report = await reaper.reap_namespace(api, ns, dry_run=True)
    assert report.dry_run
    assert report.pods == ("expired",)
    assert names(server, k8s.PODS, ns) == ["expired"]
    assert server.count("delete") == 0


async def test_k8s_reaper_without_job_rights_still_reaps_pods(
    server: KubeTestServer, api: k8s.KubeApi, ns: str
) -> None:
    """403 on listing Jobs skips that pass with a warning; the pod pass still runs."""
    server.deny("jobs", "list")
    await api.create(k8s.PODS, ns, runner_pod("expired", expires_at=PAST))
    report = await reaper.reap_namespace(api, ns)
    assert report.pods_deleted == 1
    assert report.jobs_deleted == 0
    assert any("grant list and delete on jobs" in w for w in report.warnings)


async def test_k8s_reaper_fails_when_pods_cannot_be_listed(server: KubeTestServer, api: k8s.KubeApi, ns: str) -> None:
    server.fail("list", "pods", status=500)
    with pytest.raises(errors.CleanupError, match="failed to list ironflow pods") as caught:
        await reaper.reap_namespace(api, ns)
    assert caught.value.retryable


async def test_k8s_reaper_fails_when_pods_listing_is_forbidden(
    server: KubeTestServer, api: k8s.KubeApi, ns: str
) -> None:
    """Only Jobs and claims may be denied: without pod rights the reaper cannot do its job."""
    server.deny("pods", "list")
    with pytest.raises(errors.CleanupError, match="failed to list ironflow pods"):
        await reaper.reap_namespace(api, ns)


async def test_k8s_reaper_fails_on_a_job_listing_error_other_than_forbidden(
    server: KubeTestServer, api: k8s.KubeApi, ns: str
) -> None:
    server.fail("list", "jobs", status=500)
    await api.create(k8s.PODS, ns, runner_pod("expired", expires_at=PAST))
    with pytest.raises(errors.CleanupError, match="failed to list ironflow Jobs"):
        await reaper.reap_namespace(api, ns)
    assert names(server, k8s.PODS, ns) == ["expired"]  # the whole pass failed before the pods


async def test_k8s_reaper_deletes_expired_environment_claims_only(
    server: KubeTestServer, api: k8s.KubeApi, ns: str
) -> None:
    now = int(time.time())
    await api.create(k8s.PERSISTENTVOLUMECLAIMS, ns, env_claim("env-old", expires_at=now - 1))
    await api.create(k8s.PERSISTENTVOLUMECLAIMS, ns, env_claim("env-live", expires_at=now + 3600))
    await api.create(k8s.PERSISTENTVOLUMECLAIMS, ns, env_claim("other-old", expires_at=now - 1, foreign=True))
    report = await reaper.reap_namespace(api, ns)
    assert report.pvcs == ("env-old",)
    assert report.pvcs_deleted == 1
    assert names(server, k8s.PERSISTENTVOLUMECLAIMS, ns) == ["env-live", "other-old"]


async def test_k8s_reaper_deletes_an_expired_session_home_claim_left_without_its_pod(
    server: KubeTestServer, api: k8s.KubeApi, ns: str
) -> None:
    """A session's HOME claim carries the session's expiry (its pod's owner reference takes it with
    the pod; a worker that died before making the pod left it unowned)."""
    now = int(time.time())
    volume = SessionVolume("csi-hostpath")
    for session_id, expires in (("sbx-0000000000000001", now - 1), ("sbx-0000000000000002", now + 3600)):
        claim = session_volumes.home_claim(session_id, namespace=ns, volume=volume, expires_at=expires)
        await api.create(k8s.PERSISTENTVOLUMECLAIMS, ns, claim)
    report = await reaper.reap_namespace(api, ns)
    assert report.pvcs == ("sbx-0000000000000001-home",)
    assert names(server, k8s.PERSISTENTVOLUMECLAIMS, ns) == ["sbx-0000000000000002-home"]


async def test_k8s_reaper_without_claim_rights_still_reaps_pods(
    server: KubeTestServer, api: k8s.KubeApi, ns: str
) -> None:
    server.deny("persistentvolumeclaims", "list")
    await api.create(k8s.PODS, ns, runner_pod("expired", expires_at=PAST))
    report = await reaper.reap_namespace(api, ns)
    assert report.pods_deleted == 1
    assert any("persistentvolumeclaims" in w for w in report.warnings)


async def test_k8s_reaper_fails_on_a_claim_listing_error_other_than_forbidden(
    server: KubeTestServer, api: k8s.KubeApi, ns: str
) -> None:
    server.fail("list", "persistentvolumeclaims", status=503)
    with pytest.raises(errors.CleanupError, match="failed to list claims"):
        await reaper.reap_namespace(api, ns)


async def test_k8s_reaper_reads_every_page(
    server: KubeTestServer, api: k8s.KubeApi, monkeypatch: pytest.MonkeyPatch, ns: str
) -> None:
    """Listings are paginated: more objects than a page are all seen."""
    monkeypatch.setattr(reaper, "PAGE_SIZE", 2)
    for i in range(5):
        await api.create(k8s.PODS, ns, runner_pod(f"old-{i}", expires_at=PAST))
    report = await reaper.reap_namespace(api, ns)
    assert report.pods_deleted == 5
    assert server.count("list", "pods") >= 3


async def test_k8s_reaper_failed_delete_is_not_counted(server: KubeTestServer, api: k8s.KubeApi, ns: str) -> None:
    server.fail("delete", "pods", status=500)
    await api.create(k8s.PODS, ns, runner_pod("expired", expires_at=PAST))
    report = await reaper.reap_namespace(api, ns)
    assert report.pods_deleted == 0
    second = await reaper.reap_namespace(api, ns)
    assert second.pods_deleted == 1


async def test_spawn_orphan_reaper_runs_first_pass_at_once_and_stops(
    server: KubeTestServer, api: k8s.KubeApi, ns: str
) -> None:
    await api.create(k8s.PODS, ns, runner_pod("expired", expires_at=PAST))
    handle = reaper.spawn_orphan_reaper(api, ns, 3600)
    await eventually(lambda: not server.objects(k8s.PODS, ns), interval_s=0.02, what="the first pass to reap the pod")
    assert handle.running
    await handle.stop()
    assert not handle.running


async def test_spawn_orphan_reaper_logs_failures_and_keeps_going(
    server: KubeTestServer, api: k8s.KubeApi, ns: str
) -> None:
    server.fail("list", "pods", status=500)
    await api.create(k8s.PODS, ns, runner_pod("expired", expires_at=PAST))
    handle = reaper.spawn_orphan_reaper(api, ns, 0.05)
    await eventually(lambda: not server.objects(k8s.PODS, ns), interval_s=0.02, what="a later pass to reap the pod")
    await handle.stop()
    assert server.objects(k8s.PODS, ns) == []


async def test_claim_reaper_survives_an_unexpected_error_and_reaps_on_a_later_pass(
    server: KubeTestServer, api: k8s.KubeApi, ns: str
) -> None:
    """The agent-sandbox claim reaper runs on this loop: a bug in one pass (not an IronflowError) does not end it."""
    for crd in schemas.crd_documents("v1.0.3"):
        server.register_crd(crd)
    p = AgentSandboxProvider(K8sEphemeralProvider.sandboxed("img").namespace(ns))
    stale = sandbox_steps.claim_manifest(p.settings, AgentConfig("x"), name="stale", now=int(time.time()) - 10_000)
    await api.create(p.resources.claims, ns, stale)
    calls = 0

    async def connect() -> k8s.KubeApi:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("a bug in the first pass")
        return api

    handle = claims.spawn_claim_reaper(connect, p.resources.claims, ns, 0.05)
    try:
        await eventually(
            lambda: not server.objects(p.resources.claims, ns), interval_s=0.02, what="a later pass to reap the claim"
        )
        assert handle.running
    finally:
        await handle.stop()
    assert calls >= 2


def test_spawn_orphan_reaper_zero_interval_is_refused() -> None:
    with pytest.raises(errors.ConfigError, match="orphan reaper interval must be greater than zero"):
        reaper.spawn_orphan_reaper(None, ns, 0)  # type: ignore[arg-type]


async def test_reap_orphans_connects_from_a_cluster_config(server: KubeTestServer, api: k8s.KubeApi, ns: str) -> None:
    """The module-level pass needs no provider: a cluster config and a namespace."""
    await api.create(k8s.PODS, ns, runner_pod("expired", expires_at=PAST))
    report = await reaper.reap_orphans(server.cluster_config(), ns)
    assert report.pods == ("expired",)
