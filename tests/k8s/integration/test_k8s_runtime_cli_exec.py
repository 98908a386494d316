"""``ironflow exec --backend k8s --provider FILE -- CMD``: the command runs once in a
hardened pod on the cluster the file names (test server, in a thread), its log on stdout,
exit codes as the local backend's, and nothing left behind."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ironflow.cli.app import app
from ironflow.kube import api as k8s
from ironflow.testing.kube import PodScript
from ironflow.testing.polling import eventually_sync
from ironflow.testing.threaded_kube import ThreadedKube

NS = "agents"


def _script(kube: ThreadedKube, **kwargs: Any) -> None:
    kube.soon(lambda: kube.server.script_pods(PodScript(name_prefix="exec-", **kwargs)))


def _created_pods(kube: ThreadedKube) -> list[dict[str, Any]]:
    history = kube.soon(lambda: list(kube.server.store.history))
    return [e.obj for e in history if e.kind == "ADDED" and e.obj.get("kind") == "Pod"]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[ThreadedKube, Path]]:
    st = ThreadedKube(namespaces=("default", NS))
    (tmp_path / "kubeconfig.yaml").write_text(st.kubeconfig_yaml())
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


def test_succeeding_command_prints_its_log_exits_0_and_leaves_no_pod(served: tuple[ThreadedKube, Path]) -> None:
    st, provider = served
    _script(st, run_for=0.05, log="10001\nhello\n")
    result = _exec(provider, "sh", "-c", "id -u; echo hello")
    assert result.exit_code == 0, result.output
    assert result.stdout == "10001\nhello\n"
    (pod,) = _created_pods(st)
    assert pod["metadata"]["namespace"] == NS
    assert pod["metadata"]["labels"]["team"] == "infra"
    assert pod["spec"]["runtimeClassName"] == "gvisor"
    assert pod["spec"]["containers"][0]["command"] == ["/bin/sh", "-c", "sh -c 'id -u; echo hello'"]
    assert pod["spec"]["securityContext"]["runAsUser"] == 10001
    assert pod["spec"]["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
    assert st.objects(k8s.PODS, NS) == []


def test_failing_command_exits_with_its_own_code_and_prints_its_log(served: tuple[ThreadedKube, Path]) -> None:
    """As with the local backend, ``exit 7`` in the pod is exit 7 here."""
    st, provider = served
    _script(st, run_for=0.05, phase="Failed", exit_code=7, log="oops\n")
    result = _exec(provider, "sh", "-c", "echo oops; exit 7")
    assert result.exit_code == 7
    assert result.stdout == "oops\n"
    assert result.stderr.startswith("error: the command exited with 7 in pod exec-")
    assert st.objects(k8s.PODS, NS) == []


def test_failed_pod_without_an_exit_code_exits_1_naming_the_pod_and_phase(served: tuple[ThreadedKube, Path]) -> None:
    """A failed pod with no failing exit code to pass on (e.g. evicted) is a failed step: exit 1."""
    st, provider = served
    _script(st, run_for=0.05, phase="Failed", exit_code=0, log="")
    result = _exec(provider, "true")
    assert result.exit_code == 1
    assert result.stderr.startswith("error: the command failed in pod exec-")
    assert "(phase Failed)" in result.stderr
    assert st.objects(k8s.PODS, NS) == []


def test_command_past_its_timeout_exits_1_timed_out_and_its_pod_is_deleted(
    served: tuple[ThreadedKube, Path],
) -> None:
    st, provider = served
    _script(st, run_for=None)
    result = _exec(provider, "sleep", "30", timeout="0.3")
    assert result.exit_code == 1
    assert result.stderr.startswith("error: timed out: pod 'exec-")
    (pod,) = _created_pods(st)  # still running when deleted: gone once its kubelet stopped it
    eventually_sync(lambda: st.objects(k8s.PODS, NS) == [], limit_s=5, what=f"pod {pod['metadata']['name']} gone")


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
