"""A git workspace in a real sandbox (bubblewrap, gVisor): cloned and pushed through the in-process proxy's
secret relay to git's own ``http-backend`` (:class:`tests.fakes.git_server.GitServer`), the host's
credential never in a sandbox."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.fakes.git_server import GitServer
from tests.fakes.local_sandbox import ALL_WORKSPACE_ISOLATIONS

from ironflow import errors
from ironflow.local.sandbox_provider import LocalSandboxProvider
from ironflow.local.workspaces.git_sync import GitCredential, GitHosts
from ironflow.secrets import Secret
from ironflow.workspaces import Change, Workspace

pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed"),
    pytest.mark.skipif(shutil.which("git") is None, reason="git not installed"),
]

HOST = "git.example.test"
SOURCE = f"https://{HOST}/org/repo.git"
PASSWORD = "ghs_WORKSPACE-PUSH-CREDENTIAL-0123456789"
#: What the step shows of itself: its environment, every process's argv and environment, every file of its workspace.
SELF_SCAN = (
    "env; for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; tr '\\0' '\\n' < $p/environ; done 2>/dev/null; "
    "find /workspace /tmp /home -type f -exec cat {} + 2>/dev/null; true"
)


def git(*argv: str, cwd: Path | None = None) -> str:
    env = {"PATH": os.environ["PATH"], "HOME": os.devnull, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    env |= {
        "GIT_AUTHOR_NAME": "Seed",
        "GIT_AUTHOR_EMAIL": "s@x",
        "GIT_COMMITTER_NAME": "Seed",
        "GIT_COMMITTER_EMAIL": "s@x",
    }
    return subprocess.run(["git", *argv], cwd=cwd, env=env, capture_output=True, text=True, check=True).stdout.strip()


@dataclass
class Forge:
    server: GitServer
    bare: Path
    provider: LocalSandboxProvider


@pytest.fixture(params=ALL_WORKSPACE_ISOLATIONS)
async def forge(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Forge]:
    """A git host with one repository, and a provider of each runtime whose proxy holds its credential."""
    bare = tmp_path / "forge" / HOST / "org" / "repo.git"
    bare.parent.mkdir(parents=True)
    git("init", "--quiet", "--bare", "--initial-branch=main", str(bare))
    seed = tmp_path / "seed"
    git("init", "--quiet", "--initial-branch=main", str(seed))
    (seed / "README.md").write_text("version one\n")
    (seed / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    git("add", ".", cwd=seed)
    git("commit", "--quiet", "-m", "first", cwd=seed)
    git("tag", "v1.0", cwd=seed)
    (seed / "README.md").write_text("version two\n")
    git("commit", "--quiet", "-am", "second", cwd=seed)
    git("push", "--quiet", "--tags", str(bare), "main", cwd=seed)
    async with GitServer(tmp_path / "forge", username="x-access-token", password=PASSWORD) as server:
        hosts = GitHosts({HOST: GitCredential(Secret(PASSWORD))}, upstream=server.url)
        async with LocalSandboxProvider(isolation=request.param, git_hosts=hosts) as provider:
            yield Forge(server, bare, provider)


async def test_a_git_workspace_is_cloned_at_its_ref_and_pushed_with_the_credential_never_inside(
    forge: Forge,
) -> None:
    fix = "sed -i 's/a - b/a + b/' calc.py; echo note > NOTES.md; "
    result = await forge.provider.run_command(
        ["sh", "-c", fix + SELF_SCAN], workspace=Workspace(SOURCE, ref="v1.0", push_branch="ironflow/fix-1")
    )
    assert result.exit_code == 0, result.stderr
    assert "version one" in result.stdout  # the tag's tree, not main's
    assert PASSWORD not in result.stdout + result.stderr  # not in its environment, processes or files
    assert result.workspace is not None
    assert {f.path: f.change for f in result.workspace.files} == {"NOTES.md": Change.ADDED, "calc.py": Change.MODIFIED}
    assert result.workspace.pushed_branch == "ironflow/fix-1"
    pushed = git("-C", str(forge.bare), "show", "ironflow/fix-1:calc.py")
    assert pushed == "def add(a, b):\n    return a + b"
    assert git("-C", str(forge.bare), "show", "ironflow/fix-1:NOTES.md") == "note"
    parent = git("-C", str(forge.bare), "rev-parse", "ironflow/fix-1^")
    assert parent == git("-C", str(forge.bare), "rev-parse", "v1.0^{commit}")
    assert git("-C", str(forge.bare), "log", "-1", "--format=%an %s", "ironflow/fix-1").startswith(
        "ironflow ironflow exec"
    )
    seen = forge.server.requests
    assert seen
    assert all(r.authorized and r.username == "x-access-token" for r in seen)  # the proxy's injected Basic only
    assert not any("ifap_" in value for r in seen for _, value in r.headers)
    assert forge.server.pushes


async def test_the_step_sees_no_git_token_and_a_rigged_git_dir_does_not_reach_the_push(forge: Forge) -> None:
    rig = (
        "git config core.hooksPath /workspace/hooks; mkdir -p hooks; "
        "printf '#!/bin/sh\\necho hooked > /workspace/HOOKED\\n' > hooks/pre-commit; chmod +x hooks/pre-commit; "
        "git config url.https://elsewhere.test/.insteadOf https://; echo change >> README.md; env"
    )
    result = await forge.provider.run_command(["sh", "-c", rig], workspace=Workspace(SOURCE, push_branch="rigged"))
    assert result.exit_code == 0, result.stderr
    assert "ifap_" not in result.stdout  # the clone's token was never the step's
    assert "GIT_CONFIG" not in result.stdout
    assert result.workspace is not None
    assert "README.md" in result.workspace.changed_paths
    files = git("-C", str(forge.bare), "ls-tree", "-r", "--name-only", "rigged").splitlines()
    assert "HOOKED" not in files  # the step's hook never ran at the commit
    assert git("-C", str(forge.bare), "show", "rigged:README.md") == "version two\nchange"


async def test_a_failed_step_pushes_nothing_and_a_branch_that_exists_is_never_moved(forge: Forge) -> None:
    failed = await forge.provider.run_command(
        ["sh", "-c", "echo x >> README.md; exit 4"], workspace=Workspace(SOURCE, push_branch="never")
    )
    assert failed.exit_code == 4
    assert failed.workspace is not None
    assert failed.workspace.pushed_branch is None
    assert "never" not in git("-C", str(forge.bare), "branch", "--list")
    main = git("-C", str(forge.bare), "rev-parse", "main")
    with pytest.raises(errors.WorkspaceRefused, match="push"):
        await forge.provider.run_command(
            ["sh", "-c", "echo x >> README.md"], workspace=Workspace(SOURCE, push_branch="main")
        )
    assert git("-C", str(forge.bare), "rev-parse", "main") == main


async def test_a_host_without_a_credential_or_a_missing_repository_is_refused_in_one_line(forge: Forge) -> None:
    with pytest.raises(errors.WorkspaceRefused, match=re.escape("no git credential for 'other.example.test'")):
        await forge.provider.run_command(["true"], workspace=Workspace("https://other.example.test/o/r.git"))
    missing = re.escape("clone of 'https://git.example.test/org/missing.git' failed")
    with pytest.raises(errors.WorkspaceRefused, match=missing):
        await forge.provider.run_command(["true"], workspace=Workspace(f"https://{HOST}/org/missing.git"))


async def test_exec_clones_and_pushes_a_git_workspace_from_the_command_line(forge: Forge) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("IRONFLOW_GIT_")}
    env |= {"IRONFLOW_GIT_TOKEN": PASSWORD, "IRONFLOW_GIT_UPSTREAM": forge.server.url}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "from ironflow.cli.app import main; main()", "exec",
        "--isolation", forge.provider.isolation,
        "--workspace", f"{SOURCE}@v1.0", "--push", "from-cli", "--patch", "-", "--",
        "sh", "-c", "echo cli >> README.md; " + SELF_SCAN,
        env=env, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err
    assert out.startswith(b"diff --git a/README.md b/README.md")  # stdout holds the patch alone
    assert PASSWORD.encode() not in out + err
    assert git("-C", str(forge.bare), "show", "from-cli:README.md") == "version one\ncli"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"source": "https://h.test/o/r.git@v1"}, "as ref="),
        ({"source": "https://h.test/o/r.git", "apply": True}, "push_branch"),
        ({"source": "/repo", "push_branch": "x"}, "need a git URL"),
        ({"source": "https://h.test/o/r.git", "push_branch": "-f"}, "invalid workspace push_branch"),
        ({"source": "https://user:pw@h.test/o/r.git"}, "no user name or password"),
        ({"source": "file:///etc"}, "https"),
    ],
)
def test_a_git_workspace_refuses_values_that_cannot_work(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(errors.ConfigError, match=message):
        Workspace(**kwargs)  # type: ignore[arg-type]
