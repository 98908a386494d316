"""The lifecycle I/O against the Kubernetes test server (the scripted controller where one is needed):
a name resolves through its claim, suspend patches only ``operatingMode``, wait rides the shared
watch (one list, one watch, one GET), pools count a warm adoption."""

from __future__ import annotations

import asyncio
import secrets
import time
from typing import Any

import pytest

from ironflow import errors
from ironflow.agent_sandbox import claim_sessions, claims, lifecycle, models, schemas
from ironflow.agent_sandbox.claim_provider import AgentSandboxProvider
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.kube import api as k8s
from ironflow.testing.agent_sandbox_controller import AgentSandboxController
from ironflow.testing.kube import KubeTestServer
from ironflow.testing.polling import eventually

RES = claims.resources()
NS = "life"


def served(server: KubeTestServer) -> KubeTestServer:
    """The server with the agent-sandbox CRDs and the namespace (no controller: the test plays it)."""
    for crd in schemas.crd_documents("v1.0.3"):
        server.register_crd(crd)
    server.create_namespace(NS)
    return server


def raw_sandbox(name: str) -> dict[str, Any]:
    return {
        "apiVersion": RES.sandboxes.api_version,
        "kind": "Sandbox",
        "metadata": {"name": name},
        "spec": {"podTemplate": {"spec": {"containers": [{"name": "c", "image": "img"}]}}},
    }


async def test_wait_returns_once_the_condition_holds_on_one_watch() -> None:
    async with KubeTestServer() as server, await k8s.KubeApi.connect(served(server).cluster_config()) as api:
        await api.create(RES.sandboxes, NS, raw_sandbox("job"))
        api.counters.reset()
        waiting = asyncio.create_task(lifecycle.wait_condition(api, NS, "job", "Finished", timeout_s=10))
        await asyncio.sleep(0)
        assert not waiting.done()
        finished = {"type": "Finished", "status": "True", "reason": "PodSucceeded", "message": "",
                    "lastTransitionTime": "2026-01-01T00:00:00Z"}  # fmt: skip
        await api.patch(RES.sandboxes, NS, "job", {"status": {"conditions": [finished]}}, subresource="status")
        found = await waiting
        assert claims.has_condition(found, "Finished")
        by_verb = api.counters.snapshot().by_verb
        assert (by_verb["get"], by_verb["list"], by_verb["watch"]) == (1, 1, 1)  # no poll


async def test_wait_on_a_missing_sandbox_fails_at_once_and_a_timeout_names_the_condition() -> None:
    async with KubeTestServer() as server, await k8s.KubeApi.connect(served(server).cluster_config()) as api:
        with pytest.raises(errors.KubeNotFound):
            await lifecycle.wait_condition(api, NS, "nope", "Finished", timeout_s=10)
        await api.create(RES.sandboxes, NS, raw_sandbox("slow"))
        with pytest.raises(errors.OperationTimeout, match="condition Finished=True on sandboxes/slow"):
            await lifecycle.wait_condition(api, NS, "slow", "Finished", timeout_s=0.2)


async def test_suspend_resolves_a_claim_to_its_adopted_sandbox_and_pools_count_the_adoption() -> None:
    async with KubeTestServer() as server:
        server.create_namespace(NS)
        async with (
            AgentSandboxController(server, namespace=NS),
            await k8s.KubeApi.connect(server.cluster_config()) as api,
        ):
            provider = AgentSandboxProvider(K8sEphemeralProvider.sandboxed("img").namespace(NS)).warm_pool(replicas=2)
            await provider.apply_template(api)

            async def members_ready() -> bool:
                items = (await api.list_all(RES.sandboxes, NS)).items
                return sum(claims.has_condition(s, "Ready") for s in items) == 2

            await eventually(members_ready, limit_s=10, what="two Ready pool members")
            sid = "sbx-" + secrets.token_hex(8)
            await api.create(
                RES.claims, NS, claim_sessions.session_claim(sid, provider.settings, ttl_s=600, now=time.time())
            )
            ready = await claims.wait_ready(api, RES.claims, NS, sid, timeout_s=10)
            assert ready is not None
            bound = claims.bound_sandbox(ready)
            assert bound is not None
            assert bound != sid
            (status,) = await lifecycle.pool_status(api, NS)
            assert (status.name, status.desired, status.adopted_last_hour) == (provider.settings.pool, 2, 1)

            target = await lifecycle.set_mode(api, NS, sid, models.OperatingMode.SUSPENDED, timeout_s=None)
            assert target == lifecycle.Target(bound, sid)
            stored = await api.get(RES.sandboxes, NS, bound)
            assert stored["spec"]["operatingMode"] == "Suspended"
            assert stored["spec"]["podTemplate"]  # a merge patch: the rest of the spec is untouched
            raw = await lifecycle.set_mode(api, NS, bound, models.OperatingMode.RUNNING, timeout_s=None)
            assert raw == lifecycle.Target(bound)
            assert (await api.get(RES.sandboxes, NS, bound))["spec"]["operatingMode"] == "Running"
            with pytest.raises(errors.KubeNotFound):
                await lifecycle.resolve(api, NS, "neither")
