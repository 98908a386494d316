"""A pod that cannot start, or that the node stopped, ends the step at once with the cluster's reason.

Each test runs on every ``kube`` backend: the control writes the status and events a kubelet
writes for the reason (``tests/fakes/kubelet_problems.py``), through the API on the real
kube-apiserver. The step's timeout is 60 s; it must end within 5 s of the pod showing the
reason, with the pod's name, the reason and the kubelet's message in the error, retryable
as the reason says, its events read in, and nothing left behind. ``Unschedulable`` on the
real server comes from the real scheduler (``test_realkube_fail_fast.py``).
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from tests.fakes.kubecase import KubeCase, nothing_left
from tests.fakes.kubelet_problems import PROBLEMS, Problem

from ironflow import errors
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.k8s.step_runs import StepRunner
from ironflow.kube import api as k8s
from ironflow.kube import pod_problems
from ironflow.steps import AgentConfig
from ironflow.testing import find_leaks
from ironflow.testing.kube import KubeTestServer, PodScript
from ironflow.testing.polling import eventually

JSON_TEXT = (Path(__file__).resolve().parents[2] / "fixtures" / "claude" / "json_text.out").read_text()
IMAGE = "ghcr.io/acme/claude-runner:2.1.332-1"
STEP_TIMEOUT_S = 60
PLANTED = "sk-ant-oat01-PLANTED-" + "q" * 40
CREDENTIALS = json.dumps({"claudeAiOauth": {"accessToken": PLANTED}})
ON_THE_NODE = [p for p in PROBLEMS if p.where != "scheduler"]


def provider(ns: str, *, grace: float = 60) -> K8sEphemeralProvider:
    # Not sandboxed, so the planted credential goes into the pod itself: the error must not carry it.
    return K8sEphemeralProvider(IMAGE).namespace(ns).timeout(STEP_TIMEOUT_S).image_pull_grace(grace)


def runner(kube: KubeCase, p: K8sEphemeralProvider) -> StepRunner:
    return StepRunner.of(p.oauth_credentials(CREDENTIALS).settings, api=kube.api, worker_env={})


async def the_pod(kube: KubeCase) -> dict[str, Any]:
    async def created() -> dict[str, Any] | None:
        return next(iter((await kube.api.list(k8s.PODS, kube.namespace)).items), None)

    pod: dict[str, Any] = await eventually(created, interval_s=0.02, what="the step's pod")
    return pod


async def fails_fast(kube: KubeCase, problem: Problem, *, grace: float = 60) -> errors.IronflowError:
    """Start a step, show ``problem`` on its pod, and return the error it ended with (within 5 s)."""
    started = time.monotonic()
    task = asyncio.ensure_future(runner(kube, provider(kube.namespace, grace=grace)).run(AgentConfig("hi")))
    try:
        name = (await the_pod(kube))["metadata"]["name"]
        await kube.control.report_problem(kube.namespace, name, problem.reason, problem.message)
        shown = time.monotonic()
        with pytest.raises(errors.IronflowError) as caught:
            await asyncio.wait_for(task, timeout=STEP_TIMEOUT_S)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    ended = time.monotonic()
    assert ended - shown < 5 + grace, f"ended {ended - shown:.1f}s after the pod showed {problem.reason}"
    assert ended - started < 10 + grace, "the step waited for its timeout"
    exc = caught.value
    assert f"pod {name} " in exc.message
    assert f": {problem.reason}: " in exc.message
    assert exc.retryable is problem.retryable
    assert isinstance(exc, errors.SandboxFailed if problem.retryable else errors.SandboxRefused)
    assert find_leaks([PLANTED], exc, exc.message, repr(exc), getattr(exc, "__notes__", [])) == []
    await nothing_left(kube, k8s.PODS, k8s.CONFIGMAPS)
    return exc


@pytest.mark.parametrize("problem", ON_THE_NODE, ids=lambda p: f"{p.reason}-{len(p.message)}")
async def test_a_pod_that_cannot_run_ends_the_step_at_once(kube: KubeCase, problem: Problem) -> None:
    graced = problem.reason in ("ErrImagePull", "ImagePullBackOff")
    exc = await fails_fast(kube, problem, grace=1 if graced else 60)
    if problem.message:
        assert problem.message in exc.message
    if problem.reason == "CreateContainerConfigError":
        assert "claude-token" in exc.message  # the Secret is named
        assert "\nrecent events:\n" in exc.message
        assert f"\nWarning Failed: Error: {problem.message}" in exc.message  # the kubelet's event
    ending = "(retryable)" if problem.retryable else "(not retryable)"
    assert exc.message.splitlines()[0].endswith(ending)


async def test_the_message_reads_well(kube: KubeCase) -> None:
    exc = await fails_fast(kube, PROBLEMS[0])
    assert isinstance(exc, errors.SandboxRefused)
    first, *rest = exc.message.splitlines()
    assert (
        first
        == f'{exc.subject} cannot start: CreateContainerConfigError: secret "claude-token" not found (not retryable)'
    )
    assert exc.subject.startswith("pod claude-code-")
    # On the real server, the scheduler's FailedScheduling of the manual namespace is there too.
    assert rest[0] == "recent events:"
    assert 'Warning Failed: Error: secret "claude-token" not found' in rest


async def test_an_image_pull_that_recovers_within_the_grace_runs_the_step(kube: KubeCase) -> None:
    """ImagePullBackOff is tolerated for the grace: the kubelet's next pull works, the step succeeds."""
    task = asyncio.ensure_future(runner(kube, provider(kube.namespace, grace=30)).run(AgentConfig("hi")))
    name = (await the_pod(kube))["metadata"]["name"]
    backoff = next(p for p in PROBLEMS if p.reason == "ImagePullBackOff")
    await kube.control.report_problem(kube.namespace, name, backoff.reason, backoff.message)
    await asyncio.sleep(0.5)
    assert not task.done()
    await kube.control.set_log(kube.namespace, name, JSON_TEXT)
    await kube.control.set_pod_phase(kube.namespace, name, "Succeeded")
    result = await asyncio.wait_for(task, timeout=STEP_TIMEOUT_S)
    assert result.text == "Hello from the fake model."
    await nothing_left(kube, k8s.PODS, k8s.CONFIGMAPS)


async def test_the_grace_ends_without_a_new_event(kube: KubeCase) -> None:
    """The pod shows ErrImagePull once and nothing more happens: the step still ends when the grace does."""
    pull = next(p for p in PROBLEMS if p.reason == "ErrImagePull")
    exc = await fails_fast(kube, pull, grace=2)
    assert "Failed to pull image" in exc.message  # the kubelet's event


async def test_an_oom_killed_agent_ends_a_followed_step(kube: KubeCase) -> None:
    """With a log sink (the follow path), a container OOM-killed while running ends the step with the reason."""
    await kube.control.script_pods(PodScript(name_prefix="claude-code", run_for=None))
    lines: list[str] = []

    class Sink:
        def log(self, stream: str, line: str) -> None:
            lines.append(line)

    task = asyncio.ensure_future(runner(kube, provider(kube.namespace)).run(AgentConfig("hi"), logs=Sink()))

    async def running() -> str | None:
        pods = (await kube.api.list(k8s.PODS, kube.namespace)).items
        return next((p["metadata"]["name"] for p in pods if (p.get("status") or {}).get("phase") == "Running"), None)

    name = await eventually(running, interval_s=0.05, what="the step's pod to run")
    await kube.control.report_problem(kube.namespace, name, "OOMKilled", "")
    with pytest.raises(errors.SandboxFailed, match=r"failed: OOMKilled: container claude-code was killed") as caught:
        await asyncio.wait_for(task, timeout=10)
    assert caught.value.retryable
    await nothing_left(kube, k8s.PODS, k8s.CONFIGMAPS)


async def test_unschedulable_ends_the_step_with_the_schedulers_message(kube: KubeCase, server: KubeTestServer) -> None:
    """The test server has no scheduler: the control writes what kube-scheduler writes."""
    problem = next(p for p in PROBLEMS if p.reason == "Unschedulable")
    exc = await fails_fast(kube, problem)
    assert "0/3 nodes are available: 3 Insufficient memory" in exc.message
    assert "Warning FailedScheduling" in exc.message


SCALE_UP = "pod triggered scale-up: [{pool-a 1->2 (max: 5)}]"
NO_SCALE_UP = "pod didn't trigger scale-up: 1 max node group size reached"


async def test_an_unschedulable_pod_a_node_is_being_added_for_waits_and_runs(
    kube: KubeCase, server: KubeTestServer
) -> None:
    """On a cluster that adds nodes on demand, Unschedulable is how a pod waits for its node:
    cluster-autoscaler said TriggeredScaleUp, so the step waits, and runs once the node is there."""
    task = asyncio.ensure_future(runner(kube, provider(kube.namespace)).run(AgentConfig("hi")))
    try:
        name = (await the_pod(kube))["metadata"]["name"]
        server.record_event(
            kube.namespace, name, "Normal", "TriggeredScaleUp", "pod triggered scale-up: [{pool-a 1->2}]"
        )
        problem = next(p for p in PROBLEMS if p.reason == "Unschedulable")
        await kube.control.report_problem(kube.namespace, name, problem.reason, problem.message)
        await asyncio.sleep(1.5)
        assert not task.done()
        await kube.control.set_log(kube.namespace, name, JSON_TEXT)
        await kube.control.set_pod_phase(kube.namespace, name, "Succeeded")
        result = await asyncio.wait_for(task, timeout=STEP_TIMEOUT_S)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert result.text == "Hello from the fake model."
    await nothing_left(kube, k8s.PODS, k8s.CONFIGMAPS)


async def test_an_unschedulable_pod_no_node_can_be_added_for_ends_the_step(
    kube: KubeCase, server: KubeTestServer
) -> None:
    """The autoscaler first adds a node, then says none fits: the step ends when it next looks."""
    started = time.monotonic()
    task = asyncio.ensure_future(runner(kube, provider(kube.namespace)).run(AgentConfig("hi")))
    try:
        name = (await the_pod(kube))["metadata"]["name"]
        server.record_event(
            kube.namespace, name, "Normal", "TriggeredScaleUp", "pod triggered scale-up: [{pool-a 1->2}]"
        )
        problem = next(p for p in PROBLEMS if p.reason == "Unschedulable")
        await kube.control.report_problem(kube.namespace, name, problem.reason, problem.message)
        await asyncio.sleep(1.5)
        assert not task.done()
        server.record_event(
            kube.namespace,
            name,
            "Normal",
            "NotTriggerScaleUp",
            "pod didn't trigger scale-up: 1 max node group size reached",
        )
        with pytest.raises(errors.SandboxFailed) as caught:
            await asyncio.wait_for(task, timeout=STEP_TIMEOUT_S)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert time.monotonic() - started < 10 + pod_problems.SCALE_UP_RECHECK_S, "the step waited for its timeout"
    assert f"pod {name} cannot start: Unschedulable: " in caught.value.message
    assert "NotTriggerScaleUp: pod didn't trigger scale-up" in caught.value.message
    await nothing_left(kube, k8s.PODS, k8s.CONFIGMAPS)
