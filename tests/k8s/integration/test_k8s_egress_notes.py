"""A k8s step's egress decisions reach its record: the proxy keeps each decision of the step's
egress-only token, and when the step ends the worker reads them through the admin API and hands
them to the step's log sink as ``ironflow`` lines, as a local step's arrive. A real auth proxy on
loopback (its egress listener, the in-memory registry, the admin API) issues the step's tokens; the
test plays the pod's tools, with the pod's own proxy password, while the pod runs."""

from __future__ import annotations

import asyncio
import urllib.parse
from collections.abc import AsyncIterator

import pytest
from tests.auth_proxy.integration.test_egress_live_policy import _get, _origin
from tests.fakes.kubecase import KubeCase
from tests.k8s.integration.test_k8s_runtime_steps import (
    RUN,
    RUNNER_PODS,
    STREAM_TEXT,
    Lines,
    provider,
    runner,
    running_pod,
    step_objects_left,
)

from ironflow import egress
from ironflow.auth_proxy import AdminClient, AuthProxyConfig, Credential, run_auth_proxy
from ironflow.auth_proxy.app import RunningProxy
from ironflow.kube import api as k8s
from ironflow.secrets import Secret
from ironflow.steps import AgentConfig
from ironflow.testing.kube import PodScript

ADMIN = "admin-key-" + "n" * 40


@pytest.fixture
async def proxy() -> AsyncIterator[RunningProxy]:
    config = AuthProxyConfig(admin_key=Secret(ADMIN), egress_host="127.0.0.1", egress_port=0)
    async with run_auth_proxy(config) as running:
        yield running


async def test_the_steps_egress_decisions_reach_its_log_sink_when_it_ends(kube: KubeCase, proxy: RunningProxy) -> None:
    await kube.control.script_pods(PodScript(name_prefix=RUNNER_PODS, run_for=None, log=STREAM_TEXT))
    async with _origin() as allowed, _origin() as other:
        policy = egress.policy_from_options([f"127.0.0.1:{allowed}"])
        p = provider(kube.namespace).auth_proxy(proxy.url).auth_proxy_admin_key(ADMIN).egress(policy)
        sink = Lines()
        async with AdminClient(proxy.url, ADMIN, credential=Credential("api_key", Secret("sk-ant-notes"))) as admin:
            step = runner(kube, p, issuer=admin).run(AgentConfig("hi").scoped(RUN, "fetch"), logs=sink)
            task = asyncio.ensure_future(step)
            name = await running_pod(kube)
            pod = await kube.api.get(k8s.PODS, kube.namespace, name)
            env = {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0]["env"]}
            password = urllib.parse.urlsplit(env["HTTPS_PROXY"]).password or ""
            assert (await _get(proxy, password, allowed), await _get(proxy, password, other)) == (200, 403)
            assert not [line for stream, line in sink.lines if stream == "ironflow"]  # not before the end
            await kube.control.set_pod_phase(kube.namespace, name, "Succeeded")
            await task
    notes = [line for stream, line in sink.lines if stream == "ironflow"]
    assert notes == [
        f"egress allowed 127.0.0.1:{allowed} (GET): allowed by allow 127.0.0.1:{allowed}",
        f"egress denied 127.0.0.1:{other} (GET): 127.0.0.1 is loopback: only a rule naming it opens it",
    ], notes
    assert password not in str(sink.lines)
    assert await _get(proxy, password, allowed) == 407  # revoked with the step
    await step_objects_left(kube)
