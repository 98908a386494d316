"""``ironflow sandbox apply-template`` and ``reap`` against the Kubernetes test server (with the shipped CRDs)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from tests.fakes.sandbox_cli import run_sandbox

from ironflow.agent_sandbox import claims, schemas
from ironflow.agent_sandbox import step_render as sandbox_steps
from ironflow.agent_sandbox.claim_provider import AgentSandboxProvider
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.kube import api as k8s
from ironflow.steps import AgentConfig
from ironflow.testing.kube import KubeTestServer


async def run(*args: str) -> tuple[int, str, str]:
    """The command in a thread: the test's own loop serves the cluster it talks to."""
    return await asyncio.to_thread(run_sandbox, *args)


async def test_apply_template_creates_updates_and_reports_api_failures(tmp_path: Path) -> None:
    async with KubeTestServer() as server:
        for crd in schemas.crd_documents("v1.0.3"):
            server.register_crd(crd)
        server.create_namespace("agents")
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(server.kubeconfig_yaml())
        base = ("apply-template", "--kubeconfig", str(kubeconfig), "-n", "agents", "--template", "claude")
        code, out, err = await run(*base, "--replicas", "2")
        assert code == 0, err
        assert out.splitlines() == ["sandboxtemplate/claude created", "sandboxwarmpool/claude created"]
        code, out, _ = await run(*base, "--replicas", "3")
        assert out.splitlines() == ["sandboxtemplate/claude unchanged", "sandboxwarmpool/claude updated"]
        pool = server.get_object(claims.resources().pools, "agents", "claude")
        assert pool is not None
        assert pool["spec"]["replicas"] == 3
        server.deny("sandboxwarmpools", "patch")
        code, out, err = await run(*base, "--replicas", "4")
        assert code == 3  # infrastructure, as every command reports it
        assert "error: patch sandboxwarmpools agents/claude: HTTP 403" in err


async def test_apply_template_talks_to_the_cluster_the_provider_file_names(tmp_path: Path) -> None:
    """Without --kubeconfig the file's cluster is used, as `agent` and `run` use it; --kubeconfig wins."""
    async with KubeTestServer() as server, KubeTestServer() as other:
        for s in (server, other):
            for crd in schemas.crd_documents("v1.0.3"):
                s.register_crd(crd)
            s.create_namespace("agents")
        (tmp_path / "kc.yaml").write_text(server.kubeconfig_yaml())
        (tmp_path / "other.yaml").write_text(other.kubeconfig_yaml())
        provider = tmp_path / "sandbox.yaml"
        provider.write_text(
            "image: busybox\nsandboxed: true\nnamespace: agents\ncluster: {kubeconfig: kc.yaml, context: kube-test}\n"
        )
        code, out, err = await run("apply-template", "--provider", str(provider), "--template", "claude")
        assert code == 0, err
        assert out.splitlines() == ["sandboxtemplate/claude created", "sandboxwarmpool/claude created"]
        assert server.get_object(claims.resources().templates, "agents", "claude") is not None
        assert other.get_object(claims.resources().templates, "agents", "claude") is None
        args = ("apply-template", "--provider", str(provider), "--template", "claude")
        code, _, err = await run(*args, "--kubeconfig", str(tmp_path / "other.yaml"))
        assert code == 0, err
        assert other.get_object(claims.resources().templates, "agents", "claude") is not None


async def test_sandbox_reap_deletes_only_expired_ironflow_claims(tmp_path: Path) -> None:
    async with KubeTestServer() as server:
        for crd in schemas.crd_documents("v1.0.3"):
            server.register_crd(crd)
        server.create_namespace("agents")
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(server.kubeconfig_yaml())
        p = AgentSandboxProvider(K8sEphemeralProvider.sandboxed("img").namespace("agents"))
        now = int(time.time())
        async with await k8s.KubeApi.connect(server.cluster_config()) as api:
            await api.create(
                p.resources.claims,
                "agents",
                sandbox_steps.claim_manifest(p.settings, AgentConfig("x"), name="old", now=now - 9000),
            )
            await api.create(
                p.resources.claims,
                "agents",
                sandbox_steps.claim_manifest(p.settings, AgentConfig("x"), name="new", now=now),
            )
            foreign = sandbox_steps.claim_manifest(p.settings, AgentConfig("x"), name="foreign", now=now - 9000)
            foreign["metadata"]["labels"] = {"team": "a"}
            await api.create(p.resources.claims, "agents", foreign)
        base = ("reap", "--kubeconfig", str(kubeconfig), "-n", "agents")
        code, out, _ = await run(*base, "--dry-run")
        assert (code, out) == (0, "sandboxclaim/old would delete\n")
        assert len(server.objects(p.resources.claims, "agents")) == 3
        code, out, _ = await run(*base)
        assert (code, out) == (0, "sandboxclaim/old deleted\n")
        assert sorted(c["metadata"]["name"] for c in server.objects(p.resources.claims, "agents")) == ["foreign", "new"]
        code, _, err = await run("reap", "-n", "Bad_NS")
        assert code == 2
        assert "invalid namespace 'Bad_NS'" in err
