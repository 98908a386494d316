"""The swappable backend of the session contract suite (``test_session_contract.py``).

:func:`session_case` yields a :class:`SessionCase` for each backend: local bubblewrap
and gVisor sessions (skipped with the reason when runsc is missing), Kubernetes sessions on
the in-process test server (``local_exec`` runs each exec on this machine, in the case's work
dir), and on the real kube-apiserver with kwok (its ``ClusterExec`` rule does the same;
skipped with the reason when the binaries are not built), and agent-sandbox sessions (a claim
adopting a warm pool's pod) with the scripted stand-in controller on the test server and with
the real controller on the kube-apiserver tier.
and local Docker sessions (marked ``docker``: the suite's daemon, :mod:`tests.fakes.docker_daemon`).
A case opens, reattaches and closes sessions, says what a command's working directory is,
and what of its sessions is left once they are gone (processes and directories, or pods),
asked the backend's own way so one assertion holds on every backend.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from tests.fakes.agent_sandbox_gc import wait_for_claim_cascade

from ironflow import labels
from ironflow.agent_sandbox import claims
from ironflow.agent_sandbox.claim_provider import AgentSandboxProvider
from ironflow.agent_sandbox.claim_sessions import AgentSandboxSessions
from ironflow.agent_sandbox.step_render import AgentSandboxSettings
from ironflow.claude import layout
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.k8s.sessions.pod_sessions import K8sSessions
from ironflow.k8s.settings import ProviderSettings
from ironflow.kube import api as kube
from ironflow.local.sandbox_provider import Isolation, LocalSandboxProvider
from ironflow.local.sessions import docker_runtime
from ironflow.local.sessions.local_sessions import LocalSessions
from ironflow.sessions import OpenOptions, SessionInfo
from ironflow.sessions.client import AsyncSandbox
from ironflow.testing.agent_sandbox_controller import AgentSandboxController
from ironflow.testing.kube import KubeTestServer, local_exec
from ironflow.testing.processes import running

__all__ = ["BACKENDS", "SessionCase", "open_case", "wipe"]

BACKENDS: list[Any] = [
    "local",
    pytest.param("local-gvisor", marks=pytest.mark.gvisor),
    pytest.param(
        "local-docker",
        marks=[
            pytest.mark.docker,
            pytest.mark.skipif(os.geteuid() != 0, reason="Docker sessions need a worker running as root"),
        ],
    ),
    "k8s-test-server",
    "k8s-real-apiserver",
    "agent-sandbox-test-server",
    "agent-sandbox-real-controller",
]


def wipe(root: Path) -> None:
    """Everything under ``root`` removed: what a pod's deletion does to its files (kwok's pods share a directory)."""
    for path in root.iterdir():
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


@dataclass
class SessionCase:
    """One backend's sessions, with what the contract asks of it beyond the handle."""

    backend: str
    #: Built by the backend's provider (``provider.sessions()``), as every caller gets them.
    sessions: LocalSessions | K8sSessions | AgentSandboxSessions
    work_dir: str
    api: kube.KubeApi | None = None
    namespace: str = ""
    #: A kubeconfig file of the cluster, for another process to reach it (k8s only).
    kubeconfig: Path | None = None
    state_dir: Path | None = None
    _pids: dict[str, list[int]] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        """A session environment the backend takes (agent-sandbox's pod has the template's)."""
        return {} if isinstance(self.sessions, AgentSandboxSessions) else {"B": "2"}

    async def open(self, options: OpenOptions | None = None) -> AsyncSandbox:
        sandbox = await self.sessions.open(options)
        if isinstance(self.sessions, LocalSessions):
            self._pids[sandbox.id] = self.sessions.host_pids(sandbox.id)
        return sandbox

    async def connect(self, session_id: str) -> AsyncSandbox:
        return await self.sessions.connect(session_id)

    def listed(self) -> list[SessionInfo]:
        return self.sessions.held()

    async def leftovers(self) -> list[str]:
        """What is left of every session this case opened and that has ended."""
        if isinstance(self.sessions, AgentSandboxSessions):
            assert self.api is not None
            return await _claim_leftovers(self.api, self.namespace)
        if self.api is not None:
            listed = await self.api.list(kube.PODS, self.namespace, label_selector=labels.SANDBOX_SESSION_SELECTOR)
            return [f"pod {p['metadata']['name']}" for p in listed.items]
        open_ids = {info.id for info in self.listed()}
        ended = [pid for sid, pids in self._pids.items() if sid not in open_ids for pid in pids]
        assert self.state_dir is not None
        entries = [] if open_ids else [f"dir {p.name}" for p in self.state_dir.iterdir()]
        return entries + [f"pid {pid}" for pid in ended if running(pid)] + self._containers(open_ids)

    def _containers(self, open_ids: set[str]) -> list[str]:
        """Under Docker, the session containers on the daemon beyond one per open session."""
        if self.backend != "local-docker":
            return []
        filters = [arg for f in docker_runtime.FILTERS for arg in ("--filter", f)]
        listed = subprocess.run(
            ["docker", "ps", "--all", "--quiet", *filters], capture_output=True, text=True, check=True
        )
        found = listed.stdout.split()
        return [f"container {c}" for c in found] if len(found) > len(open_ids) else []

    async def nothing_left(self) -> bool:
        return not await self.leftovers()


async def _claim_leftovers(api: kube.KubeApi, namespace: str) -> list[str]:
    """Session claims, and the Sandboxes (with their pods) still owned by a claim."""
    res = claims.resources()
    listed = await api.list(res.claims, namespace, label_selector=labels.SANDBOX_CLAIM_SELECTOR)
    left = [f"claim {c['metadata']['name']}" for c in listed.items]
    for sandbox in (await api.list(res.sandboxes, namespace)).items:
        refs = sandbox["metadata"].get("ownerReferences") or []
        if any(r.get("kind") == "SandboxClaim" for r in refs):
            left.append(f"sandbox {sandbox['metadata']['name']}")
    return left


def agent_sandbox_settings(namespace: str) -> AgentSandboxSettings:
    """A warm pool of one member, the test image (kwok and the stand-in never pull it)."""
    pod = K8sEphemeralProvider.sandboxed("runner:test").namespace(namespace)
    return AgentSandboxProvider(pod).warm_pool(replicas=1).ready_timeout(30).settings


def _k8s(api: kube.KubeApi, namespace: str) -> K8sSessions:
    return K8sEphemeralProvider(ProviderSettings(image="runner:test", namespace=namespace)).sessions(api=api)


@contextlib.asynccontextmanager
async def open_case(request: pytest.FixtureRequest, backend: str, tmp_path: Path) -> AsyncIterator[SessionCase]:
    """The case of ``backend``; every session it holds is closed at the end."""
    if backend in ("local", "local-gvisor", "local-docker"):
        isolations: dict[str, Isolation] = {"local": "bwrap", "local-gvisor": "gvisor", "local-docker": "docker"}
        isolation = isolations[backend]
        tool = {"gvisor": "runsc", "bwrap": "bwrap"}.get(isolation)
        if tool is not None and shutil.which(tool) is None:
            pytest.skip(f"{tool} not installed ({'gVisor' if tool == 'runsc' else 'bubblewrap'})")
        short = Path(tempfile.mkdtemp(prefix="ifs-test-"))  # a unix socket path holds at most 107 bytes
        provider = LocalSandboxProvider(isolation=isolation)
        try:
            async with provider.sessions(state_dir=str(short)) as local:
                yield SessionCase(backend, local, layout.SANDBOX_HOME, state_dir=short)
        finally:
            shutil.rmtree(short, ignore_errors=True)
        return
    work = tmp_path / "work"
    work.mkdir()
    if backend == "agent-sandbox-test-server":
        async with KubeTestServer() as server:
            server.create_namespace("pool")
            server.serve_exec(local_exec(cwd=str(work)))
            controller = AgentSandboxController(server, namespace="pool", cold_start_s=0.05)
            client = await kube.KubeApi.connect(server.cluster_config())
            async with controller, client:
                settings = agent_sandbox_settings("pool")
                await AgentSandboxProvider(settings).apply_template(client)
                async with AgentSandboxProvider(settings).sessions(api=client) as pooled:
                    yield SessionCase(backend, pooled, str(work), client, "pool")
                assert not controller.failures, controller.failures
        return
    if backend == "agent-sandbox-real-controller":
        env = request.getfixturevalue("kube_env")  # skipped, with the reason, when not built
        with env.namespace(f"pool-{uuid.uuid4().hex[:8]}") as namespace:
            await asyncio.to_thread(wait_for_claim_cascade, env, namespace)  # or a closed claim leaves its Sandbox
            await asyncio.to_thread(env.allow_exec, namespace, work)
            client = await kube.KubeApi.connect(env.cluster_config())
            async with client:
                settings = agent_sandbox_settings(namespace)
                await AgentSandboxProvider(settings).apply_template(client)
                async with AgentSandboxProvider(settings).sessions(api=client) as pooled:
                    yield SessionCase(backend, pooled, str(work), client, namespace)
        return
    if backend == "k8s-real-apiserver":
        env = request.getfixturevalue("kube_env")  # skipped, with the reason, when not built
        with env.namespace(f"sessions-{uuid.uuid4().hex[:8]}") as namespace:
            await asyncio.to_thread(env.allow_exec, namespace, work)
            client = await kube.KubeApi.connect(env.cluster_config())
            async with client, _k8s(client, namespace) as sessions:
                kubeconfig = env.kubeconfig_path
                yield SessionCase(backend, sessions, str(work), client, namespace, kubeconfig)
        return
    async with KubeTestServer() as server:
        server.create_namespace("sessions")
        server.serve_exec(local_exec(cwd=str(work)))
        server.script_pods(name_prefix="sbx-", run_for=None)  # Running until deleted
        client = await kube.KubeApi.connect(server.cluster_config())
        kubeconfig = tmp_path / "kubeconfig.yaml"
        kubeconfig.write_text(server.kubeconfig_yaml(namespace="sessions"))
        async with client, _k8s(client, "sessions") as sessions:
            yield SessionCase(backend, sessions, str(work), client, "sessions", kubeconfig)
