"""Fail fast on the real scheduler's word: a step whose pod no node can take ends at once with
``Unschedulable`` and kube-scheduler's message, on a real kube-apiserver (kwok the node).

The other reasons run on every backend in ``test_k8s_runtime_fail_fast.py`` (the kubelet's
part is played through the API there); this one needs the real scheduler, so it runs in a
namespace kwok drives. Skipped when the control-plane binaries are not built.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

from ironflow import errors
from ironflow.k8s.provider import K8sEphemeralProvider
from ironflow.k8s.runner import StepRunner
from ironflow.kube import api as k8s
from ironflow.steps import AgentConfig
from ironflow.testing.kubeenv import KubeEnv
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
