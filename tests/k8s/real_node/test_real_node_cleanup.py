"""ironflow's deletions on the real node: a step's retry deletes its previous attempt's running pod
before it starts, ``release_run`` deletes a run's running agent pod, ``PodRun`` pod and ``JobRun``
Job (the real garbage collector taking the Job's pod), and the reaper deletes an expired running
pod; each pod is gone from the API *and* its container's process from the node (containerd has no
task of it left), while the pods of other runs and live pods keep running. A step pod whose PID 1
ignores SIGTERM (as a real agent pod's ``sh -c`` does) is gone in seconds, not after Kubernetes'
default 30 s grace.

The kwok tier (``test_k8s_runtime_steps.py``, ``test_k8s_runtime_reaper.py``,
``test_realkube_controllers.py``) checks the same selections on pods no kubelet runs. Skipped when
the node's binaries or the runner image are missing.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from tests.fakes import node_containers

from ironflow import labels
from ironflow.k8s import reaper
from ironflow.k8s.commands import pod_runs
from ironflow.k8s.commands.pod_runs import JobRun, PodRun
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.k8s.settings import K8sResources
from ironflow.k8s.step_runs import StepRunner
from ironflow.kube import api as k8s
from ironflow.steps import AgentConfig
from ironflow.testing.polling import eventually
from ironflow.testing.realnode import RealNodeEnv

#: The first test of a session also waits for the node to start (up to ~100 s on a loaded machine).
pytestmark = pytest.mark.timeout(480)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "claude"
SCRIPTS = "/etc/ironflow-test"
#: Runs until deleted, and ends at once on the kubelet's SIGTERM (a PID 1 without a handler
#: would ignore it and hold the deletion for the whole grace period).
HOLD = "trap 'exit 0' TERM; sleep 600 & wait"
#: Runs until killed: no handler, so SIGTERM does nothing to the pod's PID 1 (dash) or its child.
DEAF = "sleep 600"
#: How long a deleted running step pod may take to be gone: a behaviour bound, generous for a
#: loaded machine, and well under the 30 s a pod without ironflow's grace takes.
GONE_WITHIN_S = 15.0
SMALL = K8sResources(
    cpu_request="50m", memory_request="64Mi", ephemeral_storage_request=None, ephemeral_storage_limit=None
)
SETTLE_S = 90.0


def provider(ns: str, image: str) -> K8sEphemeralProvider:
    """Sandboxed steps whose agent is ``sh -p <prompt>``: the prompt names a script of ``scripts``."""
    p = K8sEphemeralProvider.sandboxed(image).namespace(ns).image_pull_policy("Never").timeout(180)
    # A running agent pod's PID 1 is ``sh -c`` (dash runs the CLI as its child and has no TERM
    # handler): the kubelet's SIGTERM is ignored, its SIGKILL ends it after the step pods' grace.
    p = p.previous_attempt_timeout(SETTLE_S)
    return p.resources(SMALL).read_only_config_map("scripts", SCRIPTS).claude_path("sh")


async def add_scripts(api: k8s.KubeApi, ns: str) -> None:
    data = {
        "hold.sh": HOLD + "\n",
        "deaf.sh": DEAF + "\n",
        "answer.sh": f"cat {SCRIPTS}/answer.json\n",
        "answer.json": (FIXTURES / "json_text.out").read_text(),
    }
    await api.create(
        k8s.CONFIGMAPS, ns, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "scripts"}, "data": data}
    )


async def running(api: k8s.KubeApi, ns: str, name: str) -> str:
    """Wait until pod ``name`` runs; its container's id on the node."""

    async def started() -> str | None:
        return node_containers.running_container(await api.get(k8s.PODS, ns, name))

    found: str = await eventually(started, limit_s=SETTLE_S, interval_s=0.2, what=f"pod {name} to run")
    return found


async def pods_of(api: k8s.KubeApi, ns: str, selector: str) -> list[str]:
    return [p["metadata"]["name"] for p in (await api.list(k8s.PODS, ns, label_selector=selector)).items]


async def agent_pod(api: k8s.KubeApi, p: K8sEphemeralProvider, config: AgentConfig) -> str:
    """Create the agent pod the product renders for ``config`` (as a crashed worker left it)."""
    (pod,) = p.manifests(config)
    await api.create(k8s.PODS, pod["metadata"]["namespace"], pod)
    return str(pod["metadata"]["name"])


async def test_a_retry_deletes_the_previous_attempts_running_pod_before_it_runs(
    real_node: RealNodeEnv, node_ns: str, node_api: k8s.KubeApi, need_image: dict[str, str]
) -> None:
    await add_scripts(node_api, node_ns)
    p = provider(node_ns, need_image["runner"])
    run = str(uuid.uuid4())
    old = await agent_pod(node_api, p, AgentConfig(f"{SCRIPTS}/hold.sh").scoped(run, "greet"))
    other = await agent_pod(node_api, p, AgentConfig(f"{SCRIPTS}/hold.sh").scoped(run, "other"))
    old_container, other_container = await running(node_api, node_ns, old), await running(node_api, node_ns, other)

    seen_at_create: list[list[str]] = []
    create = node_api.create

    async def spy(resource: k8s.Resource, namespace: str | None, body: Mapping[str, Any]) -> dict[str, Any]:
        if resource == k8s.PODS:  # which pods of the step exist as its new pod is created
            seen_at_create.append(await pods_of(node_api, node_ns, f"{labels.LABEL_STEP}=greet"))
        return await create(resource, namespace, body)

    node_api.create = spy  # type: ignore[method-assign]
    result = await StepRunner.of(p.settings, api=node_api, worker_env={}).run(
        AgentConfig(f"{SCRIPTS}/answer.sh").scoped(run, "greet")
    )
    node_api.create = create  # type: ignore[method-assign]
    assert seen_at_create == [[]], "the new attempt was created while the previous one was still there"

    assert result.text, result

    async def only_the_other_step() -> bool:
        return await pods_of(node_api, node_ns, f"{labels.LABEL_RUN_ID}={run}") == [other]

    await eventually(only_the_other_step, limit_s=SETTLE_S, interval_s=0.2, what="only the other step's pod left")
    await node_containers.gone_from_the_node(real_node, {old_container})
    assert other_container in await node_containers.tasks(real_node), "another step's pod was touched"


async def test_release_run_deletes_the_runs_running_pods_and_job_from_the_node(
    real_node: RealNodeEnv, node_ns: str, node_api: k8s.KubeApi, need_image: dict[str, str]
) -> None:
    await add_scripts(node_api, node_ns)
    image = need_image["runner"]
    p = provider(node_ns, image)
    run, other_run = str(uuid.uuid4()), str(uuid.uuid4())
    agent = await agent_pod(node_api, p, AgentConfig(f"{SCRIPTS}/hold.sh").scoped(run, "a"))
    other = await agent_pod(node_api, p, AgentConfig(f"{SCRIPTS}/hold.sh").scoped(other_run, "a"))
    held = (
        PodRun("held", image, HOLD).namespace(node_ns).restricted(read_only_root=True).label(labels.LABEL_RUN_ID, run)
    )
    await node_api.create(k8s.PODS, node_ns, held.build_pod())
    job = JobRun("held-job", image, HOLD).namespace(node_ns).restricted(read_only_root=True)
    await node_api.create(k8s.JOBS, node_ns, job.label(labels.LABEL_RUN_ID, run).build_job())

    async def job_pod() -> str | None:
        return next(iter(await pods_of(node_api, node_ns, "job-name=held-job")), None)

    job_pod_name: str = await eventually(job_pod, limit_s=SETTLE_S, interval_s=0.2, what="the Job's pod")
    containers = {await running(node_api, node_ns, name) for name in (agent, "held", job_pod_name)}
    other_container = await running(node_api, node_ns, other)

    deleted = await StepRunner.of(p.settings, api=node_api, worker_env={}).release_run(run)

    assert deleted >= 2
    assert (await node_api.list(k8s.JOBS, node_ns)).items == []

    async def only_the_other_run() -> bool:
        return [o["metadata"]["name"] for o in (await node_api.list(k8s.PODS, node_ns)).items] == [other]

    await eventually(only_the_other_run, limit_s=SETTLE_S, interval_s=0.2, what="only the other run's pod left")
    await node_containers.gone_from_the_node(real_node, containers)
    assert other_container in await node_containers.tasks(real_node), "another run's pod was touched"


async def test_the_reaper_deletes_an_expired_running_pod_from_the_node_and_keeps_a_live_one(
    real_node: RealNodeEnv, node_ns: str, node_api: k8s.KubeApi, need_image: dict[str, str]
) -> None:
    image = need_image["runner"]

    def held(name: str) -> PodRun:
        return PodRun(name, image, HOLD).namespace(node_ns).restricted(read_only_root=True)

    await node_api.create(k8s.PODS, node_ns, held("expired").build_pod(now=int(time.time()) - 100_000))
    await node_api.create(k8s.PODS, node_ns, held("live").build_pod())
    expired, live = await running(node_api, node_ns, "expired"), await running(node_api, node_ns, "live")

    report = await reaper.reap_namespace(node_api, node_ns)

    assert report.pods == ("expired",)
    await node_containers.gone_from_the_node(real_node, {expired})

    async def only_the_live_pod() -> bool:
        return await pods_of(node_api, node_ns, f"{labels.LABEL_MANAGED_BY}={labels.MANAGED_BY_VALUE}") == ["live"]

    await eventually(only_the_live_pod, limit_s=SETTLE_S, interval_s=0.2, what="only the live pod left")
    assert live in await node_containers.tasks(real_node)


@pytest.mark.parametrize("runtime", ["runc", "gvisor"])
async def test_a_running_step_pod_deaf_to_sigterm_is_gone_in_seconds_not_the_default_grace(
    real_node: RealNodeEnv, node_ns: str, node_api: k8s.KubeApi, need_image: dict[str, str], runtime: str
) -> None:
    """``release_run`` deletes a running agent pod and a running ``exec`` pod, each of whose PID 1
    ignores SIGTERM: both pods leave the API (and their tasks the node) within
    :data:`GONE_WITHIN_S`. With the default grace (30 s) each took the whole of it: the step
    pods' own ``terminationGracePeriodSeconds`` is what ends them (the kubelet's SIGKILL)."""
    await add_scripts(node_api, node_ns)
    image = need_image["runner"]
    p = provider(node_ns, image)
    if runtime == "gvisor":
        p = p.runtime_class("gvisor")
    run = str(uuid.uuid4())
    agent = await agent_pod(node_api, p, AgentConfig(f"{SCRIPTS}/deaf.sh").scoped(run, "a"))
    exec_run = pod_runs.exec_pod_run(p.settings, ["sh", "-c", DEAF], timeout_s=300, now_ms=0, rand32=7)
    exec_pod = exec_run.label(labels.LABEL_RUN_ID, run).build_pod()
    await node_api.create(k8s.PODS, node_ns, exec_pod)
    names = (agent, exec_pod["metadata"]["name"])
    containers = set(await asyncio.gather(*(running(node_api, node_ns, name) for name in names)))

    started = time.monotonic()
    assert await StepRunner.of(p.settings, api=node_api, worker_env={}).release_run(run) == 2

    async def gone() -> bool:
        return not (await node_api.list(k8s.PODS, node_ns)).items

    await eventually(gone, limit_s=GONE_WITHIN_S, interval_s=0.2, what=f"{names} gone within {GONE_WITHIN_S} s")
    took = time.monotonic() - started  # release_run waits for its pods: the bound counts its call
    print(f"{runtime}: deleted running step pods gone after {took:.1f}s")
    assert took < GONE_WITHIN_S, f"the running step pods took {took:.1f} s to go (a SIGTERM grace waited out)"
    await node_containers.gone_from_the_node(real_node, containers)
