"""Pause, resume and idle suspend of agent-sandbox sessions on the REAL agent-sandbox controller
(v1.0.3) and a real kube-apiserver, kwok as the kubelet.

What is proved here is the cluster's side: a pause sets the Sandbox Suspended and its pod is
deleted while the claim and the sandbox's HOME PVC stay; the next request resumes it (a new pod
on the same PVC) and answers; an idle session is suspended by itself. kwok runs no container
(every exec runs on this host, in the test's work dir), so that the *files* come back from the
PVC is the real-node test's to show (tests/agent_sandbox/real_node/test_real_node_session_pause.py).
Skipped when the control-plane binaries are not built.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from tests.sessions.integration.serving import cli_env, ironflow

from ironflow import errors
from ironflow.agent_sandbox import claims, step_render
from ironflow.agent_sandbox.claim_provider import AgentSandboxProvider
from ironflow.agent_sandbox.claim_sessions import AgentSandboxSessions
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.kube import api as k8s
from ironflow.sandbox_router import app as router_app
from ironflow.secrets import Secret
from ironflow.sessions import OpenOptions
from ironflow.sessions.backend import PauseControls, pause_controls_of
from ironflow.sessions.remote import RemoteSessions
from ironflow.testing.kubeenv import KubeEnv
from ironflow.testing.polling import eventually

#: The hardened pod passes PodSecurity restricted, its PVC HOME included.
RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted"}
RES, SETTLE_S = claims.resources(), 60.0


@dataclass
class Cluster:
    api: k8s.KubeApi
    namespace: str
    provider: AgentSandboxProvider

    async def sandbox_of(self, session_id: str) -> dict[str, Any]:
        bound = claims.bound_sandbox(await self.api.get(RES.claims, self.namespace, session_id))
        assert bound is not None
        return await self.api.get(RES.sandboxes, self.namespace, bound)

    async def pod(self, name: str) -> dict[str, Any] | None:
        try:
            return await self.api.get(k8s.PODS, self.namespace, name)
        except errors.KubeNotFound:
            return None

    async def pvc_uid(self, name: str) -> str:
        return str((await self.api.get(k8s.PERSISTENTVOLUMECLAIMS, self.namespace, name))["metadata"]["uid"])


def _provider(namespace: str, *, home: str | None = "1Gi") -> AgentSandboxProvider:
    pod = K8sEphemeralProvider.sandboxed("runner:test").namespace(namespace)
    provider = AgentSandboxProvider(pod).warm_pool(replicas=1).ready_timeout(SETTLE_S)
    return provider.home_volume(home) if home else provider


@pytest.fixture
async def cluster(kube_env: KubeEnv, tmp_path: Path) -> AsyncIterator[Cluster]:
    work = tmp_path / "work"
    work.mkdir()
    with kube_env.namespace(f"pause-{uuid.uuid4().hex[:8]}", labels=RESTRICTED) as namespace:
        await asyncio.to_thread(kube_env.allow_exec, namespace, work)
        await asyncio.to_thread(kube_env.provide_volumes, 4)
        provider = _provider(namespace)
        async with await k8s.KubeApi.connect(kube_env.cluster_config()) as api:
            await provider.apply_template(api)
            yield Cluster(api, namespace, provider)


def _mounted_home(pod: dict[str, Any]) -> str | None:
    for volume in pod["spec"]["volumes"]:
        if volume["name"] == step_render.HOME_VOLUME:
            return (volume.get("persistentVolumeClaim") or {}).get("claimName")
    return None


async def test_a_paused_session_loses_its_pod_keeps_its_home_pvc_and_the_next_request_resumes_it(
    cluster: Cluster,
) -> None:
    async with AgentSandboxSessions(cluster.provider.settings, api=cluster.api) as sessions:
        assert isinstance(sessions, PauseControls)
        sandbox = await sessions.open(OpenOptions(ttl=300))
        await sandbox.files.write("kept.txt", "before the pause")
        bound = await cluster.sandbox_of(sandbox.id)
        name = bound["metadata"]["name"]
        first = await cluster.pod(name)
        assert first is not None
        home = _mounted_home(first)
        assert home == f"{step_render.HOME_VOLUME}-{name}"  # HOME is the sandbox's own PVC, not an emptyDir
        home_uid = await cluster.pvc_uid(home)

        info = await sessions.pause(sandbox.id)
        assert info.paused is True
        assert [i.paused for i in sessions.held()] == [True]
        stored = await cluster.sandbox_of(sandbox.id)
        assert stored["spec"]["operatingMode"] == "Suspended"
        assert claims.has_condition(stored, "Suspended")
        assert await cluster.pod(name) is None  # the pod went: every process of the session ended
        assert await cluster.pvc_uid(home) == home_uid  # the home stays
        assert (await sessions.pause(sandbox.id)).paused is True  # twice: no error

        # The next request resumes it first: a new pod on the same PVC, and the request answers.
        assert await sandbox.files.read("kept.txt") == b"before the pause"
        again = await cluster.pod(name)
        assert again is not None
        assert again["metadata"]["uid"] != first["metadata"]["uid"]
        assert _mounted_home(again) == home
        assert await cluster.pvc_uid(home) == home_uid
        resumed = await cluster.sandbox_of(sandbox.id)
        assert resumed["spec"]["operatingMode"] == "Running"
        assert claims.has_condition(resumed, "Ready")
        assert [i.paused for i in sessions.held()] == [False]
        assert (await sandbox.commands.run("echo back")).stdout == "back\n"
        assert (await sessions.resume(sandbox.id)).paused is False  # resuming a running one: no error
        await sandbox.disconnect()


async def test_an_idle_session_is_suspended_and_the_next_request_resumes_it(cluster: Cluster) -> None:
    async with AgentSandboxSessions(cluster.provider.settings, api=cluster.api) as sessions:
        sandbox = await sessions.open(OpenOptions(ttl=300, idle_suspend=2))
        assert (await sandbox.commands.run("echo one")).stdout == "one\n"
        name = (await cluster.sandbox_of(sandbox.id))["metadata"]["name"]

        async def suspended() -> bool:
            stored = await cluster.sandbox_of(sandbox.id)
            return claims.has_condition(stored, "Suspended") and await cluster.pod(name) is None

        await eventually(suspended, limit_s=SETTLE_S, interval_s=0.2, what="the idle session suspended")
        assert [i.paused for i in sessions.held()] == [True]
        assert (await sandbox.commands.run("echo two")).stdout == "two\n"  # resumed for it
        assert await cluster.pod(name) is not None
        assert claims.has_condition(await cluster.sandbox_of(sandbox.id), "Ready")
        assert [i.paused for i in sessions.held()] == [False]
        # and once idle again, suspended again
        await eventually(suspended, limit_s=SETTLE_S, interval_s=0.2, what="suspended a second time")
        await sandbox.disconnect()


async def test_another_process_pauses_by_id_and_a_connect_resumes_it(cluster: Cluster) -> None:
    async with AgentSandboxSessions(cluster.provider.settings, api=cluster.api) as opener:
        sandbox = await opener.open(OpenOptions(ttl=300))
        await sandbox.disconnect()
        await opener.release()  # the claim lives on; nothing here holds it
        async with AgentSandboxSessions(cluster.provider.settings, api=cluster.api) as other:
            assert (await pause_controls_of(other).pause(sandbox.id)).paused is True
            assert claims.has_condition(await cluster.sandbox_of(sandbox.id), "Suspended")
        async with AgentSandboxSessions(cluster.provider.settings, api=cluster.api) as third:
            handle = await third.connect(sandbox.id)  # found suspended: resumed first
            assert claims.has_condition(await cluster.sandbox_of(sandbox.id), "Ready")
            assert (await handle.commands.run("echo up")).stdout == "up\n"
            assert await third.close(sandbox.id) is True
            await handle.disconnect()


async def test_without_a_home_volume_pause_and_idle_suspend_are_refused_in_one_line(
    kube_env: KubeEnv, cluster: Cluster
) -> None:
    settings = _provider(cluster.namespace, home=None).settings
    async with AgentSandboxSessions(settings, api=cluster.api) as sessions:
        with pytest.raises(errors.ConfigError, match="set home_volume on the provider"):
            await sessions.open(OpenOptions(ttl=60, idle_suspend=5))
        assert (await cluster.api.list(RES.claims, cluster.namespace)).items == []  # refused before anything
        sandbox = await sessions.open(OpenOptions(ttl=60))
        with pytest.raises(errors.ConfigError, match="set home_volume on the provider"):
            await sessions.pause(sandbox.id)
        stored = await cluster.sandbox_of(sandbox.id)
        assert stored["spec"].get("operatingMode", "Running") == "Running"
        await sandbox.disconnect()


async def test_through_a_server_pause_resume_and_idle_suspend_reach_the_sandbox(cluster: Cluster) -> None:
    """``sandbox serve --backend agent-sandbox``: the endpoints pause and resume, an idle session is
    suspended, and a forwarded request resumes it (routed only then: the resumed pod's)."""
    async with AgentSandboxSessions(cluster.provider.settings, api=cluster.api) as sessions:
        runner = web.AppRunner(router_app.build_app(sessions, Secret("router-token")), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        try:
            url = f"http://127.0.0.1:{runner.addresses[0][1]}"
            async with RemoteSessions(url, token="router-token") as remote:
                sandbox = await remote.open(OpenOptions(ttl=300, idle_suspend=2))
                name = (await cluster.sandbox_of(sandbox.id))["metadata"]["name"]

                async def suspended() -> bool:
                    return claims.has_condition(await cluster.sandbox_of(sandbox.id), "Suspended")

                await eventually(suspended, limit_s=SETTLE_S, interval_s=0.2, what="the idle session suspended")
                assert await cluster.pod(name) is None
                assert (await sandbox.commands.run("echo via-server")).stdout == "via-server\n"
                assert await cluster.pod(name) is not None
                assert (await remote.pause(sandbox.id)).paused is True
                assert await cluster.pod(name) is None
                assert (await remote.resume(sandbox.id)).paused is False
                assert claims.has_condition(await cluster.sandbox_of(sandbox.id), "Ready")
                await sandbox.close()
        finally:
            await runner.cleanup()


def test_the_cli_pauses_and_unpauses_by_id_and_refuses_idle_suspend_without_a_server(
    kube_env: KubeEnv, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    with kube_env.namespace(f"pause-cli-{uuid.uuid4().hex[:8]}", labels=RESTRICTED) as namespace:
        kube_env.allow_exec(namespace, work)
        kube_env.provide_volumes(3)
        provider = tmp_path / "agent-sandbox.yaml"
        provider.write_text(
            f"pod:\n  image: runner:test\n  sandboxed: true\n  namespace: {namespace}\n"
            f"  cluster: {{kubeconfig: {kube_env.kubeconfig_path}}}\nreplicas: 1\nready_timeout_seconds: 60\n"
            "home_volume: 1Gi\n"
        )
        env = cli_env()
        on = ("--backend", "agent-sandbox", "--provider", str(provider))
        applied = ironflow("sandbox", "apply-template", "--provider", str(provider), env=env)
        assert applied.returncode == 0, applied.stderr
        opened = ironflow("sandbox", "open", *on, "--ttl", "10m", env=env, timeout=120)
        assert opened.returncode == 0, opened.stderr
        sid = opened.stdout.strip()
        claim = kube_env.request("GET", RES.claims.path(namespace, sid))
        sandbox_path = RES.sandboxes.path(namespace, claims.bound_sandbox(claim))

        paused = ironflow("sandbox", "pause", sid, *on, env=env, timeout=120)
        assert (paused.returncode, paused.stdout.strip()) == (0, f"{sid} paused"), paused.stderr
        assert claims.has_condition(kube_env.request("GET", sandbox_path), "Suspended")
        unpaused = ironflow("sandbox", "unpause", sid, *on, "-o", "json", env=env, timeout=120)
        assert unpaused.returncode == 0, unpaused.stderr
        assert json.loads(unpaused.stdout)["paused"] is False
        assert claims.has_condition(kube_env.request("GET", sandbox_path), "Ready")

        refused = ironflow("sandbox", "open", *on, "--idle-suspend", "5m", env=env)
        assert refused.returncode == 2
        assert refused.stderr.strip().splitlines() == [
            "error: --idle-suspend needs a server to hold the session: use --server (a `sandbox serve`)"
        ]
        closed = ironflow("sandbox", "close", sid, *on, env=env)
        assert closed.returncode == 0, closed.stderr
