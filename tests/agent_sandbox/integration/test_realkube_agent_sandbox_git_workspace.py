"""A git workspace step with ``push_branch`` on a real claim: the REAL agent-sandbox controller
(v1.0.3) on a real kube-apiserver binds the claim to a warm pool member, kwok plays its pod and
runs every exec (over the real ``pods/exec`` stream: stdin, output and exit code) on this host.
Each exec is wrapped, as the test server's local exec is, in bubblewrap on that pod's own HOME
with the warm pod's idle loop as PID 1, since kwok runs no container. The clone and the push go
through the real auth proxy's relay to a real ``git http-backend``. Skipped when the
control-plane binaries are not built.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from tests.agent_sandbox.integration.test_agent_sandbox_git_workspace import (
    ADMIN,
    CALC,
    CLAUDE,
    branch_tree,
    pod_argv,
    pytestmark,
    write_claude,
)
from tests.agent_sandbox.integration.test_agent_sandbox_workspace_execs import HOST, PASSWORD, USER
from tests.agent_sandbox.integration.test_realkube_agent_sandbox_provider import (
    _allow_exec,
    _namespace,
    gc_knows_sandboxes,
    wait_until,
)
from tests.fakes.git_server import GitServer, git, seed_forge
from tests.fakes.proxy_tokens import RecordingIssuer

from ironflow.agent_sandbox import claims
from ironflow.agent_sandbox.claim_provider import AgentSandboxProvider
from ironflow.auth_proxy import AuthProxyConfig, run_auth_proxy
from ironflow.auth_proxy.admin_client import AdminClient
from ironflow.auth_proxy.git_hosts import GitCredential, GitHosts
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.kube import api as k8s
from ironflow.secrets import Secret
from ironflow.steps import AgentConfig
from ironflow.testing.kubeenv import KubeEnv
from ironflow.workspaces import Workspace

__all__ = ["gc_knows_sandboxes", "pytestmark"]  # the provider tier's fixture; the git workspace tests' marks

RUN = "01a0e906-1f85-7000-8000-0000000000ap"


@dataclass
class Cluster:
    kube: KubeEnv
    api: k8s.KubeApi
    ns: str
    root: Path
    proxy_url: str
    #: Every exec the runner made: pod, the command it asked for (before the test's wrapping), stdin.
    execs: list[tuple[str, tuple[str, ...], bytes]] = field(default_factory=list)

    def route_execs(self, claude: Path) -> None:
        """Each exec goes to the real API as usual, its command wrapped to run in that pod's sandbox."""
        original = self.api.exec
        pods = self.root / "pods"

        async def wrapped(namespace: str, pod: str, command: Any, **kwargs: Any) -> Any:
            self.execs.append((pod, tuple(command), bytes(kwargs.get("stdin") or b"")))
            return await original(namespace, pod, tuple(pod_argv(pods, claude, pod, list(command))), **kwargs)

        self.api.exec = wrapped  # type: ignore[method-assign]

    def objects(self, resource: k8s.Resource) -> list[dict[str, Any]]:
        prefix = f"/apis/{resource.group}/{resource.version}" if resource.group else f"/api/{resource.version}"
        return list(self.kube.request("GET", f"{prefix}/namespaces/{self.ns}/{resource.plural}")["items"])


@pytest.fixture
async def cluster(kube_env: KubeEnv, gc_knows_sandboxes: None, tmp_path: Path) -> AsyncIterator[Cluster]:
    seed_forge(tmp_path, HOST, {"calc.py": CALC.decode(), "notes.txt": "old\n", "run.sh": "#!/bin/sh\n"})
    async with GitServer(tmp_path / "forge", username=USER, password=PASSWORD) as server:
        config = AuthProxyConfig(admin_key=Secret(ADMIN), secret_upstream=server.url)
        async with run_auth_proxy(config) as proxy:
            with _namespace(kube_env) as ns:
                _allow_exec(kube_env, ns, tmp_path, tmp_path)
                async with await k8s.KubeApi.connect(kube_env.cluster_config()) as api:
                    yield Cluster(kube_env, api, ns, tmp_path, proxy.url)


async def test_a_git_workspace_step_with_push_on_a_real_claim_lands_its_change_on_a_new_branch(
    cluster: Cluster,
) -> None:
    """The claim takes a warm member; the clone, the agent and the push run in its pod, in that
    order, each grant on stdin only; the branch holds the step's change alone; the claim and its
    Sandbox are gone after, and the git host's password never reached the cluster."""
    claude = write_claude(cluster.root, "echo fixed >> calc.py; rm notes.txt")
    cluster.route_execs(claude)
    hosts = GitHosts({HOST: GitCredential(Secret(PASSWORD), USER)})
    pod = (
        K8sEphemeralProvider.sandboxed("ghcr.io/acme/claude-runner:2.1.332-1").namespace(cluster.ns)
        .claude_path(CLAUDE).timeout(60).auth_proxy(cluster.proxy_url).auth_proxy_admin_key(ADMIN)
        .git_credentials(hosts)
    )  # fmt: skip
    provider = AgentSandboxProvider(pod).warm_pool(replicas=1).ready_timeout(60)
    await provider.apply_template(cluster.api)
    spec = Workspace(f"https://{HOST}/org/repo.git", ref="main", push_branch="ironflow/fix-add")
    async with AdminClient(cluster.proxy_url, Secret(ADMIN)) as admin:
        grants = RecordingIssuer(admin)
        runner = provider.runner(api=cluster.api, issuer=grants, worker_env={})
        result = await runner.run(AgentConfig("fix add()", workspace=spec).scoped(RUN, "fix"))
    assert result.text == "Hello from the fake model."
    assert result.workspace is not None
    assert result.workspace.pushed_branch == "ironflow/fix-add"
    assert branch_tree(cluster.root, "ironflow/fix-add") == {"calc.py": CALC + b"fixed\n", "run.sh": b"#!/bin/sh\n"}
    bare = str(cluster.root / "forge" / HOST / "org" / "repo.git")
    assert git("-C", bare, "log", "--format=%an", "main..ironflow/fix-add", cwd=cluster.root) == "ironflow\n"
    # One pod (the claimed member's): the clone, the step's token, the agent, the patch, the push.
    assert len({p for p, _, _ in cluster.execs}) == 1
    scripts = [c[-1] for _, c, _ in cluster.execs]
    assert "git clone" in scripts[0]
    assert "workspace-push.patch" in scripts[-2]
    assert "push --quiet" in scripts[-1]
    assert len(grants.revoked) == 3  # the step's token, the clone's grant, the push's grant
    for _, command, stdin in cluster.execs:
        assert PASSWORD not in " ".join(command)
        assert PASSWORD.encode() not in stdin
    for path in (cluster.root / "pods").rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert PASSWORD.encode() not in path.read_bytes(), path
    secrets = k8s.Resource("", "v1", "secrets", "Secret")
    for resource in (k8s.PODS, k8s.CONFIGMAPS, secrets, claims.resources().sandboxes):
        assert PASSWORD not in repr(cluster.objects(resource))

    def claim_gone() -> bool:
        return not cluster.objects(claims.resources().claims)

    await wait_until(claim_gone)
