"""A git workspace on the pod backend, end to end: the step's pod as the runner renders it,
its containers run for real (bubblewrap, the pod's volume layout: ``tests/fakes/pod_exec``),
the clone going through the real auth proxy's secret relay to a real git host
(``tests/fakes/git_server``), and the log they print played back by the fake kubelet. The
runner and ``exec --backend k8s`` read the patch off the log; it applies to the same tree.
Both tokens are revoked; the git host's password reaches no pod."""

from __future__ import annotations

import asyncio
import functools
import os
import shutil
import subprocess
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.fakes.git_server import GIT_ENV, GitServer, git, seed_forge
from tests.fakes.kubecase import KubeCase, nothing_left
from tests.fakes.pod_exec import run_pod
from tests.fakes.proxy_tokens import RecordingIssuer

from ironflow import errors
from ironflow.auth_proxy import AuthProxyConfig, run_auth_proxy, tokens
from ironflow.auth_proxy.app import RunningProxy
from ironflow.auth_proxy.git_hosts import GitCredential, GitHosts
from ironflow.k8s.commands import pod_runs
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.k8s.workspaces import command_pods
from ironflow.kube import api as k8s
from ironflow.secrets import Secret, find_leaks
from ironflow.steps import AgentConfig
from ironflow.testing.k8s_validate import validate_manifest
from ironflow.testing.kube import PodScript
from ironflow.workspaces import Change, Workspace

pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed"),
    pytest.mark.skipif(shutil.which("git") is None, reason="git not installed"),
]

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "claude"
JSON_TEXT = (FIXTURES / "json_text.out").read_text()
STREAM_TEXT = (FIXTURES / "stream_text.out").read_text()
ADMIN = "admin-key-" + "w" * 40
HOST = "git.example.test"
SOURCE = f"https://{HOST}/org/repo.git"
USER = "x-access-token"
PASSWORD = "ghs_REAL-GIT-HOST-PASSWORD-for-the-pod-test"
RUN = "01a0e906-1f85-7000-8000-0000000000ws"
EDITS = "echo fixed >> calc.py && rm notes.txt && printf '\\000\\377' > data.bin && chmod +x run.sh"
FAKE_CLAUDE = "/ironflow-test/claude"


@dataclass
class Forge:
    proxy: RunningProxy
    server: GitServer
    seed: Path
    root: Path

    def provider(self, ns: str) -> K8sEphemeralProvider:
        hosts = GitHosts({HOST: GitCredential(Secret(PASSWORD), USER)})
        return (
            K8sEphemeralProvider.sandboxed("ghcr.io/acme/claude-runner:2.1.332-1")
            .namespace(ns)
            .timeout(30)
            .auth_proxy(self.proxy.url)
            .auth_proxy_admin_key(ADMIN)
            .claude_path(FAKE_CLAUDE)
            .git_credentials(hosts)
        )


@pytest.fixture
async def forge(tmp_path: Path) -> AsyncIterator[Forge]:
    files = {"calc.py": "def add(a, b):\n    return a - b\n", "notes.txt": "old notes\n", "run.sh": "#!/bin/sh\n"}
    _bare, seed = seed_forge(tmp_path, HOST, files)
    async with GitServer(tmp_path / "forge", username=USER, password=PASSWORD) as server:
        config = AuthProxyConfig(admin_key=Secret(ADMIN), secret_upstream=server.url)
        async with run_auth_proxy(config) as proxy:
            yield Forge(proxy, server, seed, tmp_path)


class Kubelet:
    """Runs each pod the runner creates for real, then scripts the fake kubelet with what it printed."""

    def __init__(
        self, kube: KubeCase, root: Path, binds: dict[str, str], claims: dict[str, Path] | None = None
    ) -> None:
        self.kube, self.root, self.binds = kube, root, binds
        self.pods: list[dict[str, Any]] = []
        self.configmaps: dict[str, dict[str, Any]] = {}
        original = kube.api.create

        async def create(resource: k8s.Resource, namespace: str | None, body: Any) -> dict[str, Any]:
            if resource == k8s.CONFIGMAPS:
                self.configmaps[body["metadata"]["name"]] = body
            if resource == k8s.PODS:
                self.pods.append(body)
                name = body["metadata"]["name"]
                run = functools.partial(run_pod, extra_binds=binds, configmaps=self.configmaps, claims=claims)
                done = await asyncio.to_thread(run, body, root / name)
                failed = done.exit_code != 0
                await kube.control.script_pods(
                    PodScript(name_prefix=name, run_for=0.05, log=done.log, phase="Failed" if failed else "Succeeded",
                              exit_code=done.exit_code if failed else None)
                )  # fmt: skip
            return await original(resource, namespace, body)

        kube.api.create = create  # type: ignore[method-assign]


def fake_claude(root: Path, script: str, answer: str = JSON_TEXT) -> dict[str, str]:
    """A ``claude`` that runs ``script`` in its working directory, then answers as the real CLI does."""
    path = root / "claude"
    path.write_text(f"#!/bin/sh\n{script}\ncat <<'EOF'\n{answer.rstrip()}\nEOF\n")
    path.chmod(0o755)
    return {str(root): os.path.dirname(FAKE_CLAUDE)}


def applies_to_the_tree_left(forge: Forge, patch: bytes, left: dict[str, bytes]) -> None:
    fresh = forge.root / "fresh"
    git("clone", "-q", str(forge.seed), str(fresh), cwd=forge.root)
    subprocess.run(["git", "apply", "--binary", "-"], cwd=fresh, input=patch, env=GIT_ENV, check=True)
    for name, data in left.items():
        assert (fresh / name).read_bytes() == data


async def test_an_agent_step_works_on_a_clone_and_its_patch_comes_back(kube: KubeCase, forge: Forge) -> None:
    binds = fake_claude(forge.root, EDITS)
    kubelet = Kubelet(kube, forge.root / "pods", binds)
    async with forge.proxy.admin_client() as admin:
        grants = RecordingIssuer(admin)
        runner = forge.provider(kube.namespace).runner(api=kube.api, issuer=grants, worker_env={})
        config = AgentConfig("fix add()", workspace=Workspace(SOURCE, ref="main")).scoped(RUN, "fix")
        result = await runner.run(config)
    assert result.text == "Hello from the fake model."
    assert result.workspace is not None
    assert {f.path: f.change for f in result.workspace.files} == {
        "calc.py": Change.MODIFIED,
        "data.bin": Change.ADDED,
        "notes.txt": Change.DELETED,
        "run.sh": Change.MODE,
    }
    applies_to_the_tree_left(
        forge, result.workspace.patch, {"calc.py": b"def add(a, b):\n    return a - b\nfixed\n", "data.bin": b"\0\xff"}
    )
    (pod,) = kubelet.pods
    validate_manifest(pod)
    step_token, git_grant = grants.credentials
    assert step_token is None
    assert isinstance(git_grant, tokens.SecretCredential)
    assert git_grant.hosts == (HOST,)
    assert len(grants.revoked) == 2  # the step's token and the clone's grant
    assert find_leaks([PASSWORD], str(pod)) == []
    assert [r.username for r in forge.server.requests] == [USER] * len(forge.server.requests)
    await nothing_left(kube, k8s.PODS, k8s.CONFIGMAPS)


async def test_a_step_that_succeeds_without_its_report_fails(kube: KubeCase, forge: Forge) -> None:
    """A step that kills its own container's report (here: it replaces the log's end) has no patch to give."""
    binds = fake_claude(forge.root, "echo x >> calc.py")
    Kubelet(kube, forge.root / "pods", binds)
    original = kube.control.script_pods

    async def without_frame(script: PodScript) -> None:
        await original(PodScript(name_prefix=script.name_prefix, run_for=0.05, log=JSON_TEXT))

    kube.control.script_pods = without_frame  # type: ignore[method-assign]
    async with forge.proxy.admin_client() as admin:
        runner = forge.provider(kube.namespace).runner(api=kube.api, issuer=RecordingIssuer(admin), worker_env={})
        with pytest.raises(errors.WorkspaceUnsafe, match="report is missing"):
            await runner.run(AgentConfig("fix", workspace=Workspace(SOURCE)).scoped(RUN, "fix"))
    await nothing_left(kube, k8s.PODS, k8s.CONFIGMAPS)


async def test_a_clone_of_a_missing_ref_fails_the_pod_and_the_step(kube: KubeCase, forge: Forge) -> None:
    binds = fake_claude(forge.root, "true")
    Kubelet(kube, forge.root / "pods", binds)
    async with forge.proxy.admin_client() as admin:
        runner = forge.provider(kube.namespace).runner(api=kube.api, issuer=RecordingIssuer(admin), worker_env={})
        with pytest.raises(errors.AgentError):
            await runner.run(AgentConfig("fix", workspace=Workspace(SOURCE, ref="no-such-branch")).scoped(RUN, "f"))
    await nothing_left(kube, k8s.PODS, k8s.CONFIGMAPS)


async def test_exec_runs_a_command_on_a_clone_and_returns_its_patch(kube: KubeCase, forge: Forge) -> None:
    kubelet = Kubelet(kube, forge.root / "pods", {})
    settings = forge.provider(kube.namespace).settings
    run = pod_runs.exec_pod_run(settings, ["sh", "-c", f"{EDITS}; echo done"], timeout_s=30,
                                now_ms=time.time_ns() // 1_000_000, rand32=7)  # fmt: skip
    async with forge.proxy.admin_client() as admin:
        grants = RecordingIssuer(admin)
        done, changes = await command_pods.run_in_workspace(
            kube.api, settings, run, Workspace(SOURCE), now=int(time.time()), issuer=grants
        )
    assert done.success
    assert done.logs == "done\n"
    assert changes is not None
    assert changes.changed_paths == ("calc.py", "data.bin", "notes.txt", "run.sh")
    (pod,) = kubelet.pods
    validate_manifest(pod)
    assert len(grants.revoked) == 1
    assert find_leaks([PASSWORD], str(pod)) == []
    await nothing_left(kube, k8s.PODS)


async def test_a_failing_exec_command_keeps_its_exit_code_and_still_reports(kube: KubeCase, forge: Forge) -> None:
    Kubelet(kube, forge.root / "pods", {})
    settings = forge.provider(kube.namespace).settings
    run = pod_runs.exec_pod_run(settings, ["sh", "-c", "echo half >> calc.py; exit 4"], timeout_s=30,
                                now_ms=time.time_ns() // 1_000_000, rand32=8)  # fmt: skip
    async with forge.proxy.admin_client() as admin:
        done, changes = await command_pods.run_in_workspace(
            kube.api,
            settings,
            run,
            Workspace(SOURCE),
            now=int(time.time()),
            issuer=RecordingIssuer(admin),
        )
    assert not done.success
    assert done.exit_code == 4
    assert changes is not None
    assert changes.changed_paths == ("calc.py",)
    await nothing_left(kube, k8s.PODS)


def branch_file(forge: Forge, branch: str, path: str) -> bytes:
    bare = forge.root / "forge" / HOST / "org" / "repo.git"
    return subprocess.run(["git", "-C", str(bare), "show", f"{branch}:{path}"], env=GIT_ENV, check=True,
                          capture_output=True).stdout  # fmt: skip


async def test_a_succeeded_step_is_pushed_to_a_new_branch_from_a_pod_of_its_own(kube: KubeCase, forge: Forge) -> None:
    binds = fake_claude(forge.root, EDITS)
    kubelet = Kubelet(kube, forge.root / "pods", binds)
    spec = Workspace(SOURCE, ref="main", push_branch="ironflow/fix-add")
    async with forge.proxy.admin_client() as admin:
        grants = RecordingIssuer(admin)
        runner = forge.provider(kube.namespace).runner(api=kube.api, issuer=grants, worker_env={})
        result = await runner.run(AgentConfig("fix add()\nplease", workspace=spec).scoped(RUN, "fix"))
    assert result.workspace is not None
    assert result.workspace.pushed_branch == "ironflow/fix-add"
    assert branch_file(forge, "ironflow/fix-add", "calc.py").endswith(b"fixed\n")
    assert branch_file(forge, "ironflow/fix-add", "data.bin") == b"\0\xff"
    bare = forge.root / "forge" / HOST / "org" / "repo.git"
    log = git("-C", str(bare), "log", "-1", "--format=%an %s", "ironflow/fix-add", cwd=forge.root)
    assert log == "ironflow ironflow fix: fix add()\n"
    _, push_pod = kubelet.pods
    validate_manifest(push_pod)
    assert push_pod["metadata"]["labels"]["ironflow.io/run-id"] == RUN
    assert find_leaks([PASSWORD], str(push_pod), str(kubelet.configmaps)) == []
    assert len(grants.revoked) == 3  # the step's token, the clone's grant, the push's grant
    await nothing_left(kube, k8s.PODS, k8s.CONFIGMAPS)


async def test_a_push_to_a_branch_that_exists_never_moves_it(kube: KubeCase, forge: Forge) -> None:
    binds = fake_claude(forge.root, EDITS)
    Kubelet(kube, forge.root / "pods", binds)
    before = branch_file(forge, "main", "calc.py")
    async with forge.proxy.admin_client() as admin:
        runner = forge.provider(kube.namespace).runner(api=kube.api, issuer=RecordingIssuer(admin), worker_env={})
        spec = Workspace(SOURCE, ref="main", push_branch="main")
        with pytest.raises(errors.WorkspaceRefused, match=r"push of .* to 'main' failed"):
            await runner.run(AgentConfig("fix", workspace=spec).scoped(RUN, "fix"))
    assert branch_file(forge, "main", "calc.py") == before
    await nothing_left(kube, k8s.PODS, k8s.CONFIGMAPS)


async def test_exec_pushes_a_succeeded_commands_change(kube: KubeCase, forge: Forge) -> None:
    Kubelet(kube, forge.root / "pods", {})
    settings = forge.provider(kube.namespace).settings
    run = pod_runs.exec_pod_run(settings, ["sh", "-c", "echo more >> notes.txt"], timeout_s=30,
                                now_ms=time.time_ns() // 1_000_000, rand32=9)  # fmt: skip
    async with forge.proxy.admin_client() as admin:
        _, changes = await command_pods.run_in_workspace(
            kube.api, settings, run, Workspace(SOURCE, push_branch="exec-fix"), now=int(time.time()),
            issuer=RecordingIssuer(admin),
        )  # fmt: skip
    assert changes is not None
    assert changes.pushed_branch == "exec-fix"
    assert branch_file(forge, "exec-fix", "notes.txt") == b"old notes\nmore\n"
    await nothing_left(kube, k8s.PODS, k8s.CONFIGMAPS)


async def test_a_pvc_workspace_is_written_in_place_and_diffed_against_its_head(kube: KubeCase, forge: Forge) -> None:
    """No clone, no grant: the claim is the workspace; its repository's HEAD is the patch's base."""
    claim = forge.root / "claim"
    git("clone", "-q", str(forge.seed), str(claim / "repo"), cwd=forge.root)
    binds = fake_claude(forge.root, EDITS)
    kubelet = Kubelet(kube, forge.root / "pods", binds, {"sources": claim})
    async with forge.proxy.admin_client() as admin:
        grants = RecordingIssuer(admin)
        runner = forge.provider(kube.namespace).runner(api=kube.api, issuer=grants, worker_env={})
        result = await runner.run(AgentConfig("fix", workspace=Workspace("pvc:sources/repo")).scoped(RUN, "fix"))
    assert result.workspace is not None
    assert result.workspace.changed_paths == ("calc.py", "data.bin", "notes.txt", "run.sh")
    assert (claim / "repo" / "calc.py").read_text().endswith("fixed\n")  # written in place
    assert not (claim / "repo" / "notes.txt").exists()
    (pod,) = kubelet.pods
    validate_manifest(pod)
    assert grants.credentials == [None]  # the step's own token only: nothing is cloned
    await nothing_left(kube, k8s.PODS, k8s.CONFIGMAPS)


class Lines:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def log(self, stream: str, line: str) -> None:
        self.lines.append(line)


async def test_a_followed_step_streams_its_turns_and_still_gets_its_patch(kube: KubeCase, forge: Forge) -> None:
    """With a log sink the runner follows the log line by line (``agent -v``): the report is
    still read off its end, and the turns before it reach the sink."""
    binds = fake_claude(forge.root, "echo x >> calc.py", STREAM_TEXT)
    Kubelet(kube, forge.root / "pods", binds)
    sink = Lines()
    async with forge.proxy.admin_client() as admin:
        runner = forge.provider(kube.namespace).runner(api=kube.api, issuer=RecordingIssuer(admin), worker_env={})
        result = await runner.run(AgentConfig("fix", workspace=Workspace(SOURCE)).scoped(RUN, "fix"), logs=sink)
    assert result.workspace is not None
    assert result.workspace.changed_paths == ("calc.py",)
    assert any('"type":"assistant"' in line or '"type": "assistant"' in line for line in sink.lines)
    await nothing_left(kube, k8s.PODS, k8s.CONFIGMAPS)
