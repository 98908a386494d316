"""A provider loaded from YAML connects to the cluster its ``cluster:`` section names
(test server): the step runs there, and a wrong context fails as a client-config error."""

from __future__ import annotations

from pathlib import Path

import pytest

from ironflow import errors
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.kube import api as k8s
from ironflow.steps import AgentConfig
from ironflow.testing.kube import KubeTestServer, PodScript

JSON_TEXT = (Path(__file__).resolve().parents[2] / "fixtures" / "claude" / "json_text.out").read_text()
IMAGE = "ghcr.io/acme/claude-runner:2.1.332-1"


def _provider_file(tmp_path: Path, server: KubeTestServer, cluster: str) -> Path:
    (tmp_path / "kube").mkdir()
    (tmp_path / "kube" / "config.yaml").write_text(server.kubeconfig_yaml())
    path = tmp_path / "provider.yaml"
    path.write_text(f"image: {IMAGE}\nsandboxed: true\nnamespace: default\ntimeout_seconds: 5\ncluster: {cluster}\n")
    return path


async def test_step_runs_on_the_kubeconfig_named_in_the_provider_file(tmp_path: Path) -> None:
    async with KubeTestServer() as server:
        server.script_pods(PodScript(name_prefix="claude-code", run_for=0.05, log=JSON_TEXT))
        path = _provider_file(tmp_path, server, "{kubeconfig: kube/config.yaml, context: kube-test}")
        async with K8sEphemeralProvider.from_file(path) as p:
            result = await p.run(AgentConfig("Say hello"))
        assert result.text == "Hello from the fake model."
        assert server.count("create", "pods") == 1
        assert server.objects(k8s.PODS, "default") == []


async def test_unknown_context_in_the_provider_file_fails_before_any_pod(tmp_path: Path) -> None:
    async with KubeTestServer() as server:
        path = _provider_file(tmp_path, server, "{kubeconfig: kube/config.yaml, context: nowhere}")
        async with K8sEphemeralProvider.from_file(path) as p:
            with pytest.raises(errors.KubeClientConfigError, match="failed to create K8s client from kubeconfig file"):
                await p.run(AgentConfig("Say hello"))
        assert server.count("create", "pods") == 0
