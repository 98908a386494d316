"""Fail fast on the real control plane's word, on a real kube-apiserver with kwok as the node: a
step whose pod no node can take ends at once with ``Unschedulable`` and kube-scheduler's
message; a container kwok's own Stages hold waiting (a missing Secret, a bad image) or end
``OOMKilled`` ends the step at once with that reason.

Every reason also runs on every backend in ``test_k8s_runtime_fail_fast.py``, where the test
writes the kubelet's status through the API; here kwok writes it, in namespaces kwok drives.
Skipped when the control-plane binaries are not built.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from tests.fakes.kubelet_problems import PROBLEMS, Problem

from ironflow import errors
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.k8s.step_runs import StepRunner
from ironflow.kube import api as k8s
from ironflow.kube import pod_problems
from ironflow.steps import AgentConfig
from ironflow.testing.kubeenv import (
    EXIT_CODE_LABEL,
    EXIT_REASON_LABEL,
    RUN_FOR_LABEL,
    WAITING_MESSAGE,
    WAITING_REASON_LABEL,
    KubeEnv,
)
from ironflow.testing.polling import eventually


@pytest.fixture
def ns(kube_env: KubeEnv) -> Iterator[str]:
    with kube_env.namespace(f"fail-fast-{uuid.uuid4().hex[:8]}") as name:
        yield name


@pytest.fixture
async def api(kube_env: KubeEnv) -> AsyncIterator[k8s.KubeApi]:
    client = await k8s.KubeApi.connect(kube_env.cluster_config())
    try:
        yield client
    finally:
        await client.close()


async def test_a_pod_no_node_can_take_ends_the_step_with_the_schedulers_message(ns: str, api: k8s.KubeApi) -> None:
    provider = (
        K8sEphemeralProvider.sandboxed("ghcr.io/acme/claude-runner:2.1.332-1")
        .namespace(ns)
        .timeout(60)
        .node_selector("ironflow.io/no-such-node", "true")
    )
    started = time.monotonic()
    with pytest.raises(errors.SandboxFailed) as caught:
        await StepRunner.of(provider.settings, api=api, worker_env={}).run(AgentConfig("hi"))
    assert time.monotonic() - started < 10, "the step waited for its timeout"
    exc = caught.value
    assert exc.retryable
    assert exc.reason == "Unschedulable"
    assert exc.subject.startswith("pod claude-code-")
    assert f"{exc.subject} cannot start: Unschedulable: 0/1 nodes are available" in exc.message
    assert "didn't match Pod's node affinity/selector" in exc.message
    assert "\nrecent events:\nWarning FailedScheduling: " in exc.message

    async def gone() -> bool:
        return not (await api.list(k8s.PODS, ns)).items

    await eventually(gone, interval_s=0.1, what="the step's pod to be deleted")
    assert (await api.list(k8s.CONFIGMAPS, ns, field_selector="metadata.name!=kube-root-ca.crt")).items == []


WAITING = sorted({p.reason: p for p in PROBLEMS if p.where == "waiting"}.values(), key=lambda p: p.reason)


async def _gone(api: k8s.KubeApi, ns: str) -> None:
    async def gone() -> bool:
        return not (await api.list(k8s.PODS, ns)).items

    await eventually(gone, interval_s=0.1, what="the step's pod to be deleted")
    assert (await api.list(k8s.CONFIGMAPS, ns, field_selector="metadata.name!=kube-root-ca.crt")).items == []


@pytest.mark.parametrize("problem", WAITING, ids=lambda p: p.reason)
async def test_a_container_kwok_holds_waiting_ends_the_step_with_its_reason(
    ns: str, api: k8s.KubeApi, problem: Problem
) -> None:
    """kwok itself (a Stage) writes the waiting state a kubelet writes for a container it cannot
    start; the step ends within 5 s (after the pull grace for a pull), naming pod and reason."""
    grace = 1.0
    provider = (
        K8sEphemeralProvider.sandboxed("ghcr.io/acme/claude-runner:2.1.332-1")
        .namespace(ns)
        .timeout(60)
        .image_pull_grace(grace)
    )
    config = AgentConfig("hi").pod_label(WAITING_REASON_LABEL, problem.reason)
    started = time.monotonic()
    with pytest.raises(errors.IronflowError) as caught:
        await StepRunner.of(provider.settings, api=api, worker_env={}).run(config)
    # From the step's start, so within 5 s of the pod showing it (a pull reason: after its grace).
    limit = 5 + (grace if problem.reason in pod_problems.GRACED else 0)
    assert time.monotonic() - started < limit, "the step did not end within 5 s of the pod showing its reason"
    exc = caught.value
    assert isinstance(exc, errors.SandboxFailed if problem.retryable else errors.SandboxRefused)
    assert exc.retryable is problem.retryable
    assert f": {problem.reason}: {WAITING_MESSAGE % problem.reason}" in exc.message
    assert exc.message.startswith("pod claude-code-")
    assert "\nrecent events:\n" in exc.message
    assert "\nWarning Failed: Error: the container cannot start" in exc.message
    await _gone(api, ns)


async def test_a_container_kwok_ends_oom_killed_ends_the_step_as_retryable(ns: str, api: k8s.KubeApi) -> None:
    provider = K8sEphemeralProvider.sandboxed("ghcr.io/acme/claude-runner:2.1.332-1").namespace(ns).timeout(60)
    config = AgentConfig("hi")
    for key, value in ((EXIT_CODE_LABEL, "137"), (RUN_FOR_LABEL, "300ms"), (EXIT_REASON_LABEL, "OOMKilled")):
        config = config.pod_label(key, value)
    started = time.monotonic()
    with pytest.raises(errors.SandboxFailed) as caught:
        await StepRunner.of(provider.settings, api=api, worker_env={}).run(config)
    assert time.monotonic() - started < 10, "the step waited for its timeout"
    exc = caught.value
    assert exc.retryable
    assert exc.reason == "OOMKilled"
    assert exc.message.startswith("pod claude-code-")
    await _gone(api, ns)
