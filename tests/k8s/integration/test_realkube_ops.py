"""PodRun and JobRun on a real kube-apiserver with the real Job controller and garbage
collector (kube-controller-manager), kwok finishing the pods; and KubeEnv's own promise that
stopping leaves no process behind. Skipped when the control-plane binaries are not built.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from ironflow.k8s import reaper
from ironflow.k8s.commands import JobRun, PodRun
from ironflow.k8s.provider import K8sEphemeralProvider
from ironflow.kube import api as k8s
from ironflow.labels import LABEL_RUN_ID
from ironflow.testing.kubeenv import EXIT_CODE_LABEL, RUN_FOR_LABEL, KubeEnv, KubeEnvNotAvailable, find_bin_dir
from ironflow.testing.polling import eventually, eventually_sync


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


async def test_pod_run_succeeds_and_reads_the_log_through_the_api(kube_env: KubeEnv, ns: str, api: k8s.KubeApi) -> None:
    kube_env.set_namespace_log(ns, "test result: ok\n")
    out = (
        await PodRun("check", "rust:1.94", "cargo test").namespace(ns).label(EXIT_CODE_LABEL, "0").timeout(30).run(api)
    )
    assert out.success
    assert out.logs == "test result: ok\n"
    assert out.exit_code == 0
    await eventually_empty(api, k8s.PODS, ns)


async def test_pod_run_failure_is_a_result(kube_env: KubeEnv, ns: str, api: k8s.KubeApi) -> None:
    kube_env.set_namespace_log(ns, "FAILED\n")
    run = PodRun("check", "rust:1.94", "cargo test").namespace(ns).label(EXIT_CODE_LABEL, "101").timeout(30)
    out = await run.run(api)
    assert not out.success
    assert out.phase == "Failed"
    assert out.exit_code == 101  # as the kubelet recorded it in the container's terminated state
    await eventually_empty(api, k8s.PODS, ns)


async def test_job_run_uses_the_real_job_controller_and_gc(kube_env: KubeEnv, ns: str, api: k8s.KubeApi) -> None:
    """The Job controller makes the pod, kwok completes it, the Job succeeds; deleting the Job
    lets the garbage collector remove its pod."""
    kube_env.set_namespace_log(ns, "migrated\n")
    out = await JobRun("migrate", "postgres:16", "psql -f m.sql").namespace(ns).timeout(60).run(api)
    assert out.success
    assert "migrated" in out.logs
    await eventually_empty(api, k8s.JOBS, ns)
    await eventually_empty(api, k8s.PODS, ns)


def test_stop_leaves_no_process_running() -> None:
    """A second cluster, started and stopped: every component's process group is gone."""
    try:
        find_bin_dir()
    except KubeEnvNotAvailable as exc:
        pytest.skip(str(exc))
    env = KubeEnv(agent_sandbox=False)
    with env:
        pids = env.pids
        workdir = env.workdir
        assert len(pids) == 5
        assert all(os.path.exists(f"/proc/{pid}") for pid in pids)
    assert env.workdir is None
    assert workdir is not None
    assert not workdir.exists()
    survivors = [pid for pid in pids if os.path.exists(f"/proc/{pid}")]
    assert survivors == []
    for entry in os.listdir("/proc"):  # nothing else still points at the removed work dir
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            assert str(workdir).encode() not in cmdline, entry


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


def test_a_killed_test_process_takes_its_cluster_with_it(tmp_path: Path) -> None:
    """SIGKILL of the Python process that started the cluster: every component dies with it."""
    try:
        find_bin_dir()
    except KubeEnvNotAvailable as exc:
        pytest.skip(str(exc))
    script = tmp_path / "holder.py"
    script.write_text(
        "import time\n"
        "from ironflow.testing.kubeenv import KubeEnv\n"
        "env = KubeEnv(agent_sandbox=False)\n"
        "env.start()\n"
        "print(' '.join(map(str, env.pids)), env.workdir, flush=True)\n"
        "time.sleep(600)\n"
    )
    with subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True) as holder:
        assert holder.stdout is not None
        *pids, workdir = holder.stdout.readline().split()
        holder.kill()

    def alive() -> list[str]:
        return [p for p in pids if Path(f"/proc/{p}").exists()]

    try:
        eventually_sync(lambda: not alive(), interval_s=0.1, what=lambda: f"every component to die; alive: {alive()}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
