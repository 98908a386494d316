"""A git workspace on an agent-sandbox step, end to end on the kube test server with the
scripted controller: each exec into the claimed pod runs in bubblewrap on that pod's own HOME
(a host dir per pod, as its emptyDir), with the warm pod's idle loop as PID 1. The clone goes
through the real auth proxy's relay to a real ``git http-backend``; the step's patch comes back
in its result; the clone's grant and the step's token are revoked; the git host's password is
in no exec, argv or stdin. With ``push_branch`` the change is pushed from the same claimed pod
after the step, with a grant of its own, and lands on the server's new branch alone."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.agent_sandbox.integration.test_agent_sandbox_workspace_execs import HOST, PASSWORD, USER
from tests.fakes.git_server import GIT_ENV, GitServer, git, seed_forge
from tests.fakes.proxy_tokens import RecordingIssuer

from ironflow import errors
from ironflow.agent_sandbox import claims, patterns
from ironflow.agent_sandbox.claim_provider import AgentSandboxProvider
from ironflow.auth_proxy import AuthProxyConfig, run_auth_proxy
from ironflow.auth_proxy.admin_client import AdminClient
from ironflow.auth_proxy.git_hosts import GitCredential, GitHosts
from ironflow.claude import layout
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.kube import api as k8s
from ironflow.results import AgentResult
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
RUN = "01a0e906-1f85-7000-8000-0000000000as"
CALC = b"def add(a, b):\n    return a - b\n"
CLAIMS = claims.resources().claims
RC = f"{layout.SANDBOX_HOME}/.ironflow-exec-rc"
#: In the "pod": PID 1 becomes the idle loop; the exec is its child, stdin passed through fd 3.
INNER = f'exec 3<&0; {{ "$@" <&3 3<&-; echo "$?" > {RC}; kill -TERM 1; }} & exec sh -c "$IRONFLOW_IDLE" 3<&-'


#: Where the image's ``claude`` stands in this test: the pod's HOME (the image's root is the host's, read-only).
CLAUDE = f"{layout.SANDBOX_HOME}/.bin/claude"


def pod_argv(root: Path, claude: Path, pod: str, command: list[str]) -> list[str]:
    """The host argv that runs ``command`` as an exec into ``pod``: in bubblewrap on the pod's own
    HOME (``root/<pod>``, made with the image's ``claude`` on first use), the idle loop as PID 1."""
    home = root / pod
    if not home.exists():
        (home / ".bin").mkdir(parents=True)
        shutil.copy2(claude, home / ".bin" / "claude")
    bwrap = ["bwrap", "--die-with-parent", "--unshare-pid", "--ro-bind", "/", "/", "--dev", "/dev",
             "--proc", "/proc", "--tmpfs", "/tmp", "--tmpfs", "/home", "--bind", str(home), layout.SANDBOX_HOME,
             "--as-pid-1", "sh", "-c", INNER, "sh"]  # fmt: skip
    outer = f'"$@"; exit "$(cat {home}/.ironflow-exec-rc)"'
    env = {"PATH": os.environ["PATH"], "HOME": layout.SANDBOX_HOME, "IRONFLOW_IDLE": patterns.IDLE_COMMAND}
    return ["env", "-i", *(f"{k}={v}" for k, v in env.items()), "sh", "-c", outer, "outer", *bwrap, *command]


def pod_exec(root: Path, claude: Path, seen: list[tuple[list[str], bytes]]) -> Any:
    async def run(pod: dict[str, Any], container: str, command: list[str]) -> asyncio.subprocess.Process:
        argv = pod_argv(root, claude, pod["metadata"]["name"], command)
        seen.append((command, b""))
        return await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )

    return run


@pytest.fixture
async def forge(tmp_path: Path) -> AsyncIterator[tuple[str, Path]]:
    _, seed = seed_forge(tmp_path, HOST, {"calc.py": CALC.decode(), "notes.txt": "old\n", "run.sh": "#!/bin/sh\n"})
    assert git("ls-files", "-s", "run.sh", cwd=seed).startswith("100644")
    async with GitServer(tmp_path / "forge", username=USER, password=PASSWORD) as server:
        config = AuthProxyConfig(admin_key=Secret(ADMIN), secret_upstream=server.url)
        async with run_auth_proxy(config) as proxy:
            yield proxy.url, tmp_path


def write_claude(root: Path, edit: str) -> Path:
    """The image's ``claude`` stand-in: runs ``edit`` in the workspace, answers as the real CLI does."""
    claude = root / "claude"
    claude.write_text(f"#!/bin/sh\n{edit}\ncat <<'EOF'\n{JSON_TEXT.rstrip()}\nEOF\n")
    claude.chmod(0o755)
    return claude


@dataclass
class Ran:
    """What a step left: its result (or failure), every exec, the server, the grants."""

    result: AgentResult | None
    failure: BaseException | None
    seen: list[tuple[list[str], bytes]]
    server: KubeTestServer
    grants: RecordingIssuer


async def run_step(proxy_url: str, root: Path, edit: str, spec: Workspace, prompt: str = "fix add()") -> Ran:
    """One agent-sandbox step on ``spec`` whose agent runs ``edit``, on the test server with the
    scripted controller; the claim and its pod are gone when it returns."""
    claude = write_claude(root, edit)
    seen: list[tuple[list[str], bytes]] = []
    hosts = GitHosts({HOST: GitCredential(Secret(PASSWORD), USER)})
    pod = (
        K8sEphemeralProvider.sandboxed("runner:test").namespace(NS).timeout(60).claude_path(CLAUDE)
        .auth_proxy(proxy_url).auth_proxy_admin_key(ADMIN).git_credentials(hosts)
    )  # fmt: skip
    provider = AgentSandboxProvider(pod).warm_pool(replicas=1).ready_timeout(30)
    result: AgentResult | None = None
    failure: BaseException | None = None
    async with KubeTestServer() as server:
        server.create_namespace(NS)
        server.serve_exec(pod_exec(root / "pods", claude, seen))
        controller = AgentSandboxController(server, namespace=NS, cold_start_s=0.05)
        async with controller, await k8s.KubeApi.connect(server.cluster_config()) as api:
            await provider.apply_template(api)
            async with AdminClient(proxy_url, Secret(ADMIN)) as admin:
                grants = RecordingIssuer(admin)
                runner = provider.runner(api=api, issuer=grants, worker_env={})
                try:
                    result = await runner.run(AgentConfig(prompt, workspace=spec).scoped(RUN, "fix"))
                except errors.IronflowError as exc:
                    failure = exc
            assert not controller.failures, controller.failures
            assert server.objects(CLAIMS, NS) == []  # the claim went on every path
    return Ran(result, failure, seen, server, grants)


def no_git_password_anywhere(ran: Ran, root: Path) -> None:
    """The git host's password is in no exec's argv or stdin, no object, no file of any pod's HOME."""
    for command, _ in ran.seen:
        assert PASSWORD not in " ".join(command)
    for exec_record in ran.server.execs:
        assert PASSWORD not in repr(exec_record)
    for resource in (k8s.PODS, k8s.CONFIGMAPS):
        assert PASSWORD not in repr(ran.server.objects(resource, NS))
    for path in (root / "pods").rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert PASSWORD.encode() not in path.read_bytes(), path


async def test_an_agent_sandbox_step_clones_through_the_relay_and_its_patch_comes_back(
    forge: tuple[str, Path],
) -> None:
    proxy_url, root = forge
    spec = Workspace(f"https://{HOST}/org/repo.git", ref="main")
    ran = await run_step(proxy_url, root, "echo fixed >> calc.py", spec)
    result = ran.result
    assert result is not None, ran.failure
    assert result.text == "Hello from the fake model."
    assert result.workspace is not None
    assert {f.path: f.change for f in result.workspace.files} == {"calc.py": Change.MODIFIED}
    assert b"+fixed" in result.workspace.patch
    assert result.workspace.pushed_branch is None
    assert len(ran.grants.revoked) == 2  # the step's token and the clone's grant
    no_git_password_anywhere(ran, root)


def branch_tree(root: Path, branch: str) -> dict[str, bytes]:
    """Every file of ``branch`` in the forge's repository, by path."""
    bare = root / "forge" / HOST / "org" / "repo.git"
    names = git("-C", str(bare), "ls-tree", "-r", "--name-only", branch, cwd=root).split()
    return {n: subprocess.run(["git", "-C", str(bare), "show", f"{branch}:{n}"], env=GIT_ENV, check=True,
                              capture_output=True).stdout for n in names}  # fmt: skip


async def test_a_succeeded_step_is_pushed_to_a_new_branch_from_its_claimed_pod_after_the_step(
    forge: tuple[str, Path],
) -> None:
    """The branch holds exactly the step's change on top of main, committed by ironflow; the push's
    grant is one of its own, revoked; no pod's file, exec or object ever held the git password,
    and the push's clone and patch are gone from the pod's HOME."""
    proxy_url, root = forge
    edit = "echo fixed >> calc.py; rm notes.txt; printf 'new\\n' > new.txt; chmod +x run.sh"
    spec = Workspace(f"https://{HOST}/org/repo.git", ref="main", push_branch="ironflow/fix-add")
    ran = await run_step(proxy_url, root, edit, spec, prompt="fix add()\nplease")
    assert ran.result is not None, ran.failure
    changes = ran.result.workspace
    assert changes is not None
    assert changes.pushed_branch == "ironflow/fix-add"
    assert branch_tree(root, "main") == {"calc.py": CALC, "notes.txt": b"old\n", "run.sh": b"#!/bin/sh\n"}
    assert branch_tree(root, "ironflow/fix-add") == {"calc.py": CALC + b"fixed\n", "new.txt": b"new\n",
                                                     "run.sh": b"#!/bin/sh\n"}  # fmt: skip
    bare = str(root / "forge" / HOST / "org" / "repo.git")
    log = git("-C", bare, "log", "--format=%an %s", "main..ironflow/fix-add", cwd=root)
    assert log == "ironflow ironflow fix: fix add()\n"  # one commit, by ironflow, named after the step
    modes = git("-C", bare, "diff", "--raw", "main", "ironflow/fix-add", "--", "run.sh", cwd=root)
    assert ":100644 100755" in modes
    assert git("-C", bare, "rev-parse", "ironflow/fix-add^", cwd=root) == git("-C", bare, "rev-parse", "main", cwd=root)
    assert len(ran.grants.revoked) == 3  # the step's token, the clone's grant, the push's grant
    assert len(ran.grants.credentials) == 3
    assert ran.grants.credentials[2] is not None  # a git-host grant, not the step's API credential
    no_git_password_anywhere(ran, root)
    (home,) = (root / "pods").iterdir()
    assert not (home / ".ironflow" / "workspace-push").exists()
    assert not (home / ".ironflow" / "workspace-push.patch").exists()


async def test_a_step_that_changed_nothing_pushes_nothing(forge: tuple[str, Path]) -> None:
    proxy_url, root = forge
    spec = Workspace(f"https://{HOST}/org/repo.git", ref="main", push_branch="ironflow/fix-add")
    ran = await run_step(proxy_url, root, "true", spec)
    assert ran.result is not None, ran.failure
    assert ran.result.workspace is not None
    assert ran.result.workspace.files == ()
    assert ran.result.workspace.pushed_branch is None
    assert set(branch_tree(root, "main")) == {"calc.py", "notes.txt", "run.sh"}
    bare = str(root / "forge" / HOST / "org" / "repo.git")
    assert git("-C", bare, "branch", "--format=%(refname:short)", cwd=root) == "main\n"
    assert len(ran.grants.revoked) == 2  # no push grant was issued


async def test_a_push_to_a_branch_that_exists_fails_in_gits_words_and_never_moves_it(
    forge: tuple[str, Path],
) -> None:
    proxy_url, root = forge
    before = branch_tree(root, "main")
    spec = Workspace(f"https://{HOST}/org/repo.git", ref="main", push_branch="main")
    ran = await run_step(proxy_url, root, "echo fixed >> calc.py", spec)
    assert isinstance(ran.failure, errors.WorkspaceRefused), ran.failure
    assert re.search(r"push of .* to 'main' failed: error: failed to push some refs", ran.failure.message)
    assert branch_tree(root, "main") == before
    assert len(ran.grants.revoked) == 3  # the push's grant too, though it failed
    no_git_password_anywhere(ran, root)
