"""``ironflow agent --backend agent-sandbox --workspace GIT_URL@REF --push BRANCH -o json``: the
command line end to end on the kube test server (in a thread: the CLI calls ``asyncio.run``)
with the scripted controller, the real auth proxy and a real ``git http-backend`` on the
server's loop, each exec in bubblewrap on its pod's HOME with the idle loop as PID 1. The JSON
names the pushed branch and the branch holds the change; the git host's token, given in
``IRONFLOW_GIT_TOKEN``, reaches no exec."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.agent_sandbox.integration.test_agent_sandbox_git_workspace import (
    ADMIN,
    CALC,
    CLAUDE,
    branch_tree,
    pod_exec,
    pytestmark,
    write_claude,
)
from tests.agent_sandbox.integration.test_agent_sandbox_workspace_execs import HOST, PASSWORD, USER
from tests.fakes.git_server import GitServer, seed_forge
from typer.testing import CliRunner

from ironflow.auth_proxy import AuthProxyConfig, run_auth_proxy
from ironflow.cli.app import app
from ironflow.secrets import Secret
from ironflow.testing.agent_sandbox_controller import AgentSandboxController
from ironflow.testing.threaded_kube import ThreadedKube

__all__ = ["pytestmark"]  # the git workspace tests' marks

NS = "agents"


@dataclass
class Setup:
    kube: ThreadedKube
    root: Path
    provider: Path
    seen: list[tuple[list[str], bytes]]


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Setup]:
    seed_forge(tmp_path, HOST, {"calc.py": CALC.decode()})
    claude = write_claude(tmp_path, "echo fixed >> calc.py")
    seen: list[tuple[list[str], bytes]] = []
    kube = ThreadedKube(namespaces=(NS,))
    controller = kube.soon(lambda: AgentSandboxController(kube.server, namespace=NS, cold_start_s=0.05))
    stack = contextlib.AsyncExitStack()
    try:
        server = kube.call(stack.enter_async_context(GitServer(tmp_path / "forge", username=USER, password=PASSWORD)))
        config = AuthProxyConfig(admin_key=Secret(ADMIN), secret_upstream=server.url)
        proxy = kube.call(stack.enter_async_context(run_auth_proxy(config)))
        (tmp_path / "kubeconfig.yaml").write_text(kube.kubeconfig_yaml())
        kube.soon(lambda: kube.server.serve_exec(pod_exec(tmp_path / "pods", claude, seen)))
        kube.call(controller.start())
        provider = tmp_path / "sandbox.yaml"
        provider.write_text(
            "pod:\n"
            "  image: ghcr.io/acme/claude-runner:2.1.332-1\n"
            "  sandboxed: true\n"
            f"  namespace: {NS}\n"
            f"  claude_path: {CLAUDE}\n"
            "  timeout_seconds: 60\n"
            f"  auth_proxy: {proxy.url}\n"
            "  cluster: {kubeconfig: kubeconfig.yaml, context: kube-test}\n"
            "replicas: 1\n"
            "ready_timeout_seconds: 30\n"
        )
        monkeypatch.setenv("IRONFLOW_AUTH_PROXY_ADMIN_KEY", ADMIN)
        monkeypatch.setenv("IRONFLOW_GIT_TOKEN", PASSWORD)
        monkeypatch.setenv("IRONFLOW_GIT_USERNAME", USER)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-api03-cli-test")  # the step token's credential, in the proxy
        yield Setup(kube, tmp_path, provider, seen)
        assert not controller.failures, controller.failures
        assert not (errors := kube.soon(lambda: list(kube.server.internal_errors))), errors
    finally:
        try:
            kube.call(controller.stop())
            kube.call(stack.aclose())
        finally:
            kube.close()


def test_agent_on_agent_sandbox_pushes_a_git_workspaces_change_and_says_so_in_json(setup: Setup) -> None:
    apply = ["sandbox", "apply-template", "--provider", str(setup.provider)]
    applied = CliRunner().invoke(app, [*apply, "--kubeconfig", str(setup.root / "kubeconfig.yaml")])
    assert applied.exit_code == 0, applied.output
    args = ["agent", "--backend", "agent-sandbox", "--provider", str(setup.provider), "-o", "json",
            "--workspace", f"https://{HOST}/org/repo.git@main", "--push", "ironflow/fix-add", "fix add()"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["pushed_branch"] == "ironflow/fix-add"
    assert out["changed_files"] == [{"path": "calc.py", "change": "modified"}]
    assert "+fixed" in out["patch"]
    assert branch_tree(setup.root, "ironflow/fix-add") == {"calc.py": CALC + b"fixed\n"}
    for command, _ in setup.seen:
        assert PASSWORD not in " ".join(command)
    assert PASSWORD not in repr(setup.kube.soon(lambda: list(setup.kube.server.execs)))
    assert PASSWORD not in result.output
