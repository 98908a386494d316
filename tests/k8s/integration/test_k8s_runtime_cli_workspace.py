"""``ironflow exec --backend k8s --workspace GIT_URL``: the patch on stdout (``--patch -``) or in
``-o json``, the command's own output and exit code as without a workspace, and each input a
pod cannot take refused with one line (exit 2) before anything is created. The pod's log is
a report made by the real in-pod scripts (``test_pod_workspace_scripts``); the grant is
issued by, and revoked at, a real auth proxy on loopback."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.workspaces.integration.test_pod_workspace_scripts import pod, step
from typer.testing import CliRunner

from ironflow.auth_proxy import AuthProxyConfig, run_auth_proxy
from ironflow.auth_proxy.app import RunningProxy
from ironflow.cli.app import app
from ironflow.kube import api as k8s
from ironflow.secrets import Secret
from ironflow.testing.kube import PodScript
from ironflow.testing.threaded_kube import ThreadedKube

NS = "agents"
ADMIN = "admin-key-" + "c" * 40
SOURCE = "https://git.example.test/org/repo.git@main"
GIT_TOKEN = "ghs_cli-test-git-host-token"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[ThreadedKube, Path, RunningProxy]]:
    st = ThreadedKube(namespaces=("default", NS))
    stack = contextlib.AsyncExitStack()
    proxy = st.call(stack.enter_async_context(run_auth_proxy(AuthProxyConfig(admin_key=Secret(ADMIN)))))
    (tmp_path / "kubeconfig.yaml").write_text(st.kubeconfig_yaml())
    provider = tmp_path / "provider.yaml"
    provider.write_text(
        f"image: busybox:1.37\nsandboxed: true\nnamespace: {NS}\nauth_proxy: {proxy.url}\n"
        "cluster: {kubeconfig: kubeconfig.yaml, context: kube-test}\n"
    )
    try:
        yield st, provider, proxy
    finally:
        st.call(stack.aclose())
        st.close()


def report(tmp_path: Path, shell: str) -> str:
    """What a workspace pod prints for ``shell``: made by running the pod's own scripts."""
    work, base = pod(tmp_path)
    return step(work, base, shell).stdout


def _exec(provider: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    argv = ["exec", "--backend", "k8s", "--provider", str(provider), "--timeout", "10", *args]
    given = {"IRONFLOW_GIT_TOKEN": GIT_TOKEN, "IRONFLOW_AUTH_PROXY_ADMIN_KEY": ADMIN, **(env or {})}
    return CliRunner().invoke(app, argv, env=given)


def _script(st: ThreadedKube, log: str, **kwargs: Any) -> None:
    st.soon(lambda: st.server.script_pods(PodScript(name_prefix="exec-", run_for=0.05, log=log, **kwargs)))


def _pods(st: ThreadedKube) -> list[dict[str, Any]]:
    history = st.soon(lambda: list(st.server.store.history))
    return [e.obj for e in history if e.kind == "ADDED" and e.obj.get("kind") == "Pod"]


def test_the_patch_goes_to_stdout_and_the_commands_output_to_stderr(
    served: tuple[ThreadedKube, Path, RunningProxy], tmp_path: Path
) -> None:
    st, provider, _ = served
    _script(st, report(tmp_path, "echo fixed >> changed.txt; echo the command said this"))
    result = _exec(provider, "--workspace", SOURCE, "--patch", "-", "--", "make", "fix")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("diff --git a/changed.txt b/changed.txt\n")
    assert "+fixed\n" in result.stdout
    assert result.stderr == "the command said this\n"
    (created,) = _pods(st)
    assert created["spec"]["initContainers"][0]["name"] == "ironflow-workspace-clone"
    assert GIT_TOKEN not in json.dumps(created)
    assert st.objects(k8s.PODS, NS) == []


def test_json_output_carries_the_changes_and_the_exit_code_is_the_commands(
    served: tuple[ThreadedKube, Path, RunningProxy], tmp_path: Path
) -> None:
    st, provider, _ = served
    _script(st, report(tmp_path, "rm gone.txt; echo half"), phase="Failed", exit_code=5)
    result = _exec(provider, "--workspace", SOURCE, "-o", "json", "--", "sh", "-c", "exit 5")
    assert result.exit_code == 5
    out = json.loads(result.stdout)
    assert out["exit_code"] == 5
    assert out["stdout"] == "half\n"
    assert out["changed_files"] == [{"path": "gone.txt", "change": "deleted"}]
    assert out["patch"].startswith("diff --git a/gone.txt b/gone.txt\ndeleted file mode 100644\n")


def test_a_log_without_its_report_fails_the_succeeded_command(served: tuple[ThreadedKube, Path, RunningProxy]) -> None:
    st, provider, _ = served
    _script(st, "no report here\n")
    result = _exec(provider, "--workspace", SOURCE, "--", "true")
    assert result.exit_code == 1
    assert result.stderr.startswith("error: the pod's workspace report is missing")
    assert st.objects(k8s.PODS, NS) == []


@pytest.mark.parametrize(
    ("args", "env", "words"),
    [
        (["--workspace", ".", "--", "true"], {}, "--workspace DIR runs on --backend local"),
        (["--workspace", SOURCE, "--", "true"], {"IRONFLOW_GIT_TOKEN": ""}, "needs the host's token"),
        (["--workspace", SOURCE, "--apply", "--", "true"], {}, "--apply writes a directory"),
        (["--workspace", SOURCE, "--mount", ".:/x", "--", "true"], {}, "--mount runs on --backend local"),
        (
            ["--workspace", SOURCE, "--", "true"],
            {"IRONFLOW_GIT_UPSTREAM": "http://127.0.0.1:1"},
            "IRONFLOW_GIT_UPSTREAM",
        ),
    ],
)
def test_what_a_pod_cannot_take_is_one_line_and_exit_2(
    served: tuple[ThreadedKube, Path, RunningProxy], args: list[str], env: dict[str, str], words: str
) -> None:
    st, provider, _ = served
    result = _exec(provider, *args, env=env)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ")
    assert words in result.stderr
    assert result.stderr.count("\n") == 1
    assert _pods(st) == []


def test_a_provider_without_an_auth_proxy_is_refused(tmp_path: Path) -> None:
    provider = tmp_path / "provider.yaml"
    provider.write_text("image: busybox\n")
    result = _exec(provider, "--workspace", SOURCE, "--", "true")
    assert result.exit_code == 2
    assert result.stderr == (
        "error: a git workspace on --backend k8s needs auth_proxy in the provider file: the pod clones through it\n"
    )


def test_a_pvc_workspace_runs_on_k8s_only_and_cannot_push(served: tuple[ThreadedKube, Path, RunningProxy]) -> None:
    _, provider, _ = served
    local = CliRunner().invoke(app, ["exec", "--workspace", "pvc:sources", "--", "true"])
    assert local.exit_code == 2
    assert local.stderr == (
        "error: --workspace pvc:NAME runs on --backend k8s: a PersistentVolumeClaim is mounted in the pod\n"
    )
    pushed = _exec(provider, "--workspace", "pvc:sources", "--push", "fix", "--", "true")
    assert pushed.exit_code == 2
    assert pushed.stderr.startswith("error: --push needs a git workspace")


def test_a_pvc_workspace_exec_prints_its_patch(served: tuple[ThreadedKube, Path, RunningProxy], tmp_path: Path) -> None:
    st, provider, _ = served
    _script(st, report(tmp_path, "echo fixed >> changed.txt"))
    result = _exec(provider, "--workspace", "pvc:sources/repo", "--patch", "-", "--", "make")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("diff --git a/changed.txt b/changed.txt\n")
    (created,) = _pods(st)
    claim = next(v for v in created["spec"]["volumes"] if "persistentVolumeClaim" in v)
    assert claim["persistentVolumeClaim"] == {"claimName": "sources"}


JSON_TEXT = (Path(__file__).resolve().parents[2] / "fixtures" / "claude" / "json_text.out").read_text()


def test_an_agent_step_on_k8s_writes_its_patch_and_answers_in_json(
    served: tuple[ThreadedKube, Path, RunningProxy], tmp_path: Path
) -> None:
    """``ironflow agent --backend k8s --workspace GIT_URL``: the provider gets the host's token
    (kept in the proxy), the pod clones, and the patch lands in the file ``--patch`` names."""
    st, provider, _ = served
    st.soon(
        lambda: st.server.script_pods(
            PodScript(name_prefix="claude-code-", run_for=0.05, log=JSON_TEXT + report(tmp_path, "rm gone.txt"))
        )
    )
    out = tmp_path / "fix.patch"
    argv = ["agent", "--backend", "k8s", "--provider", str(provider), "--workspace", SOURCE,
            "--patch", str(out), "-o", "json", "fix it"]  # fmt: skip
    env = {"IRONFLOW_GIT_TOKEN": GIT_TOKEN, "IRONFLOW_AUTH_PROXY_ADMIN_KEY": ADMIN, "ANTHROPIC_API_KEY": "sk-ant-x"}
    result = CliRunner().invoke(app, argv, env=env)
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert answer["changed_files"] == [{"path": "gone.txt", "change": "deleted"}]
    assert out.read_text() == answer["patch"]
    (created,) = _pods(st)
    assert created["spec"]["containers"][0]["workingDir"] == "/workspace"
    assert GIT_TOKEN not in json.dumps(created)
