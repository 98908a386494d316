"""PodRun / JobRun ``run()`` on a cluster (``pod_run/tests.rs`` run cases).

Each run creates its object, waits on the namespace's shared pod watch (or the Job's
watch), reads the logs and deletes the object on every path. The tests run on every ``kube``
backend: on the real kube-apiserver the real Job controller makes a Job's pod and the real
garbage collector removes it after the Job; tests that count requests or inject faults take
``server``.
"""

from __future__ import annotations

import asyncio
import logging

import pytest
from tests.fakes.kubecase import KubeCase, names, nothing_left
from tests.fakes.kubelet_problems import PROBLEMS, Problem

from ironflow import errors, labels
from ironflow.k8s.commands.pod_runs import JobRun, PodRun
from ironflow.kube import api as k8s
from ironflow.kube import pod_status
from ironflow.labels import LABEL_RUN_ID
from ironflow.testing.k8s_validate import validate_manifest
from ironflow.testing.kube import KubeTestServer, PodScript
from ironflow.testing.polling import eventually


def check(ns: str) -> PodRun:
    return PodRun("check", "rust:1.94", "cargo test").namespace(ns).label(LABEL_RUN_ID, "run-1").timeout(5)


def migrate(ns: str) -> JobRun:
    return JobRun("migrate", "postgres:16", "psql -f m.sql").namespace(ns).timeout(5)


async def test_run_succeeded_collects_logs_and_deletes(kube: KubeCase) -> None:
    await kube.control.script_pods(PodScript(name_prefix="check", run_for=0.05, log="test result: ok\n"))
    out = await check(kube.namespace).run(kube.api)
    assert out.success
    assert out.phase == "Succeeded"
    assert out.exit_code == 0
    assert out.logs == "test result: ok\n"
    await nothing_left(kube, k8s.PODS)


async def test_run_failed_is_ok_with_success_false(kube: KubeCase) -> None:
    """A failing command is a result, not an error; the exit code is the container's."""
    script = PodScript(name_prefix="check", run_for=0.05, phase="Failed", exit_code=101, log="FAILED\n")
    await kube.control.script_pods(script)
    out = await check(kube.namespace).client(kube.api).run()
    assert not out.success
    assert out.phase == "Failed"
    assert out.exit_code == 101
    assert "FAILED" in out.logs
    await nothing_left(kube, k8s.PODS)


async def test_run_create_error_is_external(kube: KubeCase, server: KubeTestServer) -> None:
    """The create is refused: the API error comes back and nothing is left."""
    server.fail("create", "pods", status=422)
    with pytest.raises(errors.KubernetesError) as caught:
        await check(kube.namespace).run(kube.api)
    assert caught.value.status == 422
    assert server.objects(k8s.PODS, kube.namespace) == []


async def test_run_create_without_answer_still_deletes(kube: KubeCase, server: KubeTestServer) -> None:
    """A dropped connection on create may still have created the pod: it is deleted anyway."""
    server.fail("create", "pods", drop=True)
    with pytest.raises(errors.KubeUnavailable):
        await check(kube.namespace).run(kube.api)
    assert server.objects(k8s.PODS, kube.namespace) == []


async def test_run_timeout_is_external_and_deletes(kube: KubeCase) -> None:
    await kube.control.script_pods(PodScript(name_prefix="check", run_for=None))
    with pytest.raises(errors.OperationTimeout, match=r"pod 'check' did not finish within 0\.3s"):
        await check(kube.namespace).timeout(0.3).run(kube.api)
    await nothing_left(kube, k8s.PODS)


async def test_run_pod_uses_the_shared_watch_not_polling(kube: KubeCase, server: KubeTestServer) -> None:
    """One create, one list + one watch (the shared informer), one log read, one delete: no GET loop."""
    server.script_pods(PodScript(name_prefix="check", run_for=0.3, log="ok\n"))
    server.reset_requests()
    await check(kube.namespace).poll_interval(0.01).run(kube.api)
    assert server.count("get", "pods") == 0
    assert server.count("watch", "pods") == 1
    assert server.count("create", "pods") == 1
    assert server.count("delete", "pods") == 1


@pytest.mark.parametrize(
    "problem", [p for p in PROBLEMS if p.reason in ("ErrImagePull", "CreateContainerConfigError", "OOMKilled")],
    ids=lambda p: p.reason,
)  # fmt: skip
async def test_a_pod_run_whose_pod_cannot_run_ends_at_once_with_the_reason(kube: KubeCase, problem: Problem) -> None:
    """Not after its timeout: the kubelet's reason, the pod's name, retryable as the reason says; deleted."""
    task = asyncio.ensure_future(check(kube.namespace).timeout(60).image_pull_grace(0).run(kube.api))
    try:
        await eventually(lambda: names(kube, k8s.PODS), what="the run's pod")
        await kube.control.report_problem(kube.namespace, "check", problem.reason, problem.message)
        with pytest.raises(errors.IronflowError) as caught:
            await asyncio.wait_for(task, timeout=10)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    exc = caught.value
    assert exc.message.startswith("pod check ")
    assert f": {problem.reason}: " in exc.message
    assert isinstance(exc, errors.SandboxFailed if problem.retryable else errors.SandboxRefused)
    await nothing_left(kube, k8s.PODS)


async def test_cancelled_pod_run_deletes_its_pod(kube: KubeCase) -> None:
    await kube.control.script_pods(PodScript(name_prefix="check", run_for=None))
    task = asyncio.ensure_future(check(kube.namespace).run(kube.api))

    async def running() -> bool:
        pods = (await kube.api.list(k8s.PODS, kube.namespace)).items
        return any((p.get("status") or {}).get("phase") == "Running" for p in pods)

    await eventually(running, interval_s=0.05, what="the pod to run")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await nothing_left(kube, k8s.PODS)


async def jobs_and_their_pods_gone(kube: KubeCase) -> None:
    """The Job is gone at once; its pods follow (Background propagation: the garbage collector)."""
    assert await names(kube, k8s.JOBS) == []
    left: list[str] = []

    async def pods_gone() -> bool:
        left[:] = await names(kube, k8s.PODS)
        return not left

    await eventually(pods_gone, interval_s=0.1, limit_s=30, what=lambda: f"the Job's pods to go; left: {left}")


async def test_job_run_succeeded_reads_its_pod_log_and_deletes(kube: KubeCase) -> None:
    await kube.control.script_jobs(PodScript(name_prefix="migrate", run_for=0.05, log="migrated\n"))
    out = await migrate(kube.namespace).timeout(30).run(kube.api)
    assert (out.success, out.phase, out.logs) == (True, "Succeeded", "migrated\n")
    await jobs_and_their_pods_gone(kube)


async def test_job_run_failed_is_ok_with_success_false(kube: KubeCase) -> None:
    script = PodScript(name_prefix="migrate", run_for=0.05, phase="Failed", exit_code=1, log="boom\n")
    await kube.control.script_jobs(script)
    out = await migrate(kube.namespace).timeout(30).run(kube.api)
    assert (out.success, out.phase) == (False, "Failed")
    await jobs_and_their_pods_gone(kube)


async def test_job_run_timeout_names_the_job_and_deletes(kube: KubeCase) -> None:
    await kube.control.script_jobs(PodScript(name_prefix="migrate", run_for=None))
    with pytest.raises(errors.OperationTimeout, match=r"job 'migrate' did not finish within 0\.3s"):
        await migrate(kube.namespace).timeout(0.3).run(kube.api)
    await jobs_and_their_pods_gone(kube)


async def test_a_job_run_whose_pod_cannot_start_ends_at_once_and_a_stopped_pod_is_the_jobs_to_retry(
    kube: KubeCase,
) -> None:
    """A Secret the pod needs is missing: the run ends within seconds, naming the Job's pod and the
    reason, and the Job goes. (An OOM-killed pod is the Job's backoffLimit's, not ours.)"""
    problem = next(p for p in PROBLEMS if p.reason == "CreateContainerConfigError")
    await kube.control.script_jobs(PodScript(name_prefix="migrate", start_after=3600))  # Pending: the kubelet's turn
    task = asyncio.ensure_future(migrate(kube.namespace).timeout(60).image_pull_grace(0).run(kube.api))
    try:

        async def job_pod() -> str | None:
            pods = await kube.api.list(k8s.PODS, kube.namespace, label_selector="job-name=migrate")
            return str(pods.items[0]["metadata"]["name"]) if pods.items else None

        pod = await eventually(job_pod, what="the Job's pod")
        await kube.control.report_problem(kube.namespace, pod, problem.reason, problem.message)
        with pytest.raises(errors.SandboxRefused) as caught:
            await asyncio.wait_for(task, timeout=10)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert caught.value.message.startswith(f"pod {pod} cannot start: CreateContainerConfigError: ")
    await jobs_and_their_pods_gone(kube)


async def test_job_run_without_logs_returns_empty_logs(kube: KubeCase, server: KubeTestServer) -> None:
    """Logs are best effort: a refused log read still gives the outcome."""
    server.deny("pods/log", "get")
    server.script_jobs(PodScript(name_prefix="migrate", run_for=0.05, log="hidden\n"))
    out = await migrate(kube.namespace).run(kube.api)
    assert out.success
    assert out.logs == ""


def test_the_pod_predicates_runs_wait_with_take_a_pod_without_status() -> None:
    """PodRun and the step runner wait with the informer's predicates: a ``status: null`` is not an end."""
    for pod in ({}, {"status": None}, {"status": {"phase": None}}, None):
        assert not pod_status.pod_finished(pod)
        assert not pod_status.pod_started(pod)
    assert pod_status.pod_started({"status": {"phase": "Running"}})
    assert not pod_status.pod_finished({"status": {"phase": "Running"}})
    assert pod_status.pod_finished({"status": {"phase": "Failed"}})


def test_rendered_pod_and_job_validate_strictly() -> None:
    """Every PodRun / JobRun shape we render is a valid object for Kubernetes 1.30 and 1.37."""
    from ironflow.k8s.commands.specs import ResourceSpec, SecuritySpec

    pod = (
        PodRun("check", "rust:1.94", "cargo test")
        .pvc("src", "/work")
        .pvc("cache", "/cache")
        .working_dir("/work")
        .node_selector("pool", "ci")
        .image_pull_secret("regcred")
        .resources(ResourceSpec("500m", "2", "256Mi", "1Gi"))
        .security(SecuritySpec(1000, 1000, 2000))
        .allow_privilege_escalation(False)
        .automount_service_account_token(False)
        .active_deadline_seconds(60)
        .runtime_class("gvisor")
        .env("CI", "1")
        .label(LABEL_RUN_ID, "r")
    )
    validate_manifest(pod.build_pod(now=0))
    validate_manifest(PodRun("bare", "busybox", "true").build_pod(now=0))
    job = (
        JobRun("migrate", "postgres:16", "x")
        .pvc("data", "/data")
        .backoff_limit(2)
        .allow_privilege_escalation(False)
        .automount_service_account_token(False)
        .active_deadline_seconds(30)
        .label(labels.LABEL_ROOT_RUN_ID, "root")
    )
    validate_manifest(job.build_job(now=0))
    validate_manifest(JobRun("bare", "busybox", "true").build_job(now=0))


async def test_a_pod_runs_progress_is_reported_as_it_changes(kube: KubeCase, caplog: pytest.LogCaptureFixture) -> None:
    """The CLI's progress line: each change of where the pod is, once, in order."""
    caplog.set_level(logging.INFO, logger="ironflow.progress")
    await kube.control.script_pods(PodScript(name_prefix="check", run_for=0.2, log="ok\n"))
    await check(kube.namespace).run(kube.api)
    said = [r.getMessage() for r in caplog.records if r.name == "ironflow.progress"]
    assert said, "no progress reported"
    assert said[-1] == "pod check: finished (Succeeded)"
    assert len(said) == len(set(said))  # each change once
    assert any(line.startswith("pod check: running") for line in said)
