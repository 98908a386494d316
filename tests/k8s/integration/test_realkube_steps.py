"""Full agent steps through a real kube-apiserver: kwok moves the pod Pending -> Running ->
Succeeded/Failed and serves the stream-json log the test prepared; logs are read through the
apiserver (which dials kwok as the node's kubelet). Skipped when the binaries are not built.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from ironflow import errors
from ironflow.k8s.provider import K8sEphemeralProvider
from ironflow.kube import api as k8s
from ironflow.steps import AgentConfig
from ironflow.testing.kubeenv import EXIT_CODE_LABEL, RUN_FOR_LABEL, KubeEnv

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "claude"
STREAM_TEXT = (FIXTURES / "stream_text.out").read_text()
STREAM_API_ERROR = (FIXTURES / "stream_api_error_529.out").read_text()
IMAGE = "ghcr.io/acme/claude-runner:2.1.332-1"
RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}


@pytest.fixture
def ns(kube_env: KubeEnv) -> Iterator[str]:
    """A fresh namespace that enforces PodSecurity ``restricted``."""
    with kube_env.namespace(f"steps-{uuid.uuid4().hex[:8]}", labels=RESTRICTED) as name:
        yield name


#: Providers a test made: closed after it (their clients belong to them).
_made: list[K8sEphemeralProvider] = []


@pytest.fixture(autouse=True)
async def _close_clients() -> AsyncIterator[None]:
    yield
    while _made:
        await _made.pop().aclose()


def provider(env: KubeEnv, ns: str, *, timeout: float = 30) -> K8sEphemeralProvider:
    made = K8sEphemeralProvider.sandboxed(IMAGE).namespace(ns).timeout(timeout).cluster(env.cluster_config())
    _made.append(made)
    return made


def verbose(config: AgentConfig) -> AgentConfig:
    return dataclasses.replace(config, verbose=True)


async def leftovers(env: KubeEnv, ns: str) -> list[str]:
    async with await k8s.KubeApi.connect(env.cluster_config()) as api:
        pods = await api.list(k8s.PODS, ns)
        cms = await api.list(k8s.CONFIGMAPS, ns, label_selector="app.kubernetes.io/managed-by=ironflow")
    return [o["metadata"]["name"] for o in [*pods.items, *cms.items]]


async def test_agent_run_completes_end_to_end_on_the_real_api(kube_env: KubeEnv, ns: str) -> None:
    """Pod admitted under ``restricted``, Running then Succeeded by kwok, log read through the API."""
    kube_env.set_namespace_log(ns, STREAM_TEXT)
    config = verbose(AgentConfig("Say hello").pod_label(EXIT_CODE_LABEL, "0").pod_label(RUN_FOR_LABEL, "300ms"))
    result = await provider(kube_env, ns).run(config)
    assert result.text
    assert result.session_id == "e2e8a88a-55ea-451b-902e-cf3d115ed139"
    assert await leftovers(kube_env, ns) == []


async def test_large_prompt_configmap_is_admitted_and_removed(kube_env: KubeEnv, ns: str) -> None:
    """A prompt too big for argv travels in a ConfigMap; both objects are gone afterwards."""
    kube_env.set_namespace_log(ns, STREAM_TEXT)
    config = verbose(AgentConfig("x" * 120_000).pod_label(EXIT_CODE_LABEL, "0"))
    result = await provider(kube_env, ns).run(config)
    assert result.text
    assert await leftovers(kube_env, ns) == []


async def test_failed_container_with_api_error_log_is_a_typed_error(kube_env: KubeEnv, ns: str) -> None:
    """kwok ends the pod Failed with exit code 1; the 529 in the log becomes an ApiError."""
    kube_env.set_namespace_log(ns, STREAM_API_ERROR)
    config = verbose(AgentConfig("Say hello").pod_label(EXIT_CODE_LABEL, "1"))
    with pytest.raises(errors.IronflowError) as info:
        await provider(kube_env, ns).run(config)
    assert "529" in str(info.value) or isinstance(info.value, errors.ApiError)
    assert await leftovers(kube_env, ns) == []


async def test_pod_past_its_active_deadline_fails_the_step(kube_env: KubeEnv, ns: str) -> None:
    """No exit label: the pod runs until kwok's deadline stage fails it (DeadlineExceeded)."""
    kube_env.set_namespace_log(ns, "")
    p = provider(kube_env, ns, timeout=20).active_deadline_seconds(1)
    with pytest.raises(errors.IronflowError) as info:
        await p.run(verbose(AgentConfig("Say hello")))
    assert not isinstance(info.value, errors.StepConfigError)
    assert await leftovers(kube_env, ns) == []
