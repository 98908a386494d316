"""``ironflow exec --backend k8s --provider FILE -- CMD``: the command runs once in a
hardened pod on the cluster the file names (test server, in a thread), its log on stdout,
exit codes as the local backend's, and nothing left behind."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from typer.testing import CliRunner

from ironflow.cli.app import app
from ironflow.k8s import api as k8s
from ironflow.testing.kube import KubeTestServer, PodScript

T = TypeVar("T")
NS = "agents"


class ServerThread:
    """A KubeTestServer on its own event loop, so the CLI can run its own ``asyncio.run``."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server = self.call(KubeTestServer(namespaces=("default", NS)).start())

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=30)

    def script(self, **kwargs: Any) -> None:
        self.loop.call_soon_threadsafe(lambda: self.server.script_pods(PodScript(name_prefix="exec-", **kwargs)))

    def created_pods(self) -> list[dict[str, Any]]:
        return [e.obj for e in list(self.server.store.history) if e.kind == "ADDED" and e.obj.get("kind") == "Pod"]

    def close(self) -> None:
        self.call(self.server.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[ServerThread, Path]]:
    st = ServerThread()
    (tmp_path / "kubeconfig.yaml").write_text(st.server.kubeconfig_yaml())
    provider = tmp_path / "provider.yaml"
    provider.write_text(
        "image: busybox:1.37\nsandboxed: true\n"
        f"namespace: {NS}\nruntime_class: gvisor\npod_labels: {{team: infra}}\n"
        "cluster: {kubeconfig: kubeconfig.yaml, context: kube-test}\n"
    )
    try:
        yield st, provider
    finally:
        st.close()


def _exec(provider: Path, *argv: str, timeout: str = "5") -> Any:
    args = ["exec", "--backend", "k8s", "--provider", str(provider), "--timeout", timeout, "--", *argv]
    return CliRunner().invoke(app, args)


def test_succeeding_command_prints_its_log_exits_0_and_leaves_no_pod(served: tuple[ServerThread, Path]) -> None:
    st, provider = served
    st.script(run_for=0.05, log="10001\nhello\n")
    result = _exec(provider, "sh", "-c", "id -u; echo hello")
    assert result.exit_code == 0, result.output
    assert result.stdout == "10001\nhello\n"
    (pod,) = st.created_pods()
    assert pod["metadata"]["namespace"] == NS
    assert pod["metadata"]["labels"]["team"] == "infra"
    assert pod["spec"]["runtimeClassName"] == "gvisor"
    assert pod["spec"]["containers"][0]["command"] == ["/bin/sh", "-c", "sh -c 'id -u; echo hello'"]
    assert pod["spec"]["securityContext"]["runAsUser"] == 10001
    assert pod["spec"]["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
    assert st.server.objects(k8s.PODS, NS) == []


def test_failing_command_prints_its_log_and_exits_1_naming_the_pod(served: tuple[ServerThread, Path]) -> None:
    st, provider = served
    st.script(run_for=0.05, phase="Failed", exit_code=7, log="oops\n")
    result = _exec(provider, "sh", "-c", "echo oops; exit 7")
    assert result.exit_code == 1
    assert result.stdout == "oops\n"
    assert result.stderr.startswith("error: the command failed in pod exec-")
    assert "(phase Failed)" in result.stderr
    assert st.server.objects(k8s.PODS, NS) == []


def test_command_past_its_timeout_exits_1_timed_out_and_its_pod_is_deleted(
    served: tuple[ServerThread, Path],
) -> None:
    st, provider = served
    st.script(run_for=None)
    result = _exec(provider, "sleep", "30", timeout="0.3")
    assert result.exit_code == 1
    assert result.stderr.startswith("error: timed out: pod 'exec-")
    assert st.server.objects(k8s.PODS, NS) == []


def test_unreachable_cluster_is_infrastructure_exit_3(tmp_path: Path) -> None:
    provider = tmp_path / "provider.yaml"
    (tmp_path / "kubeconfig.yaml").write_text(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: 'http://127.0.0.1:9'}\n"
        "users:\n- name: u\n  user: {token: t}\ncontexts:\n- name: c\n  context: {cluster: c, user: u}\n"
        "current-context: c\n"
    )
    provider.write_text("image: busybox\ncluster: {kubeconfig: kubeconfig.yaml}\n")
    result = _exec(provider, "true")
    assert result.exit_code == 3, result.output
    assert result.stderr.startswith("error: ")
    assert result.stderr.count("\n") == 1


def test_missing_provider_file_option_is_bad_input() -> None:
    result = CliRunner().invoke(app, ["exec", "--backend", "k8s", "--", "true"])
    assert result.exit_code == 2
    assert result.stderr == "error: --backend k8s needs --provider provider.yaml (see docs/k8s-provider.md)\n"
