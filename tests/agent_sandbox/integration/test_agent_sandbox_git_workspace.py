"""A git workspace on an agent-sandbox step, end to end on the kube test server with the
scripted controller: each exec into the claimed pod runs in bubblewrap on that pod's own HOME
(a host dir per pod, as its emptyDir), with the warm pod's idle loop as PID 1. The clone goes
through the real auth proxy's relay to a real ``git http-backend``; the step's patch comes back
in its result; the clone's grant and the step's token are revoked; the git host's password is
in no exec, argv or stdin."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from tests.agent_sandbox.integration.test_agent_sandbox_workspace_execs import HOST, PASSWORD, USER
from tests.fakes.git_server import GitServer, seed_forge
from tests.k8s.integration.test_k8s_runtime_workspaces import Grants

from ironflow.agent_sandbox import patterns
from ironflow.agent_sandbox.provider import AgentSandboxProvider
from ironflow.auth_proxy import AuthProxyConfig, run_auth_proxy
from ironflow.auth_proxy.client import AdminClient
from ironflow.auth_proxy.git_hosts import GitCredential, GitHosts
from ironflow.claude import layout
from ironflow.k8s.provider import K8sEphemeralProvider
from ironflow.kube import api as k8s
from ironflow.secrets import Secret
from ironflow.steps import AgentConfig
from ironflow.testing.agent_sandbox_controller import AgentSandboxController
from ironflow.testing.kube import KubeTestServer
from ironflow.workspaces import Change, Workspace

pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed"),
    pytest.mark.skipif(shutil.which("git") is None, reason="git not installed"),
]

ADMIN = "admin-key-" + "g" * 40
NS = "pool"
JSON_TEXT = (Path(__file__).resolve().parents[2] / "fixtures" / "claude" / "json_text.out").read_text()
RC = f"{layout.SANDBOX_HOME}/.ironflow-exec-rc"
#: In the "pod": PID 1 becomes the idle loop; the exec is its child, stdin passed through fd 3.
INNER = f'exec 3<&0; {{ "$@" <&3 3<&-; echo "$?" > {RC}; kill -TERM 1; }} & exec sh -c "$IRONFLOW_IDLE" 3<&-'


#: Where the image's ``claude`` stands in this test: the pod's HOME (the image's root is the host's, read-only).
CLAUDE = f"{layout.SANDBOX_HOME}/.bin/claude"


def pod_exec(root: Path, claude: Path, seen: list[tuple[list[str], bytes]]) -> Any:
    async def run(pod: dict[str, Any], container: str, command: list[str]) -> asyncio.subprocess.Process:
        home = root / pod["metadata"]["name"]
        if not home.exists():
            (home / ".bin").mkdir(parents=True)
            shutil.copy2(claude, home / ".bin" / "claude")
        bwrap = ["bwrap", "--die-with-parent", "--unshare-pid", "--ro-bind", "/", "/", "--dev", "/dev",
                 "--proc", "/proc", "--tmpfs", "/tmp", "--tmpfs", "/home", "--bind", str(home), layout.SANDBOX_HOME,
                 "--as-pid-1", "sh", "-c", INNER, "sh"]  # fmt: skip
        outer = f'"$@"; exit "$(cat {home}/.ironflow-exec-rc)"'
        env = {"PATH": os.environ["PATH"], "HOME": layout.SANDBOX_HOME, "IRONFLOW_IDLE": patterns.IDLE_COMMAND}
        seen.append((command, b""))
        return await asyncio.create_subprocess_exec(
            "sh", "-c", outer, "outer", *bwrap, *command, env=env,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip

    return run


@pytest.fixture
async def forge(tmp_path: Path) -> AsyncIterator[tuple[str, Path]]:
    seed_forge(tmp_path, HOST, {"calc.py": "def add(a, b):\n    return a - b\n"})
    async with GitServer(tmp_path / "forge", username=USER, password=PASSWORD) as server:
        config = AuthProxyConfig(admin_key=Secret(ADMIN), secret_upstream=server.url)
        async with run_auth_proxy(config) as proxy:
            yield proxy.url, tmp_path


async def test_an_agent_sandbox_step_clones_through_the_relay_and_its_patch_comes_back(
    forge: tuple[str, Path],
) -> None:
    proxy_url, root = forge
    claude = root / "claude"
    claude.write_text(f"#!/bin/sh\necho fixed >> calc.py\ncat <<'EOF'\n{JSON_TEXT.rstrip()}\nEOF\n")
    claude.chmod(0o755)
    seen: list[tuple[list[str], bytes]] = []
    hosts = GitHosts({HOST: GitCredential(Secret(PASSWORD), USER)})
    pod = (
        K8sEphemeralProvider.sandboxed("runner:test").namespace(NS).timeout(60).claude_path(CLAUDE)
        .auth_proxy(proxy_url).auth_proxy_admin_key(ADMIN).git_credentials(hosts)
    )  # fmt: skip
    provider = AgentSandboxProvider(pod).warm_pool(replicas=1).ready_timeout(30)
    async with KubeTestServer() as server:
        server.create_namespace(NS)
        server.serve_exec(pod_exec(root / "pods", claude, seen))
        controller = AgentSandboxController(server, namespace=NS, cold_start_s=0.05)
        async with controller, await k8s.KubeApi.connect(server.cluster_config()) as api:
            await provider.apply_template(api)
            async with AdminClient(proxy_url, Secret(ADMIN)) as admin:
                grants = Grants(admin)
                runner = provider.runner(api=api, issuer=grants, worker_env={})
                config = AgentConfig("fix add()", workspace=Workspace(f"https://{HOST}/org/repo.git", ref="main"))
                result = await runner.run(config.scoped("01a0e906-1f85-7000-8000-0000000000as", "fix"))
            assert not controller.failures, controller.failures
    assert result.text == "Hello from the fake model."
    assert result.workspace is not None
    assert {f.path: f.change for f in result.workspace.files} == {"calc.py": Change.MODIFIED}
    assert b"+fixed" in result.workspace.patch
    assert len(grants.revoked) == 2  # the step's token and the clone's grant
    for command, _ in seen:
        assert PASSWORD not in " ".join(command)
    for exec_record in server.execs:
        assert PASSWORD not in repr(exec_record)
