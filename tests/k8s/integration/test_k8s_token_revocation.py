"""A dropped step's proxy tokens are refused at once, not at expiry (reference 5.0.1), against
the real auth proxy: the step's task is cancelled while its pod runs, or while the proxy's
answer to the issue is still on its way (the proxy made the token; the step never heard)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from tests.fakes.kubecase import KubeCase, nothing_left

from ironflow.auth_proxy import AdminClient, Credential
from ironflow.auth_proxy import app as proxy_app
from ironflow.auth_proxy import config as proxy_config
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.k8s.step_runs import StepRunner
from ironflow.kube import api as k8s
from ironflow.secrets import Secret
from ironflow.steps import AgentConfig
from ironflow.testing.kube import PodScript
from ironflow.testing.polling import eventually

ADMIN_KEY = "a" * 40
CREDENTIAL = Credential("api_key", Secret("sk-ant-api03-" + "k" * 20))
RUN = "01a0e906-1f85-7000-8000-0000000000bb"


class RecordingIssuer:
    """The real admin client, keeping each token it was given; ``hold_s`` delays the answer to the step."""

    def __init__(self, admin: AdminClient, *, hold_s: float = 0) -> None:
        self.admin, self.hold_s = admin, hold_s
        self.tokens: list[Secret] = []

    async def issue(
        self, run_id: str, step: str, expires_at: int, *, credential: Any = None, trace_context: str | None = None
    ) -> tuple[str, Secret]:
        issued = await self.admin.issue(run_id, step, expires_at, credential=credential or CREDENTIAL)
        self.tokens.append(issued.token)
        await asyncio.sleep(self.hold_s)  # the proxy made the token; the step, cancelled meanwhile, never hears
        return issued.id, issued.token

    async def revoke(self, token_id: str) -> bool:
        return await self.admin.revoke(token_id)

    async def revoke_run(self, run_id: str) -> int:
        return await self.admin.revoke_run(run_id)


@contextlib.asynccontextmanager
async def real_proxy() -> AsyncIterator[tuple[str, AdminClient]]:
    config = proxy_config.AuthProxyConfig(admin_key=Secret(ADMIN_KEY), upstream="http://127.0.0.1:9")
    async with proxy_app.run_auth_proxy(config) as running, AdminClient(running.url, ADMIN_KEY) as admin:
        yield running.url, admin


async def refused(proxy_url: str, token: Secret) -> bool:
    """True when the proxy refuses ``token`` (401); a live one is let through (to a dead upstream here)."""
    body = {"model": "claude-sonnet-4-5", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]}
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{proxy_url}/v1/messages", json=body, headers={"x-api-key": token.reveal()}) as answer,
    ):
        return answer.status == 401


def runner(kube: KubeCase, issuer: RecordingIssuer) -> StepRunner:
    provider = (
        K8sEphemeralProvider.sandboxed("ghcr.io/acme/claude-runner:2.1.332-1")
        .namespace(kube.namespace)
        .timeout(120)
        .auth_proxy("http://auth-proxy.ironflow:8080")
        .auth_proxy_admin_key(ADMIN_KEY)
    )
    return StepRunner.of(provider.settings, api=kube.api, worker_env={}, issuer=issuer)


async def pod_phase(kube: KubeCase) -> str | None:
    pods = (await kube.api.list(k8s.PODS, kube.namespace)).items
    return next(((p.get("status") or {}).get("phase") for p in pods), None)


async def test_a_step_cancelled_while_its_pod_runs_has_its_token_refused_at_once(kube: KubeCase) -> None:
    await kube.control.script_pods(PodScript(name_prefix="claude-code", run_for=None))
    async with real_proxy() as (url, admin):
        issuer = RecordingIssuer(admin)
        task = asyncio.create_task(runner(kube, issuer).run(AgentConfig("hi").scoped(RUN, "dropped")))
        await eventually(lambda: pod_phase(kube), interval_s=0.05, what="the step's pod to run")
        (token,) = issuer.tokens
        assert not await refused(url, token)  # live while the step runs
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await refused(url, token)  # at once: no wait, no expiry
    await nothing_left(kube, k8s.PODS, k8s.CONFIGMAPS)


async def test_a_step_cancelled_while_the_issue_answer_is_in_flight_has_that_token_refused(kube: KubeCase) -> None:
    async with real_proxy() as (url, admin):
        issuer = RecordingIssuer(admin, hold_s=1)
        task = asyncio.create_task(runner(kube, issuer).run(AgentConfig("hi").scoped(RUN, "dropped")))
        await eventually(lambda: bool(issuer.tokens), interval_s=0.02, what="the proxy to make the token")
        (token,) = issuer.tokens
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await refused(url, token)
    await nothing_left(kube, k8s.PODS, k8s.CONFIGMAPS)
