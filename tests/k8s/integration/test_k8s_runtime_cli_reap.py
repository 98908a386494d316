"""``ironflow reap`` end to end: the command against the Kubernetes API test server (in a thread)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ironflow.cli.app import app
from ironflow.k8s.commands.pod_runs import PodRun
from ironflow.kube import api as k8s
from ironflow.testing.kube import KubeTestServer
from ironflow.testing.polling import eventually
from ironflow.testing.threaded_kube import ThreadedKube

NS = "agents"


class ServerThread(ThreadedKube):
    """The test server in a thread, plus object creation through a real client."""

    def __init__(self) -> None:
        super().__init__(namespaces=("default", NS))

    async def _create(self, resource: k8s.Resource, body: dict[str, Any]) -> None:
        client = await k8s.KubeApi.connect(self.server.cluster_config())
        async with client:
            await client.create(resource, NS, body)

    def create(self, resource: k8s.Resource, body: dict[str, Any]) -> None:
        self.call(self._create(resource, body))


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[ServerThread, Path]]:
    st = ServerThread()
    kubeconfig = tmp_path / "kubeconfig.yaml"
    kubeconfig.write_text(st.kubeconfig_yaml())
    try:
        yield st, kubeconfig
    finally:
        st.close()


def test_reap_deletes_expired_pods_and_prints_json(served: tuple[ServerThread, Path]) -> None:
    st, kubeconfig = served
    st.create(k8s.PODS, PodRun("old", "busybox", "true").namespace(NS).build_pod(now=1000))
    st.create(k8s.PODS, PodRun("live", "busybox", "true").namespace(NS).build_pod())
    result = CliRunner().invoke(app, ["reap", "-n", NS, "--kubeconfig", str(kubeconfig), "-o", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout.strip().splitlines()[-1])
    assert data["pods"] == ["old"]
    assert [p["metadata"]["name"] for p in st.objects(k8s.PODS, NS)] == ["live"]


def test_reap_dry_run_deletes_nothing(served: tuple[ServerThread, Path]) -> None:
    st, kubeconfig = served
    st.create(k8s.PODS, PodRun("old", "busybox", "true").namespace(NS).build_pod(now=1000))
    result = CliRunner().invoke(app, ["reap", "-n", NS, "--kubeconfig", str(kubeconfig), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "would delete" in result.stdout
    assert "old" in result.stdout
    assert len(st.objects(k8s.PODS, NS)) == 1


def test_reap_in_a_namespace_that_does_not_exist_is_bad_input(served: tuple[ServerThread, Path]) -> None:
    st, kubeconfig = served
    result = CliRunner().invoke(app, ["reap", "-n", "no-such-namespace", "--kubeconfig", str(kubeconfig)])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.strip() == "error: namespace 'no-such-namespace' does not exist in this cluster"
    assert st.soon(lambda: st.server.count("list", "pods")) == 0


def test_reap_reports_an_api_failure_with_exit_3(served: tuple[ServerThread, Path]) -> None:
    st, kubeconfig = served
    st.soon(lambda: st.server.fail("list", "pods", status=500))
    result = CliRunner().invoke(app, ["reap", "-n", NS, "--kubeconfig", str(kubeconfig)])
    assert result.exit_code == 3  # infrastructure, as every command reports it
    assert "failed to list ironflow pods" in result.output


async def test_reap_every_runs_pass_after_pass_until_stopped(capsys: pytest.CaptureFixture[str]) -> None:
    """``--every``: one report per pass on stdout, until the command is interrupted."""
    from ironflow.cli import reap as reap_cli

    async with KubeTestServer(namespaces=("default", NS)) as server:
        task = asyncio.ensure_future(
            reap_cli._reap(server.cluster_config(), NS, dry_run=True, every=0.05, fmt=reap_cli.OutputFormat.JSON)
        )
        await eventually(lambda: server.count("list", "pods") >= 3, what="three passes")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    reports = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert len(reports) >= 2
    assert all(r["namespace"] == NS and r["dry_run"] for r in reports)
