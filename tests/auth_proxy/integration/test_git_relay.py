"""Real git through the real proxy's secret relay to git's own ``http-backend``: clone, commit, push.

The sandbox side runs exactly what :mod:`ironflow.workspaces.git_script` renders, holding only the
opaque token; the proxy injects the git host's Basic credential; the host is
:class:`tests.fakes.git_server.GitServer`. Each test asserts what reached the host and that the
host's password appears nowhere on the sandbox side (argv, environment, the clone's ``.git``).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.fakes.git_server import GitServer

from ironflow import log_lines
from ironflow.auth_proxy import AdminClient, AuthProxyConfig, run_auth_proxy, tokens
from ironflow.auth_proxy import logs as proxy_logs
from ironflow.auth_proxy.app import RunningProxy
from ironflow.secrets import Secret, find_leaks
from ironflow.workspaces import git_script

ADMIN = "admin-key-" + "g" * 40
HOST = "git.example.test"
SOURCE = f"https://{HOST}/org/repo.git"
USER = "x-access-token"
PASSWORD = "ghs_REAL-GIT-HOST-PASSWORD-0123456789"
IDENTITY = {
    "GIT_AUTHOR_NAME": "Agent",
    "GIT_AUTHOR_EMAIL": "agent@example.test",
    "GIT_COMMITTER_NAME": "Agent",
    "GIT_COMMITTER_EMAIL": "agent@example.test",
}


@dataclass(frozen=True)
class Done:
    returncode: int
    stdout: str
    stderr: str


async def _run(*argv: str, env: Mapping[str, str], cwd: Path | None = None) -> Done:
    proc = await asyncio.create_subprocess_exec(
        *argv, env=dict(env), cwd=cwd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return Done(proc.returncode, out.decode(), err.decode())


async def _ok(*argv: str, env: Mapping[str, str], cwd: Path | None = None) -> str:
    done = await _run(*argv, env=env, cwd=cwd)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@dataclass
class Site:
    """A git host with one repository, the proxy relaying to it, and a sandbox's home."""

    proxy: RunningProxy
    server: GitServer
    admin: AdminClient
    bare: Path
    work: Path
    base_env: dict[str, str]
    tagged: str  # the commit v1.0 names
    head: str  # main's commit

    async def issue(self, hosts: tuple[str, ...] = (HOST,), password: str = PASSWORD) -> tuple[str, str]:
        """A token standing for the host's Basic credential: its id and the opaque token."""
        credential = tokens.SecretCredential("git", Secret(password), tokens.Injection("basic", username=USER), hosts)
        issued = await self.admin.issue("run-ws", "clone", int(time.time()) + 300, credential=credential)
        return issued.id, issued.token.reveal()

    async def token(self, hosts: tuple[str, ...] = (HOST,), password: str = PASSWORD) -> str:
        return (await self.issue(hosts, password))[1]

    def env(self, invocation: git_script.GitInvocation) -> dict[str, str]:
        return {**self.base_env, **invocation.env}

    async def run(self, invocation: git_script.GitInvocation) -> Done:
        """Each command in turn, as a sandbox would; the first failure, else the last result."""
        done = Done(0, "", "")
        for command in invocation.commands:
            done = await _run(*command, env=self.env(invocation), cwd=self.work)
            if done.returncode != 0:
                return done
        return done

    def clone(
        self, token: str, directory: str, *, ref: str | None = None, depth: int | None = None
    ) -> git_script.GitInvocation:
        return git_script.clone_commands(self.proxy.url, SOURCE, token, directory=directory, ref=ref, depth=depth)

    def push(self, token: str, directory: str, branch: str) -> git_script.GitInvocation:
        return git_script.push_commands(self.proxy.url, SOURCE, token, directory=directory, branch=branch)

    async def bare_git(self, *argv: str) -> str:
        return await _ok("git", "-C", str(self.bare), *argv, env=self.base_env)


async def _seed(bare: Path, seed: Path, env: Mapping[str, str], *, tags: int) -> tuple[str, str]:
    """A bare repository with main (two commits), tag v1.0 on the first and ``tags`` more; the two commits."""
    await _ok("git", "init", "--quiet", "--bare", "--initial-branch=main", str(bare), env=env)
    await _ok("git", "init", "--quiet", "--initial-branch=main", str(seed), env=env)
    (seed / "README.md").write_text("version one\n")
    await _ok("git", "add", ".", env=env, cwd=seed)
    await _ok("git", "commit", "--quiet", "-m", "first", env=env, cwd=seed)
    await _ok("git", "tag", "v1.0", env=env, cwd=seed)
    for index in range(tags):
        await _ok("git", "tag", f"release-candidate-tag-{index:04d}", env=env, cwd=seed)
    (seed / "README.md").write_text("version two\n")
    await _ok("git", "commit", "--quiet", "-am", "second", env=env, cwd=seed)
    await _ok("git", "push", "--quiet", "--tags", str(bare), "main", env=env, cwd=seed)
    tagged = await _ok("git", "rev-parse", "v1.0^{commit}", env=env, cwd=seed)
    return tagged, await _ok("git", "rev-parse", "main", env=env, cwd=seed)


@pytest.fixture
async def site(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Site]:
    home = tmp_path / "home"
    work = tmp_path / "sandbox"
    home.mkdir()
    work.mkdir()
    base_env = {"PATH": os.environ["PATH"], "HOME": str(home), "LC_ALL": "C", **IDENTITY}
    base_env |= {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}  # this machine's git config stays out
    root = tmp_path / "forge"
    bare = root / HOST / "org" / "repo.git"
    bare.parent.mkdir(parents=True)
    tags = getattr(request, "param", 0)
    tagged, head = await _seed(bare, tmp_path / "seed", base_env, tags=tags)
    async with GitServer(root, username=USER, password=PASSWORD) as server:
        config = AuthProxyConfig(admin_key=Secret(ADMIN), secret_upstream=server.url)
        async with run_auth_proxy(config) as proxy, proxy.admin_client() as admin:
            yield Site(proxy, server, admin, bare, work, base_env, tagged, head)


def _sandbox_texts(site: Site, *invocations: git_script.GitInvocation, clone: Path) -> list[str]:
    """Everything the sandbox side holds: argv, environment, and every file of the clone's .git but its objects."""
    texts = [json.dumps([inv.commands, dict(site.env(inv))]) for inv in invocations]
    files = (p for p in (clone / ".git").rglob("*") if p.is_file() and "objects" not in p.parts)
    return texts + [p.read_bytes().decode(errors="replace") for p in files]


async def test_clone_at_a_tag_then_push_a_new_branch_with_the_credential_injected(
    site: Site, caplog: pytest.LogCaptureFixture
) -> None:
    """A clone at v1.0 holds its files; a commit with a 2 MiB file (past git's 1 MiB postBuffer, so
    sent chunked) lands on a new branch of the host's repository."""
    caplog.set_level(logging.DEBUG, logger=proxy_logs.LOGGER_NAME)
    token = await site.token()
    clone = site.clone(token, "ws", ref="v1.0")
    done = await site.run(clone)
    assert done.returncode == 0, done.stderr
    ws = site.work / "ws"
    assert (ws / "README.md").read_text() == "version one\n"
    assert await _ok("git", "rev-parse", "HEAD", env=site.env(clone), cwd=ws) == site.tagged

    (ws / "README.md").write_text("changed by the agent\n")
    (ws / "data.bin").write_bytes(os.urandom(2 * 1024 * 1024))
    await _ok("git", "add", ".", env=site.env(clone), cwd=ws)
    await _ok("git", "commit", "--quiet", "-m", "agent's change", env=site.env(clone), cwd=ws)
    pushed = await _ok("git", "rev-parse", "HEAD", env=site.env(clone), cwd=ws)
    push = site.push(token, "ws", "ironflow/run-ws")
    done = await site.run(push)
    assert done.returncode == 0, done.stderr

    refs = await site.bare_git("for-each-ref", "--format=%(refname) %(objectname)", "refs/heads")
    assert refs.splitlines() == [f"refs/heads/ironflow/run-ws {pushed}", f"refs/heads/main {site.head}"]
    assert await site.bare_git("show", "ironflow/run-ws:README.md") == "changed by the agent"
    assert await site.bare_git("rev-parse", "ironflow/run-ws^") == site.tagged

    seen = site.server.requests
    assert {(r.username, r.authorized) for r in seen} == {(USER, True)}
    (push_rpc,) = [r for r in site.server.pushes if r.body_bytes > 1024 * 1024]
    assert push_rpc.chunked is False  # git sent it chunked (the baseline test below); the proxy sent its length
    assert not find_leaks([token], [r.headers for r in seen])
    assert not find_leaks([PASSWORD], _sandbox_texts(site, clone, push, clone=ws), done.stderr)
    assert not find_leaks([token], _sandbox_texts(site, clone=ws))  # not kept in the clone's .git either
    lines = [log_lines.JsonFormatter().format(r) for r in caplog.records if r.name == proxy_logs.LOGGER_NAME]
    assert lines
    assert not find_leaks([token, PASSWORD], lines)


async def test_clone_at_a_branch_and_at_a_commit_id(site: Site) -> None:
    token = await site.token()
    branch = await site.run(site.clone(token, "at-main", ref="main"))
    assert branch.returncode == 0, branch.stderr
    assert (site.work / "at-main" / "README.md").read_text() == "version two\n"
    commit = site.clone(token, "at-commit", ref=site.tagged, depth=1)
    done = await site.run(commit)
    assert done.returncode == 0, done.stderr
    at_commit = site.work / "at-commit"
    assert (at_commit / "README.md").read_text() == "version one\n"
    assert await _ok("git", "rev-parse", "HEAD", env=site.env(commit), cwd=at_commit) == site.tagged
    assert await _ok("git", "rev-list", "--count", "HEAD", env=site.env(commit), cwd=at_commit) == "1"


@pytest.mark.parametrize("site", [80], indirect=True)
async def test_clone_of_a_repository_with_many_refs_sends_a_gzipped_fetch_request(site: Site) -> None:
    """80 tags make git's fetch request longer than 1 KiB, so git gzips it: the host must get it as sent."""
    token = await site.token()
    done = await site.run(site.clone(token, "ws"))
    assert done.returncode == 0, done.stderr
    assert any(r.content_encoding == "gzip" for r in site.server.requests)
    assert site.server.errors == []
    tags = await _ok("git", "tag", "--list", env=site.base_env, cwd=site.work / "ws")
    assert len(tags.splitlines()) == 81


async def test_push_never_moves_a_branch_that_exists(site: Site) -> None:
    token = await site.token()
    clone = site.clone(token, "ws", ref="main")
    assert (await site.run(clone)).returncode == 0
    await _ok("git", "commit", "--quiet", "--allow-empty", "-m", "more", env=site.env(clone), cwd=site.work / "ws")
    done = await site.run(site.push(token, "ws", "main"))
    assert done.returncode != 0
    assert "stale info" in done.stderr
    assert await site.bare_git("rev-parse", "main") == site.head
    assert site.server.pushes == []


async def test_a_token_for_another_host_is_refused_by_the_proxy(site: Site) -> None:
    token = await site.token(hosts=("other.example.test",))
    done = await site.run(site.clone(token, "ws"))
    assert done.returncode == 128
    assert "403" in done.stderr
    assert site.server.requests == []
    assert not find_leaks([token], done.stderr)
    assert not (site.work / "ws").exists()


async def test_a_revoked_or_unknown_token_fails_without_a_prompt_or_a_helper(site: Site) -> None:
    """The proxy answers 401; git asks no terminal and no credential helper, even one the clone configures."""
    grant_id, token = await site.issue()
    clone = site.clone(token, "ws", ref="main")
    assert (await site.run(clone)).returncode == 0
    ws = site.work / "ws"
    marker = site.work / "helper-was-asked"
    helper = f"!f() {{ echo asked > '{marker}'; echo username=u; echo password=p; }}; f"
    await _ok("git", "config", "credential.helper", helper, env=site.base_env, cwd=ws)
    assert await site.admin.revoke(grant_id)
    before = len(site.server.requests)
    revoked = await site.run(site.push(token, "ws", "ironflow/late"))
    unknown = await site.run(site.push("ifap_" + "0" * 64, "ws", "ironflow/late"))
    for done in (revoked, unknown):
        assert done.returncode == 128
        assert "terminal prompts disabled" in done.stderr
    assert not marker.exists()
    assert len(site.server.requests) == before
    assert await site.bare_git("for-each-ref", "refs/heads/ironflow") == ""


async def test_a_wrong_host_credential_fails_at_the_host_without_a_prompt(site: Site) -> None:
    token = await site.token(password="ghs_NOT-THE-PASSWORD")
    done = await site.run(site.clone(token, "ws"))
    assert done.returncode == 128
    assert "terminal prompts disabled" in done.stderr
    assert [(r.username, r.authorized, r.status) for r in site.server.requests] == [(USER, False, 401)]


async def test_the_environment_allows_no_transport_but_the_proxys(site: Site) -> None:
    token = await site.token()
    env = site.env(site.clone(token, "ws"))
    for url in (f"file://{site.bare}", str(site.bare), "ext::git-upload-pack %S"):
        done = await _run("git", "ls-remote", url, env=env, cwd=site.work)
        assert done.returncode != 0
        assert "not allowed" in done.stderr


async def test_without_the_proxy_such_a_push_arrives_chunked(site: Site) -> None:
    """The baseline for the relay test above: git sends a push past its postBuffer chunked, and
    the fake host takes it (no ``CONTENT_LENGTH``, as a web server passes a chunked body to CGI)."""
    basic = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    direct = f"{site.server.url}/{HOST}/org/repo.git"
    env = site.base_env | {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "http.extraHeader",
                           "GIT_CONFIG_VALUE_0": f"Authorization: Basic {basic}"}  # fmt: skip
    ws = site.work / "ws"
    await _ok("git", "clone", "--quiet", direct, "ws", env=env, cwd=site.work)
    (ws / "data.bin").write_bytes(os.urandom(2 * 1024 * 1024))
    await _ok("git", "add", ".", env=env, cwd=ws)
    await _ok("git", "commit", "--quiet", "-m", "big", env=env, cwd=ws)
    await _ok("git", "push", "--quiet", direct, "HEAD:refs/heads/direct", env=env, cwd=ws)
    assert [r.chunked for r in site.server.pushes if r.body_bytes > 1024 * 1024] == [True]
    pushed = await _ok("git", "rev-parse", "HEAD", env=env, cwd=ws)
    assert await site.bare_git("rev-parse", "direct") == pushed
