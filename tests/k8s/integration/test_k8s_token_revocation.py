"""A dropped step's proxy tokens are refused at once, not at expiry (reference 5.0.1), against
the real auth proxy: the step's task is cancelled while its pod runs, or while the proxy's
answer to the issue is still on its way (the proxy made the token; the step never heard)."""

from __future__ import annotations

import asyncio

from tests.fakes.kubecase import KubeCase, nothing_left
from tests.fakes.proxy_tokens import ADMIN_KEY, RecordingIssuer, dropped, real_proxy, refused

from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.k8s.step_runs import StepRunner
from ironflow.kube import api as k8s
from ironflow.steps import AgentConfig
from ironflow.testing.kube import PodScript
from ironflow.testing.polling import eventually

RUN = "01a0e906-1f85-7000-8000-0000000000bb"


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
        await dropped(task)
        assert await refused(url, token)  # at once: no wait, no expiry
    await nothing_left(kube, k8s.PODS, k8s.CONFIGMAPS)


async def test_a_step_cancelled_while_the_issue_answer_is_in_flight_has_that_token_refused(kube: KubeCase) -> None:
    async with real_proxy() as (url, admin):
        issuer = RecordingIssuer(admin, hold_s=1)
        task = asyncio.create_task(runner(kube, issuer).run(AgentConfig("hi").scoped(RUN, "dropped")))
        await eventually(lambda: bool(issuer.tokens), interval_s=0.02, what="the proxy to make the token")
        (token,) = issuer.tokens
        await dropped(task)
        assert await refused(url, token)
    await nothing_left(kube, k8s.PODS, k8s.CONFIGMAPS)
