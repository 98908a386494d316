"""The k8s-agent-sandbox SDK (1.0.8) sees the claims ironflow creates as its own kind of object.

The SDK is a test-only dependency (it pulls the sync ``kubernetes`` client); the test is
skipped without it. Its sync client runs in a thread against the Kubernetes test server.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from ironflow import labels
from ironflow.agent_sandbox import step_render as sandbox_steps
from ironflow.agent_sandbox.claim_provider import AgentSandboxProvider
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.kube import api as k8s
from ironflow.steps import AgentConfig
from ironflow.testing.agent_sandbox_controller import AgentSandboxController
from ironflow.testing.kube import KubeTestServer

sdk = pytest.importorskip("k8s_agent_sandbox", reason="pip install k8s-agent-sandbox==1.0.8")
kubernetes = pytest.importorskip("kubernetes")

RUN = "01a0e906-1f85-7000-8000-00000000a5b2"


def sdk_client(server: KubeTestServer) -> Any:
    configuration = kubernetes.client.Configuration()
    configuration.host = server.url
    configuration.api_key = {"authorization": f"Bearer {server.token}"}
    return sdk.SandboxClient(api_client=kubernetes.client.ApiClient(configuration))


async def test_sdk_lists_our_claims_and_reads_them_with_its_model() -> None:
    async with KubeTestServer() as server:
        controller = AgentSandboxController(server, namespace="sdk")
        async with controller, await k8s.KubeApi.connect(server.cluster_config()) as api:
            pod = K8sEphemeralProvider.sandboxed("img").namespace("sdk")
            p = AgentSandboxProvider(pod).warm_pool(replicas=0)
            await p.apply_template(api)
            claim = sandbox_steps.claim_manifest(
                p.settings, AgentConfig("x").scoped(RUN, "a"), name="ours", now=int(time.time())
            )
            await api.create(p.resources.claims, "sdk", claim)
            client = sdk_client(server)
            names = await asyncio.to_thread(client.list_all_sandboxes, "sdk")
            assert names == ["ours"]
            mine = await asyncio.to_thread(client.list_all_sandboxes, "sdk", labels.SANDBOX_CLAIM_SELECTOR)
            assert mine == ["ours"]
            assert await asyncio.to_thread(client.list_all_sandboxes, "sdk", "app=other") == []
            # The SDK's constants name the same group, version and plural; its claim shape is ours.
            assert (
                p.resources.claims.group,
                p.resources.claims.version,
                p.resources.claims.plural,
            ) == (
                sdk.constants.CLAIM_API_GROUP,
                sdk.constants.CLAIM_API_VERSION,
                sdk.constants.CLAIM_PLURAL_NAME,
            )
            stored = await asyncio.to_thread(
                client.k8s_helper.custom_objects_api.get_namespaced_custom_object,
                "extensions.agents.x-k8s.io",
                "v1beta1",
                "sdk",
                "sandboxclaims",
                "ours",
            )
            assert stored["spec"]["warmPoolRef"]["name"] == p.settings.pool
            # Bound by the controller: the SDK resolves the sandbox name from the claim's status.
            name = await asyncio.to_thread(client.k8s_helper.resolve_sandbox_name, "ours", "sdk", 5)
            assert name == "ours"
