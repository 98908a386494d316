"""``K8sEphemeralProvider``'s runtime methods: the provider protocol on a cluster (test server)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.fakes.kubecase import KubeCase

from ironflow import errors
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.kube import api as k8s
from ironflow.provider import AgentProvider
from ironflow.steps import AgentConfig
from ironflow.testing.kube import PodScript
from ironflow.testing.polling import eventually

JSON_TEXT = (Path(__file__).resolve().parents[2] / "fixtures" / "claude" / "json_text.out").read_text()
RUN = "01a0e906-1f85-7000-8000-0000000000bb"


@pytest.fixture
async def provider(kube: KubeCase) -> AsyncIterator[K8sEphemeralProvider]:
    server = kube.need_server()
    async with (
        K8sEphemeralProvider.sandboxed("ghcr.io/acme/claude-runner:2.1.332-1")
        .namespace(kube.namespace)
        .cluster(server.cluster_config())
        .timeout(5)
    ) as made:
        yield made


def test_provider_satisfies_the_agent_provider_protocol() -> None:
    assert isinstance(K8sEphemeralProvider("img"), AgentProvider)


async def test_agent_runs_on_the_provider_and_leaves_nothing(kube: KubeCase, provider: K8sEphemeralProvider) -> None:
    server = kube.need_server()
    server.script_pods(PodScript(name_prefix="claude-code", run_for=0.05, log=JSON_TEXT))
    result = await provider.run(AgentConfig("Say hello").scoped(RUN, "greet"))
    assert result.text == "Hello from the fake model."
    assert server.objects(k8s.PODS, kube.namespace) == []


async def test_provider_release_run_and_reap_orphans(kube: KubeCase, provider: K8sEphemeralProvider) -> None:
    from ironflow.k8s.commands.pod_runs import PodRun
    from ironflow.labels import LABEL_RUN_ID

    server = kube.need_server()
    await kube.api.create(
        k8s.PODS,
        kube.namespace,
        PodRun("a", "busybox", "true").label(LABEL_RUN_ID, RUN).namespace(kube.namespace).build_pod(),
    )
    await kube.api.create(
        k8s.PODS, kube.namespace, PodRun("old", "busybox", "true").namespace(kube.namespace).build_pod(now=1000)
    )
    assert await provider.release_run(RUN) == 1
    report = await provider.reap_orphans()
    assert report.pods == ("old",)
    assert server.objects(k8s.PODS, kube.namespace) == []


async def test_provider_spawn_orphan_reaper_uses_the_configured_interval(
    kube: KubeCase, provider: K8sEphemeralProvider
) -> None:
    from ironflow.k8s.commands.pod_runs import PodRun

    server = kube.need_server()
    await kube.api.create(
        k8s.PODS, kube.namespace, PodRun("old", "busybox", "true").namespace(kube.namespace).build_pod(now=1000)
    )
    handle = provider.orphan_reaper(3600).spawn_orphan_reaper()
    await eventually(lambda: not server.objects(k8s.PODS, kube.namespace), what="the first pass to reap the pod")
    await handle.stop()
    assert server.objects(k8s.PODS, kube.namespace) == []


async def test_spawn_orphan_reaper_zero_interval_panics() -> None:
    """The reference panics; we raise ConfigError with its text."""
    with pytest.raises(errors.ConfigError, match="orphan reaper interval must be greater than zero"):
        K8sEphemeralProvider("img").spawn_orphan_reaper(0)


async def test_spawn_orphan_reaper_without_any_interval_names_the_fix() -> None:
    with pytest.raises(errors.ConfigError, match="pass one or set orphan_reaper"):
        K8sEphemeralProvider("img").spawn_orphan_reaper()


async def test_auth_proxy_without_admin_key_fails_before_any_pod(
    kube: KubeCase, provider: K8sEphemeralProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("IRONFLOW_AUTH_PROXY_ADMIN_KEY", raising=False)
    server = kube.need_server()
    with pytest.raises(errors.MissingCredential, match="auth_proxy requires IRONFLOW_AUTH_PROXY_ADMIN_KEY"):
        await provider.auth_proxy("http://proxy.invalid:8080").run(AgentConfig("hi"))
    assert server.count("create") == 0
